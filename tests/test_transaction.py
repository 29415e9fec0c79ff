"""The crash-safety protocol, exercised with a tiny transform so every write point is known."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Optional

import libcst as cst
import pytest
from packaging.specifiers import SpecifierSet

import vllm_codemod.engine as engine
import vllm_codemod.fsutil as fsutil
from treeutil import snapshot
from vllm_codemod.discovery import locate_tree
from vllm_codemod.errors import CodemodError
from vllm_codemod.transforms.base import Status, Transform, Verdict

FOOTER = "# patched by a test transform\n"


class AppendFooter(Transform):
    name = "append-footer"
    description = "test transform"
    target = "_custom_ops.py"
    known_versions = SpecifierSet(">=0")

    def __init__(self, kernel: bytes = b"KERNEL = 1\n") -> None:
        self.kernel = kernel

    def plan(self, module, context):
        added = {"_codemod_kernels/__init__.py": self.kernel, "_codemod_kernels/k.py": b"K = 2\n"}
        if module.code.endswith(FOOTER):
            return Verdict(Status.APPLIED, "footer present", added_files=added)
        new = cst.parse_module(module.code + FOOTER)
        return Verdict(Status.PENDING, "footer missing", module=new, added_files=added)


def make_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    root = site / "vllm"
    (root / "__pycache__").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "_custom_ops.py").write_text("def f():\n    raise NotImplementedError\n")
    os.chmod(root / "_custom_ops.py", 0o640)
    (root / "__pycache__" / "_custom_ops.cpython-310.pyc").write_bytes(b"\x00stale bytecode")
    (root / "__pycache__" / "other.cpython-310.pyc").write_bytes(b"\x00keep me")
    dist_info = site / "vllm-0.8.3.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.8.3\n")
    return site


def plan(site: Path, transform: Optional[Transform] = None):
    tree = locate_tree(site, None)
    return engine.plan(tree, registry=[transform or AppendFooter()])


def apply(site: Path, transform: Optional[Transform] = None):
    return engine.apply(plan(site, transform))


def revert(site: Path, force: bool = False):
    return engine.revert(locate_tree(site, None), discard_local_changes=force)


def recover(site: Path):
    return engine.recover(locate_tree(site, None), registry=[AppendFooter()])


def test_apply_then_revert_is_byte_identical(tmp_path):
    site = make_site(tmp_path)
    before = snapshot(site)
    the_plan = plan(site)
    assert the_plan.pending
    engine.apply(the_plan)
    manifest = the_plan.manifest_after.to_json()
    root = site / "vllm"
    assert (root / "_custom_ops.py").read_text().endswith(FOOTER)
    assert (root / "_custom_ops.py").stat().st_mode & 0o777 == 0o640
    assert (root / "_codemod_kernels" / "k.py").read_bytes() == b"K = 2\n"
    # stale bytecode of the patched file is moved aside, other bytecode is left alone
    assert not (root / "__pycache__" / "_custom_ops.cpython-310.pyc").exists()
    assert (root / "__pycache__" / "other.cpython-310.pyc").exists()
    assert "vllm/__pycache__/_custom_ops.cpython-310.pyc" in manifest["bytecode"]
    assert not (root / ".vllm-codemod" / "journal.json").exists()
    assert not plan(site).pending  # idempotent

    # bytecode that appears for the patched source must not survive revert
    (root / "__pycache__" / "_custom_ops.cpython-311.pyc").write_bytes(b"patched bytecode")
    (root / "_codemod_kernels" / "__pycache__").mkdir()
    (root / "_codemod_kernels" / "__pycache__" / "k.cpython-311.pyc").write_bytes(b"x")
    touched = revert(site)
    assert "vllm/_custom_ops.py" in touched.restored
    assert snapshot(site) == before


def test_updated_kernels_replace_the_old_copy_and_stale_files_go(tmp_path):
    site = make_site(tmp_path)
    before = snapshot(site)
    apply(site)

    class Newer(AppendFooter):
        def plan(self, module, context):
            result = super().plan(module, context)
            result.added_files = {"_codemod_kernels/__init__.py": b"KERNEL = 2\n"}
            return result

    the_plan = plan(site, Newer())
    assert the_plan.transforms[0].status == Status.PENDING.value
    assert "bundled kernels" in the_plan.transforms[0].reason
    paths = {c.path: c for c in the_plan.changes}
    assert paths["vllm/_codemod_kernels/k.py"].new is None  # no longer shipped
    engine.apply(the_plan)
    assert not (site / "vllm" / "_codemod_kernels" / "k.py").exists()
    assert not plan(site, Newer()).pending
    revert(site)
    assert snapshot(site) == before


def test_revert_refuses_to_discard_later_edits(tmp_path):
    site = make_site(tmp_path)
    apply(site)
    target = site / "vllm" / "_custom_ops.py"
    target.write_text("someone reinstalled this\n")
    with pytest.raises(CodemodError, match="changed since vllm-codemod patched it"):
        revert(site)
    assert target.read_text() == "someone reinstalled this\n"
    revert(site, force=True)
    assert target.read_text() == "def f():\n    raise NotImplementedError\n"


def _count_writes(monkeypatch, action) -> int:
    calls = []
    real = fsutil.os.replace

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(fsutil.os, "replace", counting)
    action()
    monkeypatch.setattr(fsutil.os, "replace", real)
    return len(calls)


def _run_killed_at(n: int, action) -> None:
    """Run ``action`` in a forked child that SIGKILLs itself just before its n-th rename.

    At that instant the temp file is complete but not yet in place: the worst debris.
    """
    pid = os.fork()
    if pid == 0:  # child
        real = fsutil.os.replace
        count = [0]

        def killing(*args, **kwargs):
            count[0] += 1
            if count[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        fsutil.os.replace = killing
        try:
            action()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_sigkill_at_any_write_point_is_recoverable(tmp_path, monkeypatch):
    pristine_site = make_site(tmp_path / "pristine")
    pristine = snapshot(pristine_site)
    probe = make_site(tmp_path / "probe")
    writes = _count_writes(monkeypatch, lambda: apply(probe))
    patched = snapshot(probe)[0]["vllm/_custom_ops.py"]
    revert_writes = _count_writes(monkeypatch, lambda: revert(probe))
    assert writes >= 6 and revert_writes >= 1

    for n in range(1, writes + 1):
        site = make_site(tmp_path / f"apply{n}")
        _run_killed_at(n, lambda site=site: apply(site))
        recover(site)
        current = (site / "vllm" / "_custom_ops.py").read_bytes()
        assert current in (pristine[0]["vllm/_custom_ops.py"], patched), n
        if n < writes // 2:  # no commit yet: recovery alone gives back the pristine tree
            assert snapshot(site) == pristine, f"apply killed at write {n}"
        if plan(site).pending:
            apply(site)
        assert not plan(site).pending
        revert(site)
        assert snapshot(site) == pristine, f"apply killed at write {n}"

    for n in range(1, revert_writes + 1):
        site = make_site(tmp_path / f"revert{n}")
        apply(site)
        _run_killed_at(n, lambda site=site: revert(site))
        recover(site)
        revert(site)
        assert snapshot(site) == pristine, f"revert killed at write {n}"


def test_a_reinstall_over_a_patched_tree_becomes_the_new_original(tmp_path):
    site = make_site(tmp_path)
    apply(site)
    target = site / "vllm" / "_custom_ops.py"
    target.write_text("def f():\n    raise NotImplementedError('new release')\n")
    reinstalled = snapshot(site)
    apply(site)
    assert target.read_text().endswith(FOOTER)
    revert(site)
    assert target.read_bytes() == reinstalled[0]["vllm/_custom_ops.py"]
    assert not (site / "vllm" / ".vllm-codemod").exists()
    assert not (site / "vllm" / "_codemod_kernels").exists()

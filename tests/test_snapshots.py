"""Golden-file tests: the CLI as a user runs it, on a copy of every fixture tree.

For each tree under ``vendor_fixtures/{upstream,bi-v100}`` the goldens live in
``tests/snapshots/<tree name>/``:

* ``<target path, "/" replaced by "__">``: the patched file, for every target that
  ``apply`` changes (a target without a golden must come out byte-identical);
* ``diff.patch``: the output of ``vllm-codemod diff``, minus the sections for the
  bundled kernel files (those are checked against the kernel package instead, so that
  kernel work does not churn these goldens).

Upstream trees have nothing pending by default (``prefix-prefill-warps`` is a fork
remedy and holds back there); their goldens are what ``--only prefix-prefill-warps``
forces.

Goldens are claims about what the tool writes: regenerate them with
``VLLM_CODEMOD_UPDATE_SNAPSHOTS=1 python3 -m pytest tests/test_snapshots.py`` and read
every resulting ``git diff`` before committing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from click.testing import CliRunner

from treeutil import FIXTURES, copy_fixture, snapshot
from vllm_codemod.cli import cli
from vllm_codemod.transforms import ALL_TRANSFORMS
from vllm_codemod.transforms.paged_attention_v2 import KERNEL_DIR, bundled_kernel_files

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
UPDATE = os.environ.get("VLLM_CODEMOD_UPDATE_SNAPSHOTS") == "1"
CONFLICT_TREES = {"bi-v100/corex-unknown-shape"}
#: what it takes to patch an upstream tree at all: the fork remedy named explicitly
FORCE_UPSTREAM = ("--only", "prefix-prefill-warps")
TARGETS = [f"vllm/{t.target}" for t in ALL_TRANSFORMS]


def _trees() -> List[str]:
    found = []
    for group in ("upstream", "bi-v100"):
        base = FIXTURES / group
        if base.is_dir():
            found += [f"{group}/{d.name}" for d in sorted(base.iterdir()) if (d / "vllm").is_dir()]
    return found


TREES = _trees()
PATCHABLE = [t for t in TREES if t not in CONFLICT_TREES]


def _golden_dir(tree: str) -> Path:
    return SNAPSHOTS / tree.split("/", 1)[1]


def _golden_name(target: str) -> str:
    return target.replace("/", "__")


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def split_diff(text: str) -> Tuple[str, Dict[str, str]]:
    """(diff of the edited files, {added kernel path: its section})."""
    sections = re.split(r"(?m)^(?=diff --git )", text)
    kept, kernels = [], {}
    for section in sections:
        match = re.match(r"diff --git a/(\S+) b/", section)
        if match and match.group(1).startswith(f"vllm/{KERNEL_DIR}/"):
            kernels[match.group(1)] = section
        else:
            kept.append(section)
    return "".join(kept), kernels


def check_or_update(path: Path, actual: bytes) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_bytes() != actual:
            path.write_bytes(actual)
        return
    assert path.exists(), f"{path} missing: run with VLLM_CODEMOD_UPDATE_SNAPSHOTS=1"
    assert actual == path.read_bytes(), f"{path.relative_to(SNAPSHOTS)} differs from the golden"


def test_every_fixture_tree_is_covered():
    assert len([t for t in TREES if t.startswith("upstream/")]) == 10
    assert {"bi-v100/corex-0.4.3", "bi-v100/corex-0.11.0"} <= set(TREES)
    assert CONFLICT_TREES <= set(TREES)
    stored = (
        {d.name for d in SNAPSHOTS.iterdir() if d.is_dir() and not d.name.startswith(".")}
        if SNAPSHOTS.is_dir()
        else set()
    )
    stale = stored - {_golden_dir(t).name for t in PATCHABLE}
    assert not stale, f"goldens for trees that no longer exist: {sorted(stale)}"


@pytest.mark.parametrize("tree", [t for t in PATCHABLE if t.startswith("upstream/")])
def test_upstream_tree_has_nothing_pending_by_default(tree, tmp_path):
    site = copy_fixture(tree, tmp_path)
    pristine = snapshot(site)
    diff = run("diff", "--site-packages", str(site))
    assert (diff.exit_code, diff.output) == (0, "")
    check = run("check", "--site-packages", str(site))
    assert check.exit_code == 0, check.output
    assert "prefix-prefill-warps  not-applicable" in check.output
    assert "upstream tree (no fork markers found)" in check.output
    assert "use --only prefix-prefill-warps to force" in check.output
    applied = run("apply", "--site-packages", str(site))
    assert applied.exit_code == 0 and "nothing to do" in applied.output
    assert snapshot(site) == pristine


@pytest.mark.parametrize("tree", PATCHABLE)
def test_apply_diff_check_revert(tree, tmp_path):
    site = copy_fixture(tree, tmp_path)
    pristine = snapshot(site)
    goldens = _golden_dir(tree)
    kernels = {f"vllm/{rel}": data for rel, data in bundled_kernel_files().items()}
    assert kernels, "the kernel package is not installed"
    extra = FORCE_UPSTREAM if tree.startswith("upstream/") else ()

    # diff: the stored patch, exit 1 (something is pending in every fixture), writes nothing
    diff = run("diff", "--site-packages", str(site), *extra)
    assert diff.exit_code == 1, diff.output
    edited, added = split_diff(diff.output)
    check_or_update(goldens / "diff.patch", edited.encode())
    assert snapshot(site) == pristine

    check = run("check", "--site-packages", str(site), *extra)
    assert check.exit_code == 1, check.output

    # apply: every target equals its golden, or is unchanged when it has none
    result = run("apply", "--site-packages", str(site), *extra)
    assert result.exit_code == 0, result.output
    for target in TARGETS:
        after = (site / target).read_bytes()
        golden = goldens / _golden_name(target)
        if after != pristine[0][target]:
            check_or_update(golden, after)
        elif UPDATE and golden.exists():
            golden.unlink()
        else:
            assert not golden.exists(), f"{target} unchanged but a golden exists"
    stubbed = (goldens / _golden_name("vllm/_custom_ops.py")).exists()
    if stubbed:  # the kernels ship with the paged-attention-v2 edit, and only with it
        assert set(added) == set(kernels)
        for path, data in kernels.items():
            assert (site / path).read_bytes() == data
            assert added[path].splitlines()[1:3] == ["new file mode 100644", "--- /dev/null"]
    else:
        assert added == {}
        assert not (site / "vllm" / KERNEL_DIR).exists()
    patched = snapshot(site)

    # idempotent: a second apply has nothing to do and changes no byte
    again = run("apply", "--site-packages", str(site), *extra)
    assert again.exit_code == 0
    assert "nothing to do" in again.output
    assert snapshot(site) == patched
    nothing = run("diff", "--site-packages", str(site), *extra)
    assert (nothing.exit_code, nothing.output) == (0, "")
    done = run("check", "--site-packages", str(site), *extra)
    assert done.exit_code == 0, done.output

    # revert: original bytes everywhere, no added file or directory left
    back = run("revert", "--site-packages", str(site))
    assert back.exit_code == 0, back.output
    assert snapshot(site) == pristine


@pytest.mark.parametrize("tree", sorted(CONFLICT_TREES))
def test_unknown_shape_is_refused_and_nothing_written(tree, tmp_path):
    site = copy_fixture(tree, tmp_path)
    pristine = snapshot(site)
    for command in ("apply", "diff", "check"):
        result = run(command, "--site-packages", str(site))
        assert result.exit_code == 2, (command, result.output)
        assert snapshot(site) == pristine
    result = run("apply", "--site-packages", str(site))
    for name in ("paged-attention-v2", "v2-dispatch", "prefix-prefill-warps"):
        assert name in result.output
    assert "*args" in result.output
    assert "_ixuca_use_v1" in result.output
    assert "IXUCA_PREFIX_PREFILL_NUM_WARPS" in result.output


def test_options_reach_the_transforms(tmp_path):
    site = copy_fixture("bi-v100/corex-0.11.0", tmp_path)
    result = run(
        "apply", "--site-packages", str(site), "--num-warps", "2", "--v2-threshold", "4096"
    )
    assert result.exit_code == 0, result.output
    paged = (site / "vllm/attention/ops/paged_attn.py").read_text()
    assert "use_v1 = (max_seq_len <= 4096\n" in paged
    assert "\nNUM_WARPS = 2\n" in (site / "vllm/attention/ops/prefix_prefill.py").read_text()
    # the options are recorded: a plain check compares against them, not the defaults
    assert run("check", "--site-packages", str(site)).exit_code == 0
    ok = run("check", "--site-packages", str(site), "--num-warps", "2", "--v2-threshold", "4096")
    assert ok.exit_code == 0, ok.output
    assert run("check", "--site-packages", str(site), "--num-warps", "4").exit_code == 1


@pytest.mark.parametrize("tree", TREES)
def test_anchored_excerpt_plans_like_the_whole_file(tree):
    """The engine shows a transform only the statements defining its ``anchors``; on every
    fixture that must give the same answer (and the same file) as the whole module."""
    import libcst as cst

    from vllm_codemod.excerpt import make_excerpt
    from vllm_codemod.transforms.base import Status, TransformContext

    root = FIXTURES / tree / "vllm"
    context = TransformContext(vllm_root=root, version=None)
    for transform in ALL_TRANSFORMS:
        text = (root / transform.target).read_text()
        full = transform.plan(cst.parse_module(text), context)
        excerpt = make_excerpt(text, transform.anchors)
        assert excerpt is not None, transform.name
        small = excerpt.parse()
        part = transform.plan(small, context)
        assert (part.status, part.reason, part.details) == (full.status, full.reason, full.details)
        if full.status is Status.PENDING:
            assert excerpt.splice(small, part.module) == full.module.code

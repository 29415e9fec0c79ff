"""The data-safety contract of issue #12, one test (or a few) per item.

Items 1-7 each failed on main (21b3364) and pass now; item 8 pins what already held.
Every test drives the CLI as a user would, on a copy of a real fork tree, and checks the
whole tree afterwards, not only the exit code.
"""

from __future__ import annotations

import errno
import json
import os
import py_compile
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from treeutil import copy_fixture, snapshot
from vllm_codemod.cli import cli

FORK = "bi-v100/corex-0.8.3"
MANIFEST = "vllm/.vllm-codemod/manifest.json"


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("vllm-codemod: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def fork(tmp_path) -> Path:
    return copy_fixture(FORK, tmp_path)


def apply(site: Path, *args: str):
    result = run("apply", "--site-packages", str(site), *args)
    assert result.exit_code == 0, result.output
    return result


# --------------------------------------------------------------------------- 1. paths


def _edit_manifest(site: Path, edit) -> None:
    path = site / MANIFEST
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("how", ["dotdot", "symlinked-dir", "absolute"])
def test_revert_never_leaves_the_tree_whatever_the_manifest_says(fork, tmp_path, how):
    apply(fork)
    victim_dir = tmp_path / "outside"
    victim_dir.mkdir()
    victim = victim_dir / "victim.txt"
    victim.write_text("not yours\n")
    if how == "dotdot":
        rel = "vllm/../../outside/victim.txt"
    elif how == "symlinked-dir":
        (fork / "vllm" / "escape").symlink_to(victim_dir)
        rel = "vllm/escape/victim.txt"
    else:
        rel = str(victim)
    _edit_manifest(
        fork,
        lambda m: m["added"].update(
            {rel: {"sha256": _sha256(victim), "transform": "paged-attention-v2"}}
        ),
    )
    before = snapshot(fork)
    one_line_error(run("revert", "--site-packages", str(fork)), repr(rel), "manifest")
    assert victim.read_text() == "not yours\n"
    assert snapshot(fork) == before
    # also when the hostile path is in "files" (revert would *write* there)
    _edit_manifest(fork, lambda m: m["added"].pop(rel))
    _edit_manifest(
        fork,
        lambda m: m["files"].update(
            {rel: {"original_sha256": "0" * 64, "patched_sha256": _sha256(victim), "mode": 420}}
        ),
    )
    one_line_error(run("revert", "--site-packages", str(fork), "--force"), repr(rel))
    assert victim.read_text() == "not yours\n"
    # and apply/check refuse the manifest up front too
    one_line_error(run("apply", "--site-packages", str(fork)), repr(rel))
    one_line_error(run("check", "--site-packages", str(fork)), repr(rel))


# --------------------------------------------------------------------------- 2. not ours


def test_apply_refuses_to_take_over_a_file_it_did_not_write(fork):
    kernels = fork / "vllm" / "_codemod_kernels"
    kernels.mkdir()
    (kernels / "__init__.py").write_text("# somebody else's package\n")
    before = snapshot(fork)
    one_line_error(
        run("apply", "--site-packages", str(fork)),
        "_codemod_kernels/__init__.py",
        "not written by vllm-codemod",
    )
    assert snapshot(fork) == before
    one_line_error(run("diff", "--site-packages", str(fork)), "_codemod_kernels/__init__.py")


def test_revert_keeps_an_added_file_changed_since_unless_forced(fork):
    pristine = snapshot(fork)
    apply(fork)
    kernel = fork / "vllm" / "_codemod_kernels" / "__init__.py"
    kernel.write_text("# edited by hand\n")
    changed = snapshot(fork)
    one_line_error(run("revert", "--site-packages", str(fork)), "_codemod_kernels", "--force")
    assert snapshot(fork) == changed
    assert run("revert", "--site-packages", str(fork), "--force").exit_code == 0
    assert snapshot(fork) == pristine


# --------------------------------------------------------------------------- 4. owner/links


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another uid needs root")
def test_owner_group_and_mode_survive_apply_and_revert(fork):
    uid, gid = 12345, 12346
    for path in [fork, *fork.rglob("*")]:
        os.chown(path, uid, gid, follow_symlinks=False)
    target = fork / "vllm/attention/ops/prefix_prefill.py"
    os.chmod(target, 0o640)
    apply(fork)
    for path in (fork / "vllm").rglob("*"):
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == (uid, gid), path
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert run("revert", "--site-packages", str(fork)).exit_code == 0
    for path in (fork / "vllm").rglob("*"):
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == (uid, gid), path
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_symlinked_target_is_written_through_and_stays_a_link(fork):
    ops = fork / "vllm/attention/ops"
    (ops / "paged_attn.py").rename(ops / "paged_attn_impl.py")
    (ops / "paged_attn.py").symlink_to("paged_attn_impl.py")
    pristine = snapshot(fork)
    apply(fork)
    assert (ops / "paged_attn.py").is_symlink()
    assert os.readlink(ops / "paged_attn.py") == "paged_attn_impl.py"
    assert "vllm-codemod: v2-dispatch" in (ops / "paged_attn_impl.py").read_text()
    assert run("check", "--site-packages", str(fork)).exit_code == 0
    assert run("revert", "--site-packages", str(fork)).exit_code == 0
    assert (ops / "paged_attn.py").is_symlink()
    assert snapshot(fork) == pristine


def test_a_target_linked_out_of_the_tree_is_refused(fork, tmp_path):
    ops = fork / "vllm/attention/ops"
    outside = tmp_path / "shared_paged_attn.py"
    (ops / "paged_attn.py").rename(outside)
    (ops / "paged_attn.py").symlink_to(outside)
    before = outside.read_bytes()
    one_line_error(run("apply", "--site-packages", str(fork)), "paged_attn.py", "outside")
    assert outside.read_bytes() == before
    assert not (fork / "vllm/.vllm-codemod").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another uid needs root")
def test_tune_config_keeps_owner_and_mode(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("max-num-batched-tokens: 8\n")
    os.chown(config, 12345, 12346)
    os.chmod(config, 0o600)
    assert run("tune-config", str(config)).exit_code == 0
    st = config.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (12345, 12346, 0o600)
    assert config.read_text() == "max-num-batched-tokens: 16384\n"


# --------------------------------------------------------------------------- 5. encodings


def _patched_bytes(tmp_path: Path) -> dict:
    clean = copy_fixture(FORK, tmp_path / "clean")
    apply(clean)
    return snapshot(clean)[0]


def test_bom_crlf_and_a_missing_final_newline_survive(fork, tmp_path):
    expected = _patched_bytes(tmp_path)
    ops = "vllm/_custom_ops.py"
    prefill = "vllm/attention/ops/prefix_prefill.py"
    paged = "vllm/attention/ops/paged_attn.py"
    (fork / ops).write_bytes(b"\xef\xbb\xbf" + (fork / ops).read_bytes())
    crlf = (fork / prefill).read_bytes().replace(b"\n", b"\r\n")
    (fork / prefill).write_bytes(crlf)
    (fork / paged).write_bytes((fork / paged).read_bytes().rstrip(b"\n"))
    pristine = snapshot(fork)

    diff = run("diff", "--site-packages", str(fork))
    assert diff.exit_code == 1
    assert b"+NUM_WARPS = 4\r\n" in diff.stdout_bytes  # .output would turn CRLF into LF

    apply(fork)
    assert (fork / ops).read_bytes() == b"\xef\xbb\xbf" + expected[ops]
    assert (fork / prefill).read_bytes() == expected[prefill].replace(b"\n", b"\r\n")
    assert (fork / paged).read_bytes() == expected[paged].rstrip(b"\n")
    assert run("check", "--site-packages", str(fork)).exit_code == 0
    assert run("diff", "--site-packages", str(fork)).exit_code == 0
    assert run("revert", "--site-packages", str(fork)).exit_code == 0
    assert snapshot(fork) == pristine


# --------------------------------------------------------------------------- 6. non-files


def test_tune_config_refuses_a_fifo_without_hanging(tmp_path):
    fifo = tmp_path / "run.yaml"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_codemod.cli", "tune-config", str(fifo)],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "FIFO" in proc.stderr and str(fifo) in proc.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_tune_config_refuses_a_character_device(tmp_path):
    device = tmp_path / "run.yaml"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # like /dev/null
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot create a device node here: {exc}")
    result = run("tune-config", str(device))
    one_line_error(result, str(device), "character device")
    assert stat.S_ISCHR(device.lstat().st_mode)


# --------------------------------------------------------------------------- 7. ENOSPC/EROFS


def _count_fsyncs(site: Path, monkeypatch) -> int:
    calls = [0]
    real = os.fsync

    def counting(fd):
        calls[0] += 1
        return real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    apply(site)
    monkeypatch.setattr(os, "fsync", real)
    return calls[0]


def test_disk_full_at_any_write_is_one_line_and_recoverable(tmp_path, monkeypatch):
    pristine = snapshot(copy_fixture(FORK, tmp_path / "pristine"))
    probe = copy_fixture(FORK, tmp_path / "probe")
    total = _count_fsyncs(probe, monkeypatch)
    patched = snapshot(probe)
    assert total >= 10
    real = os.fsync
    # every fsync when VLLM_CODEMOD_KILL_RUNS asks for long runs, else a spread of them
    step = 1 if "VLLM_CODEMOD_KILL_RUNS" in os.environ else 5
    for n in sorted(set(range(1, total + 1, step)) | {total}):
        site = copy_fixture(FORK, tmp_path / f"run{n}")
        calls = [0]

        def failing(fd, n=n, calls=calls):
            calls[0] += 1
            if calls[0] == n:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(fd)

        monkeypatch.setattr(os, "fsync", failing)
        result = run("apply", "--site-packages", str(site))
        monkeypatch.setattr(os, "fsync", real)
        line = one_line_error(result, "No space left on device", str(site))
        if snapshot(site) != pristine:
            # failed after committing: the message says how to finish, and that works
            assert "run `vllm-codemod apply` to finish" in line, line
            assert (site / "vllm/.vllm-codemod/journal.json").exists(), n
            # read-only check reports the interrupted run on the pending-change status
            checked = run("check", "--site-packages", str(site))
            assert checked.exit_code == 1, checked.output
            assert "an interrupted apply; `vllm-codemod apply` finishes it" in checked.output
        else:
            assert "nothing in the tree was changed" in line, line
        apply(site)
        assert snapshot(site) == patched, n
        assert run("revert", "--site-packages", str(site)).exit_code == 0
        assert snapshot(site) == pristine, n


@pytest.mark.skipif(os.geteuid() != 0, reason="chattr +i needs root")
def test_an_immutable_target_is_refused_before_anything_is_written(fork):
    target = fork / "vllm/attention/ops/prefix_prefill.py"
    if subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode:
        pytest.skip("chattr +i not supported on this filesystem")
    try:
        before = snapshot(fork)
        one_line_error(run("apply", "--site-packages", str(fork)), str(target))
        assert snapshot(fork) == before
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)


# --------------------------------------------------------------------------- 8. bytecode


def test_no_bytecode_of_the_patched_source_passes_for_fresh_after_revert(fork):
    apply(fork)
    source = fork / "vllm/attention/ops/prefix_prefill.py"
    pyc = Path(py_compile.compile(str(source), doraise=True))
    assert pyc.exists()
    assert run("revert", "--site-packages", str(fork)).exit_code == 0
    st = source.stat()
    for candidate in source.parent.glob("__pycache__/prefix_prefill.*.pyc"):
        header = candidate.read_bytes()[8:16]
        recorded_mtime = int.from_bytes(header[:4], "little")
        recorded_size = int.from_bytes(header[4:], "little")
        assert (recorded_mtime, recorded_size) != (int(st.st_mtime) & 0xFFFFFFFF, st.st_size)


def test_a_symlinked_state_directory_part_is_refused(fork, tmp_path):
    apply(fork)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    staged = fork / "vllm/.vllm-codemod/staged"
    staged.symlink_to(outside)
    before = snapshot(fork)
    one_line_error(run("apply", "--site-packages", str(fork), "--num-warps", "2"), "symlink")
    assert snapshot(fork) == before
    assert list(outside.iterdir()) == []


# --------------------------------------------------------------------------- 9. directories

KERNELS = "vllm/_codemod_kernels"


@pytest.mark.parametrize("cache", ["empty", "compiled"])
def test_revert_removes_only_the_directories_apply_created(fork, cache):
    pristine_files, pristine_dirs = snapshot(fork)
    apply(fork)
    kernels = fork / KERNELS
    manifest = json.loads((fork / MANIFEST).read_text())
    if cache == "empty":  # an empty __pycache__ inside the directory apply created
        (kernels / "__pycache__").mkdir()
    else:  # Python's bytecode of our own modules, as importing the kernels leaves it
        for module in kernels.glob("*.py"):
            py_compile.compile(str(module), doraise=True)
        assert list((kernels / "__pycache__").glob("*.pyc"))
    # Python made this one for a patched file: not ours, though it holds only our bytecode
    patched = fork / "vllm/attention/ops/prefix_prefill.py"
    py_compile.compile(str(patched), doraise=True)
    ops_cache = patched.parent / "__pycache__"
    assert ops_cache.is_dir()
    unrelated = fork / "vllm" / "somebody_elses_empty_dir"
    unrelated.mkdir()
    assert run("revert", "--site-packages", str(fork)).exit_code == 0
    assert not kernels.exists()  # ours, with nothing of anyone else's in it: gone
    assert unrelated.is_dir() and ops_cache.is_dir()  # not ours: kept
    assert not list(ops_cache.iterdir())  # the bytecode of the patched source is gone
    files, dirs = snapshot(fork)
    assert files == pristine_files
    assert dirs == pristine_dirs | {
        "vllm/somebody_elses_empty_dir",
        "vllm/attention/ops/__pycache__",
    }
    assert manifest.get("created_dirs") == [KERNELS]


def test_revert_keeps_a_directory_it_created_once_someone_else_uses_it(fork):
    apply(fork)
    kernels = fork / KERNELS
    (kernels / "__pycache__").mkdir()
    foreign_pyc = kernels / "__pycache__" / "notes.cpython-310.pyc"
    foreign_pyc.write_bytes(b"not from a file of ours")
    (kernels / "notes.txt").write_text("mine\n")
    (kernels / "empty").mkdir()
    result = run("revert", "--site-packages", str(fork), "-v")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in kernels.iterdir()) == ["__pycache__", "empty", "notes.txt"]
    assert [p.name for p in (kernels / "__pycache__").iterdir()] == [foreign_pyc.name]
    assert f"kept {KERNELS}/: vllm-codemod created it" in result.output
    assert run("revert", "--site-packages", str(fork), "--json").exit_code == 0


def test_revert_keeps_an_empty_directory_that_was_there_before_apply(fork):
    (fork / KERNELS).mkdir()
    pristine = snapshot(fork)
    apply(fork)
    manifest = json.loads((fork / MANIFEST).read_text())
    assert run("revert", "--site-packages", str(fork)).exit_code == 0
    assert snapshot(fork) == pristine
    assert manifest.get("created_dirs") == []


def test_a_manifest_that_does_not_record_directories_removes_none(fork):
    files, dirs = snapshot(fork)
    apply(fork)
    _edit_manifest(fork, lambda data: data.pop("created_dirs"))
    assert run("revert", "--site-packages", str(fork)).exit_code == 0
    assert snapshot(fork) == (files, dirs | {KERNELS})
    assert not list((fork / KERNELS).iterdir())


@pytest.mark.parametrize("bad", [["vllm"], ["vllm/.vllm-codemod"], ["../x"], "vllm/a", [1]])
def test_created_dirs_in_the_manifest_are_validated(fork, bad):
    apply(fork)
    _edit_manifest(fork, lambda data: data.update(created_dirs=bad))
    before = snapshot(fork)
    one_line_error(run("revert", "--site-packages", str(fork)), "manifest")
    assert snapshot(fork) == before

"""The device session script packs its outputs: the run tool returns at most 8 files from
``$OUT``, and session 23 lost its window and short logs to that limit.  The archive is
rewritten after every step, so a call the run tool cuts off still returns the steps that
finished.  It moves only what it can own: a folder that held files before the run stays
as it was unless asked."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "prefill_device_session.sh"

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar"
)


def _run(out: Path, **env: str) -> subprocess.CompletedProcess:
    # A step name no step has: the script runs none and goes straight to its ending.
    # TMPDIR: the staging folder lands in the test's folder, not the machine's /tmp.
    full = dict(os.environ, OUT=str(out), STEPS="no-such-step", TMPDIR=str(out.parent), **env)
    return subprocess.run(
        ["bash", str(SCRIPT)], env=full, capture_output=True, text=True, timeout=60
    )


def _fill(out: Path) -> None:
    (out / "sub").mkdir(parents=True)
    for i in range(9):
        (out / f"step-{i}.log").write_text(f"log {i}\n")
    (out / "sub" / "rows.json").write_text("{}\n")


def _stand_in(tmp_path: Path, name: str, script: str) -> str:
    """A PATH whose ``name`` is ``script`` (a shell script), ahead of the real one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / name
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def _fake_gpu_query(tmp_path: Path) -> str:
    """A PATH whose ``nvidia-smi`` (which the script always runs) writes two files into
    $OUT, as the steps do on the device."""
    return _stand_in(tmp_path, "nvidia-smi", 'echo a > "$OUT/a.log"; echo b > "$OUT/b.json"\n')


def test_what_a_run_writes_into_an_empty_out_is_packed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = _run(out, PATH=_fake_gpu_query(tmp_path))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["session.tar.gz"]
    with tarfile.open(out / "session.tar.gz") as archive:
        assert {os.path.normpath(n) for n in archive.getnames()} >= {"a.log", "b.json"}
        assert archive.extractfile("./b.json").read() == b"b\n"


def test_bundle_1_packs_every_file_and_folder(tmp_path):
    _fill(tmp_path)
    result = _run(tmp_path, BUNDLE="1")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session.tar.gz"]
    with tarfile.open(tmp_path / "session.tar.gz") as archive:
        names = {os.path.normpath(n) for n in archive.getnames()}
        assert {f"step-{i}.log" for i in range(9)} | {"sub/rows.json"} <= names
        assert archive.extractfile("./step-3.log").read() == b"log 3\n"


@pytest.mark.parametrize("bundle", [None, "0"])
def test_a_folder_that_held_files_is_left_loose(tmp_path, bundle):
    """Files that were there before the run are not the script's to move (unless asked)."""
    _fill(tmp_path)
    env = {} if bundle is None else {"BUNDLE": bundle}
    assert _run(tmp_path, **env).returncode == 0
    assert not (tmp_path / "session.tar.gz").exists()
    assert len(list(tmp_path.glob("step-*.log"))) == 9


def test_bundle_0_leaves_a_runs_files_loose(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert _run(out, BUNDLE="0", PATH=_fake_gpu_query(tmp_path)).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == ["a.log", "b.json"]


def test_an_empty_out_stays_empty(tmp_path):
    assert _run(tmp_path).returncode == 0
    assert list(tmp_path.iterdir()) == []


def _fake_python(tmp_path: Path) -> str:
    """A PATH whose ``python3`` finishes at once (the install step, the xdist probe) but
    hangs in pytest, as a long GPU step does when the run tool's limit comes."""
    return _stand_in(
        tmp_path,
        "python3",
        'case "$*" in *pytest*) echo started; exec sleep 60 ;; esac\necho "python3 $*"\n',
    )


def test_a_run_cut_off_mid_step_leaves_the_finished_steps_packed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    printed = tmp_path / "printed.txt"
    path = _fake_python(tmp_path)
    env = dict(os.environ, OUT=str(out), STEPS="install gpu-suite", PATH=path, TMPDIR=str(tmp_path))
    with printed.open("wb") as sink:
        proc = subprocess.Popen(
            ["bash", str(SCRIPT)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 30
            while b"== gpu-suite (" not in printed.read_bytes():
                assert time.monotonic() < deadline, printed.read_text()
                assert proc.poll() is None, printed.read_text()
                time.sleep(0.05)
            time.sleep(0.2)  # inside the hanging step
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # as the run tool ends a call at its limit
            proc.wait(timeout=10)
    assert sorted(p.name for p in out.iterdir()) == ["session.tar.gz"]
    with tarfile.open(out / "session.tar.gz") as archive:
        assert b"python3 -m pip install" in archive.extractfile("./install.log").read()

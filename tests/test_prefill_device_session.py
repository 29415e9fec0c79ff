"""The device session script packs its outputs: the run tool returns at most 8 files from
``$OUT``, and session 23 lost its window and short logs to that limit."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "prefill_device_session.sh"

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar"
)


def _run(out: Path, **env: str) -> subprocess.CompletedProcess:
    # A step name no step has: the script runs none and goes straight to its ending.
    full = dict(os.environ, OUT=str(out), STEPS="no-such-step", **env)
    return subprocess.run(
        ["bash", str(SCRIPT)], env=full, capture_output=True, text=True, timeout=60
    )


def _fill(out: Path) -> None:
    (out / "sub").mkdir(parents=True)
    for i in range(9):
        (out / f"step-{i}.log").write_text(f"log {i}\n")
    (out / "sub" / "rows.json").write_text("{}\n")


def test_every_output_is_packed_into_one_archive(tmp_path):
    _fill(tmp_path)
    result = _run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session.tar.gz"]
    with tarfile.open(tmp_path / "session.tar.gz") as archive:
        names = {os.path.normpath(n) for n in archive.getnames()}
        assert {f"step-{i}.log" for i in range(9)} | {"sub/rows.json"} <= names
        assert archive.extractfile("./step-3.log").read() == b"log 3\n"


def test_bundle_0_leaves_the_files_loose(tmp_path):
    _fill(tmp_path)
    assert _run(tmp_path, BUNDLE="0").returncode == 0
    assert not (tmp_path / "session.tar.gz").exists()
    assert len(list(tmp_path.glob("step-*.log"))) == 9


def test_an_empty_out_stays_empty(tmp_path):
    assert _run(tmp_path).returncode == 0
    assert list(tmp_path.iterdir()) == []

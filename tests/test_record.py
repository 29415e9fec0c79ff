"""Issue #15, clean uninstall: pip's RECORD stays true while a tree is patched.

A tiny wheel named ``vllm`` (the embedded fork's files) is built by hand, pip-installed
into a fresh venv, patched, and uninstalled: nothing of ours may be left behind, and
``pip show -f`` / ``pip check`` agree with the tree in between.  One venv per module, without
its own pip where this interpreter's pip can drive it (``pip --python``: faster).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest
from click.testing import CliRunner

from treeutil import FIXTURES, snapshot
from vllm_codemod.cli import cli

FORK = FIXTURES / "bi-v100" / "corex-0.8.3"
DIST_INFO = "vllm-0.8.3+corex.4.2.0.dist-info"
_PIP: Dict[Path, List[str]] = {}


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(dest: Path) -> Path:
    """``vllm-0.8.3+corex.4.2.0-py3-none-any.whl`` holding the fixture's files."""
    files = {p.relative_to(FORK).as_posix(): p.read_bytes() for p in FORK.rglob("*.py")}
    files[f"{DIST_INFO}/METADATA"] = (FORK / DIST_INFO / "METADATA").read_bytes()
    files[f"{DIST_INFO}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: vllm-codemod-test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n"
    )
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in sorted(files.items()):
        writer.writerow([name, _hash(data), len(data)])
    writer.writerow([f"{DIST_INFO}/RECORD", "", ""])
    files[f"{DIST_INFO}/RECORD"] = record.getvalue().encode()
    wheel = dest / "vllm-0.8.3+corex.4.2.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def _pip_command(env: Path) -> List[str]:
    """This interpreter's pip acting on ``env`` (pip >= 22.3), else the venv's own pip."""
    ours = [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python")]
    probe = subprocess.run([*ours, "--version"], capture_output=True)
    if probe.returncode == 0:
        return ours
    subprocess.run([str(env / "bin" / "python"), "-m", "ensurepip", "-q"], check=True)
    return [str(env / "bin" / "python"), "-m", "pip"]


def pip(env: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_PIP[env], "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        check=check,
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(root / "env")
    _PIP[root / "env"] = _pip_command(root / "env")
    return root / "env"


@pytest.fixture
def installed(env, tmp_path) -> Path:
    """A fresh pip install of the fork wheel; returns its site-packages."""
    wheel = build_wheel(tmp_path)
    pip(env, "install", "-q", "--no-deps", "--no-index", "--ignore-requires-python", str(wheel))
    out = subprocess.run(
        [
            str(env / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    site = Path(out.stdout.strip())
    assert (site / "vllm" / "_custom_ops.py").is_file()
    yield site
    pip(env, "uninstall", "-y", "vllm", check=False)


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _record_rows(site: Path):
    record = site / DIST_INFO / "RECORD"
    return list(csv.reader(io.StringIO(record.read_text())))


def test_record_follows_apply_and_revert_and_uninstall_leaves_nothing(env, installed):
    site = installed
    pristine = snapshot(site / DIST_INFO)
    payload = json.loads(run("check", "--site-packages", str(site), "--json").output)
    assert payload["record"] == f"{DIST_INFO}/RECORD"
    check_before = pip(env, "check", check=False)

    assert run("apply", "--site-packages", str(site)).exit_code == 0
    assert (site / "vllm" / "_codemod_kernels" / "__init__.py").is_file()
    patched = snapshot(site / DIST_INFO)
    assert patched != pristine
    assert run("apply", "--site-packages", str(site)).exit_code == 0
    assert snapshot(site / DIST_INFO) == patched  # idempotent
    assert run("check", "--site-packages", str(site)).exit_code == 0

    # every file of ours is listed, and every hash and size listed is the file's
    rows = _record_rows(site)
    listed = {row[0] for row in rows}
    for path in (site / "vllm").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            assert path.relative_to(site).as_posix() in listed, path
    for name, digest, size in rows:
        if digest:
            data = (site / name).read_bytes()
            assert (digest, int(size)) == (_hash(data), len(data)), name
    shown = pip(env, "show", "-f", "vllm").stdout
    assert "vllm/_codemod_kernels/__init__.py" in shown
    assert "vllm/.vllm-codemod/manifest.json" in shown
    check_after = pip(env, "check", check=False)
    assert (check_after.returncode, check_after.stdout) == (
        check_before.returncode,
        check_before.stdout,
    )

    # revert gives back the original RECORD byte for byte
    assert run("revert", "--site-packages", str(site)).exit_code == 0
    assert snapshot(site / DIST_INFO) == pristine

    assert run("apply", "--site-packages", str(site)).exit_code == 0
    pip(env, "uninstall", "-y", "vllm")
    assert not (site / "vllm").exists()
    assert not (site / DIST_INFO).exists()


def test_check_says_when_there_is_no_record(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(FORK, site)
    assert run("apply", "--site-packages", str(site)).exit_code == 0
    result = run("check", "--site-packages", str(site))
    assert result.exit_code == 0
    assert "no vllm dist-info RECORD" in result.output
    payload = run("check", "--site-packages", str(site), "--json").output
    assert json.loads(payload)["record"] is None

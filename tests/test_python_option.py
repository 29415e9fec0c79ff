"""``--python PATH``: patch the vllm another interpreter imports (a real venv)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from treeutil import FIXTURES, snapshot
from vllm_codemod.cli import cli

FORK = "bi-v100/corex-0.8.3"


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Path(out)


@pytest.fixture(scope="module")
def venv_with_vllm(tmp_path_factory) -> Path:
    """A venv (no pip: fast) whose site-packages holds the fork fixture tree."""
    root = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = _site_packages(python)
    for entry in (FIXTURES / FORK).iterdir():
        shutil.copytree(entry, site / entry.name)
    return python


def test_the_tree_is_the_one_that_interpreter_imports(venv_with_vllm, tmp_path):
    site = _site_packages(venv_with_vllm)
    check = run("check", "--python", str(venv_with_vllm), "--json")
    assert check.exit_code == 1, check.output
    payload = json.loads(check.output)
    assert payload["vllm_root"] == str((site / "vllm").resolve())
    assert payload["version"] == "0.8.3+corex.4.2.0"

    before = snapshot(site)
    assert run("apply", "--python", str(venv_with_vllm)).exit_code == 0
    assert (site / "vllm" / ".vllm-codemod" / "manifest.json").is_file()
    assert run("check", "--python", str(venv_with_vllm)).exit_code == 0
    assert run("revert", "--python", str(venv_with_vllm)).exit_code == 0
    assert snapshot(site) == before


def test_an_interpreter_without_vllm(tmp_path):
    # The interpreter running the tests has no vllm installed.
    result = run("check", "--python", sys.executable)
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert line.startswith(f"vllm-codemod: error: --python {sys.executable}: vllm is not")
    assert "--site-packages" in line


def test_not_an_interpreter(tmp_path):
    missing = run("check", "--python", str(tmp_path / "nope"))
    assert missing.exit_code == 2 and "no such interpreter" in missing.output
    script = tmp_path / "fake-python"
    script.write_text("#!/bin/sh\necho 'not python' >&2\nexit 7\n")
    script.chmod(0o755)
    fake = run("check", "--python", str(script))
    assert fake.exit_code == 2, fake.output
    (line,) = fake.output.splitlines()
    assert "exited 7" in line and "not python" in line


def test_python_and_site_packages_together_are_refused(venv_with_vllm, tmp_path):
    result = run("check", "--python", str(venv_with_vllm), "--vllm-root", str(tmp_path))
    assert result.exit_code == 2
    assert "pass only one" in result.output


def test_verify_runs_under_that_interpreter_and_needs_its_torch(venv_with_vllm):
    result = run("verify", "--python", str(venv_with_vllm), "--device", "cpu")
    assert result.exit_code == 2, result.output
    (line,) = result.output.splitlines()
    # First: nothing applied yet; the kernels are not in the tree.
    assert "run `vllm-codemod apply` first" in line
    assert run("apply", "--python", str(venv_with_vllm)).exit_code == 0
    try:
        no_torch = run("verify", "--python", str(venv_with_vllm), "--device", "cpu")
        assert no_torch.exit_code == 2, no_torch.output
        (line,) = no_torch.output.splitlines()
        assert f"--python {venv_with_vllm}: verify needs torch in that interpreter" in line
    finally:
        assert run("revert", "--python", str(venv_with_vllm)).exit_code == 0


def test_verify_with_the_serving_interpreters_torch(tmp_path):
    pytest.importorskip("torch")
    import sysconfig

    root = tmp_path / "serving"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = _site_packages(python)
    for entry in (FIXTURES / "bi-v100" / "corex-0.4.3").iterdir():
        shutil.copytree(entry, site / entry.name)
    # torch comes from the test environment, as a .pth line would bring it in.
    (site / "zz_torch_from_tests.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    assert run("apply", "--python", str(python)).exit_code == 0
    result = run("verify", "--python", str(python), "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["ok"] is True and {r["path"] for r in payload["results"]} == {"torch"}
    assert not list((site / "vllm" / "_codemod_kernels").rglob("*.pyc"))

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
    torch = pytest.importorskip("torch")

    root = tmp_path / "serving"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = _site_packages(python)
    for entry in (FIXTURES / "bi-v100" / "corex-0.4.3").iterdir():
        shutil.copytree(entry, site / entry.name)
    # torch comes from the test environment, as a .pth line would bring it in: the
    # directory torch was imported from (a venv may see it through its base Python).
    torch_site = Path(torch.__file__).resolve().parent.parent
    (site / "zz_torch_from_tests.pth").write_text(f"{torch_site}\n")
    assert run("apply", "--python", str(python)).exit_code == 0
    result = run("verify", "--python", str(python), "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["ok"] is True and {r["path"] for r in payload["results"]} == {"torch"}
    assert not list((site / "vllm" / "_codemod_kernels").rglob("*.pyc"))


def _fake_python(tmp_path: Path, child_body: str) -> Path:
    """An executable "python" whose import path holds a tree with kernels in it, and whose
    kernel self-check (any other ``-c`` program) runs ``child_body`` instead."""
    site = tmp_path / "site"
    kernels = site / "vllm" / "_codemod_kernels"
    kernels.mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    (kernels / "__init__.py").write_text("")
    script = tmp_path / "fake-python"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, signal, sys\n"
        "signal.alarm(120)  # never outlive the test, even one that deadlocks\n"
        "if 'getsitepackages' in sys.argv[3]:\n"
        f"    print(json.dumps({{'executable': sys.argv[0], 'dirs': [{str(site)!r}]}}))\n"
        "    sys.exit(0)\n" + child_body
    )
    script.chmod(0o755)
    return script


GOOD_RESULT = {
    "shape": "fake",
    "path": "torch",
    "max_abs_err": 0.0,
    "rel_err": 0.0,
    "ok": True,
    "seconds": 0.01,
}


def _verify_in_subprocess(script: Path, *extra: str) -> subprocess.CompletedProcess:
    """The CLI in its own process, so that a deadlock fails the test instead of hanging it."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "vllm_codemod", "verify", "--python", str(script), *extra],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("verify --python hung: the child's output filled a pipe nobody read")


def test_verify_survives_a_child_that_floods_both_pipes(tmp_path):
    noise = "x" * 99 + "\n"
    body = (
        f"sys.stdout.write({noise!r} * 3000)  # 300 KB, not JSON\n"
        "sys.stdout.flush()\n"
        f"sys.stderr.write({noise!r} * 3000)\n"
        "sys.stderr.write('@@vllm-codemod-progress 1 1\\n')\n"
        f"print(json.dumps({{'results': [{GOOD_RESULT!r}]}}))\n"
    )
    script = _fake_python(tmp_path, body)
    result = _verify_in_subprocess(script, "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    payload = json.loads(result.stdout)
    assert payload["ok"] is True and [r["shape"] for r in payload["results"]] == ["fake"]


def test_a_case_the_child_skipped_is_listed_apart_and_fails_nothing(tmp_path):
    skipped = dict(GOOD_RESULT, shape="fp8", path="tree", ok=True, skipped="Triton 2.1")
    body = f"print(json.dumps({{'results': [{GOOD_RESULT!r}, {skipped!r}]}}))\n"
    result = _verify_in_subprocess(_fake_python(tmp_path, body), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    payload = json.loads(result.stdout)
    assert [r["shape"] for r in payload["results"]] == ["fake"]
    assert payload["skipped"] == [{"shape": "fp8", "path": "tree", "reason": "Triton 2.1"}]


@pytest.mark.parametrize(
    "answer, what",
    [
        ("'not json at all'", "no JSON object"),
        ("json.dumps({'outcome': []})", "no 'results'"),
        ("json.dumps({'results': {}})", "'results' is not a non-empty list"),
        ("json.dumps({'results': [{'shape': 'fake'}]})", "result 0 has no 'path'"),
        ("json.dumps({'results': [dict(GOOD, ok='yes')]})", "result 0 has a bad 'ok'"),
        ("json.dumps({'results': [dict(GOOD, skipped=1)]})", "result 0 has a bad 'skipped'"),
        ("json.dumps({'failure': 'gremlins'})", "unknown failure 'gremlins'"),
    ],
)
def test_a_malformed_answer_from_the_child_is_an_environment_problem(tmp_path, answer, what):
    body = f"GOOD = {GOOD_RESULT!r}\nprint({answer})\n"
    script = _fake_python(tmp_path, body)
    result = run("verify", "--python", str(script), "--device", "cpu")
    assert result.exit_code == 2, result.output
    (line,) = result.output.splitlines()
    assert line.startswith(f"vllm-codemod: error: --python {script}: malformed answer"), line
    assert what in line, line


@pytest.fixture
def patched_copy(tmp_path) -> Path:
    """A patched copy of the fork fixture, outside any interpreter's import path."""
    site = tmp_path / "patched"
    shutil.copytree(FIXTURES / FORK, site)
    assert run("apply", "--site-packages", str(site)).exit_code == 0
    return site


@pytest.mark.parametrize("flag", ["--site-packages", "--vllm-root"])
def test_verify_runs_a_named_tree_under_that_interpreter(tmp_path, patched_copy, flag):
    """--python beside --site-packages/--vllm-root: that tree's kernels, checked in that
    interpreter (apply takes --python to find the tree; verify also runs there)."""
    # The fake interpreter answers with the kernel package it was asked to check.
    body = f"print(json.dumps({{'results': [dict({GOOD_RESULT!r}, shape=sys.argv[4])]}}))\n"
    script = _fake_python(tmp_path / "fake", body)
    where = patched_copy if flag == "--site-packages" else patched_copy / "vllm"
    result = _verify_in_subprocess(script, flag, str(where), "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["vllm_root"] == str(patched_copy / "vllm")
    assert [r["shape"] for r in payload["results"]] == [
        str(patched_copy / "vllm" / "_codemod_kernels")
    ]


def test_verify_a_named_tree_with_this_interpreter_as_python(patched_copy):
    pytest.importorskip("torch")
    site = str(patched_copy)
    here = ["--python", sys.executable, "--device", "cpu", "--json"]
    result = run("verify", "--site-packages", site, *here)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["ok"] is True and {r["path"] for r in payload["results"]} == {"torch"}
    assert not list((patched_copy / "vllm" / "_codemod_kernels").rglob("*.pyc"))


def test_verify_a_named_tree_needs_torch_in_that_interpreter(venv_with_vllm, patched_copy):
    """The venv has no torch: the error comes from the child, so it ran there."""
    result = run("verify", "--site-packages", str(patched_copy), "--python", str(venv_with_vllm))
    assert result.exit_code == 2, result.output
    (line,) = result.output.splitlines()
    assert f"--python {venv_with_vllm}: verify needs torch in that interpreter" in line


def test_other_commands_still_take_one_tree_option(venv_with_vllm, patched_copy):
    result = run("check", "--site-packages", str(patched_copy), "--python", str(venv_with_vllm))
    assert result.exit_code == 2
    assert "pass only one" in result.output

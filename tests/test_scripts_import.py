"""Every benchmark and script imports the installed project by its one name, and does
no work when imported.

They run on a GPU box, rarely, far from this suite: a stale ``from kernels import``
or a shim they silently relied on would only show there.  Each directory's modules
are imported in one subprocess whose working directory is that directory, which is
what ``python benchmarks/x.py`` puts first on the import path, so sibling imports
(``import bench_paged_attention``) resolve as they do when run.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from treeutil import REPO

DIRECTORIES = ("benchmarks", "scripts")
MODULES = sorted(
    (directory, path.stem) for directory in DIRECTORIES for path in (REPO / directory).glob("*.py")
)

_IMPORT_EACH = """
import contextlib, importlib, io, json, sys
results = {}
for name in sys.argv[1:]:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            module = importlib.import_module(name)
        results[name] = ["ok", out.getvalue(), module.__file__]
    except ModuleNotFoundError as exc:
        results[name] = ["missing", exc.name, ""]
    except BaseException as exc:
        results[name] = ["error", repr(exc), ""]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def imported() -> Dict[str, Dict[str, List[str]]]:
    results = {}
    for directory in DIRECTORIES:
        names = [name for d, name in MODULES if d == directory]
        proc = subprocess.run(
            [sys.executable, "-c", _IMPORT_EACH, *names],
            cwd=REPO / directory,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        results[directory] = json.loads(proc.stdout.splitlines()[-1])
    return results


def test_every_module_is_listed():
    assert ("benchmarks", "bench_paged_attention") in MODULES
    assert ("scripts", "check_triton_compile") in MODULES


@pytest.mark.parametrize("directory,name", MODULES, ids=[f"{d}/{n}" for d, n in MODULES])
def test_imports_without_running(imported, directory, name):
    status, detail, where = imported[directory][name]
    if status == "missing" and importlib.util.find_spec(detail.split(".")[0]) is None:
        pytest.skip(f"{directory}/{name}.py needs {detail}, not installed here")
    assert status == "ok", f"{directory}/{name}.py: {detail}"
    assert detail == "", f"{directory}/{name}.py printed on import: {detail[:200]!r}"
    assert Path(where).parent == REPO / directory


@pytest.mark.parametrize("directory,name", MODULES, ids=[f"{d}/{n}" for d, n in MODULES])
def test_work_runs_only_as_a_script(directory, name):
    """A module-level ``main()`` call would run a benchmark on import."""
    tree = ast.parse((REPO / directory / f"{name}.py").read_text(encoding="utf-8"))
    guards = [
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    ]
    assert guards, f"{directory}/{name}.py has no `if __name__ == '__main__':`"
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            called = getattr(func, "id", getattr(func, "attr", ""))
            assert called != "main", f"{directory}/{name}.py calls main() at import"


def test_kernels_come_from_the_installed_package():
    """``from kernels import`` worked only with the repository root on the path."""
    for directory, name in MODULES:
        tree = ast.parse((REPO / directory / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                top = node.module.split(".")[0]
                assert top not in ("kernels", "transforms", "src"), (directory, name)
            if isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    assert top not in ("kernels", "transforms", "src"), (directory, name)


def test_no_import_path_edits_or_shims_anywhere():
    """One import name: nothing may reach the project's code by editing the import path."""
    # Edits only (reading the path, as --python's probe does, is fine); spelled apart so
    # that this file does not match itself.
    edit = re.compile("sys" + r"\.path\s*(\.\s*(insert|append|extend)|\[|\+=|=[^=])")
    shim = "/tmp/" + "shim"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    if not any(tracked):
        pytest.skip("not a git checkout")
    offenders = []
    for rel in tracked:
        if not rel or rel.startswith("vendor_fixtures/") or rel.startswith("tests/snapshots/"):
            continue
        path = REPO / rel
        if not path.is_file() or path.suffix not in (".py", ".sh", ".toml", ".md", ""):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if edit.search(text) or shim in text:
            offenders.append(rel)
    assert offenders == []


def test_device_session_script_is_valid_bash_without_a_shim():
    script = REPO / "benchmarks" / "device_session.sh"
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = script.read_text()
    assert "PYTHONPATH" not in text
    assert "pip install" in text and "-e ." in text


_HOST_AB = """
import json, sys
from pathlib import Path
import host_ab
out = {}
for label, where in json.loads(sys.argv[1]).items():
    try:
        found = host_ab.kernels_dir(Path(where))
        dispatch = host_ab.load_kernels(Path(where), name="_old_" + label)
        out[label] = [str(found), dispatch.__file__, callable(dispatch.paged_attention_v2)]
    except LookupError as exc:
        out[label] = ["missing", str(exc)]
opts = host_ab.parse_args(["--old", sys.argv[2], "--rounds", "3"])
out["args"] = [str(opts.old), opts.rounds, opts.calls]
try:
    host_ab.parse_args(["--old", sys.argv[3]])
except SystemExit as exc:
    out["refused"] = exc.code
print(json.dumps(out))
"""


def test_host_ab_old_takes_a_checkout_an_installed_tree_or_a_kernels_directory(tmp_path):
    """``--old DIR`` finds the kernel package in DIR and loads it by path (no PYTHONPATH)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("benchmarks/host_ab.py needs torch")
    from click.testing import CliRunner

    from treeutil import copy_fixture
    from vllm_codemod.cli import cli

    site = copy_fixture("bi-v100/corex-0.8.3", tmp_path)
    assert CliRunner().invoke(cli, ["apply", "--site-packages", str(site)]).exit_code == 0
    places = {
        "checkout": str(REPO),
        "kernels": str(REPO / "kernels"),
        "patched": str(site),
        "vllm": str(site / "vllm"),
        "empty": str(tmp_path / "empty"),
    }
    (tmp_path / "empty").mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", _HOST_AB, json.dumps(places), str(REPO), places["empty"]],
        cwd=REPO / "benchmarks",
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    bundled = str(site / "vllm" / "_codemod_kernels")
    for label, package in [
        ("checkout", REPO / "kernels"),
        ("kernels", REPO / "kernels"),
        ("patched", bundled),
        ("vllm", bundled),
    ]:
        found, dispatch_file, callable_ = out[label]
        assert Path(found) == Path(package).resolve(), label
        assert Path(dispatch_file) == Path(package).resolve() / "dispatch.py", label
        assert callable_ is True
    assert out["empty"][0] == "missing" and "no kernel package in it" in out["empty"][1]
    # --old is resolved while parsing: a directory without kernels is a usage error.
    assert out["args"] == [str((REPO / "kernels").resolve()), 3, 1000]
    assert out["refused"] == 2 and "argument --old" in proc.stderr

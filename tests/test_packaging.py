"""The distribution a user installs: namespaced import names, old-Python syntax."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from treeutil import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    return next(out.glob("vllm_codemod-*.whl"))


def test_wheel_installs_only_namespaced_packages(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"vllm_codemod", next(t for t in tops if t.endswith(".dist-info"))}
    assert "vllm_codemod/transforms/paged_attention_v2.py" in names
    assert "vllm_codemod/kernels/signature.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert (
        "vllm-codemod = vllm_codemod.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    )


def test_wheel_ships_every_module_of_the_checkout(wheel):
    """A subpackage missing from pyproject's list would still import in a development
    checkout (the editable install finds it), but not in a Docker image built from the
    wheel."""
    names = set(zipfile.ZipFile(wheel).namelist())
    roots = {
        "src/vllm_codemod": "vllm_codemod",
        "transforms": "vllm_codemod/transforms",
        "kernels": "vllm_codemod/kernels",
    }
    expected = {
        installed + "/" + path.relative_to(REPO / src).as_posix()
        for src, installed in roots.items()
        for path in (REPO / src).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert expected - names == set()


def test_regular_install_runs_without_the_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import vllm_codemod.kernels.signature as s, vllm_codemod.cli as c;"
            "import vllm_codemod.commands.apply as a;"
            "assert a.__file__.startswith(s.__file__.split('vllm_codemod')[0]), a.__file__;"
            "print(s.__file__); c.main()",
            "list",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(str(target))
    assert "paged-attention-v2" in proc.stdout


def _old_pythons():
    found = []
    for minor in ("3.9", "3.10"):
        found += sorted(glob.glob(f"/root/.pyenv/versions/{minor}*/bin/python{minor}"))[:1]
    return found


@pytest.mark.parametrize("python", _old_pythons() or [None])
def test_shipped_code_compiles_on_old_pythons(python):
    if python is None:
        pytest.skip("no Python 3.9/3.10 interpreter on this machine")
    files = sorted(
        str(p) for d in ("kernels", "transforms", "src") for p in (REPO / d).rglob("*.py")
    )
    code = (
        "import sys\n"
        "for f in sys.argv[1:]:\n"
        "    compile(open(f, encoding='utf-8').read(), f, 'exec', dont_inherit=True)\n"
    )
    proc = subprocess.run([python, "-c", code, *files], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr

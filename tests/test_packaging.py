"""The distribution a user installs: namespaced import names, old-Python syntax."""

from __future__ import annotations

import glob
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest

from treeutil import FIXTURES, REPO, snapshot

_CACHES = ("__pycache__", ".pytest_cache", ".ruff_cache")


def _checkout_files() -> Dict[str, int]:
    """Every file of the checkout outside .git and caches, with its mtime: a build that
    writes ``build/`` or refreshes an ``*.egg-info`` there shows up as a difference."""
    files = {}
    for root, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if d != ".git" and d not in _CACHES]
        for name in names:
            path = os.path.join(root, name)
            files[os.path.relpath(path, REPO)] = os.lstat(path).st_mtime_ns
    return files


@pytest.fixture(scope="module")
def checkout_before() -> Dict[str, int]:
    return _checkout_files()


@pytest.fixture(scope="module")
def source(checkout_before, tmp_path_factory) -> Path:
    """A copy of the checkout to build from: setuptools writes ``build/`` and
    ``*.egg-info`` into the directory it builds, and the checkout is not ours to litter."""
    copy = tmp_path_factory.mktemp("source") / "vllm-codemod"
    ignore = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", *_CACHES)
    shutil.copytree(REPO, copy, ignore=ignore)
    return copy


@pytest.fixture(scope="module")
def wheel(source, tmp_path_factory) -> Path:
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
            str(source),
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
    """pyenv's interpreters of the oldest supported minors (3.8 is requires-python's)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = []
    for minor in ("3.8", "3.9", "3.10"):
        found += sorted(glob.glob(f"{root}/versions/{minor}.*/bin/python{minor}"))[:1]
    return found


@pytest.mark.parametrize("python", _old_pythons() or [None])
def test_shipped_code_compiles_on_old_pythons(python):
    if python is None:
        pytest.skip("no Python 3.8-3.10 interpreter under pyenv on this machine")
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


@pytest.fixture(scope="module")
def fresh_venv(wheel, tmp_path_factory) -> Path:
    """A new venv with the built wheel installed, as a user gets it.

    The wheel goes in with ``--no-deps`` and the venv reads its dependencies (libcst,
    click, ...) from this interpreter's site-packages through a ``.pth`` line: no
    download, and the editable install of the checkout stays invisible there (a path
    listed in a ``.pth`` file is added, the ``.pth`` files inside it are not run).
    """
    venv = tmp_path_factory.mktemp("venv") / "v"
    python = venv / "bin" / "python"
    install = ["install", "-q", "--no-deps", "--no-index", str(wheel)]
    # This interpreter's pip installs into the venv (`pip --python`, pip >= 22.3): seconds
    # faster than bootstrapping a pip inside it.
    import pip

    if tuple(int(part) for part in pip.__version__.split(".")[:2]) >= (22, 3):
        create, install = (
            ["--without-pip"],
            [sys.executable, "-m", "pip", "--python", str(python)] + install,
        )
    else:
        create, install = [], [str(python), "-m", "pip"] + install
    subprocess.run(
        [sys.executable, "-m", "venv", *create, str(venv)], check=True, capture_output=True
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run(install, check=True, capture_output=True)
    # After the install: pip must not see the outer vllm-codemod and call it satisfied.
    deps = [p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]]]
    Path(purelib, "_outer_site_packages.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")
    return venv


def _run(args: List[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_CODEMOD_", "PYTHON"))}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)


def test_wheel_in_a_fresh_venv_runs_the_cli(fresh_venv, tmp_path):
    import vllm_codemod

    python, script = fresh_venv / "bin" / "python", fresh_venv / "bin" / "vllm-codemod"
    where = _run([str(python), "-c", "import vllm_codemod; print(vllm_codemod.__file__)"], tmp_path)
    assert where.stdout.startswith(str(fresh_venv)), where.stdout + where.stderr
    version = _run([str(script), "--version"], tmp_path)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"vllm-codemod, version {vllm_codemod.__version__}"
    helped = _run([str(python), "-m", "vllm_codemod", "--help"], tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("Usage: vllm-codemod")
    for command in ("apply", "check", "diff", "revert", "verify", "tune-config"):
        assert command in helped.stdout


def test_wheel_in_a_fresh_venv_patches_and_reverts_the_embedded_fork(fresh_venv, tmp_path):
    script = str(fresh_venv / "bin" / "vllm-codemod")
    site_dir = tmp_path / "site"
    subprocess.run(
        ["cp", "-a", str(FIXTURES / "bi-v100" / "corex-0.8.3"), str(site_dir)], check=True
    )
    before = snapshot(site_dir)
    tree = ["--site-packages", str(site_dir)]

    diff = _run([script, "diff", *tree], tmp_path)
    assert diff.returncode == 1, diff.stderr
    assert "+++ b/vllm/_custom_ops.py" in diff.stdout
    assert snapshot(site_dir) == before

    applied = _run([script, "apply", *tree], tmp_path)
    assert applied.returncode == 0, applied.stderr
    kernels = site_dir / "vllm" / "_codemod_kernels"
    assert (kernels / "signature.py").is_file()
    assert _run([script, "check", *tree], tmp_path).returncode == 0
    assert _run([script, "diff", *tree], tmp_path).returncode == 0

    reverted = _run([script, "revert", *tree], tmp_path)
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site_dir) == before


@pytest.fixture(scope="module")
def sdist(source, tmp_path_factory) -> Path:
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("sdist")
    subprocess.run(
        # -x: setup.py copes with whichever setuptools this interpreter has.
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "-x", "-o", str(out), "."],
        cwd=source,
        check=True,
        capture_output=True,
    )
    return next(out.glob("vllm_codemod-*.tar.gz"))


def test_sdist_has_the_license_and_no_tests_it_cannot_run(sdist):
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "setup.py"} <= names
    assert not any(name.startswith("tests/") for name in names)
    assert "kernels/signature.py" in names and "transforms/paged_attention_v2.py" in names


def test_sdist_builds_the_same_wheel(sdist, wheel, tmp_path):
    """A wheel built from the sdist (what pip does on a vendor image without the
    checkout) holds what the checkout's wheel holds."""
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
            str(tmp_path),
            str(sdist),
        ],
        check=True,
        capture_output=True,
    )
    rebuilt = next(tmp_path.glob("vllm_codemod-*.whl"))
    assert sorted(zipfile.ZipFile(rebuilt).namelist()) == sorted(zipfile.ZipFile(wheel).namelist())


def test_license_metadata(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA")))
    text = metadata.decode()
    assert "License-Expression: Apache-2.0" in text or "License: Apache-2.0" in text
    assert any(n.endswith("licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
    assert "Requires-Python: >=3.8" in text
    assert "Programming Language :: Python :: 3.8" in text


def test_building_leaves_the_checkout_as_it_was(checkout_before, wheel, sdist):
    assert _checkout_files() == checkout_before

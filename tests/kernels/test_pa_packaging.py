"""The kernel package must import without torch and work under any package name."""

from __future__ import annotations

import ast
import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_codemod.tuning.tree_imports import load_file

KERNELS = Path(__file__).resolve().parents[2] / "kernels"


def test_package_import_does_not_load_torch():
    code = (
        "import sys, vllm_codemod.kernels as k, vllm_codemod.kernels.signature as s;"
        "assert 'torch' not in sys.modules and 'triton' not in sys.modules;"
        "assert k.__version__ and callable(k.paged_attention_v2);"
        "assert 'kv_scale' in s.ACCEPTED_PARAMETERS"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_only_relative_imports_and_py_files():
    for path in KERNELS.iterdir():
        if path.name == "__pycache__":
            continue
        if path.name.startswith("tuning-") and path.suffix == ".json":
            continue  # a bundled tuning table (data, read by tuned.py)
        assert path.suffix == ".py", path
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module.split(".")[0] not in ("vllm", "vllm_codemod"), path
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[0] not in ("vllm", "vllm_codemod"), path


def test_selfcheck_from_a_copied_tree(tmp_path):
    """As ``vllm-codemod verify`` does: load vllm/_codemod_kernels under a private name."""
    pytest.importorskip("torch")
    package = tmp_path / "vllm" / "_codemod_kernels"
    shutil.copytree(KERNELS, package, ignore=shutil.ignore_patterns("__pycache__"))
    name = "_private_pa_kernels_test"
    try:
        load_file(name, package / "__init__.py", package=True)
        selfcheck = importlib.import_module(f"{name}.selfcheck")
        results = selfcheck.run_selfcheck(device="cpu", quick=True, seed=3)
    finally:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]
    assert len(results) >= 4
    for r in results:
        assert set(r) >= {"shape", "path", "max_abs_err", "rel_err", "ok", "seconds"}
        assert r["ok"], r
        assert r["path"] == "torch"

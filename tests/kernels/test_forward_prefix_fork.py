"""The vendored 0.8.3 fork tree's own ``PagedAttention.forward_prefix``, patched and not:
same results within bf16 rounding.  On a GPU (``-m gpu``) the tree's Triton kernel
against ours; without one, the tree's kernel under Triton's interpreter against the
routed torch path (skipped without Triton >= 3)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from treeutil import copy_fixture

torch = pytest.importorskip("torch")

HAS_TRITON = importlib.util.find_spec("triton") is not None
CUDA = torch.cuda.is_available()
SCRIPT = Path(__file__).resolve().parent / "forward_prefix_check.py"


def _triton_major() -> int:
    from importlib.metadata import version

    return int(version("triton").split(".")[0])


pytestmark = [
    pytest.mark.skipif(not HAS_TRITON, reason="the tree's prefix_prefill.py imports Triton"),
    pytest.mark.skipif(
        HAS_TRITON and not CUDA and _triton_major() < 3,
        reason="no CUDA device, and Triton 2.x has no interpreter for CPU tensors",
    ),
]


def _importable(tree: Path, dest: Path) -> Path:
    """The fixture is a slice of a tree: keep its attention ops (and the kernels apply
    copied in), stub the vllm modules they import that the slice lacks."""
    from test_tune_triton import PLATFORM_STUB

    vllm = dest / "vllm"
    shutil.copytree(tree / "vllm" / "attention", vllm / "attention")
    if (tree / "vllm" / "_codemod_kernels").is_dir():
        shutil.copytree(tree / "vllm" / "_codemod_kernels", vllm / "_codemod_kernels")
    for package in ("", "attention", "attention/ops", "platforms", "triton_utils"):
        (vllm / package).mkdir(parents=True, exist_ok=True)
        init = vllm / package / "__init__.py"
        if not init.exists():
            init.write_text("")
    (vllm / "platforms" / "__init__.py").write_text(PLATFORM_STUB)
    (vllm / "triton_utils" / "__init__.py").write_text(
        "import triton\nimport triton.language as tl\n\nHAS_TRITON = True\n"
    )
    (vllm / "_custom_ops.py").write_text("")  # forward_prefix does not use it
    return dest


def _run(tmp_path: Path) -> subprocess.CompletedProcess:
    before = copy_fixture("bi-v100/corex-0.8.3", tmp_path / "before")
    after = copy_fixture("bi-v100/corex-0.8.3", tmp_path / "after")
    # in a child: the CLI configures logging, which later tests' caplog would not see
    applied = subprocess.run(
        [sys.executable, "-m", "vllm_codemod", "apply", "--site-packages", str(after)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert applied.returncode == 0, applied.stdout + applied.stderr
    env = dict(os.environ)
    if not CUDA:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(_importable(before, tmp_path / "b")),
         str(_importable(after, tmp_path / "a"))],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_forward_prefix_patched_matches_the_tree_on_the_gpu(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ok ") >= 5, proc.stdout


@pytest.mark.skipif(CUDA, reason="CUDA present: the GPU test covers it")
def test_forward_prefix_patched_matches_the_tree_under_the_interpreter(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ok ") == 3, proc.stdout

"""The Triton kernels on CPU under Triton's interpreter (runs where Triton imports but no
CUDA device is present; GPU machines run test_pa_gpu.py and test_prefill_gpu.py instead).

Each check script runs in a subprocess: the interpreter must be chosen before Triton is
imported.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the CPU suite runs without torch too

HAS_TRITON = importlib.util.find_spec("triton") is not None
HERE = Path(__file__).resolve().parent


def _triton_major() -> int:
    from importlib.metadata import version

    return int(version("triton").split(".")[0])


pytestmark = [
    pytest.mark.skipif(not HAS_TRITON, reason="needs Triton (its interpreter runs on CPU)"),
    pytest.mark.skipif(
        HAS_TRITON and _triton_major() < 3,
        reason="TRITON_INTERPRET=1 on CPU tensors needs Triton >= 3.0 (2.x: compile check only)",
    ),
    pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: the GPU tests cover it"),
]


def _run_under_interpreter(script: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run(
        [sys.executable, str(HERE / script)], env=env, capture_output=True, text=True, timeout=600
    )


def test_triton_kernels_under_interpreter():
    proc = _run_under_interpreter("interpret_check.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_prefill_kernel_under_interpreter():
    proc = _run_under_interpreter("prefill_interpret_check.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ok  K 2-D") >= 16, proc.stdout
    skipped_3d = "K 3-D: this Triton has no tl.permute" in proc.stdout  # Triton 2.x
    assert skipped_3d or proc.stdout.count("ok  K 3-D") >= 16, proc.stdout

"""The prefix-prefill Triton kernel on CPU under Triton's interpreter, against float64
(runs where Triton imports and no CUDA device is present; test_prefill_gpu.py runs the
same cases on a GPU)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the CPU suite runs without torch too

HAS_TRITON = importlib.util.find_spec("triton") is not None
SCRIPT = Path(__file__).resolve().parent / "prefill_interpret_check.py"


def _triton_major() -> int:
    from importlib.metadata import version

    return int(version("triton").split(".")[0])


@pytest.mark.skipif(not HAS_TRITON, reason="needs Triton (its interpreter runs on CPU)")
@pytest.mark.skipif(
    HAS_TRITON and _triton_major() < 3,
    reason="TRITON_INTERPRET=1 on CPU tensors needs Triton >= 3.0 (2.x: compile check only)",
)
@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: test_prefill_gpu.py")
def test_prefill_kernel_under_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ok ") >= 16, proc.stdout

"""tune's measuring code on the real Triton kernels: the tree's prefix-prefill kernels of
three vLLM releases against our float64 prefill reference, and the decode tuner over the
bundled kernels.  On a CUDA device (``-m gpu``) on the GPU; where Triton >= 3 imports but
no GPU is present, under Triton's interpreter on CPU tensors; skipped without Triton."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from treeutil import copy_fixture
from vllm_codemod.cli import cli

torch = pytest.importorskip("torch")

HAS_TRITON = importlib.util.find_spec("triton") is not None
SCRIPT = Path(__file__).resolve().parent / "kernels" / "tune_triton_check.py"
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"


def _triton_major() -> int:
    from importlib.metadata import version

    return int(version("triton").split(".")[0])


CUDA = torch.cuda.is_available()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not HAS_TRITON, reason="needs Triton"),
    pytest.mark.skipif(
        HAS_TRITON and not CUDA and _triton_major() < 3,
        reason="no CUDA device, and Triton 2.x has no interpreter for CPU tensors",
    ),
]

PLATFORM_STUB = """\
import torch


class _Platform:
    def has_device_capability(self, capability):
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return major * 10 + minor >= capability
        return True

    def get_device_capability(self):
        return torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)

    def fp8_dtype(self):
        return torch.float8_e4m3fn

    def is_rocm(self):
        return False


current_platform = _Platform()
"""


def _run(mode: str, site: Path) -> None:
    env = dict(os.environ)
    if not CUDA:
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), mode, str(site)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("release", ["corex-0.8.3", "vllm-0.8.5.post1", "vllm-0.11.0"])
def test_prefill_reference_matches_the_trees_kernels(tmp_path, release):
    # Just enough of a vllm package to import prefix_prefill.py as the tree would.
    vllm = tmp_path / "site" / "vllm"
    for package in ("", "platforms", "triton_utils", "attention", "attention/ops"):
        (vllm / package).mkdir(parents=True, exist_ok=True)
        (vllm / package / "__init__.py").write_text("")
    (vllm / "platforms" / "__init__.py").write_text(PLATFORM_STUB)
    (vllm / "triton_utils" / "__init__.py").write_text(
        "import triton\nimport triton.language as tl\n"
    )
    # The routed snapshot asks the bundled kernel first.  This stand-in declines the
    # calls the tuner makes with the bundled backend set to "tree" (what the tuner must
    # do to reach the tree's kernel, the one NUM_WARPS governs) and fails any other.
    (vllm / "_codemod_kernels").mkdir()
    (vllm / "_codemod_kernels" / "__init__.py").write_text(
        "import os\n\n\n"
        "def context_attention_fwd(**kwargs):\n"
        "    if os.environ.get('VLLM_CODEMOD_PREFILL_BACKEND') == 'tree':\n"
        "        return False\n"
        "    raise AssertionError('the tuner timed the bundled kernel, not the tree\\'s')\n"
    )
    source = SNAPSHOTS / release / "vllm__attention__ops__prefix_prefill.py"
    (vllm / "attention" / "ops" / "prefix_prefill.py").write_bytes(source.read_bytes())
    _run("prefill", tmp_path / "site")


def test_prefill_config_tuner_rejects_a_wrong_config(tmp_path):
    site = copy_fixture("bi-v100/corex-0.8.3", tmp_path)
    result = CliRunner().invoke(cli, ["apply", "--site-packages", str(site)])
    assert result.exit_code == 0, result.output
    _run("prefill-configs", site)


def test_decode_tuner_on_the_bundled_kernels(tmp_path):
    site = copy_fixture("bi-v100/corex-0.8.3", tmp_path)
    result = CliRunner().invoke(cli, ["apply", "--site-packages", str(site)])
    assert result.exit_code == 0, result.output
    _run("decode", site)

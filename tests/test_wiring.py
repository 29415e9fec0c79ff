"""The patched ``paged_attention_v2`` really reaches the kernels shipped into the tree.

Snapshot tests prove what text is written; this proves that text works: the function
is cut out of a patched BI-V100 fixture, run on random CPU inputs with its own
signature (``kv_scale`` in 0.4.x, tensor ``k_scale``/``v_scale`` from 0.7), and its
``out`` is compared with the kernel package's independent float64 reference.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import types
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import libcst as cst
import pytest
from click.testing import CliRunner

from treeutil import copy_fixture
from vllm_codemod.cli import cli
from vllm_codemod.transforms._cst_helpers import module_function

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parent.parent


def _reference_module():
    """``kernels/reference.py`` loaded by path (it only needs torch and its signature)."""
    path = REPO / "kernels" / "reference.py"
    assert path.is_file(), f"{path} missing: the kernels' float64 reference is part of the checkout"
    package = types.ModuleType("_wiring_kernels")
    package.__path__ = [str(path.parent)]  # type: ignore[attr-defined]
    sys.modules.setdefault("_wiring_kernels", package)
    spec = importlib.util.spec_from_file_location("_wiring_kernels.reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _patched_function_source(site: Path) -> str:
    module = cst.parse_module((site / "vllm" / "_custom_ops.py").read_bytes())
    func = module_function(module, "paged_attention_v2")
    assert func is not None
    return cst.Module(body=[]).code_for_node(func.with_changes(leading_lines=[]))


@pytest.fixture
def bare_vllm(monkeypatch):
    """Make ``import vllm.X`` resolve inside a fixture tree without running its __init__."""
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}

    def install(site: Path) -> None:
        for name in list(sys.modules):
            if name == "vllm" or name.startswith("vllm."):
                del sys.modules[name]
        package = types.ModuleType("vllm")
        package.__path__ = [str(site / "vllm")]  # type: ignore[attr-defined]
        sys.modules["vllm"] = package

    yield install
    for name in list(sys.modules):
        if name == "vllm" or name.startswith("vllm."):
            del sys.modules[name]
    sys.modules.update(saved)


def _inputs(seed: int, dtype) -> Dict[str, Any]:
    """Two sequences (1500 and 1037 tokens), 8 query heads over 2 KV heads, block 16."""
    gen = torch.Generator().manual_seed(seed)
    num_heads, num_kv_heads, head_size, block_size = 8, 2, 64, 16
    seq_lens = [1500, 1037]
    x = 16 // torch.tensor([], dtype=dtype).element_size()
    blocks_per_seq = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(blocks_per_seq) + 3
    width = max(blocks_per_seq)
    # a shuffled block pool so that block tables are not the identity
    perm = torch.randperm(num_blocks, generator=gen)
    tables = torch.zeros(len(seq_lens), width, dtype=torch.int32)
    start = 0
    for s, nb in enumerate(blocks_per_seq):
        tables[s, :nb] = perm[start : start + nb].to(torch.int32)
        start += nb
    max_seq_len = max(seq_lens)
    partitions = -(-max_seq_len // 512)
    shape_q = (len(seq_lens), num_heads, head_size)
    return {
        "query": torch.randn(shape_q, generator=gen).to(dtype),
        "key_cache": torch.randn(
            (num_blocks, num_kv_heads, head_size // x, block_size, x), generator=gen
        ).to(dtype),
        "value_cache": torch.randn(
            (num_blocks, num_kv_heads, head_size, block_size), generator=gen
        ).to(dtype),
        "num_kv_heads": num_kv_heads,
        "scale": head_size**-0.5,
        "block_tables": tables,
        "seq_lens": torch.tensor(seq_lens, dtype=torch.int32),
        "block_size": block_size,
        "max_seq_len": max_seq_len,
        "alibi_slopes": None,
        "kv_cache_dtype": "auto",
        "out": torch.full(shape_q, float("nan"), dtype=dtype),
        "exp_sums": torch.empty((len(seq_lens), num_heads, partitions), dtype=torch.float32),
        "max_logits": torch.empty((len(seq_lens), num_heads, partitions), dtype=torch.float32),
        "tmp_out": torch.empty((len(seq_lens), num_heads, partitions, head_size), dtype=dtype),
    }


def _arguments(func, inputs: Dict[str, Any], scales: Dict[str, Any]) -> Dict[str, Any]:
    """Fill the function's own parameters, in whatever spelling its release used."""
    spelled = dict(inputs, **scales)
    spelled["exp_sum"] = inputs["exp_sums"]
    spelled["context_lens"] = inputs["seq_lens"]
    spelled["max_context_len"] = inputs["max_seq_len"]
    args = {}
    for name, param in inspect.signature(func).parameters.items():
        if name in spelled:
            args[name] = spelled[name]
        else:
            assert param.default is not inspect.Parameter.empty, f"no test input for {name}"
    return args


CASES = [
    # (fixture, scale arguments of that release)
    pytest.param("bi-v100/corex-0.4.3", {"kv_scale": 1.0}, id="0.4.3-kv_scale"),
    pytest.param(
        "bi-v100/corex-0.11.0",
        {"k_scale": torch.tensor(1.0), "v_scale": torch.tensor(1.0)},
        id="0.11.0-tensor-scales",
    ),
]


@pytest.mark.parametrize("fixture, scales", CASES)
def test_patched_function_runs_the_tree_kernels(fixture, scales, tmp_path, bare_vllm):
    reference = _reference_module()
    site = copy_fixture(fixture, tmp_path)
    result = CliRunner().invoke(
        cli, ["apply", "--site-packages", str(site)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert (site / "vllm" / "_codemod_kernels" / "__init__.py").is_file()

    bare_vllm(site)
    namespace: Dict[str, Any] = {
        "torch": torch,
        "Optional": Optional,
        "List": List,
        "Tuple": Tuple,
        "Union": Union,
        "__name__": "vllm._custom_ops",
    }
    exec(compile(_patched_function_source(site), "vllm/_custom_ops.py", "exec"), namespace)
    func = namespace["paged_attention_v2"]

    inputs = _inputs(seed=0, dtype=torch.float32)
    func(**_arguments(func, inputs, scales))

    # the call went to the copy inside the tree, not to the tool's own package
    loaded = sys.modules["vllm._codemod_kernels"]
    assert Path(loaded.__file__).resolve().parent == (site / "vllm" / "_codemod_kernels").resolve()

    expected = reference.reference_paged_attention(
        inputs["query"],
        inputs["key_cache"],
        inputs["value_cache"],
        inputs["block_tables"],
        inputs["seq_lens"].tolist(),
        inputs["scale"],
    )
    out = inputs["out"].to(torch.float64)
    assert not torch.isnan(out).any()
    err = (out - expected).abs().max().item()
    assert err < 1e-4, f"max abs error {err}"

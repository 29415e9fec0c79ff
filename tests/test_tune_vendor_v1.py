"""The tree's paged_attention_v1 is called through its own signature, in every spelling."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from vllm_codemod.kernels.vendor_v1 import V1Unavailable, bind_v1, probe_v1  # noqa: E402
from vllm_codemod.tuning.decode_inputs import make_check_case  # noqa: E402
from vllm_codemod.tuning.shapes import Shape  # noqa: E402

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"


def _ops_with_signature_of(tree: str):
    """A module whose paged_attention_v1 has the snapshot's exact signature and records
    the arguments it got."""
    source = (SNAPSHOTS / tree / "vllm___custom_ops.py").read_text()
    node = next(
        n
        for n in ast.parse(source).body
        if isinstance(n, ast.FunctionDef) and n.name == "paged_attention_v1"
    )
    node.body = ast.parse("_calls.append(dict(locals()))").body
    module = ast.Module(body=[node], type_ignores=[])
    namespace = {"torch": torch, "Optional": __import__("typing").Optional, "_calls": []}
    exec(compile(ast.fix_missing_locations(module), tree, "exec"), namespace)
    return types.SimpleNamespace(paged_attention_v1=namespace["paged_attention_v1"]), namespace


@pytest.mark.parametrize(
    "tree, scale_names, tensor_scales",
    [
        ("corex-0.4.3", ("kv_scale",), False),
        ("corex-0.6.3", ("k_scale", "v_scale"), None),
        ("corex-0.8.3", ("k_scale", "v_scale"), True),
        ("corex-0.11.0", ("k_scale", "v_scale"), True),
    ],
)
def test_bind_v1_fills_each_release_signature(tree, scale_names, tensor_scales):
    ops, namespace = _ops_with_signature_of(tree)
    args = make_check_case(Shape(4, 2, 64, "float32"), "cpu")
    bind_v1(ops)(args)
    (call,) = namespace["_calls"]
    assert call["out"] is args["out"] and call["key_cache"] is args["key_cache"]
    lens = call.get("seq_lens", call.get("context_lens"))
    assert lens is args["seq_lens"]
    assert call.get("max_seq_len", call.get("max_context_len")) == args["max_seq_len"]
    assert call["kv_cache_dtype"] == "auto"
    for name in scale_names:
        value = call[name]
        if tensor_scales is True:
            assert isinstance(value, torch.Tensor) and float(value) == 1.0
        elif tensor_scales is False:
            assert value == 1.0 and not isinstance(value, torch.Tensor)


def test_unusable_v1_is_reported_not_raised():
    with pytest.raises(V1Unavailable, match="has no paged_attention_v1"):
        bind_v1(types.SimpleNamespace())

    def paged_attention_v1(out, query, mystery):
        raise AssertionError("never called")

    call = bind_v1(types.SimpleNamespace(paged_attention_v1=paged_attention_v1))
    args = make_check_case(Shape(4, 2, 64, "float32"), "cpu")
    with pytest.raises(V1Unavailable, match="cannot fill: mystery"):
        probe_v1(call, args)

    def no_extension(**kwargs):
        raise AttributeError("'_OpNamespace' '_C' object has no attribute 'paged_attention_v1'")

    ops = types.SimpleNamespace(paged_attention_v1=no_extension)
    with pytest.raises(V1Unavailable, match="calling it fails: AttributeError"):
        probe_v1(bind_v1(ops), args)

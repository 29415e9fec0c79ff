"""Call the tree's own ``ops.paged_attention_v1`` (the vendor kernel) with our inputs.

Its signature changed across vLLM releases (``context_lens``/``seq_lens``, one
``kv_scale`` or ``k_scale``/``v_scale``, scale tensors from 0.6 on), so the call is
bound by parameter name from the function the tree defines.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict

import torch

_SAME = (
    "out", "query", "key_cache", "value_cache", "num_kv_heads", "scale", "block_tables",
    "block_size", "alibi_slopes",
)  # fmt: skip
_RENAMED = {"seq_lens": "seq_lens", "context_lens": "seq_lens", "max_seq_len": "max_seq_len",
            "max_context_len": "max_seq_len"}  # fmt: skip


class V1Unavailable(Exception):
    """The tree has no usable paged_attention_v1; the message says why."""


def bind_v1(ops: Any) -> Callable[[Dict[str, Any]], Any]:
    """A function taking our canonical argument dict and calling the tree's kernel."""
    fn = getattr(ops, "paged_attention_v1", None)
    if fn is None:
        raise V1Unavailable("the tree's vllm._custom_ops has no paged_attention_v1")
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as exc:
        raise V1Unavailable(f"cannot read paged_attention_v1's signature ({exc})") from None

    def scale_value(name: str, device: torch.device) -> Any:
        annotation = str(params[name].annotation)
        if "Tensor" in annotation:
            return torch.tensor(1.0, dtype=torch.float32, device=device)
        return 1.0

    def call(args: Dict[str, Any]) -> Any:
        kwargs: Dict[str, Any] = {}
        device = args["query"].device
        for name, param in params.items():
            if name in _SAME:
                kwargs[name] = args[name]
            elif name in _RENAMED:
                kwargs[name] = args[_RENAMED[name]]
            elif name == "kv_cache_dtype":
                kwargs[name] = "auto"
            elif name in ("k_scale", "v_scale", "kv_scale"):
                kwargs[name] = scale_value(name, device)
            elif param.default is inspect.Parameter.empty and param.kind not in (
                inspect.Parameter.VAR_POSITIONAL,
                inspect.Parameter.VAR_KEYWORD,
            ):
                raise V1Unavailable(f"paged_attention_v1 has a parameter we cannot fill: {name}")
        return fn(**kwargs)

    return call


def probe_v1(call: Callable[[Dict[str, Any]], Any], args: Dict[str, Any]) -> None:
    """Run the tree's V1 once; raises V1Unavailable with the reason if it cannot run."""
    try:
        call(args)
        if args["query"].device.type == "cuda":
            torch.cuda.synchronize()
    except V1Unavailable:
        raise
    except Exception as exc:
        text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise V1Unavailable(f"calling it fails: {type(exc).__name__}: {text}") from None

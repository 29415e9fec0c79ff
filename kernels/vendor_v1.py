"""Call the tree's own ``ops.paged_attention_v1`` (the vendor kernel) for a decode call.

Used only where a tuning table measured the vendor's V1 faster than our V2 for a range of
lengths.  Its signature changed across vLLM releases (``context_lens``/``seq_lens``,
``kv_scale`` or ``k_scale``/``v_scale``), so the call is bound by parameter name, once,
from the function the tree defines; the values are the ones vLLM passed to V2 in the
same release, so their types already fit.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Optional

from .call import DecodeCall

_FROM_CALL = {
    "out": "out",
    "query": "query",
    "key_cache": "key_cache",
    "value_cache": "value_cache",
    "num_kv_heads": "num_kv_heads",
    "scale": "scale",
    "block_tables": "block_tables",
    "seq_lens": "seq_lens",
    "context_lens": "seq_lens",
    "block_size": "block_size",
    "max_seq_len": "max_seq_len",
    "max_context_len": "max_seq_len",
    "alibi_slopes": "alibi_slopes",
    "kv_cache_dtype": "kv_cache_dtype",
    "k_scale": "k_scale",
    "v_scale": "v_scale",
    "kv_scale": "k_scale",
}

_state: Dict[str, Any] = {"bound": None, "why": None}


class V1Unavailable(RuntimeError):
    """The tree has no V1 kernel this call can be handed to; the message says why."""


def _bind() -> Callable[[DecodeCall], None]:
    if not __name__.startswith("vllm."):
        raise V1Unavailable("not inside a vLLM tree: there is no vendor V1 kernel to call")
    from .. import _custom_ops as ops  # the tree's own vllm._custom_ops, on first use

    fn = getattr(ops, "paged_attention_v1", None)
    if fn is None:
        raise V1Unavailable("vllm._custom_ops has no paged_attention_v1")
    names = []
    for name, param in inspect.signature(fn).parameters.items():
        if name in _FROM_CALL:
            names.append((name, _FROM_CALL[name]))
        elif param.default is inspect.Parameter.empty and param.kind not in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            raise V1Unavailable(f"paged_attention_v1 has a parameter we cannot fill: {name}")

    def call(c: DecodeCall) -> None:
        fn(**{name: getattr(c, attr) for name, attr in names})

    return call


def run(c: DecodeCall) -> None:
    """Hand the call to the tree's V1 kernel; raises V1Unavailable when there is none."""
    bound: Optional[Callable[[DecodeCall], None]] = _state["bound"]
    if bound is None:
        if _state["why"] is not None:
            raise V1Unavailable(_state["why"])
        try:
            bound = _state["bound"] = _bind()
        except Exception as exc:
            _state["why"] = f"{type(exc).__name__}: {exc}"
            raise V1Unavailable(_state["why"]) from None
    bound(c)

"""Call the tree's own ``ops.paged_attention_v1`` (the vendor kernel) for a decode call.

Two callers: the entry point, inside a vLLM tree, where a tuning table measured the
vendor's V1 faster than our V2 for a range of lengths (:func:`run`); and ``tune``, which
times that kernel through the tree's ``vllm._custom_ops`` with its own inputs
(:func:`bind_v1`, :func:`probe_v1`).  The signature changed across vLLM releases
(``context_lens``/``seq_lens``, ``kv_scale`` or ``k_scale``/``v_scale``, scale tensors
from 0.6 on), so the call is bound by parameter name, once, from the function the tree
defines.  The entry point passes the values vLLM passed to V2 in the same release, so
their types already fit; ``tune`` makes its scales tensors where the signature says so.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Dict, Optional

import torch

from . import call as call_mod
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


def bind(fn: Callable[..., Any]) -> Callable[[DecodeCall], None]:
    """``fn`` (a tree's ``paged_attention_v1``) as a function of one :class:`DecodeCall`."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as exc:
        raise V1Unavailable(f"cannot read paged_attention_v1's signature ({exc})") from None
    names = []
    for name, param in params.items():
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


def _bind_tree() -> Callable[[DecodeCall], None]:
    if not __name__.startswith("vllm."):
        raise V1Unavailable("not inside a vLLM tree: there is no vendor V1 kernel to call")
    from .. import _custom_ops as ops  # the tree's own vllm._custom_ops, on first use

    fn = getattr(ops, "paged_attention_v1", None)
    if fn is None:
        raise V1Unavailable("vllm._custom_ops has no paged_attention_v1")
    return bind(fn)


def run(c: DecodeCall) -> None:
    """Hand the call to the tree's V1 kernel; raises V1Unavailable when there is none."""
    bound: Optional[Callable[[DecodeCall], None]] = _state["bound"]
    if bound is None:
        if _state["why"] is not None:
            raise V1Unavailable(_state["why"])
        try:
            bound = _state["bound"] = _bind_tree()
        except Exception as exc:
            _state["why"] = f"{type(exc).__name__}: {exc}"
            raise V1Unavailable(_state["why"]) from None
    bound(c)


def _tensor_scales(fn: Callable[..., Any]) -> bool:
    """Whether the signature types its scales as tensors (vLLM >= 0.6's custom ops)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return any(
        "Tensor" in str(params[n].annotation)
        for n in ("k_scale", "v_scale", "kv_scale")
        if n in params
    )


def bind_v1(ops: Any) -> Callable[[Dict[str, Any]], Any]:
    """A function taking a dict of canonical decode arguments (``tune``'s inputs, scales
    1.0, cache dtype "auto") and calling the tree's kernel from ``ops``.  A signature
    this cannot fill raises V1Unavailable at the first call."""
    fn = getattr(ops, "paged_attention_v1", None)
    if fn is None:
        raise V1Unavailable("the tree's vllm._custom_ops has no paged_attention_v1")
    bound: Dict[str, Any] = {}

    def call(args: Dict[str, Any]) -> None:
        if not bound:
            bound["call"], bound["tensor_scales"] = bind(fn), _tensor_scales(fn)
        c = call_mod.build((), dict(args))
        if bound["tensor_scales"]:
            one = torch.tensor(1.0, dtype=torch.float32, device=c.query.device)
            c = dataclasses.replace(c, k_scale=one, v_scale=one)
        bound["call"](c)

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

"""Entry point: build the call, validate it, choose a backend, fall back.

Three steps, each its own function: :func:`call.build`/:func:`call.validate` (once per
shape), :func:`choose_backend` (environment override, device, dtype, Triton health), and
:func:`run`'s fallback (a Triton failure on this box is logged once and the PyTorch path
takes over for that cache dtype, so one bad dtype never costs the others their kernel).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Set, Tuple

import torch

from . import call as call_mod
from . import tuned
from .call import DecodeCall
from .log import log

BACKEND_ENV = "VLLM_CODEMOD_PA_BACKEND"

_triton_state: Dict[str, Any] = {"checked": False, "module": None, "warned": False}
_triton_failed_dtypes: Set[torch.dtype] = set()
_capabilities: Dict[Any, Tuple[int, int]] = {}


def _is_placeholder(module: Any) -> bool:
    """vLLM installs a stand-in ``triton`` module when Triton is missing (0.9+:
    ``TritonPlaceholder``, with a fake ``__version__``); it has no file behind it."""
    return (
        module is None
        or "Placeholder" in type(module).__name__
        or not getattr(module, "__file__", None)
    )


def _triton_impl():
    """The Triton implementation module, or None when Triton is missing or a placeholder."""
    if not _triton_state["checked"]:
        _triton_state["checked"] = True
        try:
            import triton

            if _is_placeholder(triton):
                raise ImportError(
                    f"'triton' is a placeholder module ({type(triton).__name__}), not Triton"
                )
            from . import decode_launch
        except Exception as exc:  # ImportError, or a Triton that fails at import
            _triton_state["import_error"] = repr(exc)
            return None
        _triton_state["module"] = decode_launch
    return _triton_state["module"]


def triton_available() -> bool:
    return _triton_impl() is not None


def _triton_safe_for(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether trying the Triton kernel for this cache dtype cannot take the process down.

    fp32 caches use a bf16-split ``tl.dot``; below compute capability 8.0 Triton 2.1's
    MMA lowering hits a C++ assertion on it and aborts the process, with no exception to
    fall back from (docs/kernel-notes.md, "Triton 2.1 compile check").  Other failures
    raise and are handled by the fallback.
    """
    if dtype != torch.float32:
        return True
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _capabilities:
        _capabilities[key] = tuple(torch.cuda.get_device_capability(key))  # type: ignore[assignment]
    return _capabilities[key] >= (8, 0)


def _requested(backend: Optional[str]) -> str:
    raw = backend or os.environ.get(BACKEND_ENV)
    if not raw:
        return "auto"
    choice = raw.strip().lower()
    if choice not in ("", "auto", "triton", "torch"):
        raise ValueError(f"{BACKEND_ENV}={choice!r}: expected 'triton', 'torch' or unset")
    return choice or "auto"


def choose_backend(c: DecodeCall, backend: Optional[str] = None) -> str:
    """'triton' or 'torch' for this call; a forced Triton that cannot run raises."""
    return _choose(c, _requested(backend))


def _choose(c: DecodeCall, choice: str) -> str:
    if choice == "torch":
        return "torch"
    if choice == "triton":
        if _triton_impl() is None:
            raise RuntimeError(
                f"{BACKEND_ENV}=triton but Triton is unusable here: "
                f"{_triton_state.get('import_error')}"
            )
        if c.fp8_dtype is not None:
            raise NotImplementedError(
                "paged_attention_v2: the Triton path does not read fp8 KV caches; "
                f"unset {BACKEND_ENV} to use the torch path"
            )
        return "triton"
    dtype = c.key_cache.dtype
    if (
        c.query.is_cuda
        and c.fp8_dtype is None
        and dtype not in _triton_failed_dtypes
        and _triton_safe_for(dtype, c.query.device)
        and _triton_impl() is not None
    ):
        return "triton"
    return "torch"


def _vendor_v1(c: DecodeCall) -> bool:
    """Run the tree's V1 kernel where the tuning table says it wins; False if it cannot."""
    from . import vendor_v1

    try:
        vendor_v1.run(c)
        return True
    except vendor_v1.V1Unavailable as exc:
        if not _triton_state.get("v1_warned"):
            _triton_state["v1_warned"] = True
            log.warning("vllm-codemod: the tuning table picks the vendor V1 kernel, but %s", exc)
        return False


def _torch_path(c: DecodeCall) -> str:
    from .torch_impl import paged_attention_v2_torch

    paged_attention_v2_torch(c)
    return "torch"


def run(c: DecodeCall, backend: Optional[str] = None) -> str:
    """Compute attention into ``c.out``; return the path taken ("triton", "torch",
    "vendor-v1" where a tuning table says the tree's V1 kernel wins, or "none")."""
    call_mod.validate(c)
    if c.query.shape[0] == 0 or c.max_seq_len <= 0:
        return "none"
    choice = _requested(backend)
    config = None
    if choice == "auto":
        decision = tuned.decision(c)
        if decision is not None:
            if decision.backend == "v1" and _vendor_v1(c):
                return "vendor-v1"
            config = decision.config
    if _choose(c, choice) == "torch":
        return _torch_path(c)
    impl = _triton_impl()
    if config is not None:
        config = impl.LaunchConfig(*config)
    if choice == "triton":
        impl.run(c)
        return "triton"
    try:
        impl.run(c, config)
        return "triton"
    except Exception as exc:  # compile or launch failure on this box, or a layout it skips
        # Per dtype: a bf16 cache failing to compile (no bf16 before sm_80) must not cost
        # fp16 caches their Triton path.
        if not isinstance(exc, impl.UnsupportedLayout):
            _triton_failed_dtypes.add(c.key_cache.dtype)
        if not _triton_state["warned"]:
            _triton_state["warned"] = True
            log.warning(
                "vllm-codemod paged_attention_v2: the Triton kernel failed for %s caches "
                "(%s: %s); using the PyTorch path for them",
                c.key_cache.dtype,
                type(exc).__name__,
                exc,
            )
    return _torch_path(c)


def paged_attention_v2(*args: Any, **kwargs: Any) -> None:
    """vLLM's ``paged_attention_v2``; accepts every 0.4.3 - 0.11.0 parameter spelling.

    Canonical signature: ``(out, exp_sums, max_logits, tmp_out, query, key_cache,
    value_cache, num_kv_heads, scale, block_tables, seq_lens, block_size, max_seq_len,
    alibi_slopes=None, kv_cache_dtype="auto", k_scale=1.0, v_scale=1.0, tp_rank=0,
    blocksparse_local_blocks=0, blocksparse_vert_stride=0, blocksparse_block_size=64,
    blocksparse_head_sliding_step=0)``; aliases ``exp_sum``, ``context_lens``,
    ``max_context_len``, ``kv_scale`` (both scales).  Returns None and writes ``out``;
    ``exp_sums``, ``max_logits`` and ``tmp_out`` are scratch (vLLM reads only ``out``).
    """
    run(call_mod.build(args, kwargs))


def paged_attention_v2_with_path(*args: Any, backend: Optional[str] = None, **kwargs: Any) -> str:
    """Same as :func:`paged_attention_v2`, returning the path taken (``backend=`` forces)."""
    return run(call_mod.build(args, kwargs), backend)

"""The patched tree's ``context_attention_fwd`` tries this first: normalize, pick a backend, run.

vLLM changed ``context_attention_fwd``'s signature five times between 0.4.3 and 0.11.0
(``b_ctx_len`` until 0.7, ``max_seq_len`` and ``skip_decode`` from 0.8, ``sm_scale``
from 0.7, float scales in 0.5-0.6 and tensor scales from 0.7, ``sinks`` from 0.10.1 and
``fp8_out_scale`` in 0.11).  :func:`context_attention_fwd` accepts any of them, by name
or by position, and hands the bundled kernel one contract (``prefill_launch``'s).

It returns True after writing ``o``, or False when the call asks for something the
bundled kernel does not do (``sinks``, an fp8 output, an unknown cache dtype, a layout
it does not recognise): the tree then runs its own kernel, exactly as before the patch.
Each such reason is logged once, at debug level; declining is never an error.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any, Dict, NamedTuple, Optional, Set, Tuple

import torch

from .prefill_declines import Declined, Triton2Refusal
from .prefill_signature import (
    ORDER_0_4,
    ORDER_0_7,
    ORDER_0_10,
    ORDER_0_11,
    PARAMETERS,
    REQUIRED,
)

logger = logging.getLogger(__name__)

BACKEND_ENV = "VLLM_CODEMOD_PREFILL_BACKEND"
_BACKENDS = ("auto", "triton", "torch", "tree")

_FP8_NAMES = {"fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
_PLAIN_NAMES = frozenset(
    ("auto", "fp16", "float16", "half", "bf16", "bfloat16", "fp32", "float32", "float")
)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)

_logged: Set[str] = set()
_triton_state: Dict[str, Any] = {"checked": False, "launch": None, "error": None}
_triton_failed: Set[Tuple[torch.dtype, torch.dtype]] = set()  # (q, cache) dtypes
_scale_tensors: Dict[Tuple[float, torch.device], torch.Tensor] = {}


class Route(NamedTuple):
    """Where one call went: ``path`` "triton", "torch" or "tree" (declined).

    For "tree", ``reason`` says why, and ``setup`` whether this box's setup, not the call,
    is the cause: a Triton release the kernel makes no launch for (too old, or a
    :class:`Triton2Refusal`) or ``VLLM_CODEMOD_PREFILL_BACKEND=tree``.  ``verify`` reports
    such a case as skipped; any other decline of its well-formed cases is a failure."""

    path: str
    reason: str = ""
    setup: bool = False


def _decline(reason: str, setup: bool = False) -> Route:
    if reason not in _logged:
        _logged.add(reason)
        logger.debug(
            "vllm-codemod prefix prefill: %s; the tree's own kernel runs this call", reason
        )
    return Route("tree", reason, setup)


def _positional_order(args: Tuple[Any, ...]) -> Tuple[str, ...]:
    """The release order a positional call follows, told by the argument types.

    The patched tree passes everything by name; positions come from a fork's ``*args``
    wrapper.  Position 4 is a string from 0.5 on (``kv_cache_dtype``), position 10 a
    tensor until 0.7 (``b_ctx_len``, then the integer ``max_seq_len``).
    """
    if len(args) <= 4:
        return ORDER_0_4[:4]
    if not isinstance(args[4], str):  # 0.4.x: no kv_cache_dtype, k_cache comes fifth
        return ORDER_0_4
    if len(args) > 10 and isinstance(args[10], torch.Tensor):  # b_ctx_len, not max_seq_len
        return ORDER_0_7
    return ORDER_0_11 if len(args) > 19 else ORDER_0_10


def bind(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """vLLM's arguments by name; raises :class:`Declined` for a call it cannot read."""
    if not args:
        bound = kwargs
    else:
        order = _positional_order(args)
        if len(args) > len(order):
            raise Declined(f"{len(args)} positional arguments")
        if len(args) == 19 and order is ORDER_0_10 and args[18] is not None:
            # 0.10's ``sinks`` or 0.11's ``fp8_out_scale``: neither is supported
            raise Declined("sinks or fp8_out_scale given")
        bound = dict(zip(order, args))
        for name, value in kwargs.items():
            if name in bound:
                raise Declined(f"argument {name!r} given twice")
            bound[name] = value
    unknown = [name for name in bound if name not in PARAMETERS]
    if unknown:
        raise Declined(f"unknown argument(s) {', '.join(sorted(unknown))}")
    missing = REQUIRED.difference(bound)
    if missing:
        raise Declined(f"missing argument(s) {', '.join(sorted(missing))}")
    return bound


def _fp8_view(kv_cache_dtype: Any, k_cache: torch.Tensor) -> Optional[torch.dtype]:
    """The float8 dtype to read the caches as, or None for a 16/32-bit cache."""
    name = kv_cache_dtype if isinstance(kv_cache_dtype, str) else str(kv_cache_dtype)
    if name in _PLAIN_NAMES or name.lower() in _PLAIN_NAMES:
        if k_cache.element_size() != 1:
            return None
        if "float8" not in str(k_cache.dtype):  # uint8 storage needs the dtype string
            raise Declined(f"a {k_cache.dtype} cache with kv_cache_dtype {name!r}")
        return k_cache.dtype  # 0.11 may hand over caches already typed as float8
    attr = _FP8_NAMES.get(name.lower())
    if attr is None:
        raise Declined(f"kv_cache_dtype {name!r}")
    if attr == "float8_e4m3fn" and getattr(torch.version, "hip", None):
        raise Declined("fp8 e4m3 caches on ROCm (float8_e4m3fnuz)")
    dtype = getattr(torch, attr, None)
    if dtype is None:
        raise Declined(f"kv_cache_dtype {name!r} needs torch.{attr}, missing in this torch")
    if k_cache.element_size() != 1:
        raise Declined(f"kv_cache_dtype {name!r} with a {k_cache.dtype} cache")
    return dtype


def _scale_tensor(scale: Any, device: torch.device) -> torch.Tensor:
    """A one-element float32 tensor on ``device`` (float scales cached per value)."""
    if isinstance(scale, torch.Tensor):
        if scale.numel() != 1:
            raise Declined(f"a scale with {scale.numel()} elements (per-channel scales)")
        if scale.dtype != torch.float32 or scale.device != device:
            scale = scale.to(device=device, dtype=torch.float32)
        return scale.reshape(1)
    value = 1.0 if scale is None else float(scale)
    key = (value, device)
    cached = _scale_tensors.get(key)
    if cached is None:
        cached = _scale_tensors[key] = torch.tensor([value], dtype=torch.float32, device=device)
    return cached


def _int32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.int32 else t.to(torch.int32)


def _check_layout(q, k, v, o, k_cache, v_cache, fp8: Optional[torch.dtype]) -> None:
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v, o, k_cache, v_cache)):
        raise Declined("a non-tensor q/k/v/o/cache")
    if (q.dim(), k.dim(), v.dim(), o.dim(), k_cache.dim(), v_cache.dim()) != (3, 3, 3, 3, 5, 4):
        raise Declined(
            f"layout q{tuple(q.shape)} k{tuple(k.shape)} k_cache{tuple(k_cache.shape)} "
            f"v_cache{tuple(v_cache.shape)}"
        )
    tokens, heads, head_size = q.shape
    kv_heads = k.shape[1]
    if (
        k.shape != v.shape
        or k.shape[0] != tokens
        or k.shape[2] != head_size
        or o.shape != q.shape
        or kv_heads == 0
        or heads % kv_heads
        or k_cache.shape[1] != kv_heads
        or v_cache.shape[1] != kv_heads
        or k_cache.shape[2] * k_cache.shape[4] != head_size
        or v_cache.shape[2] != head_size
        or k_cache.shape[3] != v_cache.shape[3]
        or k_cache.shape[0] != v_cache.shape[0]
    ):
        raise Declined(
            f"shapes q{tuple(q.shape)} k{tuple(k.shape)} v{tuple(v.shape)} o{tuple(o.shape)} "
            f"k_cache{tuple(k_cache.shape)} v_cache{tuple(v_cache.shape)}"
        )
    if q.dtype not in _FLOATS or k.dtype != q.dtype or v.dtype != q.dtype:
        raise Declined(f"q/k/v dtypes {q.dtype}/{k.dtype}/{v.dtype}")
    if fp8 is None and (k_cache.dtype != q.dtype or v_cache.dtype != q.dtype):
        raise Declined(f"{k_cache.dtype} caches with {q.dtype} queries")
    if fp8 is not None and v_cache.element_size() != 1:
        raise Declined(f"an 8-bit key cache with a {v_cache.dtype} value cache")
    device = q.device
    if any(t.device != device for t in (k, v, o, k_cache, v_cache)):
        raise Declined("tensors on different devices")


class PrefillCall:
    """The launcher's arguments (see ``prefill_launch.prefix_prefill_triton``)."""

    __slots__ = (
        "q", "k", "v", "o", "k_cache", "v_cache", "block_table", "query_start", "seq_lens",
        "max_query_len", "sm_scale", "k_scale", "v_scale", "alibi_slopes", "sliding_window",
        "skip_decode",
    )  # fmt: skip

    def kwargs(self) -> Dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def normalize(bound: Dict[str, Any]) -> PrefillCall:
    """One contract out of any release's arguments; :class:`Declined` if it cannot be."""
    if bound.get("sinks") is not None:
        raise Declined("sinks given")
    if bound.get("fp8_out_scale") is not None:
        raise Declined("fp8_out_scale given (fp8 output)")
    q, k, v, o = bound["q"], bound["k"], bound["v"], bound["o"]
    k_cache, v_cache = bound["k_cache"], bound["v_cache"]
    if not isinstance(k_cache, torch.Tensor):
        raise Declined("a non-tensor k_cache")
    fp8 = _fp8_view(bound.get("kv_cache_dtype", "auto"), k_cache)
    _check_layout(q, k, v, o, k_cache, v_cache, fp8)
    device = q.device
    b_loc, b_start_loc, b_seq_len = bound["b_loc"], bound["b_start_loc"], bound["b_seq_len"]
    for name, t in (("b_loc", b_loc), ("b_start_loc", b_start_loc), ("b_seq_len", b_seq_len)):
        if not isinstance(t, torch.Tensor) or t.device != device:
            raise Declined(f"{name} not a tensor on {device}")
    if b_loc.dim() != 2 or b_seq_len.dim() != 1 or b_start_loc.dim() != 1:
        raise Declined("block table / start / length tensors of unexpected rank")
    batch = b_seq_len.shape[0]
    b_ctx_len = bound.get("b_ctx_len")
    if b_ctx_len is not None:
        # up to 0.7: the new-token count of a sequence is b_seq_len - b_ctx_len, and
        # b_start_loc holds its start (vLLM's tests pass [B] starts, its callers [B + 1])
        if not isinstance(b_ctx_len, torch.Tensor) or b_ctx_len.shape != b_seq_len.shape:
            raise Declined("b_ctx_len not a tensor like b_seq_len")
        if b_start_loc.shape[0] == batch + 1:
            query_start = b_start_loc
        elif b_start_loc.shape[0] == batch:
            new = (b_seq_len - b_ctx_len.to(device)).to(torch.int32)
            query_start = torch.cat([b_start_loc[:1].to(torch.int32),
                                     b_start_loc[:1] + torch.cumsum(new, 0)])  # fmt: skip
        else:
            raise Declined(f"b_start_loc of {b_start_loc.shape[0]} entries for {batch} sequences")
    else:
        # from 0.8: the new tokens are b_start_loc[i]:b_start_loc[i + 1]
        if b_start_loc.shape[0] != batch + 1:
            raise Declined(f"b_start_loc of {b_start_loc.shape[0]} entries for {batch} sequences")
        query_start = b_start_loc
    call = PrefillCall()
    call.q, call.k, call.v, call.o = q, k, v, o
    call.k_cache = k_cache.view(fp8) if fp8 is not None and k_cache.dtype != fp8 else k_cache
    call.v_cache = v_cache.view(fp8) if fp8 is not None and v_cache.dtype != fp8 else v_cache
    call.block_table = _int32(b_loc)
    call.query_start = _int32(query_start)
    call.seq_lens = _int32(b_seq_len)
    max_input_len = bound["max_input_len"]
    call.max_query_len = int(max_input_len if max_input_len is not None else 0)
    sm_scale = bound.get("sm_scale")
    call.sm_scale = 1.0 / math.sqrt(q.shape[2]) if sm_scale is None else float(sm_scale)
    if fp8 is not None:
        call.k_scale = _scale_tensor(bound.get("k_scale"), device)
        call.v_scale = _scale_tensor(bound.get("v_scale"), device)
    else:
        call.k_scale = call.v_scale = None
    alibi = bound.get("alibi_slopes")
    if alibi is not None:
        if not isinstance(alibi, torch.Tensor) or alibi.numel() != q.shape[1]:
            raise Declined("alibi_slopes not one slope per query head")
        if alibi.dtype != torch.float32 or alibi.device != device:
            alibi = alibi.to(device=device, dtype=torch.float32)
    call.alibi_slopes = alibi
    window = bound.get("sliding_window")
    call.sliding_window = int(window) if window is not None and window > 0 else 0
    call.skip_decode = bool(bound.get("skip_decode", False))
    return call


def _requested() -> str:
    raw = os.environ.get(BACKEND_ENV)
    if not raw:
        return "auto"
    choice = raw.strip().lower() or "auto"
    if choice not in _BACKENDS:
        raise ValueError(f"{BACKEND_ENV}={raw!r}: expected one of {', '.join(_BACKENDS)}")
    return choice


#: The oldest Triton the bundled prefill kernel is used on.  Triton 2.1, 2.2 and 2.3
#: compile its ``LEGACY`` forms (every 16-bit and fp32 launch of the compile check,
#: within 48 KB at the 2.x configs, ``prefill_launch.LEGACY_CONFIGS``; fp8 caches are
#: refused there).  Older Triton: the tree's kernel, built for it.  Nothing ran on a GPU
#: under Triton 2.x (docs/kernel-notes.md, "Prefix prefill, session 17").
MIN_TRITON = (2, 1)


def _triton_version(triton: Any) -> Tuple[int, int]:
    parts = str(getattr(triton, "__version__", "0.0")).split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def _triton_launch():
    """``prefix_prefill_triton``, or None where Triton is missing, vLLM's placeholder, or
    older than ``MIN_TRITON`` (then ``_triton_state["too_old"]`` says so)."""
    if not _triton_state["checked"]:
        _triton_state["checked"] = True
        try:
            import triton

            from .dispatch import _is_placeholder

            if _is_placeholder(triton):
                raise ImportError(f"'triton' is a placeholder ({type(triton).__name__})")
            if _triton_version(triton) < MIN_TRITON:
                _triton_state["too_old"] = f"Triton {triton.__version__} is older than 2.1"
                raise ImportError(_triton_state["too_old"])
            from .prefill_launch import prefix_prefill_triton
        except Exception as exc:  # ImportError, or a Triton that fails at import
            _triton_state["error"] = repr(exc)
            return None
        _triton_state["launch"] = prefix_prefill_triton
    return _triton_state["launch"]


def _torch_path(call: PrefillCall) -> Route:
    from .prefill_torch import prefix_prefill_torch

    prefix_prefill_torch(**call.kwargs())
    return Route("torch")


def run(call: PrefillCall, choice: str = "auto") -> Route:
    """Write ``call.o`` and say which path did, or why the tree's kernel must."""
    if choice == "torch":
        return _torch_path(call)
    if choice == "triton":
        launch = _triton_launch()
        if launch is None:
            raise RuntimeError(
                f"{BACKEND_ENV}=triton but Triton is unusable here: {_triton_state['error']}"
            )
        launch(**call.kwargs())
        return Route("triton")
    if not call.q.is_cuda:
        return _torch_path(call)  # Triton is not even imported for CPU tensors
    launch = _triton_launch()
    if launch is None:
        if _triton_state.get("too_old"):  # the tree's kernel was built for this Triton
            return _decline(_triton_state["too_old"], setup=True)
        return _torch_path(call)  # the tree's kernel needs Triton too
    dtypes = (call.q.dtype, call.k_cache.dtype)
    if dtypes in _triton_failed:
        return _decline(f"the bundled Triton kernel failed earlier for {dtypes}")
    try:
        launch(**call.kwargs())
        return Route("triton")
    except Triton2Refusal as exc:
        return _decline(f"launcher refused the call: {exc}", setup=True)
    except ValueError as exc:  # a layout the launcher does not take (e.g. strided heads)
        return _decline(f"launcher refused the call: {exc}")
    except Exception as exc:  # compile or launch failure on this box
        _triton_failed.add(dtypes)
        logger.warning(
            "vllm-codemod prefix prefill: the bundled Triton kernel failed for %s queries "
            "on %s caches (%s: %s); the tree's own kernel runs these calls",
            *dtypes,
            type(exc).__name__,
            exc,
        )
        return Route("tree", f"{type(exc).__name__}: {exc}")


def route(*args: Any, **kwargs: Any) -> Route:
    """:func:`context_attention_fwd`, saying where the call went and why (``verify``)."""
    choice = _requested()
    if choice == "tree":
        return _decline(f"{BACKEND_ENV}=tree", setup=True)
    try:
        call = normalize(bind(args, kwargs))
    except Declined as exc:
        return _decline(str(exc))
    return run(call, choice)


def context_attention_fwd_with_path(*args: Any, **kwargs: Any) -> str:
    """Same as :func:`context_attention_fwd`, returning the path ("tree" when declined)."""
    return route(*args, **kwargs).path


def context_attention_fwd(*args: Any, **kwargs: Any) -> bool:
    """vLLM's ``context_attention_fwd`` (any 0.4.3 - 0.11.0 spelling); True once ``o`` is
    written, False to let the tree's own kernel run the call."""
    return context_attention_fwd_with_path(*args, **kwargs) != "tree"

"""Entry point: normalize vLLM's arguments, validate them, pick the Triton or torch path."""

from __future__ import annotations

import os
import warnings
from typing import Any, Dict, Optional, Tuple

import torch

from .signature import ALIASES, CANONICAL_PARAMETERS, PARTITION_SIZE

BACKEND_ENV = "VLLM_CODEMOD_PA_BACKEND"

_FP8_NAMES = {
    "fp8": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
}
_PLAIN_NAMES = {"auto", "fp16", "float16", "half", "bf16", "bfloat16", "fp32", "float32", "float"}

_triton_state = {"checked": False, "module": None, "warned": False}

_UNSET = object()


def _triton_impl():
    """The Triton implementation module, or None when Triton is missing."""
    if not _triton_state["checked"]:
        _triton_state["checked"] = True
        try:
            from . import triton_impl
        except Exception as exc:  # ImportError, or a Triton that fails at import
            _triton_state["import_error"] = repr(exc)
            return None
        _triton_state["module"] = triton_impl
    return _triton_state["module"]


_triton_failed_dtypes: set = set()
_capabilities: Dict[Any, Tuple[int, int]] = {}


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


def _on_gpu(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cuda"


def triton_available() -> bool:
    return _triton_impl() is not None


def fp8_dtype(kv_cache_dtype: str) -> Optional[torch.dtype]:
    """The torch float8 dtype for an fp8 ``kv_cache_dtype``, None for unquantized caches."""
    name = str(kv_cache_dtype).lower()
    if name in _PLAIN_NAMES:
        return None
    if name not in _FP8_NAMES:
        raise ValueError(
            f"paged_attention_v2: unsupported kv_cache_dtype {kv_cache_dtype!r} "
            f"(supported: 'auto' and {sorted(_FP8_NAMES)})"
        )
    dtype = getattr(torch, _FP8_NAMES[name], None)
    if dtype is None:
        raise NotImplementedError(
            f"paged_attention_v2: kv_cache_dtype={kv_cache_dtype!r} needs "
            f"torch.{_FP8_NAMES[name]}, which this torch ({torch.__version__}) lacks; "
            "fp8 KV caches are unsupported here"
        )
    return dtype


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"paged_attention_v2: {name} must be a scalar")
        value = value.item()
    return int(value)


def _check(query, key_cache, value_cache, num_kv_heads, block_tables, seq_lens, block_size, out):
    if query.dim() != 3:
        raise ValueError(f"paged_attention_v2: query must be 3-D, got shape {tuple(query.shape)}")
    num_seqs, num_heads, head_size = query.shape
    if out.shape != query.shape:
        raise ValueError(
            f"paged_attention_v2: out shape {tuple(out.shape)} != query {tuple(query.shape)}"
        )
    if num_kv_heads <= 0 or num_heads % num_kv_heads:
        raise ValueError(
            f"paged_attention_v2: num_heads={num_heads} is not a multiple of "
            f"num_kv_heads={num_kv_heads}"
        )
    if key_cache.dim() != 5 or value_cache.dim() != 4:
        raise ValueError(
            "paged_attention_v2: key_cache must be [blocks, kv_heads, head_size/x, block_size, x] "
            "and value_cache [blocks, kv_heads, head_size, block_size]"
        )
    nb, kvh, dx, bs, x = key_cache.shape
    if kvh != num_kv_heads or dx * x != head_size or bs != block_size:
        raise ValueError(
            f"paged_attention_v2: key_cache shape {tuple(key_cache.shape)} does not match "
            f"num_kv_heads={num_kv_heads}, head_size={head_size}, block_size={block_size}"
        )
    if tuple(value_cache.shape) != (nb, kvh, head_size, block_size):
        raise ValueError(
            f"paged_attention_v2: value_cache shape {tuple(value_cache.shape)} does not match "
            f"key_cache {tuple(key_cache.shape)}"
        )
    if PARTITION_SIZE % block_size:
        raise ValueError(f"paged_attention_v2: block_size {block_size} must divide 512")
    if block_tables.dim() != 2 or block_tables.shape[0] < num_seqs or seq_lens.numel() < num_seqs:
        raise ValueError("paged_attention_v2: block_tables/seq_lens do not cover every sequence")


def _run(
    out,
    exp_sums,
    max_logits,
    tmp_out,
    query,
    key_cache,
    value_cache,
    num_kv_heads,
    scale,
    block_tables,
    seq_lens,
    block_size,
    max_seq_len,
    alibi_slopes=None,
    kv_cache_dtype="auto",
    k_scale=1.0,
    v_scale=1.0,
    tp_rank=0,
    blocksparse_local_blocks=0,
    blocksparse_vert_stride=0,
    blocksparse_block_size=64,
    blocksparse_head_sliding_step=0,
    backend: Optional[str] = None,
) -> str:
    """Compute attention into ``out`` (and the partition buffers); return the path used."""
    del tp_rank, blocksparse_block_size, blocksparse_head_sliding_step  # dense: unused
    local_blocks = _as_int(blocksparse_local_blocks, "blocksparse_local_blocks")
    vert_stride = _as_int(blocksparse_vert_stride, "blocksparse_vert_stride")
    if vert_stride > 1 or local_blocks > 0:
        raise NotImplementedError(
            "paged_attention_v2 (vllm-codemod kernels): block-sparse attention "
            f"(blocksparse_local_blocks={local_blocks}, blocksparse_vert_stride={vert_stride}) "
            "is not implemented; only dense attention is supported"
        )
    num_kv_heads = _as_int(num_kv_heads, "num_kv_heads")
    block_size = _as_int(block_size, "block_size")
    max_seq_len = _as_int(max_seq_len, "max_seq_len")
    if isinstance(scale, torch.Tensor):
        scale = float(scale.item())
    scale = float(scale)
    _check(query, key_cache, value_cache, num_kv_heads, block_tables, seq_lens, block_size, out)
    fp8 = fp8_dtype(kv_cache_dtype)
    if fp8 is None and key_cache.dtype == torch.uint8:
        raise ValueError(
            "paged_attention_v2: uint8 KV cache needs kv_cache_dtype='fp8'/'fp8_e4m3'/'fp8_e5m2'"
        )
    num_parts = (max_seq_len + PARTITION_SIZE - 1) // PARTITION_SIZE
    if num_parts > tmp_out.shape[2] or num_parts > exp_sums.shape[2]:
        raise ValueError(
            f"paged_attention_v2: max_seq_len={max_seq_len} needs {num_parts} partitions, "
            f"the buffers hold {tmp_out.shape[2]}"
        )
    if query.shape[0] == 0 or num_parts == 0:
        return "none"

    choice = (backend or os.environ.get(BACKEND_ENV, "") or "").strip().lower()
    if choice not in ("", "auto", "triton", "torch"):
        raise ValueError(f"{BACKEND_ENV}={choice!r}: expected 'triton', 'torch' or unset")
    args = (
        out,
        exp_sums,
        max_logits,
        tmp_out,
        query,
        key_cache,
        value_cache,
        num_kv_heads,
        scale,
        block_tables,
        seq_lens,
        block_size,
        max_seq_len,
        alibi_slopes,
    )
    if choice == "triton":
        impl = _triton_impl()
        if impl is None:
            raise RuntimeError(
                f"{BACKEND_ENV}=triton but Triton is unusable here: "
                f"{_triton_state.get('import_error')}"
            )
        if fp8 is not None:
            raise NotImplementedError(
                "paged_attention_v2: the Triton path does not read fp8 KV caches; "
                f"unset {BACKEND_ENV} to use the torch path"
            )
        impl.paged_attention_v2_triton(*args)
        return "triton"
    if (
        choice in ("", "auto")
        and fp8 is None
        and _on_gpu(query)
        and key_cache.dtype not in _triton_failed_dtypes
        and _triton_safe_for(key_cache.dtype, query.device)
    ):
        impl = _triton_impl()
        if impl is not None:
            try:
                impl.paged_attention_v2_triton(*args)
                return "triton"
            except Exception as exc:  # compile or launch failure on this box
                # Per dtype: a bf16 cache failing to compile (no bf16 before sm_80) must
                # not cost fp16 caches their Triton path.
                _triton_failed_dtypes.add(key_cache.dtype)
                if not _triton_state["warned"]:
                    _triton_state["warned"] = True
                    warnings.warn(
                        "vllm-codemod paged_attention_v2: the Triton kernel failed for "
                        f"{key_cache.dtype} caches ({type(exc).__name__}: {exc}); using the "
                        "PyTorch path for them from now on",
                        RuntimeWarning,
                        stacklevel=3,
                    )
    from .torch_impl import paged_attention_v2_torch

    paged_attention_v2_torch(*args, fp8_dtype=fp8, k_scale=k_scale, v_scale=v_scale)
    return "torch"


_CANONICAL_SET = frozenset(CANONICAL_PARAMETERS)


def _normalize(args: tuple, kwargs: dict) -> dict:
    if len(args) > len(CANONICAL_PARAMETERS):
        raise TypeError("paged_attention_v2: too many positional arguments")
    bound = dict(zip(CANONICAL_PARAMETERS, args)) if args else {}
    kv_scale = kwargs.pop("kv_scale", _UNSET)
    for name, value in kwargs.items():
        canonical = ALIASES.get(name, name)
        if canonical not in _CANONICAL_SET and name != "backend":
            raise TypeError(f"paged_attention_v2: unexpected argument {name!r}")
        if canonical in bound:
            raise TypeError(f"paged_attention_v2: {canonical!r} given twice (as {name!r})")
        bound[canonical] = value
    if kv_scale is not _UNSET:
        for name in ("k_scale", "v_scale"):
            if name in bound:
                raise TypeError(f"paged_attention_v2: kv_scale and {name} both given")
            bound[name] = kv_scale
    return bound


def paged_attention_v2(*args: Any, **kwargs: Any) -> None:
    """vLLM's ``paged_attention_v2``; accepts every 0.4.3 - 0.11.0 parameter spelling.

    Canonical signature: ``(out, exp_sums, max_logits, tmp_out, query, key_cache,
    value_cache, num_kv_heads, scale, block_tables, seq_lens, block_size, max_seq_len,
    alibi_slopes=None, kv_cache_dtype="auto", k_scale=1.0, v_scale=1.0, tp_rank=0,
    blocksparse_local_blocks=0, blocksparse_vert_stride=0, blocksparse_block_size=64,
    blocksparse_head_sliding_step=0)``; aliases ``exp_sum``, ``context_lens``,
    ``max_context_len``, ``kv_scale`` (both scales).  Returns None; writes ``out``,
    ``exp_sums``, ``max_logits`` and ``tmp_out`` for the partitions each sequence covers.
    """
    _run(**_normalize(args, kwargs))


def paged_attention_v2_with_path(*args: Any, **kwargs: Any) -> str:
    """Same as :func:`paged_attention_v2`, returning "triton" or "torch" (``backend=`` forces)."""
    return _run(**_normalize(args, kwargs))

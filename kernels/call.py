"""One decode call, as a typed object: vLLM's arguments in any 0.4.3 - 0.11.0 spelling,
normalized once and validated once per shape.

Both implementations (Triton and PyTorch) and the vendor-V1 route take a
:class:`DecodeCall`; nothing downstream re-reads positional tuples or aliases.
Validation is cached by everything it depends on (shapes, dtypes, the cache-dtype string),
so a decode loop pays for it once per batch shape, not once per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Set, Tuple

import torch

from .signature import ALIASES, CANONICAL_PARAMETERS, PARTITION_SIZE

_FP8_NAMES = {
    "fp8": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
}
_PLAIN_NAMES = {
    "auto",
    "fp16",
    "float16",
    "half",
    "bf16",
    "bfloat16",
    "fp32",
    "float32",
    "float",
}
_CANONICAL_SET = frozenset(CANONICAL_PARAMETERS)
_N_CANONICAL = len(CANONICAL_PARAMETERS)
_UNSET = object()
_DEFAULTS: Dict[str, Any] = {
    "alibi_slopes": None,
    "kv_cache_dtype": "auto",
    "k_scale": 1.0,
    "v_scale": 1.0,
    "tp_rank": 0,
    "blocksparse_local_blocks": 0,
    "blocksparse_vert_stride": 0,
    "blocksparse_block_size": 64,
    "blocksparse_head_sliding_step": 0,
}


@dataclass
class DecodeCall:
    """vLLM's ``paged_attention_v2`` arguments, normalized (dense attention only)."""

    out: torch.Tensor
    exp_sums: torch.Tensor
    max_logits: torch.Tensor
    tmp_out: torch.Tensor
    query: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    num_kv_heads: int
    scale: float
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    block_size: int
    max_seq_len: int
    alibi_slopes: Optional[torch.Tensor]
    kv_cache_dtype: str
    k_scale: Any
    v_scale: Any

    @property
    def fp8_dtype(self) -> Optional[torch.dtype]:
        return fp8_dtype(self.kv_cache_dtype)

    @property
    def num_partitions(self) -> int:
        return (self.max_seq_len + PARTITION_SIZE - 1) // PARTITION_SIZE


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"paged_attention_v2: {name} must be a scalar")
        value = value.item()
    return int(value)


def bind(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """Map positional and keyword arguments (with their old spellings) to canonical names."""
    if len(args) > _N_CANONICAL:
        raise TypeError("paged_attention_v2: too many positional arguments")
    bound = dict(zip(CANONICAL_PARAMETERS, args))
    if not kwargs:
        return bound
    kv_scale = kwargs.pop("kv_scale", _UNSET)
    for name, value in kwargs.items():
        canonical = ALIASES.get(name, name)
        if canonical not in _CANONICAL_SET:
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


_DEFAULT_TAIL = tuple(_DEFAULTS[n] for n in CANONICAL_PARAMETERS[13:])


def _int(value: Any, name: str) -> int:
    return value if type(value) is int else _as_int(value, name)


def build(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> DecodeCall:
    """The call object for vLLM's arguments; refuses what the kernels do not implement.

    vLLM passes every argument positionally; that path builds the call straight from the
    tuple (this runs once per decode call, so it is kept short).
    """
    if kwargs or len(args) < 13:
        bound = bind(args, kwargs)
        missing = [n for n in CANONICAL_PARAMETERS[:13] if n not in bound]
        if missing:
            raise TypeError(f"paged_attention_v2: missing argument(s) {', '.join(missing)}")
        args = tuple(bound.get(n, _DEFAULTS.get(n)) for n in CANONICAL_PARAMETERS)
    elif len(args) < _N_CANONICAL:
        args = tuple(args) + _DEFAULT_TAIL[len(args) - 13 :]
    elif len(args) > _N_CANONICAL:
        raise TypeError("paged_attention_v2: too many positional arguments")
    (out, exp_sums, max_logits, tmp_out, query, key_cache, value_cache, num_kv_heads, scale,
     block_tables, seq_lens, block_size, max_seq_len, alibi_slopes, kv_cache_dtype, k_scale,
     v_scale, _tp_rank, local_blocks, vert_stride, _, _) = args  # fmt: skip
    if local_blocks or (vert_stride and vert_stride != 1):
        local_blocks = _as_int(local_blocks, "blocksparse_local_blocks")
        vert_stride = _as_int(vert_stride, "blocksparse_vert_stride")
        if vert_stride > 1 or local_blocks > 0:
            raise NotImplementedError(
                "paged_attention_v2 (vllm-codemod kernels): block-sparse attention "
                f"(blocksparse_local_blocks={local_blocks}, "
                f"blocksparse_vert_stride={vert_stride}) is not implemented; only dense "
                "attention is supported"
            )
    if type(scale) is not float:
        scale = float(scale.item() if isinstance(scale, torch.Tensor) else scale)
    return DecodeCall(
        out,
        exp_sums,
        max_logits,
        tmp_out,
        query,
        key_cache,
        value_cache,
        _int(num_kv_heads, "num_kv_heads"),
        scale,
        block_tables,
        seq_lens,
        _int(block_size, "block_size"),
        _int(max_seq_len, "max_seq_len"),
        alibi_slopes,
        kv_cache_dtype if type(kv_cache_dtype) is str else str(kv_cache_dtype),
        k_scale,
        v_scale,
    )


def fp8_dtype(kv_cache_dtype: str) -> Optional[torch.dtype]:
    """The torch float8 dtype for an fp8 ``kv_cache_dtype``, None for unquantized caches."""
    if kv_cache_dtype in _PLAIN_NAMES:  # the usual "auto": no string work per call
        return None
    name = kv_cache_dtype.lower()
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


_validated: Set[tuple] = set()


def validate(call: DecodeCall) -> None:
    """Shape/dtype checks, once per distinct key (the decode loop repeats the same few)."""
    key = (
        call.query.shape,
        call.out.shape,
        call.key_cache.shape,
        call.value_cache.shape,
        call.key_cache.dtype,
        call.block_tables.dim(),
        call.block_tables.shape[0],
        call.seq_lens.shape,
        call.num_kv_heads,
        call.block_size,
        call.kv_cache_dtype,
    )
    if key in _validated:
        return
    _check(call)
    _validated.add(key)


def _check(call: DecodeCall) -> None:
    query, out, key_cache, value_cache = call.query, call.out, call.key_cache, call.value_cache
    num_kv_heads, block_size = call.num_kv_heads, call.block_size
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
    bt = call.block_tables
    if bt.dim() != 2 or bt.shape[0] < num_seqs or call.seq_lens.numel() < num_seqs:
        raise ValueError("paged_attention_v2: block_tables/seq_lens do not cover every sequence")
    fp8 = fp8_dtype(call.kv_cache_dtype)
    if fp8 is None and key_cache.dtype == torch.uint8:
        raise ValueError(
            "paged_attention_v2: uint8 KV cache needs kv_cache_dtype='fp8'/'fp8_e4m3'/'fp8_e5m2'"
        )

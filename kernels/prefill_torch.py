"""Prefix prefill in plain PyTorch: the path for CPU tensors, and for GPUs without Triton.

Same contract as the Triton launcher (``prefill_launch.prefix_prefill_triton``), so the
adapter can hand either one the same normalized arguments.  Vectorized per sequence: the
paged context is gathered through the block table once, the query heads of one KV head
share its keys (GQA by reshape, never by copying K/V per query head), and the query rows
are taken in chunks so that a 16K-token chunk on a GPU does not materialize a
``heads x 16K x 32K`` logits tensor at once.  Each chunk only sees the keys it can
attend to (up to its last row's position, and from its first row's window start).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

#: Upper bound on the logits elements of one chunk (``heads x rows x keys``): 64 Mi
#: elements is 256 MB in float32, small next to the caches that feed it.
_CHUNK_ELEMENTS = 1 << 26


def _compute_dtype(q: torch.Tensor) -> torch.dtype:
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _scale_of(scale, dtype: torch.dtype, device: torch.device):
    """A multiplier for the dequantized cache: a Python float or a 0-d tensor (no sync)."""
    if scale is None:
        return None
    if isinstance(scale, torch.Tensor):
        return scale.reshape(()).to(device=device, dtype=dtype)
    return float(scale)


def _gather(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    table: torch.Tensor,
    ctx: int,
    dtype: torch.dtype,
    k_scale,
    v_scale,
):
    """The first ``ctx`` cached keys and values of one sequence as ``[kv_heads, ctx, D]``."""
    kv_heads, head_size, block_size = v_cache.shape[1], v_cache.shape[2], v_cache.shape[3]
    if ctx == 0:
        empty = torch.empty(kv_heads, 0, head_size, dtype=dtype, device=v_cache.device)
        return empty, empty
    n_blocks = -(-ctx // block_size)
    blocks = table[:n_blocks].to(device=k_cache.device, dtype=torch.long)
    # key_cache [blocks, kvh, D/x, bs, x] -> [kvh, blocks, bs, D/x, x] -> [kvh, tokens, D]
    keys = k_cache.index_select(0, blocks).permute(1, 0, 3, 2, 4)
    keys = keys.reshape(kv_heads, n_blocks * block_size, head_size)[:, :ctx]
    # value_cache [blocks, kvh, D, bs] -> [kvh, blocks, bs, D] -> [kvh, tokens, D]
    values = v_cache.index_select(0, blocks).permute(1, 0, 3, 2)
    values = values.reshape(kv_heads, n_blocks * block_size, head_size)[:, :ctx]
    keys, values = keys.to(dtype), values.to(dtype)
    if k_scale is not None:
        keys = keys * k_scale
    if v_scale is not None:
        values = values * v_scale
    return keys, values


def _attend_sequence(
    q_s: torch.Tensor,  # [new, Hq, D], compute dtype
    keys: torch.Tensor,  # [Hkv, ctx + new, D]
    values: torch.Tensor,
    ctx: int,
    sm_scale: float,
    slopes: Optional[torch.Tensor],  # [Hkv, G, 1, 1] or None
    sliding_window: int,
) -> torch.Tensor:
    """Attention output ``[new, Hq, D]`` (compute dtype) of one sequence's new tokens."""
    new, num_heads, head_size = q_s.shape
    kv_heads = keys.shape[0]
    group = num_heads // kv_heads
    total = ctx + new
    # [Hkv, G, new, D]: the G query heads of a KV head stacked, sharing its keys
    q_r = q_s.reshape(new, kv_heads, group, head_size).permute(1, 2, 0, 3)
    rows = max(1, min(new, _CHUNK_ELEMENTS // max(1, num_heads * total)))
    out = torch.empty(kv_heads, group, new, head_size, dtype=q_s.dtype, device=q_s.device)
    for r0 in range(0, new, rows):
        r1 = min(new, r0 + rows)
        k_hi = ctx + r1  # causal: the last row sees keys up to its own position
        k_lo = max(0, ctx + r0 - sliding_window + 1) if sliding_window > 0 else 0
        k_chunk = keys[:, k_lo:k_hi].unsqueeze(1)  # [Hkv, 1, L, D]
        v_chunk = values[:, k_lo:k_hi].unsqueeze(1)
        logits = torch.matmul(q_r[:, :, r0:r1], k_chunk.transpose(-1, -2)) * sm_scale
        q_pos = torch.arange(ctx + r0, ctx + r1, device=q_s.device)[:, None]
        k_pos = torch.arange(k_lo, k_hi, device=q_s.device)[None, :]
        if slopes is not None:
            logits = logits + slopes * (k_pos - q_pos).to(logits.dtype)
        visible = k_pos <= q_pos
        if sliding_window > 0:
            visible = visible & (q_pos - k_pos < sliding_window)
        logits = logits.masked_fill(~visible, float("-inf"))
        out[:, :, r0:r1] = torch.matmul(torch.softmax(logits, dim=-1), v_chunk)
    return out.permute(2, 0, 1, 3).reshape(new, num_heads, head_size)


def prefix_prefill_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    max_query_len: int,
    sm_scale: float,
    k_scale=None,
    v_scale=None,
    alibi_slopes: Optional[torch.Tensor] = None,
    sliding_window: int = 0,
    skip_decode: bool = False,
) -> None:
    """Write ``o`` for every sequence's new tokens (see ``reference_prefix_prefill``).

    ``max_query_len`` is accepted for the launcher's signature only: the rows come from
    ``query_start``.  ``k_scale`` / ``v_scale`` (None, a float or a one-element tensor)
    multiply an fp8 cache; a float16/bfloat16 cache is read as it is.
    """
    del max_query_len
    dtype = _compute_dtype(q)
    fp8 = k_cache.element_size() == 1
    ks = _scale_of(k_scale, dtype, q.device) if fp8 else None
    vs = _scale_of(v_scale, dtype, q.device) if fp8 else None
    window = int(sliding_window) if sliding_window and sliding_window > 0 else 0
    starts = [int(n) for n in query_start.tolist()]
    lens = [int(n) for n in seq_lens.tolist()]
    num_heads, kv_heads = q.shape[1], k.shape[1]
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(device=q.device, dtype=dtype)
        slopes = slopes.reshape(kv_heads, num_heads // kv_heads, 1, 1)
    for s, seq_len in enumerate(lens):
        s0, s1 = starts[s], starts[s + 1]
        new = s1 - s0
        if new <= 0 or (skip_decode and new == 1):
            continue
        ctx = seq_len - new
        if ctx < 0:
            raise ValueError(
                f"prefix prefill: sequence {s} has {new} new tokens but seq_len {seq_len}"
            )
        k_ctx, v_ctx = _gather(k_cache, v_cache, block_table[s], ctx, dtype, ks, vs)
        keys = torch.cat([k_ctx, k[s0:s1].to(dtype).permute(1, 0, 2)], dim=1)
        values = torch.cat([v_ctx, v[s0:s1].to(dtype).permute(1, 0, 2)], dim=1)
        out = _attend_sequence(
            q[s0:s1].to(dtype), keys, values, ctx, float(sm_scale), slopes, window
        )
        o[s0:s1] = out.to(o.dtype)


def default_scale(head_size: int) -> float:
    """vLLM's ``sm_scale`` when none is given: ``1 / sqrt(head_size)``."""
    return 1.0 / math.sqrt(head_size)

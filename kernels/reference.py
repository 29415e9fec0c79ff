"""Independent float64 reference: gather each token through the block table, plain softmax.

Deliberately naive (a Python loop over sequences, one softmax over the whole context):
shares no code with the kernels.  For tests and the self-check only.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from .signature import PARTITION_SIZE


def _dequant(cache: torch.Tensor, fp8_dtype: Optional[torch.dtype], scale: float) -> torch.Tensor:
    if fp8_dtype is not None:
        return cache.view(fp8_dtype).to(torch.float64) * float(scale)
    return cache.to(torch.float64)


def gather_kv(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_len: int,
    fp8_dtype: Optional[torch.dtype] = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """K, V of one sequence as float64 ``[kv_heads, seq_len, head_size]``."""
    block_size = value_cache.shape[3]
    pos = torch.arange(seq_len)
    blocks = block_table.to(torch.int64).cpu()[pos // block_size]
    offsets = pos % block_size
    kc = key_cache.cpu()
    vc = value_cache.cpu()
    # key_cache[b, h, d // x, t, d % x]; value_cache[b, h, d, t]
    k = kc[blocks, :, :, offsets, :]  # [L, kvh, D/x, x]
    k = k.reshape(seq_len, kc.shape[1], kc.shape[2] * kc.shape[4]).permute(1, 0, 2)
    v = vc[blocks, :, :, offsets].permute(1, 0, 2)  # [kvh, L, D]
    return _dequant(k, fp8_dtype, k_scale), _dequant(v, fp8_dtype, v_scale)


def _logits(query_s, k, scale, alibi_slopes, seq_len):
    num_heads = query_s.shape[0]
    group = num_heads // k.shape[0]
    kk = k.repeat_interleave(group, dim=0)  # [H, L, D]
    logits = torch.einsum("hd,hld->hl", query_s.to(torch.float64).cpu(), kk) * scale
    if alibi_slopes is not None:
        rel = (torch.arange(seq_len) - seq_len + 1).to(torch.float64)
        logits = logits + alibi_slopes.to(torch.float64).cpu()[:, None] * rel[None, :]
    return logits, group


def reference_paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens,
    scale: float,
    alibi_slopes: Optional[torch.Tensor] = None,
    fp8_dtype: Optional[torch.dtype] = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """Attention output as float64 ``[num_seqs, num_heads, head_size]`` on the CPU."""
    lens = [int(n) for n in seq_lens]
    outs: List[torch.Tensor] = []
    for s, seq_len in enumerate(lens):
        k, v = gather_kv(
            key_cache, value_cache, block_tables[s], seq_len, fp8_dtype, k_scale, v_scale
        )
        logits, group = _logits(query[s], k, scale, alibi_slopes, seq_len)
        prob = torch.softmax(logits, dim=-1)
        outs.append(torch.einsum("hl,hld->hd", prob, v.repeat_interleave(group, dim=0)))
    return torch.stack(outs)


def reference_partitions(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_len: int,
    seq_index: int,
    scale: float,
    alibi_slopes: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """vLLM's partition buffers for one sequence, float64: (tmp_out, exp_sums, max_logits).

    ``tmp_out[h, p]`` is partition p's output normalized by its own exp-sum;
    ``exp_sums[h, p]`` = sum exp(logit - max_logits[h, p]) over the partition.
    """
    k, v = gather_kv(key_cache, value_cache, block_tables[seq_index], seq_len)
    logits, group = _logits(query[seq_index], k, scale, alibi_slopes, seq_len)
    vv = v.repeat_interleave(group, dim=0)
    tmp, sums, maxes = [], [], []
    for p0 in range(0, seq_len, PARTITION_SIZE):
        lg = logits[:, p0 : p0 + PARTITION_SIZE]
        m = lg.amax(dim=-1)
        e = torch.exp(lg - m[:, None])
        sums.append(e.sum(-1))
        maxes.append(m)
        tmp.append(
            torch.einsum("hl,hld->hd", e, vv[:, p0 : p0 + PARTITION_SIZE]) / e.sum(-1)[:, None]
        )
    return torch.stack(tmp, dim=1), torch.stack(sums, dim=1), torch.stack(maxes, dim=1)


def reference_prefix_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    query_start,
    seq_lens,
    scale: float,
    alibi_slopes: Optional[torch.Tensor] = None,
    sliding_window: int = 0,
    fp8_dtype: Optional[torch.dtype] = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    skip_decode: bool = False,
) -> torch.Tensor:
    """vLLM's ``context_attention_fwd`` as float64 ``[tokens, num_heads, head_size]`` (CPU).

    Sequence ``s`` owns the new tokens ``query_start[s]:query_start[s + 1]`` of ``q``,
    ``k`` and ``v``; its ``seq_lens[s]`` minus that count are cached tokens, read from the
    paged caches through ``block_table[s]``.  Each new token attends to every cached
    token and, causally, to the new tokens up to itself.  ALiBi adds ``slope * (key
    position - query position)`` to the scaled logit; a sliding window ``W > 0`` keeps
    the keys with ``query position - key position < W``.  Rows of sequences that
    ``skip_decode`` skips (one new token) are NaN: the kernels leave them unwritten.
    """
    starts = [int(n) for n in query_start]
    lens = [int(n) for n in seq_lens]
    qf = q.to(torch.float64).cpu()
    kf = k.to(torch.float64).cpu()
    vf = v.to(torch.float64).cpu()
    num_heads, kv_heads = qf.shape[1], kf.shape[1]
    group = num_heads // kv_heads
    out = torch.full(qf.shape, float("nan"), dtype=torch.float64)
    for s, seq_len in enumerate(lens):
        s0, s1 = starts[s], starts[s + 1]
        new = s1 - s0
        if new == 0 or (skip_decode and new == 1):
            continue
        ctx = seq_len - new
        k_ctx, v_ctx = gather_kv(
            key_cache, value_cache, block_table[s], ctx, fp8_dtype, k_scale, v_scale
        )  # [kvh, ctx, D]
        keys = torch.cat([k_ctx, kf[s0:s1].permute(1, 0, 2)], dim=1)
        values = torch.cat([v_ctx, vf[s0:s1].permute(1, 0, 2)], dim=1)
        keys = keys.repeat_interleave(group, dim=0)  # [H, L, D]
        values = values.repeat_interleave(group, dim=0)
        logits = torch.einsum("qhd,hkd->hqk", qf[s0:s1], keys) * scale
        q_pos = torch.arange(ctx, seq_len)[:, None]
        k_pos = torch.arange(seq_len)[None, :]
        if alibi_slopes is not None:
            slopes = alibi_slopes.to(torch.float64).cpu()
            logits = logits + slopes[:, None, None] * (k_pos - q_pos).to(torch.float64)
        visible = k_pos <= q_pos
        if sliding_window and sliding_window > 0:
            visible = visible & (q_pos - k_pos < sliding_window)
        logits = logits.masked_fill(~visible, float("-inf"))
        out[s0:s1] = torch.einsum("hqk,hkd->qhd", torch.softmax(logits, dim=-1), values)
    return out

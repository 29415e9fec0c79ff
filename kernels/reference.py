"""Independent float64 reference: gather each token through the block table, plain softmax.

Deliberately naive (a Python loop over sequences, one softmax over the whole context):
shares no code with the kernels.  For tests and the self-check only.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Tuple

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
    device: Optional[torch.device] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """K, V of one sequence as float64 ``[kv_heads, seq_len, head_size]`` (CPU by default)."""
    device = device or torch.device("cpu")
    block_size = value_cache.shape[3]
    pos = torch.arange(seq_len, device=device)
    blocks = block_table.to(device=device, dtype=torch.int64)[pos // block_size]
    offsets = pos % block_size
    kc = key_cache.to(device)
    vc = value_cache.to(device)
    # key_cache[b, h, d // x, t, d % x]; value_cache[b, h, d, t]
    k = kc[blocks, :, :, offsets, :]  # [L, kvh, D/x, x]
    k = k.reshape(seq_len, kc.shape[1], kc.shape[2] * kc.shape[4]).permute(1, 0, 2)
    v = vc[blocks, :, :, offsets].permute(1, 0, 2)  # [kvh, L, D]
    return _dequant(k, fp8_dtype, k_scale), _dequant(v, fp8_dtype, v_scale)


def _logits(query_s, k, scale, alibi_slopes, seq_len):
    num_heads = query_s.shape[0]
    group = num_heads // k.shape[0]
    kk = k.repeat_interleave(group, dim=0)  # [H, L, D]
    logits = torch.einsum("hd,hld->hl", query_s.to(torch.float64).to(k.device), kk) * scale
    if alibi_slopes is not None:
        rel = (torch.arange(seq_len, device=k.device) - seq_len + 1).to(torch.float64)
        logits = logits + alibi_slopes.to(torch.float64).to(k.device)[:, None] * rel[None, :]
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
    device: Optional[torch.device] = None,
) -> torch.Tensor:
    """Attention output as float64 ``[num_seqs, num_heads, head_size]`` on ``device`` (the
    CPU unless a benchmark's 100K-token cache asks for its GPU)."""
    lens = [int(n) for n in seq_lens]
    outs: List[torch.Tensor] = []
    for s, seq_len in enumerate(lens):
        k, v = gather_kv(
            key_cache, value_cache, block_tables[s], seq_len, fp8_dtype, k_scale, v_scale, device
        )
        logits, group = _logits(query[s], k, scale, alibi_slopes, seq_len)
        prob = torch.softmax(logits, dim=-1)
        outs.append(torch.einsum("hl,hld->hd", prob, v.repeat_interleave(group, dim=0)))
    return torch.stack(outs)


def reference_for_args(
    a: Mapping[str, Any],
    seqs: Optional[Sequence[int]] = None,
    seq_lens: Optional[Sequence[int]] = None,
    **options: Any,
) -> torch.Tensor:
    """:func:`reference_paged_attention` of a dict of ``paged_attention_v2`` arguments
    (canonical names), for the sequences ``seqs`` (default: all) with lengths ``seq_lens``
    (default: ``a["seq_lens"]``; a test may have changed those, e.g. to an empty one).
    ``options``: fp8_dtype, k_scale, v_scale, device."""
    lens = a["seq_lens"].tolist() if seq_lens is None else list(seq_lens)
    query, tables = a["query"], a["block_tables"]
    if seqs is not None:
        query, tables, lens = query[list(seqs)], tables[list(seqs)], [lens[i] for i in seqs]
    return reference_paged_attention(
        query,
        a["key_cache"],
        a["value_cache"],
        tables,
        lens,
        a["scale"],
        a.get("alibi_slopes"),
        **options,
    )


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
    rows: Optional[Sequence[int]] = None,
    device: Optional[torch.device] = None,
) -> torch.Tensor:
    """vLLM's ``context_attention_fwd`` as float64 ``[tokens, num_heads, head_size]``.

    Sequence ``s`` owns the new tokens ``query_start[s]:query_start[s + 1]`` of ``q``,
    ``k`` and ``v``; its ``seq_lens[s]`` minus that count are cached tokens, read from the
    paged caches through ``block_table[s]``.  Each new token attends to every cached
    token and, causally, to the new tokens up to itself.  ALiBi adds ``slope * (key
    position - query position)`` to the scaled logit; a sliding window ``W > 0`` keeps
    the keys with ``query position - key position < W``.  Rows of sequences that
    ``skip_decode`` skips (one new token) are NaN: the kernels leave them unwritten.
    ``rows`` (token indices) limits the work to those rows (the others are NaN), so a
    long case can be checked on a sample; ``device`` computes there (CPU by default).
    """
    device = device or torch.device("cpu")
    starts = [int(n) for n in query_start]
    lens = [int(n) for n in seq_lens]
    wanted = None if rows is None else sorted({int(r) for r in rows})
    qf = q.to(device=device, dtype=torch.float64)
    kf = k.to(device=device, dtype=torch.float64)
    vf = v.to(device=device, dtype=torch.float64)
    num_heads, kv_heads = qf.shape[1], kf.shape[1]
    group = num_heads // kv_heads
    out = torch.full(qf.shape, float("nan"), dtype=torch.float64, device=device)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(device=device, dtype=torch.float64)
    for s, seq_len in enumerate(lens):
        s0, s1 = starts[s], starts[s + 1]
        new = s1 - s0
        if new == 0 or (skip_decode and new == 1):
            continue
        mine = torch.arange(s0, s1, device=device)
        if wanted is not None:
            mine = torch.tensor([r for r in wanted if s0 <= r < s1], device=device)
            if not len(mine):
                continue
        ctx = seq_len - new
        k_ctx, v_ctx = gather_kv(
            key_cache, value_cache, block_table[s], ctx, fp8_dtype, k_scale, v_scale, device
        )  # [kvh, ctx, D]
        keys = torch.cat([k_ctx, kf[s0:s1].permute(1, 0, 2)], dim=1)
        values = torch.cat([v_ctx, vf[s0:s1].permute(1, 0, 2)], dim=1)
        keys = keys.repeat_interleave(group, dim=0)  # [H, L, D]
        values = values.repeat_interleave(group, dim=0)
        k_pos = torch.arange(seq_len, device=device)[None, :]
        for rows_here in mine.split(_rows_per_step(num_heads, seq_len)):
            logits = torch.einsum("qhd,hkd->hqk", qf[rows_here], keys) * scale
            q_pos = (rows_here - s0 + ctx)[:, None]
            if slopes is not None:
                logits = logits + slopes[:, None, None] * (k_pos - q_pos).to(torch.float64)
            visible = k_pos <= q_pos
            if sliding_window and sliding_window > 0:
                visible = visible & (q_pos - k_pos < sliding_window)
            logits = logits.masked_fill(~visible, float("-inf"))
            out[rows_here] = torch.einsum("hqk,hkd->qhd", torch.softmax(logits, dim=-1), values)
    return out


#: float64 logits one step of the reference holds at once (a few temporaries this size
#: live together): 1x(48K+16K) at 8 heads would need 69 GB as one matrix, which killed
#: the self-check's process on a 128 GB host.
_LOGITS_BYTES = 256 << 20


def _rows_per_step(num_heads: int, keys: int) -> int:
    return max(1, _LOGITS_BYTES // (8 * num_heads * max(keys, 1)))

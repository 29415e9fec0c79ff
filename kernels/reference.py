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
    k = k.reshape(seq_len, kc.shape[1], -1).permute(1, 0, 2)
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

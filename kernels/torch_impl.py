"""Vectorized PyTorch PagedAttention V2 (CPU, or wherever Triton is unusable).

Works on all sequences at once, a bounded number of 512-token partitions per step
(``chunk`` partitions whose fp32 working set fits ``_WORKSET_BYTES``): memory stays
bounded at any context length, and the Python loop runs once per chunk, never per
block or per partition.  There is no host sync.  K/V are never repeated per query
head: queries are grouped by kv head (GQA/MQA) and multiplied against the shared K/V.
"""

from __future__ import annotations

import torch

from .call import DecodeCall
from .signature import PARTITION_SIZE

_WORKSET_BYTES = 96 << 20


def _scale_tensor(value, device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().to(device=device, dtype=torch.float32).reshape(-1)[:1].reshape(())
    return torch.tensor(float(value), dtype=torch.float32, device=device)


def paged_attention_v2_torch(c: DecodeCall) -> None:
    """Write ``c.out`` and vLLM's partition buffers (``exp_sums``, ``max_logits``,
    ``tmp_out``) for every partition the sequences cover."""
    out, exp_sums, max_logits, tmp_out = c.out, c.exp_sums, c.max_logits, c.tmp_out
    query, key_cache, value_cache = c.query, c.key_cache, c.value_cache
    num_kv_heads, scale, block_tables, seq_lens = (
        c.num_kv_heads,
        c.scale,
        c.block_tables,
        c.seq_lens,
    )
    block_size, max_seq_len, alibi_slopes = c.block_size, c.max_seq_len, c.alibi_slopes
    fp8_dtype, k_scale, v_scale = c.fp8_dtype, c.k_scale, c.v_scale
    if c.num_partitions > tmp_out.shape[2] or c.num_partitions > exp_sums.shape[2]:
        raise ValueError(
            f"paged_attention_v2: max_seq_len={max_seq_len} needs {c.num_partitions} "
            f"partitions, the buffers hold {tmp_out.shape[2]}"
        )
    num_seqs, num_heads, head_size = query.shape
    kvh = num_kv_heads
    group = num_heads // kvh
    device = query.device
    bpp = PARTITION_SIZE // block_size  # blocks per partition
    num_parts = (max_seq_len + PARTITION_SIZE - 1) // PARTITION_SIZE
    num_blocks = key_cache.shape[0]

    # fp32 bytes touched per partition: K and V copies, logits/probabilities.
    per_part = num_seqs * kvh * PARTITION_SIZE * (2 * head_size + 3 * group) * 4
    chunk = max(1, min(num_parts, _WORKSET_BYTES // max(per_part, 1)))

    q = query.to(torch.float32).reshape(num_seqs, kvh, group, head_size) * scale
    lens = seq_lens[:num_seqs].to(device=device, dtype=torch.int64)
    tables = block_tables[:num_seqs]
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(device=device, dtype=torch.float32).reshape(1, kvh, group, 1)
    if fp8_dtype is not None:
        ks = _scale_tensor(k_scale, device)
        vs = _scale_tensor(v_scale, device)

    # Running log-sum-exp state across chunks (fp32), per (seq, kv head, group row).
    run_m = torch.full((num_seqs, kvh, group), float("-inf"), dtype=torch.float32, device=device)
    run_l = torch.zeros((num_seqs, kvh, group), dtype=torch.float32, device=device)
    run_acc = torch.zeros((num_seqs, kvh, group, head_size), dtype=torch.float32, device=device)

    for p0 in range(0, num_parts, chunk):
        p1 = min(num_parts, p0 + chunk)
        nparts = p1 - p0
        b0, b1 = p0 * bpp, p1 * bpp
        ids = tables[:, b0 : min(b1, tables.shape[1])].to(torch.int64)
        if ids.shape[1] < b1 - b0:  # the table is narrower than whole partitions: pad
            ids = torch.nn.functional.pad(ids, (0, b1 - b0 - ids.shape[1]))
        ids = ids.clamp(0, num_blocks - 1)  # entries past a sequence's end may be junk
        tokens = (b1 - b0) * block_size

        k = key_cache[ids]  # [S, nb, kvh, D/x, bs, x]
        k = k.permute(0, 2, 1, 4, 3, 5).reshape(num_seqs, kvh, tokens, head_size)
        v = value_cache[ids]  # [S, nb, kvh, D, bs]
        v = v.permute(0, 2, 1, 4, 3).reshape(num_seqs, kvh, tokens, head_size)
        if fp8_dtype is not None:
            k = k.view(fp8_dtype).to(torch.float32) * ks
            v = v.view(fp8_dtype).to(torch.float32) * vs
        else:
            k = k.to(torch.float32)
            v = v.to(torch.float32)

        logits = torch.matmul(q, k.transpose(-1, -2))  # [S, kvh, G, T]
        pos = torch.arange(b0 * block_size, b0 * block_size + tokens, device=device)
        if alibi_slopes is not None:
            rel = (pos.unsqueeze(0) - lens.unsqueeze(1) + 1).to(torch.float32)  # [S, T]
            logits = logits + slopes * rel[:, None, None, :]
        valid = pos.unsqueeze(0) < lens.unsqueeze(1)  # [S, T]
        logits = logits.masked_fill(~valid[:, None, None, :], float("-inf"))
        v = v.masked_fill(~valid[:, None, :, None], 0.0)  # junk slots may hold NaN/inf

        lp = logits.reshape(num_seqs, kvh, group, nparts, PARTITION_SIZE)
        pm = lp.amax(dim=-1)  # [S, kvh, G, P]
        pm_safe = torch.where(torch.isfinite(pm), pm, torch.zeros_like(pm))
        prob = torch.exp(lp - pm_safe.unsqueeze(-1))  # masked tokens -> 0
        psum = prob.sum(dim=-1)  # [S, kvh, G, P]
        # [S, kvh, P, G, 512] @ [S, kvh, P, 512, D] -> [S, kvh, P, G, D]
        part = torch.matmul(
            prob.permute(0, 1, 3, 2, 4),
            v.reshape(num_seqs, kvh, nparts, PARTITION_SIZE, head_size),
        ).permute(0, 1, 3, 2, 4)  # [S, kvh, G, P, D], unnormalized
        denom = torch.where(psum > 0, psum, torch.ones_like(psum))
        normalized = part / denom.unsqueeze(-1)

        tmp_out[:num_seqs, :, p0:p1].copy_(normalized.reshape(num_seqs, num_heads, nparts, -1))
        exp_sums[:num_seqs, :, p0:p1].copy_(psum.reshape(num_seqs, num_heads, nparts))
        max_logits[:num_seqs, :, p0:p1].copy_(pm.reshape(num_seqs, num_heads, nparts))

        # Fold this chunk into the running state (same math as vLLM's reduce kernel).
        cm = pm.amax(dim=-1)
        new_m = torch.maximum(run_m, cm)
        new_m_safe = torch.where(torch.isfinite(new_m), new_m, torch.zeros_like(new_m))
        alpha = torch.exp(run_m - new_m_safe)  # -inf -> 0
        w = torch.exp(pm - new_m_safe.unsqueeze(-1))  # [S, kvh, G, P]; empty partitions -> 0
        run_l = run_l * alpha + (w * psum).sum(dim=-1)
        run_acc = run_acc * alpha.unsqueeze(-1) + (w.unsqueeze(-1) * part).sum(dim=-2)
        run_m = new_m

    denom = torch.where(run_l > 0, run_l, torch.ones_like(run_l))
    result = run_acc / denom.unsqueeze(-1)
    out[:num_seqs].copy_(result.reshape(num_seqs, num_heads, head_size))

"""Triton PagedAttention V2 decode kernels: the device code only.

Laid out as Triton's fused-attention tutorial lays out its kernels: the inner-loop helpers
first (the split-precision dot, the K/V tile loads, one chunk's online softmax), then the
helpers that number the work, then the two kernels a launch runs: the partition kernel
(one program per chunk item) and the reduce kernel (log-sum-exp merge of the partials).
The host side (plan, launch config, launch) is ``decode_launch.py``; what each launch
choice means and why: that module's docstring and docs/kernel-notes.md.

Only Triton 2.1 language features: tl.dot, masked tl.load/tl.store, tl.max/tl.sum,
tl.cumsum, tl.exp, tl.where, tl.arange, tl.zeros, atomics, constexpr.  fp32 caches use a
3-pass bf16 split product (hi*hi + hi*lo + lo*hi), so no TF32/precision keyword is
needed.  One exception, chosen by the launcher: on Triton >= 3.0 K tiles are loaded in
memory order and permuted (``K_3D``; tl.permute/3-D reshape).
"""

from __future__ import annotations

import triton
import triton.language as tl

# -- inner-loop helpers: loads and products of one tile ---------------------------------


@triton.jit
def _dot(a, b, F32_SPLIT: tl.constexpr):
    if F32_SPLIT:
        a_hi = a.to(tl.bfloat16)
        a_lo = (a - a_hi.to(tl.float32)).to(tl.bfloat16)
        b_hi = b.to(tl.bfloat16)
        b_lo = (b - b_hi.to(tl.float32)).to(tl.bfloat16)
        r = tl.dot(a_hi, b_hi)
        r += tl.dot(a_hi, b_lo)
        r += tl.dot(a_lo, b_hi)
    else:
        r = tl.dot(a, b)
    return r


@triton.jit
def _tile_block_ids(bt_base, t0, n_blocks, TILE: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    # One table entry per token of the tile (whole blocks share one); blocks past the
    # sequence's end read block 0, so K/V addresses need no per-token mask.
    blk_idx = (t0 + tl.arange(0, TILE)) // BLOCK_SIZE
    return tl.load(bt_base + blk_idx, mask=blk_idx < n_blocks, other=0).to(tl.int64)


@triton.jit
def _kv_offsets(
    blk, t0, k_d, v_d, stride_kb, stride_kt, stride_vb, stride_vt,
    X: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, CONTIG_HINTS: tl.constexpr,
):  # fmt: skip
    t_in = (t0 + tl.arange(0, TILE)) % BLOCK_SIZE
    k_off = blk[None, :] * stride_kb + t_in[None, :] * stride_kt + k_d[:, None]
    v_off = blk[:, None] * stride_vb + t_in[:, None] * stride_vt + v_d[None, :]
    if CONTIG_HINTS:
        k_off = tl.max_contiguous(tl.multiple_of(k_off, [X, 1]), [X, 1])
        v_off = tl.max_contiguous(tl.multiple_of(v_off, [BLOCK_SIZE, 1]), [BLOCK_SIZE, 1])
    return k_off, v_off


@triton.jit
def _load_k_3d(
    k_base, blk, t0, ok, stride_kb, stride_kt, stride_kd, stride_kx,
    X: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, HEAD_SIZE: tl.constexpr,
    D_PAD: tl.constexpr, CONTIG_HINTS: tl.constexpr, USE_OK: tl.constexpr,
):  # fmt: skip
    # K tile as [TILE, D/X, X]: one block's K of one kv head is a single contiguous run in
    # the order (d/x, token, x), and with the token axis first Triton lays a warp's threads
    # along tokens after the 16-byte x vector, so each load instruction covers whole
    # consecutive lines.  The 2-D [D, TILE] load puts 16 threads along d instead: each
    # instruction then touches 16 lines 256 bytes apart.  The dot's [D, TILE] operand is a
    # permute + reshape of it (Triton >= 3.0).
    dx = tl.arange(0, D_PAD // X)
    t_in = (t0 + tl.arange(0, TILE)) % BLOCK_SIZE
    xx = tl.arange(0, X)
    off = (
        blk[:, None, None] * stride_kb
        + t_in[:, None, None] * stride_kt
        + dx[None, :, None] * stride_kd
        + xx[None, None, :] * stride_kx
    )
    if CONTIG_HINTS:
        off = tl.max_contiguous(tl.multiple_of(off, [1, 1, X]), [1, 1, X])
    if D_PAD == HEAD_SIZE:
        if USE_OK:
            k3 = tl.load(k_base + off, mask=ok, other=0.0)
        else:
            k3 = tl.load(k_base + off)
    else:
        m = (dx < HEAD_SIZE // X)[None, :, None]
        if USE_OK:
            m = m & ok
        k3 = tl.load(k_base + off, mask=m, other=0.0)
    return tl.reshape(tl.permute(k3, (1, 2, 0)), (D_PAD, TILE))


@triton.jit
def _load_kv_tile(
    k_base, v_base, blk, t0, k_d, v_d, d_ok, ok, stride_kb, stride_kt, stride_kd, stride_kx,
    stride_vb, stride_vt,
    X: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, HEAD_SIZE: tl.constexpr,
    D_PAD: tl.constexpr, CONTIG_HINTS: tl.constexpr, K_3D: tl.constexpr,
):  # fmt: skip
    # ``ok`` is one flag for the whole tile (False past the partition's last tile), so the
    # loads keep their vector width.
    k_off, v_off = _kv_offsets(
        blk, t0, k_d, v_d, stride_kb, stride_kt, stride_vb, stride_vt,
        X, BLOCK_SIZE, TILE, CONTIG_HINTS,
    )  # fmt: skip
    if K_3D:
        k = _load_k_3d(
            k_base, blk, t0, ok, stride_kb, stride_kt, stride_kd, stride_kx,
            X, BLOCK_SIZE, TILE, HEAD_SIZE, D_PAD, CONTIG_HINTS, True,
        )  # fmt: skip
    elif D_PAD == HEAD_SIZE:
        k = tl.load(k_base + k_off, mask=ok, other=0.0)  # [D_PAD, TILE]
    else:
        k = tl.load(k_base + k_off, mask=d_ok[:, None] & ok, other=0.0)
    if D_PAD == HEAD_SIZE:
        v = tl.load(v_base + v_off, mask=ok, other=0.0)  # [TILE, D_PAD]
    else:
        v = tl.load(v_base + v_off, mask=d_ok[None, :] & ok, other=0.0)
    return k, v


# -- one chunk of one sequence for one kv head's query rows ----------------------------


@triton.jit
def _partition(
    seq, part, start, end, seq_len, kvh, gc, hg, exp_sums_ptr, max_logits_ptr, tmp_out_ptr, out_ptr,
    counters_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, alibi_ptr, scale,
    num_hg, stride_qs, stride_qh, stride_qd, stride_kb, stride_kh, stride_kd, stride_kt, stride_kx,
    stride_vb, stride_vh, stride_vd, stride_vt, stride_bt, stride_es_s, stride_es_h, stride_es_p,
    stride_ml_s, stride_ml_h, stride_ml_p, stride_to_s, stride_to_h, stride_to_p, stride_to_d,
    stride_os, stride_oh,
    QUERIES_PER_KV: tl.constexpr, G_PAD: tl.constexpr, HEAD_SIZE: tl.constexpr,
    D_PAD: tl.constexpr, X: tl.constexpr, BLOCK_SIZE: tl.constexpr, PART: tl.constexpr,
    TILE: tl.constexpr, USE_ALIBI: tl.constexpr, F32_SPLIT: tl.constexpr,
    CONTIG_HINTS: tl.constexpr, EARLY_V: tl.constexpr, PREFETCH: tl.constexpr,
    K_3D: tl.constexpr, FUSED: tl.constexpr, P_FUSE: tl.constexpr,
):  # fmt: skip
    # Tokens [start, end) of one sequence for the query heads (rows) of one kv head; the
    # partials go to slot ``part`` (the chunk's index, or with BALANCED the item's).
    num_tiles = (end - start + TILE - 1) // TILE  # <= 0 past the sequence's end
    part_ok = start < seq_len

    rows = gc * G_PAD + tl.arange(0, G_PAD)
    row_ok = rows < QUERIES_PER_KV
    heads = kvh * QUERIES_PER_KV + rows
    d = tl.arange(0, D_PAD)
    d_ok = d < HEAD_SIZE

    q = tl.load(
        q_ptr + seq * stride_qs + heads[:, None] * stride_qh + d[None, :] * stride_qd,
        mask=row_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    q = q.to(k_cache_ptr.dtype.element_ty)
    if F32_SPLIT:
        q = q.to(tl.float32)
    if USE_ALIBI:
        slopes = tl.load(alibi_ptr + heads, mask=row_ok, other=0.0).to(tl.float32)

    k_base = k_cache_ptr + kvh * stride_kh
    v_base = v_cache_ptr + kvh * stride_vh
    k_d = (d // X) * stride_kd + (d % X) * stride_kx
    v_d = d * stride_vd
    bt_base = block_tables_ptr + seq * stride_bt

    m_i = tl.zeros([G_PAD], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([G_PAD], dtype=tl.float32)
    acc = tl.zeros([G_PAD, D_PAD], dtype=tl.float32)
    n_blocks = (seq_len + BLOCK_SIZE - 1) // BLOCK_SIZE
    # PREFETCH 1: each tile's block ids are loaded one tile ahead (the table read no
    # longer sits between one tile's K/V loads and the next).  PREFETCH 2: K and V too
    # (register double buffer: the next tile's bytes are in flight during this tile's math).
    if PREFETCH >= 1:
        blk_nxt = _tile_block_ids(bt_base, start, n_blocks, TILE, BLOCK_SIZE)
    if PREFETCH == 2:
        k_nxt, v_nxt = _load_kv_tile(
            k_base, v_base, blk_nxt, start, k_d, v_d, d_ok, num_tiles > 0,
            stride_kb, stride_kt, stride_kd, stride_kx, stride_vb, stride_vt,
            X, BLOCK_SIZE, TILE, HEAD_SIZE, D_PAD, CONTIG_HINTS, K_3D,
        )  # fmt: skip
        blk_nxt = _tile_block_ids(bt_base, start + TILE, n_blocks, TILE, BLOCK_SIZE)
    for i in range(0, num_tiles):
        t0 = start + i * TILE
        offs = t0 + tl.arange(0, TILE)
        t_ok = offs < end
        if PREFETCH == 2:
            k = k_nxt
            v = v_nxt
            k_nxt, v_nxt = _load_kv_tile(
                k_base, v_base, blk_nxt, t0 + TILE, k_d, v_d, d_ok, i + 1 < num_tiles,
                stride_kb, stride_kt, stride_kd, stride_kx, stride_vb, stride_vt,
                X, BLOCK_SIZE, TILE, HEAD_SIZE, D_PAD, CONTIG_HINTS, K_3D,
            )  # fmt: skip
            blk_nxt = _tile_block_ids(bt_base, t0 + 2 * TILE, n_blocks, TILE, BLOCK_SIZE)
        else:
            if PREFETCH == 1:
                blk = blk_nxt
                blk_nxt = _tile_block_ids(bt_base, t0 + TILE, n_blocks, TILE, BLOCK_SIZE)
            else:
                blk = _tile_block_ids(bt_base, t0, n_blocks, TILE, BLOCK_SIZE)
            k_off, v_off = _kv_offsets(
                blk, t0, k_d, v_d, stride_kb, stride_kt, stride_vb, stride_vt,
                X, BLOCK_SIZE, TILE, CONTIG_HINTS,
            )  # fmt: skip
            if K_3D:
                k = _load_k_3d(
                    k_base, blk, t0, t0 < end, stride_kb, stride_kt, stride_kd, stride_kx,
                    X, BLOCK_SIZE, TILE, HEAD_SIZE, D_PAD, CONTIG_HINTS, False,
                )  # fmt: skip
            elif D_PAD == HEAD_SIZE:
                k = tl.load(k_base + k_off)  # [D_PAD, TILE]
            else:
                k = tl.load(k_base + k_off, mask=d_ok[:, None], other=0.0)
            if EARLY_V:  # issue the V load before the QK product: more bytes in flight
                if D_PAD == HEAD_SIZE:
                    v = tl.load(v_base + v_off)  # [TILE, D_PAD]
                else:
                    v = tl.load(v_base + v_off, mask=d_ok[None, :], other=0.0)
        if F32_SPLIT:
            k = k.to(tl.float32)
        s = _dot(q, k, F32_SPLIT) * scale  # [G_PAD, TILE]
        if USE_ALIBI:
            s += slopes[:, None] * (offs - seq_len + 1).to(tl.float32)[None, :]
        s = tl.where(t_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        if not EARLY_V and PREFETCH < 2:
            if D_PAD == HEAD_SIZE:
                v = tl.load(v_base + v_off)
            else:
                v = tl.load(v_base + v_off, mask=d_ok[None, :], other=0.0)
        v = tl.where(t_ok[:, None], v, 0.0)
        if F32_SPLIT:
            pv = _dot(p, v.to(tl.float32), F32_SPLIT)
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    l_safe = tl.where(l_i > 0, l_i, 1.0)
    res = acc / l_safe[:, None]
    st_rows = row_ok & part_ok
    to_base = tmp_out_ptr + seq * stride_to_s + heads * stride_to_h
    es_base = exp_sums_ptr + seq * stride_es_s + heads * stride_es_h
    ml_base = max_logits_ptr + seq * stride_ml_s + heads * stride_ml_h
    tl.store(
        to_base[:, None] + part * stride_to_p + d[None, :] * stride_to_d,
        res.to(tmp_out_ptr.dtype.element_ty),
        mask=st_rows[:, None] & d_ok[None, :],
    )
    tl.store(es_base + part * stride_es_p, l_i, mask=st_rows)
    tl.store(ml_base + part * stride_ml_p, m_i, mask=st_rows)
    if FUSED:
        # One launch for short sequences: the last chunk of (sequence, kv head, group
        # chunk) to finish merges every chunk's partial into `out`, found through a
        # counter that it resets to zero (so a CUDA-graph replay starts clean).
        out_rows = out_ptr + seq * stride_os + heads * stride_oh
        n_parts = (seq_len + PART - 1) // PART
        if part_ok:
            tl.debug_barrier()  # every thread's partial is stored before the release
            ctr = counters_ptr + seq * num_hg + hg
            arrived = tl.atomic_add(ctr, 1, sem="acq_rel")
            if arrived == n_parts - 1:
                tl.atomic_xchg(ctr, 0)
                pj = tl.arange(0, P_FUSE)
                pm = row_ok[:, None] & (pj < n_parts)[None, :]
                ml = tl.load(ml_base[:, None] + pj[None, :] * stride_ml_p, mask=pm, other=0.0)
                es = tl.load(es_base[:, None] + pj[None, :] * stride_es_p, mask=pm, other=0.0)
                ml = tl.where(pm, ml, float("-inf"))
                m_all = tl.max(ml, 1)
                m_all = tl.where(m_all > float("-inf"), m_all, 0.0)
                w = tl.where(pm, tl.exp(ml - m_all[:, None]) * es, 0.0)
                total = tl.sum(w, 1)
                total = tl.where(total > 0, total, 1.0)
                merged = tl.zeros([G_PAD, D_PAD], dtype=tl.float32)
                for j in range(0, n_parts):
                    t = tl.load(
                        to_base[:, None] + j * stride_to_p + d[None, :] * stride_to_d,
                        mask=row_ok[:, None] & d_ok[None, :],
                        other=0.0,
                    ).to(tl.float32)
                    wj = tl.sum(tl.where(pj[None, :] == j, w, 0.0), 1)
                    merged += wj[:, None] * t
                tl.store(
                    out_rows[:, None] + d[None, :],
                    (merged / total[:, None]).to(out_ptr.dtype.element_ty),
                    mask=row_ok[:, None] & d_ok[None, :],
                )
        elif part == 0:  # an empty sequence: no chunk arrives, its rows are zero
            tl.store(
                out_rows[:, None] + d[None, :],
                tl.zeros([G_PAD, D_PAD], dtype=out_ptr.dtype.element_ty),
                mask=row_ok[:, None] & d_ok[None, :],
            )


# -- work numbering: which (sequence, chunk) a program owns ----------------------------


@triton.jit
def _compact_item(lens, sidx, num_seqs, item, part_len):
    # (sequence, chunk) of the item-th chunk when every sequence's chunks are numbered back
    # to back (prefix sum of the lengths).  Every sequence has at least one item: an empty
    # one's program writes its zero rows when the merge is fused (no chunk of it arrives
    # at the counter).  Past the last item: the last sequence, a chunk past its end (no
    # work, no stores).
    chunks = tl.maximum((lens + part_len - 1) // part_len, 1)
    ends = tl.cumsum(chunks, 0)
    seq = tl.minimum(tl.sum((ends <= item).to(tl.int32), 0), num_seqs - 1)
    return seq, item - tl.sum(tl.where(sidx < seq, chunks, 0), 0)


@triton.jit
def _balanced_chunk(total, budget, ALIGN: tl.constexpr, MIN_CHUNK: tl.constexpr):
    # Tokens per item so that the whole batch's full items number at most ``budget`` per
    # (kv head, group chunk): the total over ``budget``, rounded up to whole tiles and
    # blocks.  Each sequence adds at most one shorter item, so there are at most
    # budget + sequences items, the host's grid.  Computed on the device from the lengths
    # (no host sync; a captured CUDA graph replays with new lengths).
    per = (total + budget - 1) // budget
    return tl.maximum((per + ALIGN - 1) // ALIGN * ALIGN, MIN_CHUNK)


@triton.jit
def _stream_layout(lens, budget, ALIGN: tl.constexpr, MIN_CHUNK: tl.constexpr):
    # A batch as one stream (STREAM): the lengths padded to whole ALIGN units (so every cut
    # falls on a tile and block boundary of its sequence) and the range length, the same
    # in the partition and the reduce kernel.
    padded = (lens + ALIGN - 1) // ALIGN * ALIGN
    return padded, _balanced_chunk(tl.sum(padded, 0), budget, ALIGN, MIN_CHUNK)


@triton.jit
def _merge_chunk(
    ml_base, es_base, to_base, p, p_ok, in_buf, d, d_ok, stride_ml_p, stride_es_p, stride_to_p,
    stride_to_d, m, den, acc,
):  # fmt: skip
    # One chunk of partials folded into a running (max, exp-sum, weighted sum): an online
    # softmax over partials, one round trip per chunk.  Loads are masked by ``in_buf``
    # (the buffer's size, known before seq_len is), rows past the sequence's partials
    # (never written: junk, maybe NaN) dropped with ``p_ok`` afterwards.
    ml = tl.load(ml_base + p * stride_ml_p, mask=in_buf, other=float("-inf"))
    es = tl.load(es_base + p * stride_es_p, mask=in_buf, other=0.0)
    t = tl.load(
        to_base + p[:, None] * stride_to_p + d[None, :] * stride_to_d,
        mask=in_buf[:, None] & d_ok[None, :],
        other=0.0,
    ).to(tl.float32)
    ml = tl.where(p_ok, ml, float("-inf"))
    t = tl.where(p_ok[:, None], t, 0.0)
    m_new = tl.maximum(m, tl.max(ml, 0))
    m_ref = tl.where(m_new > float("-inf"), m_new, 0.0)
    scale = tl.exp(m - m_ref)
    w = tl.where(p_ok, tl.exp(ml - m_ref) * es, 0.0)
    return m_new, den * scale + tl.sum(w, 0), acc * scale + tl.sum(w[:, None] * t, 0)


# -- the kernels -----------------------------------------------------------------------


@triton.jit
def partition_kernel(
    exp_sums_ptr, max_logits_ptr, tmp_out_ptr, out_ptr, counters_ptr, q_ptr, k_cache_ptr,
    v_cache_ptr, block_tables_ptr, seq_lens_ptr, alibi_ptr, scale, num_seqs, num_kv_heads,
    num_group_chunks, budget, stride_qs, stride_qh, stride_qd, stride_kb, stride_kh,
    stride_kd, stride_kt, stride_kx, stride_vb, stride_vh, stride_vd, stride_vt, stride_bt,
    stride_es_s, stride_es_h, stride_es_p, stride_ml_s, stride_ml_h, stride_ml_p,
    stride_to_s, stride_to_h, stride_to_p, stride_to_d, stride_os, stride_oh,
    QUERIES_PER_KV: tl.constexpr, G_PAD: tl.constexpr, HEAD_SIZE: tl.constexpr,
    D_PAD: tl.constexpr, X: tl.constexpr, BLOCK_SIZE: tl.constexpr, PART: tl.constexpr,
    TILE: tl.constexpr, USE_ALIBI: tl.constexpr, F32_SPLIT: tl.constexpr,
    CONTIG_HINTS: tl.constexpr, EARLY_V: tl.constexpr, PREFETCH: tl.constexpr,
    K_3D: tl.constexpr, FUSED: tl.constexpr, P_FUSE: tl.constexpr, COMPACT: tl.constexpr,
    NS_PAD: tl.constexpr, BALANCED: tl.constexpr, ALIGN: tl.constexpr, STREAM: tl.constexpr,
):  # fmt: skip
    # Grid: (sequences x kv heads x group chunks, chunks of the longest sequence), or with
    # COMPACT one axis over (chunk item, kv head x group chunk) with the items of every
    # sequence numbered back to back (from the lengths' prefix sum): in a ragged batch the
    # programs with work come first, and the ones past the last item exit at once (run
    # v25: 147.1 -> 124.2 us on the 16-sequence ragged batch).
    # BALANCED: the same one axis, but the items' length comes from the lengths' total
    # (_balanced_chunk), so the full items fill ``budget`` programs per (kv head, group
    # chunk) whatever the batch; partials go to slot = item in a buffer of ours.  STREAM
    # (a batch): budget equal ranges of the sequences laid end to end (below).
    num_hg = num_kv_heads * num_group_chunks
    pid = tl.program_id(0)
    hg = pid % num_hg
    if STREAM:
        # The batch's sequences laid end to end (each padded to whole ALIGN units, so every
        # cut falls on a tile and block boundary of its sequence), cut into equal ranges
        # of part_len tokens: one range per program, whatever the lengths.  A range that
        # crosses sequence ends covers one segment of each; segment (range, sequence j)
        # writes slot range + j, so the slots of one sequence are consecutive.
        sidx = tl.arange(0, NS_PAD)
        lens = tl.load(seq_lens_ptr + sidx, mask=sidx < num_seqs, other=0)
        padded, part_len = _stream_layout(lens, budget, ALIGN, PART)
        ends = tl.cumsum(padded, 0)
        starts = ends - padded
        total = tl.sum(padded, 0)
        item = pid // num_hg
        lo = item * part_len
        hi = tl.minimum(lo + part_len, total)  # past the end: no sequence, no work
        first = tl.sum((ends <= lo).to(tl.int32), 0)
        last = tl.sum((starts < hi).to(tl.int32), 0)
        for j in range(first, last):
            seq_start = tl.sum(tl.where(sidx == j, starts, 0), 0)
            seq_len = tl.sum(tl.where(sidx == j, lens, 0), 0)
            start = tl.maximum(lo - seq_start, 0)
            end = tl.minimum(hi - seq_start, seq_len)
            _partition(
                j, item + j, start, end, seq_len, hg // num_group_chunks,
                hg % num_group_chunks, hg, exp_sums_ptr, max_logits_ptr, tmp_out_ptr, out_ptr,
                counters_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr,
                alibi_ptr, scale, num_hg, stride_qs, stride_qh, stride_qd, stride_kb,
                stride_kh, stride_kd, stride_kt, stride_kx, stride_vb, stride_vh, stride_vd,
                stride_vt, stride_bt, stride_es_s, stride_es_h, stride_es_p, stride_ml_s,
                stride_ml_h, stride_ml_p, stride_to_s, stride_to_h, stride_to_p, stride_to_d,
                stride_os, stride_oh,
                QUERIES_PER_KV, G_PAD, HEAD_SIZE, D_PAD, X, BLOCK_SIZE, PART, TILE, USE_ALIBI,
                F32_SPLIT, CONTIG_HINTS, EARLY_V, PREFETCH, K_3D, FUSED, P_FUSE,
            )  # fmt: skip
        return
    if BALANCED and NS_PAD == 1:  # one sequence: item = chunk, no prefix sum
        seq = 0
        seq_len = tl.load(seq_lens_ptr)
        part_len = _balanced_chunk(seq_len, budget, ALIGN, PART)
        part = pid // num_hg
        slot = part
    elif COMPACT or BALANCED:
        sidx = tl.arange(0, NS_PAD)
        lens = tl.load(seq_lens_ptr + sidx, mask=sidx < num_seqs, other=0)
        item = pid // num_hg
        if BALANCED:
            part_len = _balanced_chunk(tl.sum(lens, 0), budget, ALIGN, PART)
            seq, part = _compact_item(lens, sidx, num_seqs, item, part_len)
            slot = item
        else:
            part_len = PART
            seq, part = _compact_item(lens, sidx, num_seqs, item, PART)
            slot = part
        seq_len = tl.sum(tl.where(sidx == seq, lens, 0), 0)
    else:
        seq = pid // num_hg
        part = tl.program_id(1)
        slot = part
        part_len = PART
        seq_len = tl.load(seq_lens_ptr + seq)
    start = part * part_len
    end = tl.minimum(start + part_len, seq_len)
    _partition(
        seq, slot, start, end, seq_len, hg // num_group_chunks, hg % num_group_chunks, hg,
        exp_sums_ptr, max_logits_ptr, tmp_out_ptr, out_ptr, counters_ptr, q_ptr, k_cache_ptr,
        v_cache_ptr, block_tables_ptr, seq_lens_ptr, alibi_ptr, scale, num_hg, stride_qs, stride_qh,
        stride_qd, stride_kb, stride_kh, stride_kd, stride_kt, stride_kx, stride_vb, stride_vh,
        stride_vd, stride_vt, stride_bt, stride_es_s, stride_es_h, stride_es_p, stride_ml_s,
        stride_ml_h, stride_ml_p, stride_to_s, stride_to_h, stride_to_p, stride_to_d, stride_os,
        stride_oh,
        QUERIES_PER_KV, G_PAD, HEAD_SIZE, D_PAD, X, BLOCK_SIZE, PART, TILE, USE_ALIBI,
        F32_SPLIT, CONTIG_HINTS, EARLY_V, PREFETCH, K_3D, FUSED, P_FUSE,
    )  # fmt: skip


@triton.jit
def reduce_kernel(
    out_ptr,
    exp_sums_ptr,
    max_logits_ptr,
    tmp_out_ptr,
    seq_lens_ptr,
    num_seqs,
    budget,
    num_heads,
    max_parts,
    stride_os,
    stride_oh,
    stride_od,
    stride_es_s,
    stride_es_h,
    stride_es_p,
    stride_ml_s,
    stride_ml_h,
    stride_ml_p,
    stride_to_s,
    stride_to_h,
    stride_to_p,
    stride_to_d,
    HEAD_SIZE: tl.constexpr,
    D_BLK: tl.constexpr,
    PART: tl.constexpr,
    P_MAX: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    BALANCED: tl.constexpr,
    ALIGN: tl.constexpr,
    NS_PAD: tl.constexpr,
    STREAM: tl.constexpr,
):
    # One program per (sequence, head, D_BLK slice of the head; reduce_tile): for one
    # sequence many four-warp programs over slices, for a batch one-warp programs over
    # the whole head; short dependent chains (P_MAX partials per load).
    # BALANCED: a sequence's partials are the items first .. first + num_parts - 1 of the
    # partition kernel's numbering, recomputed here from the lengths the same way.
    pid = tl.program_id(0)
    seq = pid // num_heads
    h = pid % num_heads
    d = tl.program_id(1) * D_BLK + tl.arange(0, D_BLK)
    d_ok = d < HEAD_SIZE
    ml_base = max_logits_ptr + seq * stride_ml_s + h * stride_ml_h
    es_base = exp_sums_ptr + seq * stride_es_s + h * stride_es_h
    to_base = tmp_out_ptr + seq * stride_to_s + h * stride_to_h
    if STREAM:  # the ranges that cross this sequence: slots first + seq onwards
        sidx = tl.arange(0, NS_PAD)
        lens = tl.load(seq_lens_ptr + sidx, mask=sidx < num_seqs, other=0)
        padded, part_len = _stream_layout(lens, budget, ALIGN, PART)
        seq_start = tl.sum(tl.where(sidx < seq, padded, 0), 0)
        seq_len = tl.sum(tl.where(sidx == seq, lens, 0), 0)
        first = seq_start // part_len
        num_parts = tl.where(seq_len > 0, (seq_start + seq_len - 1) // part_len - first + 1, 0)
        ml_base += (first + seq) * stride_ml_p
        es_base += (first + seq) * stride_es_p
        to_base += (first + seq) * stride_to_p
        max_parts = num_parts
    elif BALANCED and NS_PAD == 1:  # one sequence: its items are slots 0 .. num_parts - 1
        seq_len = tl.load(seq_lens_ptr)
        part_len = _balanced_chunk(seq_len, budget, ALIGN, PART)
        num_parts = (seq_len + part_len - 1) // part_len
    elif BALANCED:
        sidx = tl.arange(0, NS_PAD)
        lens = tl.load(seq_lens_ptr + sidx, mask=sidx < num_seqs, other=0)
        part_len = _balanced_chunk(tl.sum(lens, 0), budget, ALIGN, PART)
        chunks = tl.maximum((lens + part_len - 1) // part_len, 1)
        first = tl.sum(tl.where(sidx < seq, chunks, 0), 0)
        seq_len = tl.sum(tl.where(sidx == seq, lens, 0), 0)
        num_parts = (seq_len + part_len - 1) // part_len
        ml_base += first * stride_ml_p
        es_base += first * stride_es_p
        to_base += first * stride_to_p
        max_parts = num_parts  # the buffer ends after the last item: no junk to mask
    else:
        seq_len = tl.load(seq_lens_ptr + seq)
        num_parts = (seq_len + PART - 1) // PART

    # P_MAX partials per load: the first load is masked by the buffer's size only, so it
    # goes out with the seq_len load (one round trip); SINGLE_PASS: every partition of
    # any sequence fits in it, otherwise later chunks follow in a loop.
    p = tl.arange(0, P_MAX)
    m = tl.max(tl.zeros([P_MAX], dtype=tl.float32), 0) - float("inf")
    den = tl.sum(tl.zeros([P_MAX], dtype=tl.float32), 0)
    acc = tl.zeros([D_BLK], dtype=tl.float32)
    m, den, acc = _merge_chunk(
        ml_base, es_base, to_base, p, p < num_parts, p < max_parts, d, d_ok, stride_ml_p,
        stride_es_p, stride_to_p, stride_to_d, m, den, acc,
    )  # fmt: skip
    if not SINGLE_PASS:
        for c in range(1, (num_parts + P_MAX - 1) // P_MAX):
            pc = c * P_MAX + p
            ok = pc < num_parts
            m, den, acc = _merge_chunk(
                ml_base, es_base, to_base, pc, ok, ok, d, d_ok, stride_ml_p, stride_es_p,
                stride_to_p, stride_to_d, m, den, acc,
            )  # fmt: skip
    res = acc / tl.where(den > 0, den, 1.0)
    tl.store(
        out_ptr + seq * stride_os + h * stride_oh + d * stride_od,
        res.to(out_ptr.dtype.element_ty),
        mask=d_ok,
    )

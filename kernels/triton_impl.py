"""Triton PagedAttention V2: split-KV chunks + a log-sum-exp reduction.

One program per (sequence, kv head, chunk of tokens): it loads every query head that
shares the kv head (GQA/MQA; rows padded to >= 16 for ``tl.dot``), gathers K/V through
the block table tile by tile, and keeps an online softmax.  Each K/V byte is read once
per kv head.  A chunk is vLLM's 512-token partition, or 256/128 tokens where that fills
the GPU better (``launch_tables.pick_chunk``).  512-token chunks write vLLM's partition
buffers (``tmp_out`` normalized by the partition's own exp-sum, ``exp_sums``,
``max_logits``), smaller ones a per-device scratch buffer of ours in the same layout; a
second kernel reduces them into ``out``.  A batch of several sequences numbers only the
chunks that exist (COMPACT); a short sequence called eagerly is one launch, the last
chunk of each kv head merging the others (FUSED).  Where the config's programs per SM are
known, one sequence is cut into balanced items instead (BALANCED): one item length for
the whole call, computed on the device from the length, so that the items fill one wave
of the GPU; a batch is laid end to end and cut into equal token ranges, a range crossing
sequence ends where it falls there (STREAM), so every program carries the same work
whatever the lengths.

Only Triton 2.1 language features: tl.dot, masked tl.load/tl.store, tl.max/tl.sum,
tl.cumsum, tl.exp, tl.where, tl.arange, tl.zeros, atomics, constexpr.  fp32 caches use a
3-pass bf16 split product (hi*hi + hi*lo + lo*hi), so no TF32/precision keyword is
needed.  One exception, chosen at launch: on Triton >= 3.0 K tiles are loaded in memory
order and permuted (``k3d``; tl.permute/3-D reshape), which keeps each load instruction
on whole cache lines; older Triton gets the 2-D load and launch tables tuned for it.
Launch choices: ``launch_tables.py``; measurements: docs/kernel-notes.md.

A balanced one-launch variant (a fixed grid, partials merged in-kernel in two levels)
was built and measured in session 4 and lost at every shape (run v21); see the notes.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch
import triton
import triton.language as tl

from . import launch_tables
from .call import DecodeCall
from .launch_tables import (  # noqa: F401 - the tables, also read through this module by tune
    DEFAULT_CONFIGS,
    FALLBACK_CONFIG,
    K3D_CONFIGS,
    K3D_MANY_PROGRAMS_CONFIG,
    K3D_WIDE_GROUP_CONFIG,
    K3D_WIDE_GROUP_MANY_CONFIG,
    MANY_PROGRAMS_CONFIG,
    MID_PROGRAMS_CONFIG,
    WIDE_GROUP_CONFIG,
    WIDE_GROUP_MANY_CONFIG,
    LaunchConfig,
    config_override,
    set_config_override,
)
from .log import log
from .signature import PARTITION_SIZE


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
def _pa_v2_partition_kernel(
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


@triton.jit
def _pa_v2_reduce_kernel(
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


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


MAX_GROUP_ROWS = 64
# tl.permute / 3-D reshape arrived in Triton 3.0; older Triton keeps the 2-D K load.
HAS_PERMUTE = hasattr(tl, "permute")
TRITON_MAJOR = int(getattr(triton, "__version__", "0").split(".")[0])
# The reduce kernel loads every partition of a sequence at once (one round trip) up to
# this many partitions; longer sequences loop over chunks.
REDUCE_SINGLE_PASS_MAX = 512
# Values of one reduce load (partials x head columns), and partials per load and warps
# per program in a batch (reduce_tile).
REDUCE_TILE = 4096
REDUCE_BATCH_ROWS = 32
REDUCE_BATCH_WARPS = 1
# One launch (the last chunk of each kv head merges, see _partition) for eager calls on
# sequences of up to FUSE_MAX_PARTITIONS of vLLM's 512-token partitions (chunks stay at
# 512 there), or for any plan of up to FUSE_MAX_CHUNKS chunks (0: only the first rule):
# short sequences, where the host cost of a second launch is most of an eager decode
# call (run v26, 1 x 1024: 25.5 us per call against 47.4 us for two launches).  In a CUDA
# graph, and for longer sequences, the reduce kernel stays: the merging program walks the
# chunks in series (run v25, 1 x 1024 in 8 chunks of 128: 9.4 us fused against 7.6 us
# for two launches per call in a graph; v26, 1 x 2048 in 4 chunks: 28.6 us).
FUSE_MAX_PARTITIONS = 4
FUSE_MAX_CHUNKS = 0
# A batch of more than one sequence launches only the chunks that exist (COMPACT) while its
# lengths fit one vector per program.
COMPACT_MAX_SEQS = 256
_k3d_state = {"disabled": False}
# Relaunch a compiled kernel through its launcher, skipping Triton's per-call argument
# binding (Triton >= 3: the launcher takes every parameter, constexprs included).
_fast = {"enabled": TRITON_MAJOR >= 3}
_MAX_PLANS = 4096
_sm_counts: Dict[Any, int] = {}


def k3d_enabled() -> bool:
    """Whether launches use the k3d K load (and the tables tuned for it)."""
    return HAS_PERMUTE and not _k3d_state["disabled"]


def group_rows(queries_per_kv: int) -> int:
    """Rows of one partition program: its kv head's query heads, padded to a power of two
    >= 16 (``tl.dot``'s minimum) and capped at MAX_GROUP_ROWS (larger groups take several
    programs)."""
    return max(16, min(_next_pow2(queries_per_kv), MAX_GROUP_ROWS))


def pick_config(programs: int, d_pad: int, device: Any = None, g_pad: int = 16) -> LaunchConfig:
    """The tables' choice for this process's load path (k3d or 2-D); ``device`` unused."""
    del device
    return launch_tables.pick_config(programs, d_pad, g_pad, k3d_enabled())


def sm_count(device: Any) -> int:
    """Streaming multiprocessors of a CUDA device; 0 elsewhere (Triton's interpreter on
    CPU tensors), where chunks stay at 512 tokens unless a config asks for less."""
    n = _sm_counts.get(device)
    if n is None:
        n = 0
        if getattr(device, "type", None) == "cuda":
            n = int(torch.cuda.get_device_properties(device).multi_processor_count)
        _sm_counts[device] = n
    return n


class UnsupportedLayout(ValueError):
    """A tensor layout the kernels do not address (the dispatcher falls back to torch)."""


class _Kernel:
    """One kernel of a plan: its grid, arguments' fixed tail and constexprs, and the
    compiled handle once Triton has launched it the normal way."""

    __slots__ = ("fn", "grid", "constexprs", "const_values", "options", "compiled")

    def __init__(self, fn, grid, constexprs, options) -> None:
        self.fn = fn
        self.grid = grid
        self.constexprs = constexprs
        self.const_values = tuple(constexprs.values())
        self.options = options
        self.compiled = None

    def launch(self, args: Tuple[Any, ...]) -> None:
        compiled = self.compiled
        if compiled is not None and _fast["enabled"]:
            try:
                compiled[self.grid](*args, *self.const_values)
                return
            except Exception as exc:  # a launcher of another shape: plain launches from now
                _fast["enabled"] = False
                log.info("vllm-codemod: Triton's compiled-kernel launcher is unusable (%s)", exc)
        handle = self.fn[self.grid](*args, **self.constexprs, **self.options)
        if hasattr(handle, "__getitem__"):
            self.compiled = handle


class _Scratch:
    """Per-device buffers of ours: chunk partials when chunks are smaller than vLLM's
    512-token partitions, and the fused merge's counters.  Grown on demand; a replaced
    buffer is kept alive (a captured CUDA graph may still point at it).  Counters are zero
    at rest (each merge resets its own), so one zeroed buffer serves every shape."""

    def __init__(self) -> None:
        self.partials: Dict[Any, Any] = {}
        self.counters: Dict[Any, Any] = {}
        self.retired: List[Any] = []

    def partial_views(self, like: Any, num_seqs: int, num_heads: int, chunks: int, head: int):
        """``tmp_out``, ``exp_sums``, ``max_logits`` views for ``chunks`` chunks per
        sequence (vLLM's layout), in one buffer per (device, dtype) that at least doubles
        when it grows.  Shared by every plan: calls run in stream order, one at a time."""
        n_out = num_seqs * num_heads * chunks * head
        n_ml = num_seqs * num_heads * chunks
        key = (like.device, like.dtype)
        held = self.partials.get(key)
        if held is None or held[0].numel() < n_out or held[1].numel() < 2 * n_ml:
            old_out, old_ml = (0, 0) if held is None else (held[0].numel(), held[1].numel())
            if held is not None:
                self.retired.append(held)
            held = self.partials[key] = (
                torch.empty(max(n_out, 2 * old_out), dtype=like.dtype, device=like.device),
                torch.empty(max(2 * n_ml, 2 * old_ml), dtype=torch.float32, device=like.device),
            )
        out, ml = held
        tmp = out[:n_out].view(num_seqs, num_heads, chunks, head)
        es = ml[:n_ml].view(num_seqs, num_heads, chunks)
        mx = ml[n_ml : 2 * n_ml].view(num_seqs, num_heads, chunks)
        return tmp, es, mx

    def counter_buffer(self, device: Any, needed: int) -> Optional[Any]:
        """Zeroed counters, or None while a CUDA graph is being captured and the buffer
        would have to grow (a zero-fill captured into the graph would not run now)."""
        held = self.counters.get(device)
        if held is not None and held.numel() >= needed:
            return held
        if getattr(device, "type", None) == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        if held is not None:
            self.retired.append(held)
        held = self.counters[device] = torch.zeros(
            max(needed, 4096), dtype=torch.int32, device=device
        )
        return held


_scratch = _Scratch()


class _Plan:
    """Everything fixed for one (shapes, strides, dtypes, partitions, config): built once,
    so a call only gathers its tensors."""

    __slots__ = ("partition", "reduce", "part_strides", "reduce_strides", "n_gc", "partials")
    __slots__ += ("counters", "config", "budget")

    def __init__(
        self, c: DecodeCall, config: Optional[LaunchConfig], k3d: bool, fusable: bool = False
    ) -> None:
        query, key_cache, value_cache = c.query, c.key_cache, c.value_cache
        out = c.out
        num_seqs, num_heads, head_size = query.shape
        qpk = num_heads // c.num_kv_heads
        d_pad = max(16, _next_pow2(head_size))
        f32_split = key_cache.element_size() == 4
        g_pad = group_rows(qpk)
        if d_pad >= 256 and (f32_split or not k3d):
            # At head 256 the query operand and its layout copies dominate shared memory
            # (fp32's split bf16 query alone fills 64 KB at 64 rows; the 2-D load path of
            # Triton 2.1 needs 53 KB at 32 rows): 16 rows per program, more group chunks.
            g_pad = 16
        n_gc = (qpk + g_pad - 1) // g_pad
        num_hg = c.num_kv_heads * n_gc
        at_max = num_seqs * num_hg * c.num_partitions  # programs with 512-token chunks
        picked = config is None
        if picked:
            config = launch_tables.pick_config(at_max, d_pad, g_pad, k3d)
        # One launch for short sequences called eagerly (FUSE_MAX_PARTITIONS, _fusable), in
        # vLLM's partitions.
        fused = fusable and not config.chunk
        budget = 0
        if fused:
            chunk = PARTITION_SIZE
        else:
            sms = sm_count(query.device)
            balanced = num_seqs <= COMPACT_MAX_SEQS
            if picked and balanced and k3d and not f32_split:
                # The tables' config for a launch that balances, if it then does balance.
                alt = launch_tables.balanced_config(config, g_pad, d_pad, num_seqs)
                if alt != config and launch_tables.balanced_budget(
                    alt, g_pad, d_pad, sms, num_hg, num_seqs
                ):
                    config = alt
            chunk = launch_tables.pick_chunk(at_max, sms, config, g_pad, d_pad)
            if balanced:
                budget = launch_tables.balanced_budget(config, g_pad, d_pad, sms, num_hg, num_seqs)
        self.config = config  # as given or as the tables picked it (for tests, benchmarks)
        if chunk & (chunk - 1) or not 16 <= chunk <= PARTITION_SIZE:
            raise ValueError(f"paged_attention_v2 (Triton): chunk {chunk} is not 16-512, 2^k")
        chunk = max(chunk, c.block_size)  # whole blocks per chunk (the V load's hints)
        n_chunks = (c.max_seq_len + chunk - 1) // chunk
        tile, warps, stages, early_v, prefetch, config_k3d = tuple(config)[:6]
        tile = min(tile, chunk)
        k3d = k3d and bool(config_k3d)
        x = key_cache.shape[4]
        # Shared memory within 48 KB per program (the BI-V100's limit; checked by
        # scripts/check_triton_compile.py on Triton 2.1 and 3.x): the staged dot operands
        # grow with rows x head size and with the tile.
        if f32_split:  # the 3-pass split product stages hi and lo halves of each operand
            tile = min(tile, 16 if g_pad >= 64 or d_pad >= 256 else 32 if g_pad >= 32 else 64)
        elif g_pad >= 64 and d_pad >= 256:
            tile = min(tile, 16)
        elif g_pad >= 32 and not k3d:  # Triton 2.1's 2-D load: 49408 bytes at 32 x 64
            tile = min(tile, 32)
        align = max(tile, c.block_size)
        stream = bool(budget) and num_seqs > 1 and launch_tables.BALANCED_STREAM
        if budget:
            # Items of a length chosen on the device (>= chunk, whole tiles and blocks),
            # at most budget + sequences of them; their partials in a buffer of ours,
            # slot = item, shared by every sequence (stride 0).
            chunk = max(launch_tables.BALANCED_MIN_CHUNK, align)
            n_items = budget + num_seqs
            tmp_out, exp_sums, max_logits = (
                t.expand(num_seqs, *t.shape[1:])
                for t in _scratch.partial_views(c.tmp_out, 1, num_heads, n_items, head_size)
            )
            self.partials = (exp_sums, max_logits, tmp_out)
            # A sequence's items: <= budget (its length / chunk <= total / chunk); a
            # stream's ranges may start inside it, one more.
            n_chunks = min(budget, -(-c.max_seq_len // chunk) + stream)
            max_parts = n_chunks
        elif chunk == PARTITION_SIZE:  # vLLM's own partition buffers
            tmp_out, exp_sums, max_logits = c.tmp_out, c.exp_sums, c.max_logits
            max_parts = min(exp_sums.shape[2], max_logits.shape[2], tmp_out.shape[2])
            self.partials: Optional[tuple] = None
        else:
            tmp_out, exp_sums, max_logits = _scratch.partial_views(
                c.tmp_out, num_seqs, num_heads, n_chunks, head_size
            )
            max_parts = n_chunks
            self.partials = (exp_sums, max_logits, tmp_out)
        fused = (fused or n_chunks <= FUSE_MAX_CHUNKS) and not budget
        counters = _scratch.counter_buffer(query.device, num_seqs * num_hg) if fused else None
        fused = counters is not None
        self.counters = counters
        compact = 1 < num_seqs <= COMPACT_MAX_SEQS and not budget
        if stream:
            grid = (num_hg * budget, 1, 1)
        elif budget:
            grid = (num_hg * (budget + num_seqs), 1, 1)
        elif compact:  # sequences x chunks of the longest (>= 1): an upper bound of the items
            grid = (num_hg * num_seqs * max(n_chunks, 1), 1, 1)
        else:
            grid = (num_seqs * num_hg, n_chunks, 1)
        # The lengths' vector of the compact and balanced grids; 1: one sequence, no vector.
        ns_pad = 1 if num_seqs == 1 else max(2, _next_pow2(num_seqs))
        ks, vs = key_cache.stride(), value_cache.stride()
        # Contiguity hints hold for vLLM's dense cache layouts: x elements contiguous in K,
        # block_size tokens contiguous in V, every block/head/row start aligned to them.
        hints = (
            ks[4] == 1
            and all(v % x == 0 for v in ks[:4])
            and vs[3] == 1
            and all(v % c.block_size == 0 for v in vs[:3])
        )
        self.n_gc = n_gc
        self.budget = budget
        self.part_strides = (num_seqs, c.num_kv_heads, n_gc, max(budget, 1))
        self.part_strides += tuple(query.stride())
        self.part_strides += tuple(ks) + tuple(vs) + (c.block_tables.stride(0),)
        self.part_strides += tuple(exp_sums.stride()) + tuple(max_logits.stride())
        self.part_strides += tuple(tmp_out.stride()) + tuple(out.stride()[:2])
        self.partition = _Kernel(
            _pa_v2_partition_kernel,
            grid,
            dict(
                QUERIES_PER_KV=qpk,
                G_PAD=g_pad,
                HEAD_SIZE=head_size,
                D_PAD=d_pad,
                X=x,
                BLOCK_SIZE=c.block_size,
                PART=chunk,
                TILE=tile,
                USE_ALIBI=c.alibi_slopes is not None,
                F32_SPLIT=f32_split,
                CONTIG_HINTS=hints,
                EARLY_V=bool(early_v),
                PREFETCH=int(prefetch),
                K_3D=k3d,
                FUSED=fused,
                P_FUSE=max(2, _next_pow2(n_chunks)) if fused else 2,
                COMPACT=compact,
                NS_PAD=ns_pad,
                BALANCED=bool(budget),
                ALIGN=align,
                STREAM=stream,
            ),
            dict(num_warps=warps, num_stages=stages),
        )
        if fused:
            self.reduce = None
            return
        p_rows, d_blk, single, r_warps = reduce_tile(num_seqs, n_chunks, d_pad)
        self.reduce_strides = (num_seqs, max(budget, 1), num_heads, max_parts)
        self.reduce_strides += tuple(out.stride())
        self.reduce_strides += tuple(exp_sums.stride()) + tuple(max_logits.stride())
        self.reduce_strides += tuple(tmp_out.stride())
        self.reduce = _Kernel(
            _pa_v2_reduce_kernel,
            (num_seqs * num_heads, d_pad // d_blk, 1),
            dict(
                HEAD_SIZE=head_size,
                D_BLK=d_blk,
                PART=chunk,
                P_MAX=p_rows,
                SINGLE_PASS=single,
                BALANCED=bool(budget),
                ALIGN=align,
                NS_PAD=ns_pad,
                STREAM=stream,
            ),
            dict(num_warps=r_warps),
        )


_plans: Dict[tuple, _Plan] = {}


def reduce_tile(num_seqs: int, n_chunks: int, d_pad: int) -> Tuple[int, int, bool, int]:
    """(partials per load, head columns per program, whether one load covers every
    partition, warps) of the reduce kernel for ``n_chunks`` partitions at most per
    sequence.

    One sequence: four-warp programs over 16- or 32-column slices of each head, every
    partition in one load up to REDUCE_SINGLE_PASS_MAX (many programs, one round trip).
    A batch: one-warp programs per (sequence, head) over the whole head where REDUCE_TILE
    values allow, at most REDUCE_BATCH_ROWS partials per load, longer sequences looping.
    Runs v35-v37 (H200): the reduce of the ragged batch took 9.8 us and 64 x 4K 10.8-12.4
    us with four-warp programs (per slice, or per head), 5.9 and 3.0 us with this; one
    sequence's four-warp slices 2.8 us at 1 x 32K against 4.0 us on one warp.
    """
    if num_seqs == 1:
        d_blk = min(32 if n_chunks <= 256 else 16, d_pad)
        if n_chunks <= REDUCE_SINGLE_PASS_MAX:
            return max(16, _next_pow2(n_chunks)), d_blk, True, 4
        return REDUCE_TILE // d_blk, d_blk, False, 4
    rows = max(2, min(_next_pow2(n_chunks), REDUCE_BATCH_ROWS))
    if n_chunks > REDUCE_SINGLE_PASS_MAX:  # a cap on a batch's load too (tests force loops)
        rows = min(rows, max(2, _next_pow2(REDUCE_SINGLE_PASS_MAX)))
    d_blk = min(d_pad, max(16, REDUCE_TILE // rows))
    return rows, d_blk, n_chunks <= min(rows, REDUCE_SINGLE_PASS_MAX), REDUCE_BATCH_WARPS


def _plan_key(c: DecodeCall, config: Optional[LaunchConfig], k3d: bool) -> tuple:
    # Everything a plan and Triton's specialization depend on: shapes, strides, dtypes,
    # devices, partitions, and the data pointers' 16-byte alignment.
    q, kc = c.query, c.key_cache
    ptrs = q.data_ptr() | kc.data_ptr() | c.value_cache.data_ptr() | c.out.data_ptr()
    ptrs |= c.exp_sums.data_ptr() | c.max_logits.data_ptr() | c.tmp_out.data_ptr()
    return (
        q.shape,
        q.stride(),
        q.dtype,
        q.device,
        kc.shape,
        kc.stride(),
        kc.dtype,
        c.value_cache.stride(),
        c.out.stride(),
        c.tmp_out.shape,
        c.tmp_out.stride(),
        c.exp_sums.shape,
        c.exp_sums.stride(),
        c.max_logits.stride(),
        c.block_tables.stride(0),
        c.seq_lens.dtype,
        c.num_kv_heads,
        # The chunk count (grid, fused merge) follows the length at the finest chunk.
        -(-c.max_seq_len // (config.chunk if config and config.chunk else launch_tables.MIN_CHUNK)),
        c.alibi_slopes is None,
        config,
        k3d,
        ptrs & 15,
    )


def _fusable(c: DecodeCall) -> bool:
    """Whether this call may take the one-launch plan: a short sequence, launched eagerly.
    Inside a CUDA graph launches cost nothing on the host and the two-launch plan's
    smaller chunks win on the GPU (run v26), so a captured call never fuses."""
    if c.num_partitions > FUSE_MAX_PARTITIONS:
        return False
    if not c.query.is_cuda:
        return True
    return not torch.cuda.is_current_stream_capturing()


def _launch(c: DecodeCall, config: Optional[LaunchConfig], k3d: bool) -> None:
    fusable = _fusable(c)
    key = _plan_key(c, config, k3d) + (fusable,)
    plan = _plans.get(key)
    if plan is None:
        if c.query.stride(2) != 1 or c.out.stride(2) != 1:
            raise UnsupportedLayout("paged_attention_v2 (Triton): query/out rows must be dense")
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        plan = _plans[key] = _Plan(c, config, k3d, fusable)
    seq_lens = c.seq_lens
    alibi = c.alibi_slopes if c.alibi_slopes is not None else seq_lens  # unused pointer
    partials = plan.partials
    if partials is None:
        partials = (c.exp_sums, c.max_logits, c.tmp_out)
    counters = plan.counters if plan.counters is not None else c.out  # unused if not fused
    plan.partition.launch(
        partials + (c.out, counters, c.query, c.key_cache, c.value_cache, c.block_tables)
        + (seq_lens, alibi, c.scale)
        + plan.part_strides
    )  # fmt: skip
    if plan.reduce is not None:
        plan.reduce.launch((c.out,) + partials + (seq_lens,) + plan.reduce_strides)


def run(c: DecodeCall, config: Optional[LaunchConfig] = None) -> None:
    """vLLM's paged_attention_v2 on CUDA tensors: partition kernel, then reduce kernel.

    The first call for a plan goes through Triton's normal launch, which binds and
    specializes every argument; later calls reuse the compiled kernels through their
    launchers (Triton >= 3), skipping that per-call work.  Pointer alignment, strides and
    shapes are part of the plan key, so a reused kernel is always the one Triton would
    have picked itself.

    On Triton >= 3.0 the k3d kernels go first; if they fail to compile or launch (a vendor
    Triton that has tl.permute but cannot lower it) the call is retried once with the 2-D K
    load and the tables tuned for it, and if that works k3d stays off for the rest of the
    process (one log line).  A failure of both is raised (the dispatcher then falls back
    to the PyTorch path).
    """
    if config is None:
        config = config_override()
    if not k3d_enabled():
        _launch(c, config, False)
        return
    try:
        _launch(c, config, True)
    except UnsupportedLayout:
        raise
    except Exception as exc:
        _k3d_state["disabled"] = True
        try:
            _launch(c, config, False)
        except Exception:
            _k3d_state["disabled"] = False  # not k3d's fault: leave it on for other calls
            raise
        log.warning(
            "vllm-codemod paged_attention_v2: the k3d Triton kernel failed (%s: %s); using "
            "the 2-D K load from now on",
            type(exc).__name__,
            str(exc)[:200],
        )

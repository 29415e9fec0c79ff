"""Triton PagedAttention V2: split-KV partitions of 512 tokens + a log-sum-exp reduction.

One program per (sequence, kv head, partition): it loads every query head that shares
the kv head (GQA/MQA; rows padded to >= 16 for ``tl.dot``), gathers K/V through the
block table tile by tile, and keeps an online softmax.  Each K/V byte is read once per
kv head.  It writes vLLM's partition buffers (``tmp_out`` normalized by the partition's
own exp-sum, ``exp_sums``, ``max_logits``); a second kernel reduces them into ``out``.

Only Triton 2.1 language features: tl.dot, masked tl.load/tl.store, tl.max/tl.sum,
tl.exp, tl.where, tl.arange, tl.zeros, constexpr.  fp32 caches use a 3-pass bf16
split product (hi*hi + hi*lo + lo*hi), so no TF32/precision keyword is needed.  One
exception, chosen at launch: on Triton >= 3.0 K tiles are loaded in memory order and
permuted (``k3d``; tl.permute/3-D reshape), which keeps each load instruction on whole
cache lines; older Triton gets the 2-D load and launch tables tuned for it.  Launch
choices (``LaunchConfig``) and their measurements: docs/kernel-notes.md.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, NamedTuple, Optional, Sequence

import torch
import triton
import triton.language as tl

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
def _pa_v2_partition_kernel(
    exp_sums_ptr,
    max_logits_ptr,
    tmp_out_ptr,
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    alibi_ptr,
    scale,
    num_kv_heads,
    num_group_chunks,
    stride_qs,
    stride_qh,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kd,
    stride_kt,
    stride_kx,
    stride_vb,
    stride_vh,
    stride_vd,
    stride_vt,
    stride_bt,
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
    QUERIES_PER_KV: tl.constexpr,
    G_PAD: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    D_PAD: tl.constexpr,
    X: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    PART: tl.constexpr,
    TILE: tl.constexpr,
    USE_ALIBI: tl.constexpr,
    F32_SPLIT: tl.constexpr,
    CONTIG_HINTS: tl.constexpr,
    EARLY_V: tl.constexpr,
    STORE_ALL: tl.constexpr,
    PREFETCH: tl.constexpr,
    K_3D: tl.constexpr,
):
    pid = tl.program_id(0)
    part = tl.program_id(1)
    gc = pid % num_group_chunks
    seq_kvh = pid // num_group_chunks
    seq = seq_kvh // num_kv_heads
    kvh = seq_kvh % num_kv_heads

    seq_len = tl.load(seq_lens_ptr + seq)
    start = part * PART
    end = tl.minimum(start + PART, seq_len)
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
    if STORE_ALL:  # split scratch: empty sub-partitions write m=-inf, l=0, out=0 too
        st_rows = row_ok
    else:
        st_rows = row_ok & part_ok
    to_ptrs = (
        tmp_out_ptr
        + seq * stride_to_s
        + heads[:, None] * stride_to_h
        + part * stride_to_p
        + d[None, :] * stride_to_d
    )
    tl.store(to_ptrs, res.to(tmp_out_ptr.dtype.element_ty), mask=st_rows[:, None] & d_ok[None, :])
    tl.store(
        exp_sums_ptr + seq * stride_es_s + heads * stride_es_h + part * stride_es_p,
        l_i,
        mask=st_rows,
    )
    tl.store(
        max_logits_ptr + seq * stride_ml_s + heads * stride_ml_h + part * stride_ml_p,
        m_i,
        mask=st_rows,
    )


@triton.jit
def _max_of(base, stride, n, P_MAX: tl.constexpr):
    # The largest of n fp32 values (one partition's max logit each), P_MAX per load.
    m_vec = tl.zeros([P_MAX], dtype=tl.float32) - float("inf")
    for c in range(0, (n + P_MAX - 1) // P_MAX):
        i = c * P_MAX + tl.arange(0, P_MAX)
        m_vec = tl.maximum(m_vec, tl.load(base + i * stride, mask=i < n, other=float("-inf")))
    return tl.max(m_vec, 0)


@triton.jit
def _pa_v2_reduce_kernel(
    out_ptr,
    exp_sums_ptr,
    max_logits_ptr,
    tmp_out_ptr,
    seq_lens_ptr,
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
    P_CHUNK: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    # One program per (sequence, head, D_BLK slice of the head): many programs even for
    # one sequence, and short dependent chains (the max over partitions in one load).
    pid = tl.program_id(0)
    seq = pid // num_heads
    h = pid % num_heads
    d = tl.program_id(1) * D_BLK + tl.arange(0, D_BLK)
    d_ok = d < HEAD_SIZE
    seq_len = tl.load(seq_lens_ptr + seq)
    num_parts = (seq_len + PART - 1) // PART
    ml_base = max_logits_ptr + seq * stride_ml_s + h * stride_ml_h
    es_base = exp_sums_ptr + seq * stride_es_s + h * stride_es_h
    to_base = tmp_out_ptr + seq * stride_to_s + h * stride_to_h

    if SINGLE_PASS:
        # Every partition fits in P_MAX: the three loads are masked by the buffers' size,
        # not by seq_len, so they go out together with the seq_len load (one round trip);
        # partitions past the sequence's end (never written: junk, maybe NaN) are dropped
        # with `where` afterwards.
        p = tl.arange(0, P_MAX)
        in_buf = p < max_parts
        ml = tl.load(ml_base + p * stride_ml_p, mask=in_buf, other=float("-inf"))
        es = tl.load(es_base + p * stride_es_p, mask=in_buf, other=0.0)
        t = tl.load(
            to_base + p[:, None] * stride_to_p + d[None, :] * stride_to_d,
            mask=in_buf[:, None] & d_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        p_ok = p < num_parts
        ml = tl.where(p_ok, ml, float("-inf"))
        t = tl.where(p_ok[:, None], t, 0.0)
        w = tl.where(p_ok, tl.exp(ml - tl.max(ml, 0)) * es, 0.0)
        total = tl.sum(w, 0)
        total = tl.where(total > 0, total, 1.0)
        res = tl.sum(w[:, None] * t, 0) / total
    else:
        m_all = _max_of(ml_base, stride_ml_p, num_parts, P_MAX)

        den = tl.zeros([P_CHUNK], dtype=tl.float32)
        acc = tl.zeros([P_CHUNK, D_BLK], dtype=tl.float32)
        for c in range(0, (num_parts + P_CHUNK - 1) // P_CHUNK):
            p = c * P_CHUNK + tl.arange(0, P_CHUNK)
            p_ok = p < num_parts
            ml = tl.load(ml_base + p * stride_ml_p, mask=p_ok, other=float("-inf"))
            es = tl.load(es_base + p * stride_es_p, mask=p_ok, other=0.0)
            w = tl.where(p_ok, tl.exp(ml - m_all) * es, 0.0)
            den += w
            t = tl.load(
                to_base + p[:, None] * stride_to_p + d[None, :] * stride_to_d,
                mask=p_ok[:, None] & d_ok[None, :],
                other=0.0,
            ).to(tl.float32)
            acc += w[:, None] * t
        total = tl.sum(den, 0)
        total = tl.where(total > 0, total, 1.0)
        res = tl.sum(acc, 0) / total
    tl.store(
        out_ptr + seq * stride_os + h * stride_oh + d * stride_od,
        res.to(out_ptr.dtype.element_ty),
        mask=d_ok,
    )


@triton.jit
def _pa_v2_fold_reduce_kernel(
    out_ptr,
    exp_sums_ptr,
    max_logits_ptr,
    tmp_out_ptr,
    sub_es_ptr,
    sub_ml_ptr,
    sub_to_ptr,
    seq_lens_ptr,
    num_heads,
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
    stride_ss_s,
    stride_ss_h,
    stride_ss_p,
    stride_st_s,
    stride_st_h,
    stride_st_p,
    stride_st_d,
    HEAD_SIZE: tl.constexpr,
    D_BLK: tl.constexpr,
    PART: tl.constexpr,
    SPLIT: tl.constexpr,
    P_MAX: tl.constexpr,
    P_CHUNK: tl.constexpr,
):
    # Split path: SPLIT sub-partitions per 512-token partition sit in the scratch buffers
    # (same layout as vLLM's, PART // SPLIT tokens each; empty ones hold m=-inf, l=0).
    # Fold each group into vLLM's partition buffers (tmp_out normalized by the
    # partition's own exp-sum) and reduce the partitions into out, in one pass.
    pid = tl.program_id(0)
    seq = pid // num_heads
    h = pid % num_heads
    d_blk = tl.program_id(1)
    d = d_blk * D_BLK + tl.arange(0, D_BLK)
    d_ok = d < HEAD_SIZE
    seq_len = tl.load(seq_lens_ptr + seq)
    num_parts = (seq_len + PART - 1) // PART
    num_subs = num_parts * SPLIT
    sml_base = sub_ml_ptr + seq * stride_ss_s + h * stride_ss_h
    ses_base = sub_es_ptr + seq * stride_ss_s + h * stride_ss_h
    sto_base = sub_to_ptr + seq * stride_st_s + h * stride_st_h
    ml_base = max_logits_ptr + seq * stride_ml_s + h * stride_ml_h
    es_base = exp_sums_ptr + seq * stride_es_s + h * stride_es_h
    to_base = tmp_out_ptr + seq * stride_to_s + h * stride_to_h

    m_all = _max_of(sml_base, stride_ss_p, num_subs, P_MAX)

    den = tl.zeros([P_CHUNK], dtype=tl.float32)
    acc = tl.zeros([P_CHUNK, D_BLK], dtype=tl.float32)
    for c in range(0, (num_parts + P_CHUNK - 1) // P_CHUNK):
        p = c * P_CHUNK + tl.arange(0, P_CHUNK)
        p_ok = p < num_parts
        m_p = tl.zeros([P_CHUNK], dtype=tl.float32) - float("inf")
        for s in range(0, SPLIT):
            ml = tl.load(sml_base + (p * SPLIT + s) * stride_ss_p, mask=p_ok, other=float("-inf"))
            m_p = tl.maximum(m_p, ml)
        m_p = tl.where(p_ok, m_p, 0.0)  # finite wherever p_ok: sub 0 is never empty
        l_p = tl.zeros([P_CHUNK], dtype=tl.float32)
        a_p = tl.zeros([P_CHUNK, D_BLK], dtype=tl.float32)
        for s in range(0, SPLIT):
            sub = p * SPLIT + s
            ml = tl.load(sml_base + sub * stride_ss_p, mask=p_ok, other=float("-inf"))
            es = tl.load(ses_base + sub * stride_ss_p, mask=p_ok, other=0.0)
            w_s = tl.where(p_ok, tl.exp(ml - m_p) * es, 0.0)
            t = tl.load(
                sto_base + sub[:, None] * stride_st_p + d[None, :] * stride_st_d,
                mask=p_ok[:, None] & d_ok[None, :],
                other=0.0,
            ).to(tl.float32)
            l_p += w_s
            a_p += w_s[:, None] * t
        t_p = a_p / tl.where(l_p > 0, l_p, 1.0)[:, None]
        tl.store(
            to_base + p[:, None] * stride_to_p + d[None, :] * stride_to_d,
            t_p.to(tmp_out_ptr.dtype.element_ty),
            mask=p_ok[:, None] & d_ok[None, :],
        )
        first = p_ok & (d_blk == 0)
        tl.store(es_base + p * stride_es_p, l_p, mask=first)
        tl.store(ml_base + p * stride_ml_p, m_p, mask=first)
        w = tl.where(p_ok, tl.exp(m_p - m_all) * l_p, 0.0)
        den += w
        acc += w[:, None] * t_p
    total = tl.sum(den, 0)
    total = tl.where(total > 0, total, 1.0)
    res = tl.sum(acc, 0) / total
    tl.store(
        out_ptr + seq * stride_os + h * stride_oh + d * stride_od,
        res.to(out_ptr.dtype.element_ty),
        mask=d_ok,
    )


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


class LaunchConfig(NamedTuple):
    """How the partition kernel is launched.

    tile: tokens per loop step; warps/stages: Triton's num_warps/num_stages; early_v: issue
    the V load before the QK product; split: programs per 512-token partition (> 1 = the
    split path); prefetch: 0 none, 1 block ids one tile ahead, 2 block ids and K/V one
    tile ahead (register double buffer); k3d: load K tiles in memory order, whole lines per
    load instruction (Triton >= 3.0; older Triton keeps the 2-D load).
    """

    tile: int
    warps: int
    stages: int
    early_v: bool = True
    split: int = 1
    prefetch: int = 0
    k3d: bool = False


# Launch configs, picked from CUDA-graph-timed runs on an H200 (docs/kernel-notes.md).
# Programs = seqs * kv_heads * partitions; tables keyed by padded head size.
#
# Triton >= 3.0 (K tiles loaded in memory order, runs v8-v9): (64,2,1) below 4096
# programs (one 100K sequence: 124.4 us, one 32K sequence: 52.0 us), 32-token tiles on one
# warp with block ids prefetched from 4096 programs on (8x32K: 264.9 us, 64x4K: 270.9 us),
# (32,4,1) + block-id prefetch at head 256 (73.5 us).
K3D_CONFIGS: Dict[int, LaunchConfig] = {
    32: LaunchConfig(64, 2, 1, True, k3d=True),
    64: LaunchConfig(64, 2, 1, True, k3d=True),
    128: LaunchConfig(64, 2, 1, True, k3d=True),
    256: LaunchConfig(32, 4, 1, True, prefetch=1, k3d=True),
}
K3D_MANY_PROGRAMS = 4096
K3D_MANY_PROGRAMS_CONFIG = LaunchConfig(32, 1, 1, True, prefetch=1, k3d=True)
# 64 rows per program (33-64+ query heads per kv head: MQA models), head <= 128: four warps
# spread the [64, D] accumulator; the 1-2 warp configs above spill there (run v18: 3.5x
# faster at 128 x 16K tokens, 1.3-1.7x at 1024 and 196 programs).
K3D_WIDE_GROUP_CONFIG = LaunchConfig(64, 4, 1, True, k3d=True)
K3D_WIDE_GROUP_MANY_CONFIG = LaunchConfig(32, 4, 1, True, prefetch=1, k3d=True)
#
# Older Triton (2-D K load; runs v4-v6): few warps and 1-2 stages let more programs share
# an SM.
DEFAULT_CONFIGS: Dict[int, LaunchConfig] = {
    32: LaunchConfig(64, 2, 1, True),
    64: LaunchConfig(64, 2, 1, True),
    128: LaunchConfig(64, 2, 1, True),
    256: LaunchConfig(32, 2, 1, True),
}
FALLBACK_CONFIG = LaunchConfig(32, 2, 1, True)
# Enough programs to fill the GPU several times over: 16-token tiles, one warp each.
MANY_PROGRAMS = 1024
MANY_PROGRAMS_CONFIG = LaunchConfig(16, 1, 2, True)
# Between MANY_PROGRAMS and this (e.g. one 100K sequence, 8 kv heads: 1568 programs) one
# stage without the early V load measured 5% faster (v5: 135.4 vs 142.9 us); from about
# 4096 programs on it is 7% slower, so it stops there (docs/kernel-notes.md, v5/v6).
MID_PROGRAMS_LIMIT = 4096
MID_PROGRAMS_CONFIG = LaunchConfig(16, 1, 1, False)
# 64 rows per program, head <= 128: four warps (run v19, 2-D loads on an H200: 2.1-2.3x
# faster than the configs above at 1024 and 4096 programs, 2x at 196).  The same row count
# switches the k3d table to K3D_WIDE_GROUP_*.
WIDE_GROUP_ROWS = 64
WIDE_GROUP_CONFIG = LaunchConfig(64, 4, 1, True)
WIDE_GROUP_MANY_CONFIG = LaunchConfig(32, 4, 1, True)
# Split path: with fewer than SPLIT_BELOW_PROGRAMS_PER_SM * (SM count) programs, each
# 512-token partition is computed by `split` programs (PART / split tokens each) into a
# scratch buffer, then folded into vLLM's partition buffers and reduced in one kernel.
# 0 disables it: off, since on an H200 (run v5) no split config beat the unsplit defaults
# by more than 1% at any benchmark shape; kept, GPU-tested, for other GPUs (fewer SMs,
# other latencies).  Keyed by padded head size.
SPLIT_BELOW_PROGRAMS_PER_SM = 0
SPLIT_CONFIGS: Dict[int, LaunchConfig] = {
    d: LaunchConfig(32, 2, 1, True, split=2) for d in (32, 64, 128, 256)
}
# The reduce kernel loads every partition of a sequence at once (one round trip) up to
# this many partitions (256 x 512 = 128K tokens); longer sequences loop over chunks.
REDUCE_SINGLE_PASS_MAX = 256
_config_override: Optional[LaunchConfig] = None
_use_hints = True
_sm_counts: Dict[int, int] = {}
MAX_GROUP_ROWS = 64
# tl.permute / 3-D reshape arrived in Triton 3.0; older Triton keeps the 2-D K load.
HAS_PERMUTE = hasattr(tl, "permute")
_k3d_state = {"disabled": False}


def k3d_enabled() -> bool:
    """Whether launches use the k3d K load (and the tables tuned for it)."""
    return HAS_PERMUTE and not _k3d_state["disabled"]


def set_config_override(config: Optional[Sequence]) -> None:
    """Force a launch config (a LaunchConfig or a tuple of 3-6 of its fields) for every
    launch; None restores the defaults."""
    global _config_override
    _config_override = None if config is None else LaunchConfig(*config)


def _sm_count(device: torch.device) -> int:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    n = _sm_counts.get(idx)
    if n is None:
        n = _sm_counts[idx] = int(torch.cuda.get_device_properties(idx).multi_processor_count)
    return n


def group_rows(queries_per_kv: int) -> int:
    """Rows of one partition program: its kv head's query heads, padded to a power of two
    >= 16 (``tl.dot``'s minimum) and capped at MAX_GROUP_ROWS (larger groups take several
    programs)."""
    return max(16, min(_next_pow2(queries_per_kv), MAX_GROUP_ROWS))


def pick_config(
    programs: int, d_pad: int, device: Optional[torch.device] = None, g_pad: int = 16
) -> LaunchConfig:
    """The launch config for ``programs`` partition programs at padded head size ``d_pad``
    with ``g_pad`` rows (query heads per kv head, padded) per program."""
    if _config_override is not None:
        return _config_override
    if (
        SPLIT_BELOW_PROGRAMS_PER_SM > 0
        and d_pad in SPLIT_CONFIGS
        and device is not None
        and device.type == "cuda"
        and programs < SPLIT_BELOW_PROGRAMS_PER_SM * _sm_count(device)
    ):
        return SPLIT_CONFIGS[d_pad]
    if k3d_enabled():
        if g_pad >= WIDE_GROUP_ROWS and d_pad <= 128:
            many = programs >= K3D_MANY_PROGRAMS
            return K3D_WIDE_GROUP_MANY_CONFIG if many else K3D_WIDE_GROUP_CONFIG
        if programs >= K3D_MANY_PROGRAMS and d_pad <= 128:
            return K3D_MANY_PROGRAMS_CONFIG
        return K3D_CONFIGS.get(d_pad, FALLBACK_CONFIG._replace(k3d=True))
    if g_pad >= WIDE_GROUP_ROWS and d_pad <= 128:
        return WIDE_GROUP_MANY_CONFIG if programs >= MANY_PROGRAMS else WIDE_GROUP_CONFIG
    if MANY_PROGRAMS <= programs < MID_PROGRAMS_LIMIT and d_pad <= 128:
        return MID_PROGRAMS_CONFIG
    if programs >= MANY_PROGRAMS and d_pad <= 128:
        return MANY_PROGRAMS_CONFIG
    return DEFAULT_CONFIGS.get(d_pad, FALLBACK_CONFIG)


def paged_attention_v2_triton(*args: Any, **kwargs: Any) -> None:
    """vLLM's paged_attention_v2 on CUDA tensors (arguments already normalized).

    On Triton >= 3.0 the k3d kernels go first; if they fail to compile or launch (a vendor
    Triton that has tl.permute but cannot lower it) the call is retried once with the 2-D K
    load and the launch tables tuned for it, and if that works k3d stays off for the rest
    of the process (one warning).  A failure of both is raised (the dispatcher then falls
    back to the PyTorch path).  Arguments: those of ``_launch``.
    """
    if not k3d_enabled():
        _launch(*args, **kwargs)
        return
    try:
        _launch(*args, **kwargs)
    except Exception as exc:
        _k3d_state["disabled"] = True
        try:
            _launch(*args, **kwargs)
        except Exception:
            _k3d_state["disabled"] = False  # not k3d's fault: leave it on for other calls
            raise
        warnings.warn(
            "vllm-codemod paged_attention_v2: the k3d Triton kernel failed "
            f"({type(exc).__name__}: {str(exc)[:200]}); using the 2-D K load from now on",
            RuntimeWarning,
            stacklevel=2,
        )


def _launch(
    out: torch.Tensor,
    exp_sums: torch.Tensor,
    max_logits: torch.Tensor,
    tmp_out: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    num_kv_heads: int,
    scale: float,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    max_seq_len: int,
    alibi_slopes: Optional[torch.Tensor] = None,
) -> None:
    num_seqs, num_heads, head_size = query.shape
    qpk = num_heads // num_kv_heads
    g_pad = group_rows(qpk)
    n_gc = (qpk + g_pad - 1) // g_pad
    d_pad = max(16, _next_pow2(head_size))
    x = key_cache.shape[4]
    num_parts = (max_seq_len + PARTITION_SIZE - 1) // PARTITION_SIZE
    programs = num_seqs * num_kv_heads * n_gc * num_parts
    tile, warps, stages, early_v, split, prefetch, k3d = pick_config(
        programs, d_pad, query.device, g_pad
    )
    split = max(1, int(split))
    # Sub-partitions must hold whole blocks (the contiguity hints and the block-granular
    # table loads assume tiles never straddle a sub-partition start mid-block).
    while split > 1 and (PARTITION_SIZE // split) % block_size:
        split //= 2
    part = PARTITION_SIZE // split
    tile = min(tile, part)
    f32_split = key_cache.dtype == torch.float32
    if f32_split:
        tile = min(tile, 64)
    if seq_lens.dtype not in (torch.int32, torch.int64):
        seq_lens = seq_lens.to(torch.int32)
    use_alibi = alibi_slopes is not None
    if use_alibi and alibi_slopes.dtype != torch.float32:
        alibi_slopes = alibi_slopes.to(torch.float32)
    alibi_arg = alibi_slopes if use_alibi else seq_lens  # dummy pointer when unused
    ks, vs = key_cache.stride(), value_cache.stride()
    # Contiguity hints hold for vLLM's dense cache layouts: x elements contiguous in K,
    # block_size tokens contiguous in V, every block/head/row start aligned to them.
    hints = _use_hints and (
        ks[4] == 1
        and all(v % x == 0 for v in (ks[0], ks[1], ks[2], ks[3]))
        and vs[3] == 1
        and all(v % block_size == 0 for v in (vs[0], vs[1], vs[2]))
    )
    if split > 1:  # partition programs write sub-partitions into scratch buffers
        p_es = torch.empty(
            (2, num_seqs, num_heads, num_parts * split), dtype=torch.float32, device=query.device
        )
        p_ml = p_es[1]
        p_es = p_es[0]
        p_to = torch.empty(
            (num_seqs, num_heads, num_parts * split, head_size),
            dtype=tmp_out.dtype,
            device=query.device,
        )
    else:
        p_es, p_ml, p_to = exp_sums, max_logits, tmp_out

    grid = (num_seqs * num_kv_heads * n_gc, num_parts * split)
    _pa_v2_partition_kernel[grid](
        p_es,
        p_ml,
        p_to,
        query,
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        alibi_arg,
        scale,
        num_kv_heads,
        n_gc,
        query.stride(0),
        query.stride(1),
        query.stride(2),
        key_cache.stride(0),
        key_cache.stride(1),
        key_cache.stride(2),
        key_cache.stride(3),
        key_cache.stride(4),
        value_cache.stride(0),
        value_cache.stride(1),
        value_cache.stride(2),
        value_cache.stride(3),
        block_tables.stride(0),
        p_es.stride(0),
        p_es.stride(1),
        p_es.stride(2),
        p_ml.stride(0),
        p_ml.stride(1),
        p_ml.stride(2),
        p_to.stride(0),
        p_to.stride(1),
        p_to.stride(2),
        p_to.stride(3),
        QUERIES_PER_KV=qpk,
        G_PAD=g_pad,
        HEAD_SIZE=head_size,
        D_PAD=d_pad,
        X=x,
        BLOCK_SIZE=block_size,
        PART=part,
        TILE=tile,
        USE_ALIBI=use_alibi,
        F32_SPLIT=f32_split,
        CONTIG_HINTS=hints,
        EARLY_V=bool(early_v),
        STORE_ALL=split > 1,
        PREFETCH=int(prefetch),
        K_3D=bool(k3d) and k3d_enabled(),
        num_warps=warps,
        num_stages=stages,
    )
    d_blk = min(32, d_pad)
    buf_strides = (
        out.stride(0),
        out.stride(1),
        out.stride(2),
        exp_sums.stride(0),
        exp_sums.stride(1),
        exp_sums.stride(2),
        max_logits.stride(0),
        max_logits.stride(1),
        max_logits.stride(2),
        tmp_out.stride(0),
        tmp_out.stride(1),
        tmp_out.stride(2),
        tmp_out.stride(3),
    )
    reduce_grid = (num_seqs * num_heads, d_pad // d_blk)
    if split > 1:
        _pa_v2_fold_reduce_kernel[reduce_grid](
            out,
            exp_sums,
            max_logits,
            tmp_out,
            p_es,
            p_ml,
            p_to,
            seq_lens,
            num_heads,
            *buf_strides,
            p_es.stride(0),
            p_es.stride(1),
            p_es.stride(2),
            p_to.stride(0),
            p_to.stride(1),
            p_to.stride(2),
            p_to.stride(3),
            HEAD_SIZE=head_size,
            D_BLK=d_blk,
            PART=PARTITION_SIZE,
            SPLIT=split,
            P_MAX=max(16, min(512, _next_pow2(num_parts * split))),
            P_CHUNK=32,
            num_warps=4,
        )
        return
    _pa_v2_reduce_kernel[reduce_grid](
        out,
        exp_sums,
        max_logits,
        tmp_out,
        seq_lens,
        num_heads,
        min(exp_sums.shape[2], max_logits.shape[2], tmp_out.shape[2]),
        *buf_strides,
        HEAD_SIZE=head_size,
        D_BLK=d_blk,
        PART=PARTITION_SIZE,
        P_MAX=max(16, min(512, _next_pow2(num_parts))),
        P_CHUNK=32,
        SINGLE_PASS=num_parts <= REDUCE_SINGLE_PASS_MAX,
        num_warps=4,
    )

"""Triton PagedAttention decode in one launch: balanced split-KV with an in-kernel reduction.

vLLM's V2 contract only promises ``out``; ``exp_sums``, ``max_logits`` and ``tmp_out`` are
scratch.  So instead of one program per fixed 512-token partition plus a second reduction
launch, this kernel runs a fixed number of programs (a few per SM) and hands each an equal
share of the whole batch's work, counted in tiles of ``TILE`` tokens of one (sequence, kv
head) *segment*.  A program walks its contiguous range of tiles with an online softmax,
one segment at a time.  A segment covered by a single program is written to ``out``
directly; otherwise each covering program leaves an unnormalized partial (max, sum, acc)
in a slot of a cached scratch buffer and bumps the segment's counter, and the program
that brings the counter to the number of contributors reduces the partials in slot order
(deterministic) and resets the counter to zero (so CUDA-graph replays start clean).

Balancing by tiles is what keeps one 100K-token sequence or a ragged batch from ending in
a long tail of a few busy programs, and no program is spent on a partition past a short
sequence's end.  Only Triton 2.1 language features (tl.cumsum, atomics, while loops); on
Triton >= 3.0 K tiles can be loaded in memory order and permuted (``K_3D``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import triton
import triton.language as tl

from .call import DecodeCall
from .launch_tables import FusedConfig, pick_config
from .log import log


@triton.jit
def _dot(a, b, F32_SPLIT: tl.constexpr):
    # fp32 caches: a 3-pass bf16 split product, exact enough without TF32 keywords.
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
    # One table entry per token of the tile (whole blocks share one); entries past the
    # sequence's last block are never read (block 0 instead), so junk in the table is safe.
    blk_idx = (t0 + tl.arange(0, TILE)) // BLOCK_SIZE
    return tl.load(bt_base + blk_idx, mask=blk_idx < n_blocks, other=0).to(tl.int64)


@triton.jit
def _load_k(
    k_base, blk, t0, d, stride_kb, stride_kt, stride_kd,
    X: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, HEAD_SIZE: tl.constexpr,
    D_PAD: tl.constexpr, CONTIG_HINTS: tl.constexpr, K_3D: tl.constexpr,
):  # fmt: skip
    # K tile as the dot's [D_PAD, TILE] operand.  vLLM's K cache is
    # [blocks, kv_heads, D/X, BLOCK_SIZE, X] with X elements contiguous (stride 1).
    t_in = (t0 + tl.arange(0, TILE)) % BLOCK_SIZE
    if K_3D:
        # [TILE, D/X, X] in memory order: a warp's threads run along tokens after the
        # 16-byte x vector, so each load instruction covers whole consecutive lines.
        dx = tl.arange(0, D_PAD // X)
        xx = tl.arange(0, X)
        off = (
            blk[:, None, None] * stride_kb
            + t_in[:, None, None] * stride_kt
            + dx[None, :, None] * stride_kd
            + xx[None, None, :]
        )
        if CONTIG_HINTS:
            off = tl.max_contiguous(tl.multiple_of(off, [1, 1, X]), [1, 1, X])
        if D_PAD == HEAD_SIZE:
            k3 = tl.load(k_base + off)
        else:
            k3 = tl.load(k_base + off, mask=(dx < HEAD_SIZE // X)[None, :, None], other=0.0)
        k = tl.reshape(tl.permute(k3, (1, 2, 0)), (D_PAD, TILE))
    else:
        k_off = blk[None, :] * stride_kb + t_in[None, :] * stride_kt
        k_off += ((d // X) * stride_kd + (d % X))[:, None]
        if CONTIG_HINTS:
            k_off = tl.max_contiguous(tl.multiple_of(k_off, [X, 1]), [X, 1])
        if D_PAD == HEAD_SIZE:
            k = tl.load(k_base + k_off)
        else:
            k = tl.load(k_base + k_off, mask=(d < HEAD_SIZE)[:, None], other=0.0)
    return k


@triton.jit
def _load_v(
    v_base, blk, t0, d, stride_vb, stride_vd,
    BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, HEAD_SIZE: tl.constexpr,
    D_PAD: tl.constexpr, CONTIG_HINTS: tl.constexpr,
):  # fmt: skip
    # V tile [TILE, D_PAD]; vLLM's V cache is [blocks, kv_heads, D, BLOCK_SIZE], tokens
    # contiguous (stride 1).
    t_in = (t0 + tl.arange(0, TILE)) % BLOCK_SIZE
    v_off = blk[:, None] * stride_vb + t_in[:, None] + (d * stride_vd)[None, :]
    if CONTIG_HINTS:
        v_off = tl.max_contiguous(tl.multiple_of(v_off, [BLOCK_SIZE, 1]), [BLOCK_SIZE, 1])
    if D_PAD == HEAD_SIZE:
        v = tl.load(v_base + v_off)
    else:
        v = tl.load(v_base + v_off, mask=(d < HEAD_SIZE)[None, :], other=0.0)
    return v


@triton.jit
def _pa_decode_kernel(
    out_ptr,
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    alibi_ptr,
    part_acc_ptr,
    part_ml_ptr,
    counters_ptr,
    scale,
    num_seqs,
    stride_os,
    stride_oh,
    stride_qs,
    stride_qh,
    stride_kb,
    stride_kh,
    stride_kd,
    stride_kt,
    stride_vb,
    stride_vh,
    stride_vd,
    stride_bt,
    NUM_KV_HEADS: tl.constexpr,
    QUERIES_PER_KV: tl.constexpr,
    G_PAD: tl.constexpr,
    N_GC: tl.constexpr,
    ROWS: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    D_PAD: tl.constexpr,
    X: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE: tl.constexpr,
    S_PAD: tl.constexpr,
    R_CHUNK: tl.constexpr,
    RB: tl.constexpr,
    GROUP: tl.constexpr,
    USE_ALIBI: tl.constexpr,
    F32_SPLIT: tl.constexpr,
    CONTIG_HINTS: tl.constexpr,
    EARLY_V: tl.constexpr,
    PREFETCH: tl.constexpr,
    K_3D: tl.constexpr,
):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    SEGS_PER_SEQ: tl.constexpr = NUM_KV_HEADS * N_GC

    # The batch's work in tiles, from seq_lens (device memory: graph-safe, no host sync).
    # Every segment counts at least one tile, so an empty sequence still gets its `out`
    # written (zeros).
    s_idx = tl.arange(0, S_PAD)
    lens = tl.load(seq_lens_ptr + s_idx, mask=s_idx < num_seqs, other=0)
    nt = tl.where(s_idx < num_seqs, tl.maximum((lens + TILE - 1) // TILE, 1), 0)
    seq_tiles = nt * SEGS_PER_SEQ
    cum_incl = tl.cumsum(seq_tiles, 0)
    total = tl.sum(seq_tiles, 0).to(tl.int64)
    # Never more programs than tiles: every program in a segment's range must own a tile,
    # or the segment's contributor count (below) would include idle programs.
    n_prog = tl.minimum(n_prog, total)
    t = (pid * total // n_prog).to(tl.int32)
    t_end = ((pid + 1) * total // n_prog).to(tl.int32)
    t_end = tl.where(pid < n_prog, t_end, t)

    d = tl.arange(0, D_PAD)
    d_ok = d < HEAD_SIZE
    r = tl.arange(0, G_PAD)

    while t < t_end:
        # Which segment holds tile t: its sequence, kv head and group chunk.
        seq = tl.sum((cum_incl <= t).to(tl.int32), 0)
        is_seq = s_idx == seq
        seq_base = tl.sum(tl.where(is_seq, cum_incl - seq_tiles, 0), 0)
        seg_tiles = tl.sum(tl.where(is_seq, nt, 0), 0)
        seq_len = tl.sum(tl.where(is_seq, lens, 0), 0)
        local = t - seq_base
        sg = local // seg_tiles
        tile_lo = local % seg_tiles
        seg_start = seq_base + sg * seg_tiles
        seg_end = seg_start + seg_tiles
        stop = tl.minimum(seg_end, t_end)
        tile_hi = tile_lo + (stop - t)
        kvh = sg // N_GC
        gc = sg % N_GC
        g = seq * SEGS_PER_SEQ + sg

        rows = gc * G_PAD + r
        row_ok = rows < QUERIES_PER_KV
        heads = kvh * QUERIES_PER_KV + rows
        q = tl.load(
            q_ptr + seq * stride_qs + heads[:, None] * stride_qh + d[None, :],
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
        bt_base = block_tables_ptr + seq * stride_bt
        n_blocks = (seq_len + BLOCK_SIZE - 1) // BLOCK_SIZE

        m_i = tl.zeros([G_PAD], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([G_PAD], dtype=tl.float32)
        acc = tl.zeros([G_PAD, D_PAD], dtype=tl.float32)
        if PREFETCH:
            blk_nxt = _tile_block_ids(bt_base, tile_lo * TILE, n_blocks, TILE, BLOCK_SIZE)
        for i in range(tile_lo, tile_hi):
            t0 = i * TILE
            offs = t0 + tl.arange(0, TILE)
            t_ok = offs < seq_len
            if PREFETCH:
                blk = blk_nxt
                blk_nxt = _tile_block_ids(bt_base, t0 + TILE, n_blocks, TILE, BLOCK_SIZE)
            else:
                blk = _tile_block_ids(bt_base, t0, n_blocks, TILE, BLOCK_SIZE)
            k = _load_k(
                k_base, blk, t0, d, stride_kb, stride_kt, stride_kd,
                X, BLOCK_SIZE, TILE, HEAD_SIZE, D_PAD, CONTIG_HINTS, K_3D,
            )  # fmt: skip
            if EARLY_V:  # the V load goes out before the QK product: more bytes in flight
                v = _load_v(
                    v_base, blk, t0, d, stride_vb, stride_vd,
                    BLOCK_SIZE, TILE, HEAD_SIZE, D_PAD, CONTIG_HINTS,
                )  # fmt: skip
            if F32_SPLIT:
                k = k.to(tl.float32)
            s = _dot(q, k, F32_SPLIT) * scale  # [G_PAD, TILE]
            if USE_ALIBI:
                s += slopes[:, None] * (offs - seq_len + 1).to(tl.float32)[None, :]
            s = tl.where(t_ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # A row whose every logit so far is masked keeps m = -inf: guard the exps.
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(s - m_use[:, None])
            alpha = tl.exp(m_i - m_use)
            l_i = l_i * alpha + tl.sum(p, 1)
            if not EARLY_V:
                v = _load_v(
                    v_base, blk, t0, d, stride_vb, stride_vd,
                    BLOCK_SIZE, TILE, HEAD_SIZE, D_PAD, CONTIG_HINTS,
                )  # fmt: skip
            v = tl.where(t_ok[:, None], v, 0.0)
            if F32_SPLIT:
                pv = _dot(p, v.to(tl.float32), F32_SPLIT)
            else:
                pv = tl.dot(p.to(v.dtype), v)
            acc = acc * alpha[:, None] + pv
            m_i = m_new

        # Programs covering this segment: p(t) = ((t + 1) * P - 1) // total owns tile t.
        p_first = ((seg_start + 1).to(tl.int64) * n_prog - 1) // total
        p_last = (seg_end.to(tl.int64) * n_prog - 1) // total
        n_contrib = (p_last - p_first + 1).to(tl.int32)
        out_rows = seq * stride_os + heads * stride_oh
        if n_contrib == 1:
            res = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
            tl.store(
                out_ptr + out_rows[:, None] + d[None, :],
                res.to(out_ptr.dtype.element_ty),
                mask=row_ok[:, None] & d_ok[None, :],
            )
        else:
            # Slot pid + g: contributors of one segment are consecutive programs, and the
            # slot ranges of consecutive segments never overlap (P + G - 1 slots in all).
            first_slot = p_first + g
            slot = (pid + g).to(tl.int64)
            keep = r < ROWS
            tl.store(
                part_acc_ptr + (slot * ROWS + r[:, None]) * D_PAD + d[None, :],
                acc,
                mask=keep[:, None],
            )
            tl.store(part_ml_ptr + (slot * ROWS + r) * 2, m_i, mask=keep)
            tl.store(part_ml_ptr + (slot * ROWS + r) * 2 + 1, l_i, mask=keep)
            # Two-level merge so no program merges more than GROUP partials: the last of
            # each GROUP consecutive contributors folds them into its group's first slot,
            # the last group to finish folds the group partials into `out`.
            member = pid - p_first
            grp_first = first_slot + (member // GROUP) * GROUP
            grp_n = tl.minimum(n_contrib - (member // GROUP) * GROUP, GROUP)
            n_groups = (n_contrib + GROUP - 1) // GROUP
            out_base = seq * stride_os + (kvh * QUERIES_PER_KV + gc * G_PAD) * stride_oh
            rows_left = QUERIES_PER_KV - gc * G_PAD
            tl.debug_barrier()  # every thread's partial is stored before the release
            # Group counters live after the segment counters.
            grp_ctr = counters_ptr + num_seqs * SEGS_PER_SEQ + grp_first
            arrived = tl.atomic_add(grp_ctr, 1, sem="acq_rel")
            if arrived == grp_n - 1:
                tl.atomic_xchg(grp_ctr, 0)
                if n_groups == 1:
                    _merge(part_acc_ptr, part_ml_ptr, grp_first, 1, grp_n, grp_first, True,
                           out_ptr, out_base, stride_oh, rows_left,
                           ROWS, RB, HEAD_SIZE, D_PAD, R_CHUNK)  # fmt: skip
                else:
                    _merge(part_acc_ptr, part_ml_ptr, grp_first, 1, grp_n, grp_first, False,
                           out_ptr, out_base, stride_oh, rows_left,
                           ROWS, RB, HEAD_SIZE, D_PAD, R_CHUNK)  # fmt: skip
                    tl.debug_barrier()
                    done = tl.atomic_add(counters_ptr + g, 1, sem="acq_rel")
                    if done == n_groups - 1:
                        tl.atomic_xchg(counters_ptr + g, 0)
                        _merge(part_acc_ptr, part_ml_ptr, first_slot, GROUP, n_groups,
                               first_slot, True, out_ptr, out_base, stride_oh, rows_left,
                               ROWS, RB, HEAD_SIZE, D_PAD, R_CHUNK)  # fmt: skip
        t = stop


@triton.jit
def _merge(
    part_acc_ptr, part_ml_ptr, first_slot, step, n, dst_slot, to_out, out_ptr, out_base,
    stride_oh, rows_left, ROWS: tl.constexpr, RB: tl.constexpr, HEAD_SIZE: tl.constexpr,
    D_PAD: tl.constexpr, R_CHUNK: tl.constexpr,
):  # fmt: skip
    # Merge n partials (slots first_slot, first_slot + step, ...) in slot order with a
    # running log-sum-exp, RB rows at a time: columns are (row, d) pairs flattened, so
    # every load is 2-D.  The result goes to `out` (normalized) or, unnormalized, back
    # into dst_slot (one of the inputs, read before it is overwritten).
    for rb in range(0, ROWS // RB):
        cols = tl.arange(0, RB * D_PAD)
        c_row = rb * RB + cols // D_PAD
        c_d = cols % D_PAD
        m_run = tl.zeros([RB * D_PAD], dtype=tl.float32) - float("inf")
        l_run = tl.zeros([RB * D_PAD], dtype=tl.float32)
        a_run = tl.zeros([RB * D_PAD], dtype=tl.float32)
        for c in range(0, (n + R_CHUNK - 1) // R_CHUNK):
            j = c * R_CHUNK + tl.arange(0, R_CHUNK)
            ok = j < n
            slot = (first_slot + j * step).to(tl.int64)
            ml_off = (slot[:, None] * ROWS + c_row[None, :]) * 2
            # .cg: other programs wrote these; read them from L2, never a stale L1 line.
            m = tl.load(
                part_ml_ptr + ml_off, mask=ok[:, None], other=float("-inf"), cache_modifier=".cg"
            )
            ls = tl.load(
                part_ml_ptr + ml_off + 1, mask=ok[:, None], other=0.0, cache_modifier=".cg"
            )
            a = tl.load(
                part_acc_ptr + (slot[:, None] * ROWS + c_row[None, :]) * D_PAD + c_d[None, :],
                mask=ok[:, None],
                other=0.0,
                cache_modifier=".cg",
            )
            m_new = tl.maximum(m_run, tl.max(m, 0))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            w = tl.where(ok[:, None], tl.exp(m - m_use[None, :]), 0.0)
            alpha = tl.exp(m_run - m_use)
            l_run = l_run * alpha + tl.sum(w * ls, 0)
            a_run = a_run * alpha + tl.sum(w * a, 0)
            m_run = m_new
        if to_out:
            res = a_run / tl.where(l_run > 0, l_run, 1.0)
            tl.store(
                out_ptr + out_base + c_row * stride_oh + c_d,
                res.to(out_ptr.dtype.element_ty),
                mask=(c_row < rows_left) & (c_d < HEAD_SIZE),
            )
        else:
            dst = dst_slot.to(tl.int64)
            tl.store(part_acc_ptr + (dst * ROWS + c_row) * D_PAD + c_d, a_run)
            first_col = c_d == 0
            tl.store(part_ml_ptr + (dst * ROWS + c_row) * 2, m_run, mask=first_col)
            tl.store(part_ml_ptr + (dst * ROWS + c_row) * 2 + 1, l_run, mask=first_col)


# --------------------------------------------------------------------------- launcher


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


MAX_GROUP_ROWS = 64
# tl.permute / 3-D reshape arrived in Triton 3.0; older Triton keeps the 2-D K load.
HAS_PERMUTE = hasattr(tl, "permute")
TRITON_MAJOR = int(triton.__version__.split(".")[0])
_k3d_state = {"disabled": False}
_fast = {"enabled": TRITON_MAJOR >= 3}


def k3d_enabled() -> bool:
    """Whether launches load K tiles in memory order (Triton >= 3, not failed here)."""
    return HAS_PERMUTE and not _k3d_state["disabled"]


def group_rows(queries_per_kv: int) -> int:
    """Rows of one segment: its kv head's query heads padded to a power of two >= 16
    (``tl.dot``'s minimum), capped at MAX_GROUP_ROWS (larger groups take several segments)."""
    return max(16, min(_next_pow2(queries_per_kv), MAX_GROUP_ROWS))


class UnsupportedLayout(ValueError):
    """A tensor layout the kernel does not address (the dispatcher falls back to torch)."""


class _Scratch:
    """Per-device partial buffers and counters, grown on demand and never freed while the
    process lives: a captured CUDA graph may still point at an older one.  Counters are
    zero at rest (each use resets its own), so one zeroed buffer serves every shape."""

    def __init__(self) -> None:
        self.by_device: Dict[Any, Tuple[Any, Any, Any]] = {}
        self.retired: List[Any] = []

    def get(self, device, acc_floats: int, ml_floats: int, counters_needed: int):
        held = self.by_device.get(device)
        if held is not None:
            acc, ml, counters = held
            big_enough = acc.numel() >= acc_floats and ml.numel() >= ml_floats
            if big_enough and counters.numel() >= counters_needed:
                return held
            self.retired.append(held)
        import torch

        acc = torch.empty(max(acc_floats, 1 << 16), dtype=torch.float32, device=device)
        ml = torch.empty(max(ml_floats, 1 << 12), dtype=torch.float32, device=device)
        counters = torch.zeros(max(counters_needed, 8192), dtype=torch.int32, device=device)
        held = self.by_device[device] = (acc, ml, counters)
        return held


_scratch = _Scratch()
_sm_counts: Dict[Any, int] = {}


def sm_count(device) -> int:
    n = _sm_counts.get(device)
    if n is None:
        import torch

        idx = device.index if device.index is not None else torch.cuda.current_device()
        n = _sm_counts[device] = int(torch.cuda.get_device_properties(idx).multi_processor_count)
    return n


class _Plan:
    """What is fixed for one (shape, layout, dtype, config): built once, so a call only
    gathers its tensors and the grid size."""

    __slots__ = ("constexprs", "const_values", "options", "strides", "target", "segments")
    __slots__ += ("rows", "d_pad", "compiled", "device")

    def __init__(self, call: DecodeCall, config: FusedConfig, k3d: bool) -> None:
        query, key_cache, value_cache = call.query, call.key_cache, call.value_cache
        out, block_size = call.out, call.block_size
        num_seqs, num_heads, head_size = query.shape
        ks, vs = key_cache.stride(), value_cache.stride()
        if query.stride(2) != 1 or out.stride(2) != 1 or ks[4] != 1 or vs[3] != 1:
            raise UnsupportedLayout(
                "paged_attention_v2 (Triton): query/out rows, K's x vectors and V's token "
                "runs must be contiguous (vLLM's layouts are)"
            )
        qpk = num_heads // call.num_kv_heads
        g_pad = group_rows(qpk)
        n_gc = (qpk + g_pad - 1) // g_pad
        tile, warps, stages, early_v, prefetch, _, pps, group = config
        f32_split = key_cache.dtype.itemsize == 4
        if f32_split:
            tile = min(tile, 64)
        x = key_cache.shape[4]
        self.device = query.device
        self.segments = num_seqs * call.num_kv_heads * n_gc
        self.target = sm_count(query.device) * pps
        # vLLM's dense cache layouts: x elements contiguous in K, block_size tokens in V,
        # every block/head/row start aligned to them.
        hints = all(v % x == 0 for v in ks[:4]) and all(v % block_size == 0 for v in vs[:3])
        self.strides = (out.stride(0), out.stride(1), query.stride(0), query.stride(1))
        self.strides += (ks[0], ks[1], ks[2], ks[3], vs[0], vs[1], vs[2])
        self.strides += (call.block_tables.stride(0),)
        self.rows = min(g_pad, _next_pow2(qpk))
        self.d_pad = max(16, _next_pow2(head_size))
        rb = max(1, min(self.rows, 2048 // self.d_pad))
        self.constexprs = dict(
            NUM_KV_HEADS=call.num_kv_heads,
            QUERIES_PER_KV=qpk,
            G_PAD=g_pad,
            N_GC=n_gc,
            ROWS=self.rows,
            HEAD_SIZE=head_size,
            D_PAD=self.d_pad,
            X=x,
            BLOCK_SIZE=block_size,
            TILE=tile,
            S_PAD=max(16, _next_pow2(num_seqs)),
            R_CHUNK=max(1, min(group, 4096 // (rb * self.d_pad))),
            RB=rb,
            GROUP=group,
            USE_ALIBI=call.alibi_slopes is not None,
            F32_SPLIT=f32_split,
            CONTIG_HINTS=hints,
            EARLY_V=bool(early_v),
            PREFETCH=int(prefetch),
            K_3D=k3d,
        )
        self.const_values = tuple(self.constexprs.values())
        self.options = dict(num_warps=warps, num_stages=stages)
        self.compiled = None


_plans: Dict[tuple, _Plan] = {}


def _plan_key(call: DecodeCall, config: FusedConfig, k3d: bool) -> tuple:
    # Everything the plan and Triton's specialization depend on: shapes, strides, dtypes,
    # devices, and the data pointers' 16-byte alignment.
    q, out, kc, vc = call.query, call.out, call.key_cache, call.value_cache
    return (
        q.shape,
        q.stride(),
        out.stride(),
        kc.shape,
        kc.stride(),
        vc.stride(),
        call.block_tables.stride(0),
        kc.dtype,
        q.dtype,
        out.dtype,
        call.alibi_slopes is None,
        q.device,
        call.num_kv_heads,
        config,
        k3d,
        (out.data_ptr() | q.data_ptr() | kc.data_ptr() | vc.data_ptr()) & 15,
    )


def _launch(call: DecodeCall, config: FusedConfig, k3d: bool) -> None:
    key = _plan_key(call, config, k3d)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = _Plan(call, config, k3d)
    tile = plan.constexprs["TILE"]
    programs = min(plan.target, plan.segments * max(1, (call.max_seq_len + tile - 1) // tile))
    slots = programs + plan.segments
    acc_buf, ml_buf, counters = _scratch.get(
        plan.device, slots * plan.rows * plan.d_pad, slots * plan.rows * 2, plan.segments + slots
    )
    seq_lens = call.seq_lens
    alibi_arg = call.alibi_slopes if call.alibi_slopes is not None else seq_lens
    args = (call.out, call.query, call.key_cache, call.value_cache, call.block_tables, seq_lens)
    args += (alibi_arg, acc_buf, ml_buf, counters, call.scale, call.query.shape[0])
    args += plan.strides
    compiled = plan.compiled
    if compiled is not None and _fast["enabled"]:
        try:
            compiled[(programs, 1, 1)](*args, *plan.const_values)
            return
        except Exception as exc:  # a Triton whose launcher differs: plain launches from now
            _fast["enabled"] = False
            log.info("vllm-codemod: Triton's compiled-kernel launcher is unusable here (%s)", exc)
    plan.compiled = _pa_decode_kernel[(programs,)](*args, **plan.constexprs, **plan.options)


def run(call: DecodeCall, config: Optional[FusedConfig] = None) -> None:
    """Write ``call.out`` with one launch of the fused kernel.

    The first call for a (shape, layout, dtype, config) goes through Triton's normal launch,
    which binds and specializes every argument; later calls reuse the compiled kernel
    through its launcher (Triton >= 3), skipping that per-call work.  The alignment of the
    data pointers and the stride values are part of the plan key, so a reused kernel is
    always one Triton would have picked itself.

    On Triton >= 3.0 the k3d K load goes first; if it fails to compile or launch (a vendor
    Triton that has tl.permute but cannot lower it) the call is retried once with the 2-D
    load, and if that works k3d stays off for the rest of the process (one log line).  A
    failure of both is raised (the dispatcher then falls back to the PyTorch path).
    """
    if config is None:
        d_pad = max(16, _next_pow2(call.query.shape[2]))
        g_pad = group_rows(call.query.shape[1] // call.num_kv_heads)
        config = pick_config(d_pad, g_pad)
    k3d = bool(config.k3d) and k3d_enabled()
    if not k3d:
        _launch(call, config, False)
        return
    try:
        _launch(call, config, True)
    except UnsupportedLayout:
        raise
    except Exception as exc:
        _launch(call, config, False)  # raises when the 2-D load fails too
        _k3d_state["disabled"] = True
        log.warning(
            "vllm-codemod paged_attention_v2: the k3d Triton kernel failed (%s: %s); using "
            "the 2-D K load from now on",
            type(exc).__name__,
            str(exc)[:200],
        )

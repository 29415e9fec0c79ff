"""Triton prefix prefill: a chunk of new tokens attends to its paged context and itself.

One program per (query tile, sequence, query head).  Its keys come in three parts, each
its own loop, so that only the tiles that need a mask pay for one (the split of Triton's
fused-attention tutorial and of LightLLM's prompt-cache kernel):

A. the cached context, read from the paged caches through the block table in tiles of
   ``BLOCK_N`` tokens (a multiple of the page size reads whole pages): no mask but on
   the last, partial tile;
B. the new tokens before the tile's first query: no mask (every key precedes every
   query of the tile);
C. the new tokens of the tile's own diagonal: the causal mask.

A sliding window or ALiBi adds its term in every loop (``WINDOW`` starts loop A and B at
the first tile the window can reach).  The online softmax runs in base 2 with
``sm_scale * log2(e)`` folded into exp2's argument (one FMA per score); the output is
normalized once, at the end.  fp8 caches fold ``k_scale`` into the context loop's score
scale and ``v_scale`` into the accumulator between loops A and B, so no element is
multiplied by a scale.

Programs with the most work start first: within a sequence the last query tile sees
the most keys, so tiles are numbered from the end.

Only Triton 2.1 language features: tl.dot, masked tl.load/tl.store, tl.max/tl.sum,
tl.math.exp2, tl.where, tl.arange, tl.zeros, constexpr.  Launch choices:
``prefill_launch.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl

#: log2(e): scores are kept in base 2 so the softmax can use exp2.
LOG2E = 1.4426950408889634


@triton.jit
def _online_softmax_step(acc, l_i, m_i, s, v, scale, SCALED: tl.constexpr, GUARD: tl.constexpr):
    """Fold one tile of scores ``s`` [M, N] and values ``v`` [N, D] into the state.

    ``s`` is the raw dot product unless ``SCALED`` (ALiBi adds its term after scaling).
    The state is kept in base 2 and the maximum taken on raw scores (it commutes with
    the positive scale), so a score costs one fused multiply-add on its way into exp2.

    With ``GUARD`` a row whose every score so far is -inf (a sliding window can hide a
    whole tile from a row) keeps a zero state instead of NaN.
    """
    if SCALED:
        m_new = tl.maximum(m_i, tl.max(s, 1))
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1) * scale)
    if GUARD:
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    if SCALED:
        p = tl.math.exp2(s - m_use[:, None])
    else:
        p = tl.math.exp2(s * scale - m_use[:, None])
    alpha = tl.math.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc += tl.dot(p.to(v.dtype), v)
    return acc, l_i, m_new


@triton.jit
def _bias_and_mask(
    s, scale, q_pos, k_pos, slope_log2, window, MASK: tl.constexpr, k_limit,
    ALIBI: tl.constexpr, WINDOW: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    """The position-dependent terms of one tile of raw scores (all compile away when
    off); with ALiBi the tile comes back scaled (its term is in base-2 units)."""
    if ALIBI:
        s = s * scale + slope_log2 * (k_pos[None, :] - q_pos[:, None]).to(tl.float32)
    if MASK:
        keep = k_pos[None, :] < k_limit
        if CAUSAL:
            keep = keep & (k_pos[None, :] <= q_pos[:, None])
        if WINDOW:
            keep = keep & (q_pos[:, None] - k_pos[None, :] < window)
        s = tl.where(keep, s, float("-inf"))
    return s


@triton.jit
def _load_kv(k_ptrs, v_ptrs, d_ok, n_ok, PADDED: tl.constexpr, MASK_N: tl.constexpr):
    """K^T [D, N] and V [N, D]; masks only the padded head lanes and, with ``MASK_N``,
    the keys past the end (unmasked loads keep their full vector width)."""
    if MASK_N:
        k = tl.load(k_ptrs, mask=n_ok[None, :] & d_ok[:, None], other=0.0)
        v = tl.load(v_ptrs, mask=n_ok[:, None] & d_ok[None, :], other=0.0)
    elif PADDED:
        k = tl.load(k_ptrs, mask=d_ok[:, None], other=0.0)
        v = tl.load(v_ptrs, mask=d_ok[None, :], other=0.0)
    else:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    return k, v


@triton.jit
def _context_tile(
    acc, l_i, m_i, q, start_n, ctx_len, q_pos, slope_log2, window, ctx_scale,
    bt_row, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
    stride_kcb, stride_kct, stride_vcb, stride_vct,
    HEAD_SIZE: tl.constexpr, D_PAD: tl.constexpr, PAGE: tl.constexpr, MASK: tl.constexpr,
    FP8: tl.constexpr, ALIBI: tl.constexpr, WINDOW: tl.constexpr,
    K_RUN: tl.constexpr, V_RUN: tl.constexpr,
):  # fmt: skip
    """One tile of cached keys: one block-table entry per page, K^T [D, N] and V [N, D].

    Tokens past the context read page 0 (their table entries are masked to 0) and are
    masked out of the scores, so the loads themselves need no token mask.
    """
    k_idx = start_n + offs_n
    if MASK:
        blk = tl.load(bt_row + k_idx // PAGE, mask=k_idx < ctx_len, other=0).to(tl.int64)
    else:
        blk = tl.load(bt_row + k_idx // PAGE).to(tl.int64)
    t_in = k_idx % PAGE
    k_tok = blk * stride_kcb + t_in * stride_kct
    v_tok = blk * stride_vcb + t_in * stride_vct
    # The block numbers are loaded values, so the compiler cannot see that one page of
    # V is a contiguous run of tokens, nor that K's tokens start on x-element
    # boundaries; without these facts V is read one element per load and neither
    # tile is pipelined.  The launcher sets the runs only where the strides allow them.
    k_tok = tl.multiple_of(k_tok, K_RUN)
    v_tok = tl.max_contiguous(tl.multiple_of(v_tok, V_RUN), V_RUN)
    k_ptrs = kc_base + k_tok[None, :] + k_d[:, None]
    v_ptrs = vc_base + v_tok[:, None] + v_d[None, :]
    k, v = _load_kv(k_ptrs, v_ptrs, d_ok, d_ok, D_PAD != HEAD_SIZE, False)
    if FP8:
        k = k.to(q.dtype)
        v = v.to(q.dtype)
    s = tl.dot(q, k)
    s = _bias_and_mask(
        s, ctx_scale, q_pos, k_idx, slope_log2, window, MASK, ctx_len, ALIBI, WINDOW, False
    )
    return _online_softmax_step(acc, l_i, m_i, s, v, ctx_scale, ALIBI, WINDOW)


@triton.jit
def _prefix_prefill_kernel(
    Q, K, V, OUT, K_CACHE, V_CACHE, BLOCK_TABLE, QUERY_START, SEQ_LENS, ALIBI_SLOPES,
    K_SCALE, V_SCALE, qk_scale, window, num_m_tiles,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_ot, stride_oh,
    stride_kcb, stride_kch, stride_kcd, stride_kct,
    stride_vcb, stride_vch, stride_vcd, stride_vct,
    stride_btb,
    GROUP: tl.constexpr, HEAD_SIZE: tl.constexpr, D_PAD: tl.constexpr,
    X: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    FP8: tl.constexpr, ALIBI: tl.constexpr, WINDOW: tl.constexpr, SKIP_DECODE: tl.constexpr,
    K_RUN: tl.constexpr, V_RUN: tl.constexpr,
):  # fmt: skip
    m_tile = num_m_tiles - 1 - tl.program_id(0)  # longest tiles first
    seq = tl.program_id(1)
    head = tl.program_id(2)
    kv_head = head // GROUP

    q_begin = tl.load(QUERY_START + seq)
    q_len = tl.load(QUERY_START + seq + 1) - q_begin
    m0 = m_tile * BLOCK_M
    if m0 >= q_len:
        return
    if SKIP_DECODE:
        if q_len == 1:
            return
    ctx_len = tl.load(SEQ_LENS + seq) - q_len

    offs_m = m0 + tl.arange(0, BLOCK_M)  # query index within the chunk
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D_PAD)
    d_ok = offs_d < HEAD_SIZE
    m_ok = offs_m < q_len
    q_pos = ctx_len + offs_m  # query positions in the sequence

    q_ptrs = Q + (q_begin + offs_m)[:, None] * stride_qt + head * stride_qh + offs_d[None, :]
    if D_PAD == HEAD_SIZE:
        q = tl.load(q_ptrs, mask=m_ok[:, None], other=0.0)
    else:
        q = tl.load(q_ptrs, mask=m_ok[:, None] & d_ok[None, :], other=0.0)

    slope_log2 = 0.0
    if ALIBI:
        slope_log2 = tl.load(ALIBI_SLOPES + head).to(tl.float32) * 1.4426950408889634

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32)

    # ---- A: the cached context, through the block table --------------------------
    ctx_scale = qk_scale
    if FP8:
        ctx_scale = qk_scale * tl.load(K_SCALE).to(tl.float32)
    bt_row = BLOCK_TABLE + seq * stride_btb
    kc_base = K_CACHE + kv_head * stride_kch
    vc_base = V_CACHE + kv_head * stride_vch
    k_d = (offs_d // X) * stride_kcd + (offs_d % X)
    k_d = tl.max_contiguous(tl.multiple_of(k_d, K_RUN), K_RUN)  # x lanes are contiguous
    v_d = offs_d * stride_vcd
    if WINDOW:
        # from the tile holding the first key the tile's first query can see
        lo = tl.maximum(ctx_len + m0 - window + 1, 0)
        for start_n in range((lo // BLOCK_N) * BLOCK_N, ctx_len, BLOCK_N):
            acc, l_i, m_i = _context_tile(
                acc, l_i, m_i, q, start_n, ctx_len, q_pos, slope_log2, window, ctx_scale,
                bt_row, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
                stride_kcb, stride_kct, stride_vcb, stride_vct,
                HEAD_SIZE, D_PAD, PAGE, True, FP8, ALIBI, True, K_RUN, V_RUN,
            )  # fmt: skip
    else:
        full_end = (ctx_len // BLOCK_N) * BLOCK_N
        for start_n in range(0, full_end, BLOCK_N):
            acc, l_i, m_i = _context_tile(
                acc, l_i, m_i, q, start_n, ctx_len, q_pos, slope_log2, window, ctx_scale,
                bt_row, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
                stride_kcb, stride_kct, stride_vcb, stride_vct,
                HEAD_SIZE, D_PAD, PAGE, False, FP8, ALIBI, False, K_RUN, V_RUN,
            )  # fmt: skip
        if full_end < ctx_len:
            acc, l_i, m_i = _context_tile(
                acc, l_i, m_i, q, full_end, ctx_len, q_pos, slope_log2, window, ctx_scale,
                bt_row, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
                stride_kcb, stride_kct, stride_vcb, stride_vct,
                HEAD_SIZE, D_PAD, PAGE, True, FP8, ALIBI, False, K_RUN, V_RUN,
            )  # fmt: skip
    if FP8:
        acc = acc * tl.load(V_SCALE).to(tl.float32)

    # ---- B: new tokens before the tile (no causal mask) --------------------------
    k_base = K + (q_begin * stride_kt + kv_head * stride_kh)
    v_base = V + (q_begin * stride_vt + kv_head * stride_vh)
    lo_b = 0
    if WINDOW:
        lo_b = tl.maximum(m0 - window + 1, 0)
        lo_b = (lo_b // BLOCK_N) * BLOCK_N
    for start_n in range(lo_b, m0, BLOCK_N):
        k_idx = start_n + offs_n
        k_ptrs = k_base + k_idx[None, :] * stride_kt + offs_d[:, None]
        v_ptrs = v_base + k_idx[:, None] * stride_vt + offs_d[None, :]
        k, v = _load_kv(k_ptrs, v_ptrs, d_ok, d_ok, D_PAD != HEAD_SIZE, False)
        s = tl.dot(q, k)
        s = _bias_and_mask(
            s, qk_scale, q_pos, ctx_len + k_idx, slope_log2, window, WINDOW, ctx_len + m0,
            ALIBI, WINDOW, False,
        )  # fmt: skip
        acc, l_i, m_i = _online_softmax_step(acc, l_i, m_i, s, v, qk_scale, ALIBI, WINDOW)

    # ---- C: the diagonal tiles (causal mask) --------------------------------------
    hi_c = tl.minimum(m0 + BLOCK_M, q_len)
    for start_n in range(m0, hi_c, BLOCK_N):
        k_idx = start_n + offs_n
        k_ptrs = k_base + k_idx[None, :] * stride_kt + offs_d[:, None]
        v_ptrs = v_base + k_idx[:, None] * stride_vt + offs_d[None, :]
        k, v = _load_kv(k_ptrs, v_ptrs, d_ok, k_idx < q_len, D_PAD != HEAD_SIZE, True)
        s = tl.dot(q, k)
        s = _bias_and_mask(
            s, qk_scale, q_pos, ctx_len + k_idx, slope_log2, window, True, ctx_len + q_len,
            ALIBI, WINDOW, True,
        )  # fmt: skip
        acc, l_i, m_i = _online_softmax_step(acc, l_i, m_i, s, v, qk_scale, ALIBI, WINDOW)

    out = acc / l_i[:, None]
    o_ptrs = OUT + (q_begin + offs_m)[:, None] * stride_ot + head * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=m_ok[:, None] & d_ok[None, :])


__all__ = ["LOG2E", "_prefix_prefill_kernel"]

"""Triton prefix prefill: a chunk of new tokens attends to its paged context and itself.

One program per (query tile, sequence, ``PACK`` query heads of one kv head).  The rows
of its tile are ``QUERIES`` queries times those heads (GQA packing, as vLLM's
``unified_attention`` does), so each K/V tile is read once for all of them rather than
once per query head.  Its keys come in three parts, each its own loop, so that only the
tiles that need a mask pay for one (the split of Triton's fused-attention tutorial and
of LightLLM's prompt-cache kernel):

A. the cached context in tiles of ``BLOCK_N`` tokens, no mask but on the last, partial
   tile.  With ``GATHERED`` (the launcher's choice at 2+ stages) it is read from
   contiguous copies of the context (``prefill_gather``) in the same loop as B, which
   Triton's pipeliner streams with ``cp.async``.  Otherwise it is read from the paged
   caches through the block table (a ``BLOCK_N`` that is a multiple of the page size
   reads whole pages), pipelined by hand: the next tile's K/V are loaded into
   registers while the current one is folded in (Triton's own pipeliner leaves a load
   whose address comes from another load too little lead), and K is read as
   ``[N, D / X, X]`` so that a warp's threads walk the tokens of a page (coalesced)
   rather than its head dimension (256 bytes apart) where Triton can reshape (3.0+);
B. the new tokens before the tile's first query: no mask (every key precedes every
   query of the tile);
C. the new tokens of the tile's own diagonal, from the key tile holding its first query:
   the causal mask.

ALiBi adds its term in every loop.  A sliding window starts loops A and B at the first
tile the window can reach and masks only the tiles that are in some row's window but
not in every row's (the window's trailing edge); the tiles after them, in every row's
window, run as the plain path's do (no mask, no all-masked-row guard), so a window wider
than the sequence does the plain path's work the plain path's way.  The online softmax
runs in base 2 with ``sm_scale * log2(e)`` folded into exp2's argument (one FMA per
score); the output is normalized once, at the end.  fp8 caches fold ``k_scale`` into the
context loop's score scale and ``v_scale`` into the accumulator between loops A and B, so
no element is multiplied by a scale.

Programs with the most work start first: within a sequence the last query tile sees
the most keys, so tiles are numbered from the end.

Only Triton 2.1 language features: tl.dot, masked tl.load/tl.store, tl.max/tl.sum,
tl.math.exp2, tl.where, tl.arange, tl.zeros, tl.trans, constexpr; ``tl.reshape`` only
behind ``K_3D``.  ``LEGACY`` (set where Triton is older than 3.0) picks two forms Triton
2.1's layout pass (``remove_layout_conversions``) can compile, where the 3.x forms make
it fail or never return: scores scaled before their row maximum, and the context's
partial last tile folded in by a loop of at most one trip instead of an ``if``.  Launch
choices: ``prefill_launch.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl

#: log2(e): scores are kept in base 2 so the softmax can use exp2.
LOG2E = 1.4426950408889634


@triton.jit
def _lanes_to_rows(k3, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr):
    """[N, D / X, X] -> K^T [D, N] (merge, then transpose: both rename registers).
    Triton 3.0+ only (2.1's tl.reshape raises): traced only where the launcher sets
    ``K_3D``."""
    return tl.trans(tl.reshape(k3, (BLOCK_N, D_PAD)))


@triton.jit
def _online_softmax_step(
    acc, l_i, m_i, s, v, scale, SCALED: tl.constexpr, GUARD: tl.constexpr,
    LEGACY: tl.constexpr,
):  # fmt: skip
    """Fold one tile of scores ``s`` [M, N] and values ``v`` [N, D] into the state.

    ``s`` is the raw dot product unless ``SCALED`` (ALiBi adds its term after scaling).
    The state is kept in base 2 and the maximum taken on raw scores (it commutes with
    the positive scale), so a score costs one fused multiply-add on its way into exp2.
    ``LEGACY`` scales the scores first instead (one more multiply per score): Triton
    2.1's layout pass gives ``tl.max(s, 1) * scale`` an encoding other than the running
    maximum's and the kernel fails to compile (``cmpf op requires the same encoding``).

    With ``GUARD`` a row whose every score so far is -inf (a sliding window can hide a
    whole tile from a row) keeps a zero state instead of NaN.
    """
    if SCALED:
        m_new = tl.maximum(m_i, tl.max(s, 1))
    elif LEGACY:
        s = s * scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1) * scale)
    if GUARD:
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    if SCALED or LEGACY:
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
        s = s * scale + slope_log2[:, None] * (k_pos[None, :] - q_pos[:, None]).to(tl.float32)
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
def _token_rows_kv(
    k_base, v_base, k_idx, stride_kt, stride_vt, offs_d, d_ok, n_ok,
    PADDED: tl.constexpr, MASK_N: tl.constexpr,
):  # fmt: skip
    """K^T and V of keys ``k_idx`` from token-major rows (the new tokens' ``k``/``v`` or
    the gathered context): one place builds these pointers, which also changes how
    Triton schedules the inlined loops (fewer spills at the 48 KB default)."""
    k_ptrs = k_base + k_idx[None, :] * stride_kt + offs_d[:, None]
    v_ptrs = v_base + k_idx[:, None] * stride_vt + offs_d[None, :]
    return _load_kv(k_ptrs, v_ptrs, d_ok, n_ok, PADDED, MASK_N)


@triton.jit
def _page_blocks(bt_row, start_n, offs_n, ctx_len, PAGE: tl.constexpr, MASK: tl.constexpr):
    """Each token's page number for the tile at ``start_n`` (0 for pages past the context).

    Masked by page, not by token: the tokens of the context's last page that lie past
    its end read that page's own slots (allocated, and finite: vLLM zero-fills its caches;
    masked out of the scores), so each page's tokens stay one contiguous run of the
    cache, as the V load's contiguity hint claims (a token mask sent them to page 0 in
    mid-run, making the hint false on the partial last tile).
    """
    k_idx = start_n + offs_n
    if MASK:
        page = k_idx // PAGE
        return tl.load(bt_row + page, mask=page * PAGE < ctx_len, other=0).to(tl.int64)
    return tl.load(bt_row + k_idx // PAGE).to(tl.int64)


@triton.jit
def _context_kv(
    blk, start_n, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
    stride_kcb, stride_kct, stride_vcb, stride_vct,
    HEAD_SIZE: tl.constexpr, D_PAD: tl.constexpr, PAGE: tl.constexpr,
    K_RUN: tl.constexpr, V_RUN: tl.constexpr, stride_kcd, X: tl.constexpr,
    BLOCK_N: tl.constexpr, K_3D: tl.constexpr,
):  # fmt: skip
    """K^T [D, N] and V [N, D] of one tile of cached tokens, whose pages are ``blk``.

    Tokens past the context read their page's unwritten slots or, on pages past it, page
    0 (see ``_page_blocks``) and are masked out of the scores, so the loads need no token
    mask.  Their scores are -inf, but their V rows still enter the PV dot times 0: a NaN
    in those slots would reach the output.  vLLM zero-fills its caches (since 2023), so
    they hold zeros or a former owner's finite values; masking the loads instead cost
    spill reloads in this loop at 8-warp configs (sm_90 SASS, docs/kernel-notes.md).
    """
    t_in = (start_n + offs_n) % PAGE
    k_tok = blk * stride_kcb + t_in * stride_kct
    v_tok = blk * stride_vcb + t_in * stride_vct
    # The block numbers are loaded values, so the compiler cannot see that one page of
    # V is a contiguous run of tokens, nor that K's tokens start on x-element
    # boundaries; without these facts V is read one element per load and neither
    # tile is pipelined.  The launcher sets the runs only where the strides allow them.
    k_tok = tl.multiple_of(k_tok, K_RUN)
    v_tok = tl.max_contiguous(tl.multiple_of(v_tok, V_RUN), V_RUN)
    v_ptrs = vc_base + v_tok[:, None] + v_d[None, :]
    if K_3D:
        # K read as [N, D / X, X]: a warp's threads then walk the tokens of a page, whose
        # X-lane runs are adjacent in the cache (a 2-D [D, N] tile puts the threads along
        # D instead, 256 bytes apart: four times the cache lines per load).  The merge
        # and transpose to K^T [D, N] only rename registers.
        offs_c = tl.arange(0, D_PAD // X)
        offs_x = tl.arange(0, X)
        k3_ptrs = (
            kc_base + k_tok[:, None, None] + offs_c[None, :, None] * stride_kcd
            + offs_x[None, None, :]
        )  # fmt: skip
        if D_PAD != HEAD_SIZE:
            d3_ok = (offs_c[None, :, None] * X + offs_x[None, None, :]) < HEAD_SIZE
            k3 = tl.load(k3_ptrs, mask=d3_ok, other=0.0)
            v = tl.load(v_ptrs, mask=d_ok[None, :], other=0.0)
        else:
            k3 = tl.load(k3_ptrs)
            v = tl.load(v_ptrs)
        k = _lanes_to_rows(k3, D_PAD, BLOCK_N)
        return k, v
    k_ptrs = kc_base + k_tok[None, :] + k_d[:, None]
    return _load_kv(k_ptrs, v_ptrs, d_ok, d_ok, D_PAD != HEAD_SIZE, False)


@triton.jit
def _context_fold(
    acc, l_i, m_i, q, k, v, start_n, ctx_len, q_pos, slope_log2, window, ctx_scale, offs_n,
    MASK: tl.constexpr, FP8: tl.constexpr, ALIBI: tl.constexpr, WINDOW: tl.constexpr,
    LEGACY: tl.constexpr,
):  # fmt: skip
    """One tile of cached keys and values into the softmax state."""
    if FP8:
        k = k.to(q.dtype)
        v = v.to(q.dtype)
    s = tl.dot(q, k)
    s = _bias_and_mask(
        s, ctx_scale, q_pos, start_n + offs_n, slope_log2, window, MASK, ctx_len, ALIBI,
        WINDOW, False,
    )  # fmt: skip
    return _online_softmax_step(acc, l_i, m_i, s, v, ctx_scale, ALIBI, WINDOW, LEGACY)


@triton.jit
def _paged_tile(
    acc, l_i, m_i, q, start_n, q_pos, slope_log2, window, ctx_scale, ctx_len,
    bt_row, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
    stride_kcb, stride_kct, stride_vcb, stride_vct, stride_kcd,
    HEAD_SIZE: tl.constexpr, D_PAD: tl.constexpr, PAGE: tl.constexpr,
    K_RUN: tl.constexpr, V_RUN: tl.constexpr, X: tl.constexpr, BLOCK_N: tl.constexpr,
    K_3D: tl.constexpr, FP8: tl.constexpr, ALIBI: tl.constexpr, WINDOW: tl.constexpr,
    LEGACY: tl.constexpr, TAIL: tl.constexpr, MASK: tl.constexpr,
):  # fmt: skip
    """One tile of cached keys at ``start_n``, loaded where it is used and folded in: its
    pages (masked on the ``TAIL``), its K/V, the scores (masked with ``MASK``)."""
    blk = _page_blocks(bt_row, start_n, offs_n, ctx_len, PAGE, TAIL)
    k, v = _context_kv(
        blk, start_n, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
        stride_kcb, stride_kct, stride_vcb, stride_vct, HEAD_SIZE, D_PAD, PAGE,
        K_RUN, V_RUN, stride_kcd, X, BLOCK_N, K_3D,
    )  # fmt: skip
    return _context_fold(
        acc, l_i, m_i, q, k, v, start_n, ctx_len, q_pos, slope_log2, window, ctx_scale,
        offs_n, MASK, FP8, ALIBI, WINDOW, LEGACY,
    )  # fmt: skip


@triton.jit
def _paged_context(
    acc, l_i, m_i, q, q_pos, slope_log2, window, ctx_scale, ctx_len, lo, open_n, full_end,
    bt_row, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
    stride_kcb, stride_kct, stride_vcb, stride_vct, stride_kcd,
    HEAD_SIZE: tl.constexpr, D_PAD: tl.constexpr, PAGE: tl.constexpr,
    K_RUN: tl.constexpr, V_RUN: tl.constexpr, X: tl.constexpr, BLOCK_N: tl.constexpr,
    K_3D: tl.constexpr, FP8: tl.constexpr, ALIBI: tl.constexpr, WINDOW: tl.constexpr,
    LEGACY: tl.constexpr,
):  # fmt: skip
    """Loop A over the paged caches themselves, through the block table: with a window,
    its edge tiles ``[lo, open_n)`` masked, then the full tiles up to ``full_end`` as
    the plain path's."""
    if WINDOW:
        # the window's edge: a few tiles, each loaded where it is used
        for start_n in range(lo, open_n, BLOCK_N):
            acc, l_i, m_i = _paged_tile(
                acc, l_i, m_i, q, start_n, q_pos, slope_log2, window, ctx_scale, ctx_len,
                bt_row, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
                stride_kcb, stride_kct, stride_vcb, stride_vct, stride_kcd,
                HEAD_SIZE, D_PAD, PAGE, K_RUN, V_RUN, X, BLOCK_N, K_3D, FP8, ALIBI, True,
                LEGACY, False, True,
            )  # fmt: skip
        lo = open_n
    if FP8:
        # fp8 caches: each tile loaded where it is used, no prefetch.  The prefetched
        # fp8 tile held in registers while the current one is converted to 16 bits
        # spilled at every config (sm_90 SASS, Triton 3.6: 444 local-memory instructions
        # at (64, 64, 4, 1), 343 of them in this loop; docs/kernel-notes.md, session 15).
        for start_n in range(lo, full_end, BLOCK_N):
            acc, l_i, m_i = _paged_tile(
                acc, l_i, m_i, q, start_n, q_pos, slope_log2, window, ctx_scale, ctx_len,
                bt_row, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
                stride_kcb, stride_kct, stride_vcb, stride_vct, stride_kcd,
                HEAD_SIZE, D_PAD, PAGE, K_RUN, V_RUN, X, BLOCK_N, K_3D, FP8, ALIBI, False,
                LEGACY, False, False,
            )  # fmt: skip
    else:
        # Software pipelining by hand: the next tile's K/V are loaded into registers
        # while this one is folded in, and the page numbers one tile further ahead.
        # (Triton's pipeliner gives a load whose address comes from another load only
        # one tile of lead, too little to hide it; with one stage it gives none.)
        blk = _page_blocks(bt_row, lo, offs_n, ctx_len, PAGE, True)
        k_cur, v_cur = _context_kv(
            blk, lo, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
            stride_kcb, stride_kct, stride_vcb, stride_vct, HEAD_SIZE, D_PAD, PAGE,
            K_RUN, V_RUN, stride_kcd, X, BLOCK_N, K_3D,
        )  # fmt: skip
        blk_next = _page_blocks(bt_row, lo + BLOCK_N, offs_n, ctx_len, PAGE, True)
        for start_n in range(lo, full_end, BLOCK_N):
            k_next, v_next = _context_kv(
                blk_next, start_n + BLOCK_N, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
                stride_kcb, stride_kct, stride_vcb, stride_vct, HEAD_SIZE, D_PAD, PAGE,
                K_RUN, V_RUN, stride_kcd, X, BLOCK_N, K_3D,
            )  # fmt: skip
            blk_next = _page_blocks(bt_row, start_n + 2 * BLOCK_N, offs_n, ctx_len, PAGE, True)
            acc, l_i, m_i = _context_fold(
                acc, l_i, m_i, q, k_cur, v_cur, start_n, ctx_len, q_pos, slope_log2, window,
                ctx_scale, offs_n, False, FP8, ALIBI, False, LEGACY,
            )  # fmt: skip
            k_cur = k_next
            v_cur = v_next
        if not LEGACY:
            if full_end < ctx_len:  # the partial last tile, prefetched above
                acc, l_i, m_i = _context_fold(
                    acc, l_i, m_i, q, k_cur, v_cur, full_end, ctx_len, q_pos, slope_log2,
                    window, ctx_scale, offs_n, True, FP8, ALIBI, WINDOW, LEGACY,
                )  # fmt: skip
    if FP8 or LEGACY:
        # The partial last tile as a loop of at most one trip that loads its own K/V (with
        # LEGACY the prefetched ones go unused): behind an ``if``, Triton 2.1's layout pass
        # never returns on this kernel; with loop-invariant K/V the loop's first dot is
        # hoisted out of it, its second gets another MMA layout, and 2.1 aborts on the
        # MMA -> MMA conversion between them (CPU compile checks, docs/kernel-notes.md).
        for tail_n in range(full_end, ctx_len, BLOCK_N):
            acc, l_i, m_i = _paged_tile(
                acc, l_i, m_i, q, tail_n, q_pos, slope_log2, window, ctx_scale, ctx_len,
                bt_row, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
                stride_kcb, stride_kct, stride_vcb, stride_vct, stride_kcd,
                HEAD_SIZE, D_PAD, PAGE, K_RUN, V_RUN, X, BLOCK_N, K_3D, FP8, ALIBI, WINDOW,
                LEGACY, True, True,
            )  # fmt: skip
    return acc, l_i, m_i


@triton.jit
def _window_open(first_seen, lo, hi, BLOCK_N: tl.constexpr):
    """The first tile boundary at or after ``first_seen`` (the first key index every row
    of the query tile sees), kept within ``[lo, hi]``: the tiles before it are the
    window's edge (masked), those after it are in every row's window."""
    first_seen = tl.maximum(first_seen, 0)  # integer division truncates: stay >= 0
    return tl.minimum(tl.maximum(((first_seen + BLOCK_N - 1) // BLOCK_N) * BLOCK_N, lo), hi)


@triton.jit
def _new_keys_tile(
    acc, l_i, m_i, q, k_base, v_base, start_n, offs_n, offs_d, d_ok,
    stride_kt, stride_vt, qk_scale, q_pos, ctx_len, m0, slope_log2, window,
    HEAD_SIZE: tl.constexpr, D_PAD: tl.constexpr, ALIBI: tl.constexpr, EDGE: tl.constexpr,
    LEGACY: tl.constexpr,
):  # fmt: skip
    """One tile of loop B: new tokens before the query tile, so no causal mask; an
    ``EDGE`` tile of a sliding window is masked by it (and guarded: a row can have seen
    no key yet)."""
    k_idx = start_n + offs_n
    k, v = _token_rows_kv(
        k_base, v_base, k_idx, stride_kt, stride_vt, offs_d, d_ok, d_ok,
        D_PAD != HEAD_SIZE, False,
    )  # fmt: skip
    s = tl.dot(q, k)
    s = _bias_and_mask(
        s, qk_scale, q_pos, ctx_len + k_idx, slope_log2, window, EDGE, ctx_len + m0,
        ALIBI, EDGE, False,
    )  # fmt: skip
    return _online_softmax_step(acc, l_i, m_i, s, v, qk_scale, ALIBI, EDGE, LEGACY)


@triton.jit
def _prefix_prefill_kernel(
    Q, K, V, OUT, K_CACHE, V_CACHE, BLOCK_TABLE, QUERY_START, SEQ_LENS, ALIBI_SLOPES,
    K_SCALE, V_SCALE, qk_scale, window, num_m_tiles,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_ot, stride_oh,
    stride_kcb, stride_kch, stride_kcd, stride_kct,
    stride_vcb, stride_vch, stride_vcd, stride_vct,
    stride_btb, KG, VG, stride_gb, stride_gh, stride_gt,
    GROUP: tl.constexpr, HEAD_SIZE: tl.constexpr, D_PAD: tl.constexpr,
    X: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    FP8: tl.constexpr, ALIBI: tl.constexpr, WINDOW: tl.constexpr, SKIP_DECODE: tl.constexpr,
    K_RUN: tl.constexpr, V_RUN: tl.constexpr, K_3D: tl.constexpr, LEGACY: tl.constexpr,
    PACK: tl.constexpr, QUERIES: tl.constexpr, GATHERED: tl.constexpr, M_LAST: tl.constexpr,
):  # fmt: skip
    # Longest tiles first: of each (sequence, head) (M_LAST False: programs that share a
    # kv head's K/V run together), or of the whole grid (M_LAST: the short tiles of every
    # head fill the last wave).
    if M_LAST:
        m_tile = num_m_tiles - 1 - tl.program_id(2)
        head0 = tl.program_id(0) * PACK  # the first of the PACK query heads of this program
    else:
        m_tile = num_m_tiles - 1 - tl.program_id(0)
        head0 = tl.program_id(2) * PACK
    seq = tl.program_id(1)
    kv_head = head0 // GROUP

    q_begin = tl.load(QUERY_START + seq)
    q_len = tl.load(QUERY_START + seq + 1) - q_begin
    m0 = m_tile * QUERIES
    if m0 >= q_len:
        return
    if SKIP_DECODE:
        if q_len == 1:
            return
    ctx_len = tl.load(SEQ_LENS + seq) - q_len

    # Row r of the tile is query m0 + r // PACK of query head head0 + r % PACK: the
    # PACK heads share one kv head, so every K/V tile below is read once for all of them.
    rows = tl.arange(0, BLOCK_M)
    if PACK == 1:
        offs_m = m0 + rows  # query index within the chunk
        m_ok = offs_m < q_len
        row_head = head0 + tl.zeros([BLOCK_M], dtype=tl.int32)
    else:
        offs_m = m0 + rows // PACK
        m_ok = (offs_m < q_len) & (rows < QUERIES * PACK)
        row_head = head0 + rows % PACK
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D_PAD)
    d_ok = offs_d < HEAD_SIZE
    q_pos = ctx_len + offs_m  # query positions in the sequence

    row_off = (q_begin + offs_m) * stride_qt + row_head * stride_qh
    q_ptrs = Q + row_off[:, None] + offs_d[None, :]
    if D_PAD == HEAD_SIZE:
        q = tl.load(q_ptrs, mask=m_ok[:, None], other=0.0)
    else:
        q = tl.load(q_ptrs, mask=m_ok[:, None] & d_ok[None, :], other=0.0)

    slope_log2 = tl.zeros([BLOCK_M], dtype=tl.float32)
    if ALIBI:
        slope_log2 = tl.load(ALIBI_SLOPES + row_head).to(tl.float32) * 1.4426950408889634

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
    full_end = (ctx_len // BLOCK_N) * BLOCK_N
    lo = 0
    open_n = 0
    if WINDOW:
        # from the tile holding the first key the tile's first query can see (at most
        # the partial last tile, which the prefetch below must find loaded)
        lo = tl.maximum(ctx_len + m0 - window + 1, 0)
        lo = tl.minimum((lo // BLOCK_N) * BLOCK_N, full_end)
        # masked up to the first tile whose every key its last query still sees
        q_last = tl.minimum(m0 + QUERIES, q_len) - 1
        open_n = _window_open(ctx_len + q_last - window + 1, lo, full_end, BLOCK_N)
    if GATHERED:
        # The context copied into contiguous [seq, kv head, token, D] buffers
        # (prefill_gather.py): the same loop as B's, pipelined by Triton.
        g_off = seq.to(tl.int64) * stride_gb + kv_head.to(tl.int64) * stride_gh
        lo_full = lo
        if WINDOW:
            for start_n in range(lo, open_n, BLOCK_N):  # the window's edge
                k_t, v_t = _token_rows_kv(
                    KG + g_off, VG + g_off, start_n + offs_n, stride_gt, stride_gt, offs_d,
                    d_ok, d_ok, D_PAD != HEAD_SIZE, False,
                )  # fmt: skip
                acc, l_i, m_i = _context_fold(
                    acc, l_i, m_i, q, k_t, v_t, start_n, ctx_len, q_pos, slope_log2, window,
                    ctx_scale, offs_n, True, FP8, ALIBI, True, LEGACY,
                )  # fmt: skip
            lo_full = open_n
        for start_n in range(lo_full, full_end, BLOCK_N):
            k_t, v_t = _token_rows_kv(
                KG + g_off, VG + g_off, start_n + offs_n, stride_gt, stride_gt, offs_d, d_ok,
                d_ok, D_PAD != HEAD_SIZE, False,
            )  # fmt: skip
            acc, l_i, m_i = _context_fold(
                acc, l_i, m_i, q, k_t, v_t, start_n, ctx_len, q_pos, slope_log2, window,
                ctx_scale, offs_n, False, FP8, ALIBI, False, LEGACY,
            )  # fmt: skip
        # the partial last tile (a loop of at most one trip: see _paged_context's LEGACY
        # note); its rows past the context were never written, so its loads are masked
        for tail_n in range(full_end, ctx_len, BLOCK_N):
            k_idx = tail_n + offs_n
            k_t, v_t = _token_rows_kv(
                KG + g_off, VG + g_off, k_idx, stride_gt, stride_gt, offs_d, d_ok,
                k_idx < ctx_len, D_PAD != HEAD_SIZE, True,
            )  # fmt: skip
            acc, l_i, m_i = _context_fold(
                acc, l_i, m_i, q, k_t, v_t, tail_n, ctx_len, q_pos, slope_log2, window,
                ctx_scale, offs_n, True, FP8, ALIBI, WINDOW, LEGACY,
            )  # fmt: skip
    else:
        acc, l_i, m_i = _paged_context(
            acc, l_i, m_i, q, q_pos, slope_log2, window, ctx_scale, ctx_len, lo, open_n,
            full_end, bt_row, kc_base, vc_base, k_d, v_d, d_ok, offs_n,
            stride_kcb, stride_kct, stride_vcb, stride_vct, stride_kcd,
            HEAD_SIZE, D_PAD, PAGE, K_RUN, V_RUN, X, BLOCK_N, K_3D, FP8, ALIBI, WINDOW,
            LEGACY,
        )  # fmt: skip
    if FP8:
        acc = acc * tl.load(V_SCALE).to(tl.float32)

    # ---- B: new tokens before the tile (no causal mask) --------------------------
    k_base = K + (q_begin * stride_kt + kv_head * stride_kh)
    v_base = V + (q_begin * stride_vt + kv_head * stride_vh)
    lo_b = 0
    # loop B ends at the last key tile boundary before the tile's first query (a tile
    # of QUERIES < BLOCK_N queries may start inside a key tile; C masks from there)
    end_b = (m0 // BLOCK_N) * BLOCK_N
    if WINDOW:
        lo_b = tl.maximum(m0 - window + 1, 0)
        lo_b = (lo_b // BLOCK_N) * BLOCK_N
        open_b = _window_open(q_last - window + 1, lo_b, end_b, BLOCK_N)
        for start_n in range(lo_b, open_b, BLOCK_N):  # the window's edge
            acc, l_i, m_i = _new_keys_tile(
                acc, l_i, m_i, q, k_base, v_base, start_n, offs_n, offs_d, d_ok,
                stride_kt, stride_vt, qk_scale, q_pos, ctx_len, m0, slope_log2, window,
                HEAD_SIZE, D_PAD, ALIBI, True, LEGACY,
            )  # fmt: skip
        lo_b = open_b
    for start_n in range(lo_b, end_b, BLOCK_N):
        acc, l_i, m_i = _new_keys_tile(
            acc, l_i, m_i, q, k_base, v_base, start_n, offs_n, offs_d, d_ok,
            stride_kt, stride_vt, qk_scale, q_pos, ctx_len, m0, slope_log2, window,
            HEAD_SIZE, D_PAD, ALIBI, False, LEGACY,
        )  # fmt: skip

    # ---- C: the diagonal tiles (causal mask) --------------------------------------
    hi_c = tl.minimum(m0 + QUERIES, q_len)
    for start_n in range(end_b, hi_c, BLOCK_N):
        k_idx = start_n + offs_n
        k, v = _token_rows_kv(
            k_base, v_base, k_idx, stride_kt, stride_vt, offs_d, d_ok, k_idx < q_len,
            D_PAD != HEAD_SIZE, True,
        )  # fmt: skip
        s = tl.dot(q, k)
        s = _bias_and_mask(
            s, qk_scale, q_pos, ctx_len + k_idx, slope_log2, window, True, ctx_len + q_len,
            ALIBI, WINDOW, True,
        )  # fmt: skip
        acc, l_i, m_i = _online_softmax_step(acc, l_i, m_i, s, v, qk_scale, ALIBI, WINDOW, LEGACY)

    # Rows past the chunk's end (``m_ok`` false) saw no key: 0/0 there, never stored
    # (the interpreter warns "invalid value encountered in divide" for them).
    out = acc / l_i[:, None]
    o_row = (q_begin + offs_m) * stride_ot + row_head * stride_oh
    o_ptrs = OUT + o_row[:, None] + offs_d[None, :]
    tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=m_ok[:, None] & d_ok[None, :])


__all__ = ["LOG2E", "_prefix_prefill_kernel"]

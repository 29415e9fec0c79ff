"""Copy each sequence's paged context into one contiguous K and one V buffer.

Why: the prefill kernel's context loop reads K/V through the block table, so their
addresses come from a load, and Triton's pipeliner gives such loads no lead (the tile
waits for its own copies; the hand prefetch that replaced it holds the next tile in
registers: 255 registers and spills).  Over a contiguous buffer the context loop is the
same loop as the one over the chunk's own tokens, which the pipeliner runs with
``cp.async`` several tiles ahead.  The copy reads and writes the context once, a few
hundred MB at 100K tokens: well under 1% of the attention's time, since the kernel
reads every K/V tile once per query tile.

The buffers are ``[seqs, kv_heads, tokens, head_size]``, in the cache's dtype or the one
asked for: an fp8 context is converted to the queries' dtype here, once per element,
instead of once per query tile in the context loop (there the conversion is about a
third of the loop's instructions; its ``k_scale``/``v_scale`` stay in the kernel's score
scale and final normalization).  ``tokens`` is the block table's width in tokens, known
on the host without a device sync; rows past a sequence's context are left unwritten
(the kernel masks them).  With a sliding window the rows no query can see, below
``context - window + 1`` rounded down to the kernel's key tile, are left unwritten too
(the kernel's context loop starts at the tile holding the first key its first query
sees): at 84K cached tokens and a 4096-token window that is 95% of the copy.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import torch
import triton
import triton.language as tl

#: The kernel's ``window`` where there is none: wider than any context.
NO_WINDOW = 1 << 30


@triton.jit
def _gather_context_kernel(
    K_CACHE, V_CACHE, BLOCK_TABLE, QUERY_START, SEQ_LENS, KG, VG,
    stride_kcb, stride_kch, stride_kcd, stride_kct,
    stride_vcb, stride_vch, stride_vcd, stride_vct,
    stride_btb, stride_gb, stride_gh, stride_gt, window,
    HEAD_SIZE: tl.constexpr, D_PAD: tl.constexpr, X: tl.constexpr, PAGE: tl.constexpr,
    TOKENS: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    """One program copies ``TOKENS`` context tokens of one sequence and kv head, unless
    they all lie below the first ``ALIGN``-aligned tile the window lets a query see
    (``window``: 2**30 where there is none; ``ALIGN`` a multiple of ``TOKENS``)."""
    t0 = tl.program_id(0) * TOKENS
    seq = tl.program_id(1)
    kv_head = tl.program_id(2)
    q_len = tl.load(QUERY_START + seq + 1) - tl.load(QUERY_START + seq)
    ctx_len = tl.load(SEQ_LENS + seq) - q_len
    if t0 >= ctx_len:
        return
    if t0 < (tl.maximum(ctx_len - window + 1, 0) // ALIGN) * ALIGN:
        return
    offs_t = t0 + tl.arange(0, TOKENS)
    offs_d = tl.arange(0, D_PAD)
    t_ok = offs_t < ctx_len
    ok = t_ok[:, None] & (offs_d < HEAD_SIZE)[None, :]
    blk = tl.load(BLOCK_TABLE + seq * stride_btb + offs_t // PAGE, mask=t_ok, other=0)
    blk = blk.to(tl.int64)
    t_in = offs_t % PAGE
    k_src = (
        K_CACHE + blk[:, None] * stride_kcb + kv_head * stride_kch + t_in[:, None] * stride_kct
        + (offs_d // X)[None, :] * stride_kcd + (offs_d % X)[None, :]
    )  # fmt: skip
    v_src = (
        V_CACHE + blk[:, None] * stride_vcb + kv_head * stride_vch + t_in[:, None] * stride_vct
        + offs_d[None, :] * stride_vcd
    )  # fmt: skip
    # int64: a batch of long contexts passes 2**31 elements
    dst = seq.to(tl.int64) * stride_gb + kv_head.to(tl.int64) * stride_gh
    dst = dst + offs_t[:, None].to(tl.int64) * stride_gt
    dst = dst + offs_d[None, :]
    tl.store(KG + dst, tl.load(k_src, mask=ok).to(KG.dtype.element_ty), mask=ok)
    tl.store(VG + dst, tl.load(v_src, mask=ok).to(VG.dtype.element_ty), mask=ok)


def d_pad_of(head_size: int) -> int:
    """The head size padded to a power of two, at least 16 (plain Python: the launch path
    is host time, and ``triton.next_power_of_2`` is a constexpr function there)."""
    return max(1 << (head_size - 1).bit_length(), 16)


def _buffer_shape(k_cache: torch.Tensor, block_table: torch.Tensor) -> Tuple[int, ...]:
    """``[seqs, kv_heads, table width x page, head_size]``."""
    _blocks, kv_heads, lanes, page, x = k_cache.shape
    return (block_table.shape[0], kv_heads, block_table.shape[1] * page, lanes * x)


def gathered_bytes(
    k_cache: torch.Tensor, block_table: torch.Tensor, dtype: Optional[torch.dtype] = None
) -> int:
    """Bytes the two buffers of :func:`gather_context` take (in ``dtype``, by default the
    cache's)."""
    if dtype is None:
        elem = k_cache.element_size()
    else:  # torch.dtype.itemsize where this torch has it: no allocation per launch
        elem = getattr(dtype, "itemsize", None) or torch.empty(0, dtype=dtype).element_size()
    return 2 * math.prod(_buffer_shape(k_cache, block_table)) * elem


#: Warps of the copy's programs (64 tokens x head_size each).
GATHER_WARPS = 4
#: Context tokens one program copies.
GATHER_TOKENS = 64


def gather_buffers(
    k_cache: torch.Tensor, block_table: torch.Tensor, dtype: Optional[torch.dtype] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The two buffers :func:`gather_context` fills, uninitialized."""
    shape = _buffer_shape(k_cache, block_table)
    dtype = dtype or k_cache.dtype
    kg = torch.empty(shape, dtype=dtype, device=k_cache.device)
    return kg, torch.empty(shape, dtype=dtype, device=k_cache.device)


def context_copy_args(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    kg: torch.Tensor,
    vg: torch.Tensor,
    window: int = 0,
) -> Tuple[Any, ...]:
    """The copy kernel's runtime arguments, in its parameter order."""
    return (
        k_cache, v_cache, block_table, query_start, seq_lens, kg, vg,
        *k_cache.stride()[:4], *v_cache.stride()[:4],
        block_table.stride(0), *kg.stride()[:3], window if window > 0 else NO_WINDOW,
    )  # fmt: skip


def context_copy_launch(
    kg: torch.Tensor, x: int, page: int, block_n: int = 1, tokens: int = GATHER_TOKENS
) -> Tuple[Tuple[int, int, int], Dict[str, int]]:
    """The copy kernel's grid and constexprs for buffers ``kg`` (a plain launch adds
    ``num_warps=GATHER_WARPS``; the prefill launcher relaunches the compiled kernel)."""
    seqs, kv_heads, length, head_size = kg.shape
    grid = (-(-length // tokens), seqs, kv_heads)
    constexprs = dict(
        HEAD_SIZE=head_size, D_PAD=d_pad_of(head_size), X=x, PAGE=page, TOKENS=tokens,
        ALIGN=max(block_n, tokens),
    )  # fmt: skip
    return grid, constexprs


def gather_context(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    tokens: int = GATHER_TOKENS,
    dtype: Optional[torch.dtype] = None,
    window: int = 0,
    block_n: int = 1,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """K and V of every sequence's cached tokens, ``[seqs, kv_heads, L, head_size]``
    with L the block table's width in tokens, in ``dtype`` (by default the cache's; see
    the module docstring).  With a sliding ``window`` (> 0) only the rows from the
    ``block_n``-token tile (the kernel's; a power of two) holding each sequence's first
    visible key on are written.  (The prefill launcher makes the same copy from the
    same three parts, relaunching the compiled kernel.)"""
    kg, vg = gather_buffers(k_cache, block_table, dtype)
    if kg.numel() == 0:
        return kg, vg
    grid, constexprs = context_copy_launch(kg, k_cache.shape[4], k_cache.shape[3], block_n, tokens)
    args = context_copy_args(k_cache, v_cache, block_table, query_start, seq_lens, kg, vg, window)
    _gather_context_kernel[grid](*args, **constexprs, num_warps=GATHER_WARPS)
    return kg, vg


__all__ = [
    "GATHER_TOKENS",
    "GATHER_WARPS",
    "context_copy_args",
    "context_copy_launch",
    "gather_buffers",
    "gather_context",
    "gathered_bytes",
]

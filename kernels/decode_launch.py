"""Host side of the Triton PagedAttention V2 decode: plan, launch config, launch.

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

Everything fixed for one call shape is worked out once, in a :class:`_Plan` (cached by
everything it depends on); a call then looks its plan up and launches:
``run -> _launch -> plan.partition.launch(...) [-> plan.reduce.launch(...)]``.
The kernels: ``decode_kernels.py``; launch choices: ``launch_tables.py``; measurements:
docs/kernel-notes.md.  On Triton >= 3.0 K tiles are loaded in memory order and permuted
(``k3d``), which keeps each load instruction on whole cache lines; older Triton gets the
2-D load and launch tables tuned for it.

A balanced one-launch variant (a fixed grid, partials merged in-kernel in two levels)
was built and measured in session 4 and lost at every shape (run v21); see the notes.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
import triton.language as tl

from . import decode_kernels, launch_tables
from .call import DecodeCall
from .decode_layout import (  # noqa: F401 - group_rows: also read through this module by tune
    Scratch,
    Shape,
    call_shape,
    choose_work,
    contiguity_hints,
    group_rows,
    next_pow2,
    partition_grid,
    smem_tile,
)
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
from .relaunch import TRITON_MAJOR, Relauncher, fast_state, misaligned  # noqa: F401
from .signature import PARTITION_SIZE

# tl.permute / 3-D reshape arrived in Triton 3.0; older Triton keeps the 2-D K load.
HAS_PERMUTE = hasattr(tl, "permute")
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
# Relaunch a plan's compiled kernels through their launchers, skipping Triton's per-call
# argument binding (relaunch.py); off where Triton < 3 or once a launcher fails.
_fast = fast_state()
_MAX_PLANS = 4096
_sm_counts: Dict[Any, int] = {}


def k3d_enabled() -> bool:
    """Whether launches use the k3d K load (and the tables tuned for it)."""
    return HAS_PERMUTE and not _k3d_state["disabled"]


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


#: Partials and counters of every plan (one launch at a time: calls run in stream order).
_scratch = Scratch()


class _Plan:
    """Everything fixed for one (shapes, strides, dtypes, partitions, config): built once,
    so a call only gathers its tensors.  ``partials``: the (exp_sums, max_logits, tmp_out)
    buffers of ours, None where vLLM's own partition buffers take the partials."""

    __slots__ = ("partition", "reduce", "part_strides", "reduce_strides", "n_gc", "partials")
    __slots__ += ("counters", "config", "budget")

    def __init__(
        self, c: DecodeCall, config: Optional[LaunchConfig], k3d: bool, fusable: bool = False
    ) -> None:
        s = call_shape(c, k3d)
        balanced = s.num_seqs <= COMPACT_MAX_SEQS
        work = choose_work(c, s, config, k3d, fusable, sm_count(c.query.device), balanced)
        self.config = config = work.config  # as given or as the tables picked it
        chunk, budget = work.chunk, work.budget
        if chunk & (chunk - 1) or not 16 <= chunk <= PARTITION_SIZE:
            raise ValueError(f"paged_attention_v2 (Triton): chunk {chunk} is not 16-512, 2^k")
        chunk = max(chunk, c.block_size)  # whole blocks per chunk (the V load's hints)
        n_chunks = (c.max_seq_len + chunk - 1) // chunk
        tile, warps, stages, early_v, prefetch, config_k3d = tuple(config)[:6]
        k3d = k3d and bool(config_k3d)
        tile = smem_tile(min(tile, chunk), s, k3d)
        align = max(tile, c.block_size)
        stream = bool(budget) and s.num_seqs > 1 and launch_tables.BALANCED_STREAM
        if budget:
            # Items of a length chosen on the device (>= chunk, whole tiles and blocks),
            # at most budget + sequences of them; a sequence's items: <= budget (its
            # length / chunk <= total / chunk); a stream's ranges may start inside it,
            # one more.
            chunk = max(launch_tables.BALANCED_MIN_CHUNK, align)
            n_chunks = min(budget, -(-c.max_seq_len // chunk) + stream)
        exp_sums, max_logits, tmp_out = self._partial_buffers(c, s, budget, chunk, n_chunks)
        max_parts = n_chunks
        if self.partials is None:
            max_parts = min(exp_sums.shape[2], max_logits.shape[2], tmp_out.shape[2])
        fused = (work.fused or n_chunks <= FUSE_MAX_CHUNKS) and not budget
        self.counters = None
        if fused:
            self.counters = _scratch.counter_buffer(c.query.device, s.num_seqs * s.num_hg)
        fused = self.counters is not None
        compact = 1 < s.num_seqs <= COMPACT_MAX_SEQS and not budget
        # The lengths' vector of the compact and balanced grids; 1: one sequence, no vector.
        ns_pad = 1 if s.num_seqs == 1 else max(2, next_pow2(s.num_seqs))
        self.n_gc = s.n_gc
        self.budget = budget
        self.part_strides = (s.num_seqs, c.num_kv_heads, s.n_gc, max(budget, 1))
        self.part_strides += tuple(c.query.stride())
        self.part_strides += tuple(c.key_cache.stride()) + tuple(c.value_cache.stride())
        self.part_strides += (c.block_tables.stride(0),)
        self.part_strides += tuple(exp_sums.stride()) + tuple(max_logits.stride())
        self.part_strides += tuple(tmp_out.stride()) + tuple(c.out.stride()[:2])
        self.partition = Relauncher(
            decode_kernels.partition_kernel,
            partition_grid(s, budget, stream, compact, n_chunks),
            dict(
                QUERIES_PER_KV=s.qpk,
                G_PAD=s.g_pad,
                HEAD_SIZE=s.head_size,
                D_PAD=s.d_pad,
                X=c.key_cache.shape[4],
                BLOCK_SIZE=c.block_size,
                PART=chunk,
                TILE=tile,
                USE_ALIBI=c.alibi_slopes is not None,
                F32_SPLIT=s.f32_split,
                CONTIG_HINTS=contiguity_hints(c),
                EARLY_V=bool(early_v),
                PREFETCH=int(prefetch),
                K_3D=k3d,
                FUSED=fused,
                P_FUSE=max(2, next_pow2(n_chunks)) if fused else 2,
                COMPACT=compact,
                NS_PAD=ns_pad,
                BALANCED=bool(budget),
                ALIGN=align,
                STREAM=stream,
            ),
            dict(num_warps=warps, num_stages=stages),
            _fast,
        )
        self.reduce = None
        if fused:
            return
        p_rows, d_blk, single, r_warps = reduce_tile(s.num_seqs, n_chunks, s.d_pad)
        self.reduce_strides = (s.num_seqs, max(budget, 1), s.num_heads, max_parts)
        self.reduce_strides += tuple(c.out.stride())
        self.reduce_strides += tuple(exp_sums.stride()) + tuple(max_logits.stride())
        self.reduce_strides += tuple(tmp_out.stride())
        self.reduce = Relauncher(
            decode_kernels.reduce_kernel,
            (s.num_seqs * s.num_heads, s.d_pad // d_blk, 1),
            dict(
                HEAD_SIZE=s.head_size,
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
            _fast,
        )

    def _partial_buffers(
        self, c: DecodeCall, s: Shape, budget: int, chunk: int, n_chunks: int
    ) -> tuple:
        """(exp_sums, max_logits, tmp_out) that take the partition kernel's partials;
        ``partials`` holds them where they are ours, None where they are vLLM's."""
        self.partials: Optional[tuple] = None
        if budget:
            # Balanced items' partials in a buffer of ours, slot = item, shared by every
            # sequence (stride 0): at most budget + sequences items.
            tmp_out, exp_sums, max_logits = (
                t.expand(s.num_seqs, *t.shape[1:])
                for t in _scratch.partial_views(
                    c.tmp_out, 1, s.num_heads, budget + s.num_seqs, s.head_size
                )
            )
        elif chunk == PARTITION_SIZE:  # vLLM's own partition buffers
            return c.exp_sums, c.max_logits, c.tmp_out
        else:
            tmp_out, exp_sums, max_logits = _scratch.partial_views(
                c.tmp_out, s.num_seqs, s.num_heads, n_chunks, s.head_size
            )
        self.partials = (exp_sums, max_logits, tmp_out)
        return self.partials


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
            return max(16, next_pow2(n_chunks)), d_blk, True, 4
        return REDUCE_TILE // d_blk, d_blk, False, 4
    rows = max(2, min(next_pow2(n_chunks), REDUCE_BATCH_ROWS))
    if n_chunks > REDUCE_SINGLE_PASS_MAX:  # a cap on a batch's load too (tests force loops)
        rows = min(rows, max(2, next_pow2(REDUCE_SINGLE_PASS_MAX)))
    d_blk = min(d_pad, max(16, REDUCE_TILE // rows))
    return rows, d_blk, n_chunks <= min(rows, REDUCE_SINGLE_PASS_MAX), REDUCE_BATCH_WARPS


def _plan_key(c: DecodeCall, config: Optional[LaunchConfig], k3d: bool) -> tuple:
    # Everything a plan and Triton's specialization depend on: shapes, strides, dtypes,
    # devices, partitions, and which data pointers are 16-byte aligned (one flag each).
    q, kc = c.query, c.key_cache
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
        # Triton's signature has every pointer's element type
        (c.block_tables.dtype, c.value_cache.dtype, c.out.dtype, c.tmp_out.dtype),
        (c.exp_sums.dtype, c.max_logits.dtype),
        c.num_kv_heads,
        # The chunk count (grid, fused merge) follows the length at the finest chunk.
        -(-c.max_seq_len // (config.chunk if config and config.chunk else launch_tables.MIN_CHUNK)),
        None if c.alibi_slopes is None else c.alibi_slopes.dtype,
        config,
        k3d,
        misaligned(
            q,
            kc,
            c.value_cache,
            c.out,
            c.exp_sums,
            c.max_logits,
            c.tmp_out,
            c.block_tables,
            c.seq_lens,
            c.alibi_slopes,
        ),  # fmt: skip
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

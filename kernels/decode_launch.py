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

from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
import triton
import triton.language as tl

from . import decode_kernels, launch_tables
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


class _Shape(NamedTuple):
    """The call's geometry as the partition kernel sees it."""

    num_seqs: int
    num_heads: int
    head_size: int
    qpk: int  # query heads per kv head
    d_pad: int  # head size padded to a power of two >= 16
    g_pad: int  # rows of one program
    n_gc: int  # programs (group chunks) per kv head
    num_hg: int  # kv heads x group chunks
    f32_split: bool  # fp32 caches: the 3-pass bf16 split product


class _Work(NamedTuple):
    """How the tables cut the call's tokens: the config, the chunk, the balanced budget
    (items per (kv head, group chunk); 0: fixed chunks) and whether the one-launch plan
    in vLLM's partitions applies."""

    config: LaunchConfig
    chunk: int
    budget: int
    fused: bool


def _shape(c: DecodeCall, k3d: bool) -> _Shape:
    num_seqs, num_heads, head_size = c.query.shape
    qpk = num_heads // c.num_kv_heads
    d_pad = max(16, _next_pow2(head_size))
    f32_split = c.key_cache.element_size() == 4
    g_pad = group_rows(qpk)
    if d_pad >= 256 and (f32_split or not k3d):
        # At head 256 the query operand and its layout copies dominate shared memory
        # (fp32's split bf16 query alone fills 64 KB at 64 rows; the 2-D load path of
        # Triton 2.1 needs 53 KB at 32 rows): 16 rows per program, more group chunks.
        g_pad = 16
    n_gc = (qpk + g_pad - 1) // g_pad
    return _Shape(
        num_seqs, num_heads, head_size, qpk, d_pad, g_pad, n_gc, c.num_kv_heads * n_gc, f32_split
    )


def _work(
    c: DecodeCall, s: _Shape, config: Optional[LaunchConfig], k3d: bool, fusable: bool
) -> _Work:
    at_max = s.num_seqs * s.num_hg * c.num_partitions  # programs with 512-token chunks
    picked = config is None
    if config is None:
        config = launch_tables.pick_config(at_max, s.d_pad, s.g_pad, k3d)
    # One launch for short sequences called eagerly (FUSE_MAX_PARTITIONS, _fusable), in
    # vLLM's partitions.
    if fusable and not config.chunk:
        return _Work(config, PARTITION_SIZE, 0, True)
    sms = sm_count(c.query.device)
    balanced = s.num_seqs <= COMPACT_MAX_SEQS
    if picked and balanced and k3d and not s.f32_split:
        # The tables' config for a launch that balances, if it then does balance.
        alt = launch_tables.balanced_config(config, s.g_pad, s.d_pad, s.num_seqs)
        if alt != config and launch_tables.balanced_budget(
            alt, s.g_pad, s.d_pad, sms, s.num_hg, s.num_seqs
        ):
            config = alt
    chunk = launch_tables.pick_chunk(at_max, sms, config, s.g_pad, s.d_pad)
    budget = 0
    if balanced:
        budget = launch_tables.balanced_budget(config, s.g_pad, s.d_pad, sms, s.num_hg, s.num_seqs)
    return _Work(config, chunk, budget, False)


def _smem_tile(tile: int, s: _Shape, k3d: bool) -> int:
    """The config's tile, cut so that one program stays within 48 KB of shared memory (the
    BI-V100's limit; checked by scripts/check_triton_compile.py on Triton 2.1 and 3.x): the
    staged dot operands grow with rows x head size and with the tile."""
    if s.f32_split:  # the 3-pass split product stages hi and lo halves of each operand
        return min(tile, 16 if s.g_pad >= 64 or s.d_pad >= 256 else 32 if s.g_pad >= 32 else 64)
    if s.g_pad >= 64 and s.d_pad >= 256:
        return min(tile, 16)
    if s.g_pad >= 32 and not k3d:  # Triton 2.1's 2-D load: 49408 bytes at 32 x 64
        return min(tile, 32)
    return tile


def _contiguity_hints(c: DecodeCall) -> bool:
    """Whether the contiguity hints hold: they do for vLLM's dense cache layouts (x
    elements contiguous in K, block_size tokens contiguous in V, every block/head/row start
    aligned to them)."""
    ks, vs, x = c.key_cache.stride(), c.value_cache.stride(), c.key_cache.shape[4]
    return (
        ks[4] == 1
        and all(v % x == 0 for v in ks[:4])
        and vs[3] == 1
        and all(v % c.block_size == 0 for v in vs[:3])
    )


def _partition_grid(s: _Shape, budget: int, stream: bool, compact: bool, n_chunks: int) -> tuple:
    if stream:
        return (s.num_hg * budget, 1, 1)
    if budget:
        return (s.num_hg * (budget + s.num_seqs), 1, 1)
    if compact:  # sequences x chunks of the longest (>= 1): an upper bound of the items
        return (s.num_hg * s.num_seqs * max(n_chunks, 1), 1, 1)
    return (s.num_seqs * s.num_hg, n_chunks, 1)


class _Plan:
    """Everything fixed for one (shapes, strides, dtypes, partitions, config): built once,
    so a call only gathers its tensors.  ``partials``: the (exp_sums, max_logits, tmp_out)
    buffers of ours, None where vLLM's own partition buffers take the partials."""

    __slots__ = ("partition", "reduce", "part_strides", "reduce_strides", "n_gc", "partials")
    __slots__ += ("counters", "config", "budget")

    def __init__(
        self, c: DecodeCall, config: Optional[LaunchConfig], k3d: bool, fusable: bool = False
    ) -> None:
        s = _shape(c, k3d)
        work = _work(c, s, config, k3d, fusable)
        self.config = config = work.config  # as given or as the tables picked it
        chunk, budget = work.chunk, work.budget
        if chunk & (chunk - 1) or not 16 <= chunk <= PARTITION_SIZE:
            raise ValueError(f"paged_attention_v2 (Triton): chunk {chunk} is not 16-512, 2^k")
        chunk = max(chunk, c.block_size)  # whole blocks per chunk (the V load's hints)
        n_chunks = (c.max_seq_len + chunk - 1) // chunk
        tile, warps, stages, early_v, prefetch, config_k3d = tuple(config)[:6]
        k3d = k3d and bool(config_k3d)
        tile = _smem_tile(min(tile, chunk), s, k3d)
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
        ns_pad = 1 if s.num_seqs == 1 else max(2, _next_pow2(s.num_seqs))
        self.n_gc = s.n_gc
        self.budget = budget
        self.part_strides = (s.num_seqs, c.num_kv_heads, s.n_gc, max(budget, 1))
        self.part_strides += tuple(c.query.stride())
        self.part_strides += tuple(c.key_cache.stride()) + tuple(c.value_cache.stride())
        self.part_strides += (c.block_tables.stride(0),)
        self.part_strides += tuple(exp_sums.stride()) + tuple(max_logits.stride())
        self.part_strides += tuple(tmp_out.stride()) + tuple(c.out.stride()[:2])
        self.partition = _Kernel(
            decode_kernels.partition_kernel,
            _partition_grid(s, budget, stream, compact, n_chunks),
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
                CONTIG_HINTS=_contiguity_hints(c),
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
        self.reduce = None
        if fused:
            return
        p_rows, d_blk, single, r_warps = reduce_tile(s.num_seqs, n_chunks, s.d_pad)
        self.reduce_strides = (s.num_seqs, max(budget, 1), s.num_heads, max_parts)
        self.reduce_strides += tuple(c.out.stride())
        self.reduce_strides += tuple(exp_sums.stride()) + tuple(max_logits.stride())
        self.reduce_strides += tuple(tmp_out.stride())
        self.reduce = _Kernel(
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
        )

    def _partial_buffers(
        self, c: DecodeCall, s: _Shape, budget: int, chunk: int, n_chunks: int
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

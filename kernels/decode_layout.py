"""What one decode call's shape means for the kernels, worked out once per plan.

The rows of one partition program (a kv head's query heads, padded for ``tl.dot``), the
config and how it cuts the tokens (chunks or balanced items), the tile that keeps one
program within 48 KB of shared memory, whether the caches' strides allow the contiguity
hints, the partition grid, and the per-device scratch buffers that hold partials where
vLLM's own partition buffers do not fit.  Nothing here runs per call, and nothing reads
a module setting: ``decode_launch.py`` passes its settings in, builds a plan from these
and caches it.
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional

import torch

from . import launch_tables
from .call import DecodeCall
from .launch_tables import LaunchConfig
from .signature import PARTITION_SIZE


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


MAX_GROUP_ROWS = 64


def group_rows(queries_per_kv: int) -> int:
    """Rows of one partition program: its kv head's query heads, padded to a power of two
    >= 16 (``tl.dot``'s minimum) and capped at MAX_GROUP_ROWS (larger groups take several
    programs)."""
    return max(16, min(next_pow2(queries_per_kv), MAX_GROUP_ROWS))


class Shape(NamedTuple):
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


def call_shape(c: DecodeCall, k3d: bool) -> Shape:
    num_seqs, num_heads, head_size = c.query.shape
    qpk = num_heads // c.num_kv_heads
    d_pad = max(16, next_pow2(head_size))
    f32_split = c.key_cache.element_size() == 4
    g_pad = group_rows(qpk)
    if d_pad >= 256 and (f32_split or not k3d):
        # At head 256 the query operand and its layout copies dominate shared memory
        # (fp32's split bf16 query alone fills 64 KB at 64 rows; the 2-D load path of
        # Triton 2.1 needs 53 KB at 32 rows): 16 rows per program, more group chunks.
        g_pad = 16
    n_gc = (qpk + g_pad - 1) // g_pad
    return Shape(
        num_seqs, num_heads, head_size, qpk, d_pad, g_pad, n_gc, c.num_kv_heads * n_gc, f32_split
    )


class Work(NamedTuple):
    """How the tables cut the call's tokens: the config, the chunk, the balanced budget
    (items per (kv head, group chunk); 0: fixed chunks) and whether the one-launch plan
    in vLLM's partitions applies."""

    config: LaunchConfig
    chunk: int
    budget: int
    fused: bool


def choose_work(
    c: DecodeCall,
    s: Shape,
    config: Optional[LaunchConfig],
    k3d: bool,
    fusable: bool,
    sms: int,
    balanced: bool,
) -> Work:
    """The config (``config``, or the tables' pick), and how it cuts the tokens: ``sms``,
    the device's SM count (0: unknown); ``balanced``, whether the batch is small enough
    for balanced items."""
    at_max = s.num_seqs * s.num_hg * c.num_partitions  # programs with 512-token chunks
    picked = config is None
    if config is None:
        config = launch_tables.pick_config(at_max, s.d_pad, s.g_pad, k3d)
    # One launch for short sequences called eagerly (FUSE_MAX_PARTITIONS, _fusable), in
    # vLLM's partitions.
    if fusable and not config.chunk:
        return Work(config, PARTITION_SIZE, 0, True)
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
    return Work(config, chunk, budget, False)


def smem_tile(tile: int, s: Shape, k3d: bool) -> int:
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


def contiguity_hints(c: DecodeCall) -> bool:
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


def partition_grid(s: Shape, budget: int, stream: bool, compact: bool, n_chunks: int) -> tuple:
    if stream:
        return (s.num_hg * budget, 1, 1)
    if budget:
        return (s.num_hg * (budget + s.num_seqs), 1, 1)
    if compact:  # sequences x chunks of the longest (>= 1): an upper bound of the items
        return (s.num_hg * s.num_seqs * max(n_chunks, 1), 1, 1)
    return (s.num_seqs * s.num_hg, n_chunks, 1)


class Scratch:
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

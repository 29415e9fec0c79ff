"""Launch configs of the partition kernel, and the rule that picks one.

Pure Python (no torch, no Triton): the tool's ``tune`` command and the AOT compile check
read these tables without a GPU.  Every default was timed on an H200 (runs and numbers:
docs/kernel-notes.md); a tuning file measured on the target device (``vllm-codemod
tune``) overrides them per shape.  Programs = sequences x kv heads x group chunks x
512-token partitions; tables keyed by padded head size.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Sequence


class LaunchConfig(NamedTuple):
    """How the partition kernel is launched.

    tile: tokens per loop step; warps/stages: Triton's num_warps/num_stages; early_v: issue
    the V load before the QK product; prefetch: 0 none, 1 block ids one tile ahead, 2 block
    ids and K/V one tile ahead (register double buffer); k3d: load K tiles in memory order,
    whole lines per load instruction (Triton >= 3.0; older Triton keeps the 2-D load);
    chunk: tokens per program (a power of two >= tile and <= 512; 512 writes vLLM's own
    partition buffers), 0 = chosen by :func:`pick_chunk`; slots: programs per SM that a
    balanced launch (chunk 0) plans its one wave for, 0 = the figure measured for this
    config on an H200 where there is one (:func:`balanced_slots`), else no balancing.
    ``tune`` times other figures on the target device, whose register file and limits
    set how many programs really share an SM.
    """

    tile: int
    warps: int
    stages: int
    early_v: bool = True
    prefetch: int = 0
    k3d: bool = False
    chunk: int = 0
    slots: int = 0


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
# Since run v25 the same config also takes every 16-row program count at head <= 128 (a
# GQA group of <= 16 query heads), with the chunk rule below filling the SMs: (64,2,1) and
# (32,2,1,pf1) lost to it at every single-sequence shape once the chunk was chosen.
# 64 rows per program (33-64+ query heads per kv head: MQA models), head <= 128: four warps
# spread the [64, D] accumulator; the 1-2 warp configs above spill there (run v18: 3.5x
# faster at 128 x 16K tokens, 1.3-1.7x at 1024 and 196 programs).
K3D_WIDE_GROUP_CONFIG = LaunchConfig(64, 4, 1, True, k3d=True)
K3D_WIDE_GROUP_MANY_CONFIG = LaunchConfig(32, 4, 1, True, prefetch=1, k3d=True)

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

# Tokens per program ("chunk").  vLLM's 512-token partitions give a single long sequence
# few programs (one 32K sequence with 8 kv heads: 512, for 1056 one-warp slots on an
# H200), and a program count just past a whole number of waves leaves a half-empty last
# wave (one 100K sequence: 1568 = 1.48 waves).  For the one-warp k3d config at 16 rows
# (K3D_MANY_PROGRAMS_CONFIG: 251-255 registers, 8 programs per SM), the chunk is the
# smallest of 512/256/128 whose programs still fit one wave; when even 512 needs more,
# the one whose last wave is fullest (ties: the larger chunk).  Run v25 (H200, per call
# in a 20-call graph): 1 x 100K 32/8 114.9 -> 106.6 us (chunk 256), 1 x 100K 28/4 74.8 ->
# 59.8 us (512 with this config), 1 x 32K 43.1 -> 39.4 us (256).  Chunks below 512 keep
# their partials in a scratch buffer of ours (vLLM's buffers have one slot per 512
# tokens).  Other configs keep 512: head 256 measured slower at 256 and 128 (v25), and
# nothing else was measured.
CHUNKS = (512, 256, 128)
MAX_CHUNK = CHUNKS[0]
MIN_CHUNK = CHUNKS[-1]
K3D_SLOTS_PER_SM = 8

_override: Optional[LaunchConfig] = None


def set_config_override(config: Optional[Sequence]) -> None:
    """Force one config (a LaunchConfig or a tuple of its 3-8 leading fields) for every
    launch; None restores the tables.  For tests, benchmarks and ``tune``."""
    global _override
    _override = None if config is None else LaunchConfig(*config)


def config_override() -> Optional[LaunchConfig]:
    return _override


def pick_config(programs: int, d_pad: int, g_pad: int = 16, k3d: bool = True) -> LaunchConfig:
    """The launch config for ``programs`` partition programs at padded head size ``d_pad``
    with ``g_pad`` rows per program; ``k3d`` says whether the k3d tables apply (Triton
    >= 3 and the k3d kernel not failed here)."""
    if _override is not None:
        return _override
    if k3d:
        if g_pad >= WIDE_GROUP_ROWS and d_pad <= 128:
            many = programs >= K3D_MANY_PROGRAMS
            return K3D_WIDE_GROUP_MANY_CONFIG if many else K3D_WIDE_GROUP_CONFIG
        if d_pad <= 128 and (g_pad <= 16 or programs >= K3D_MANY_PROGRAMS):
            return K3D_MANY_PROGRAMS_CONFIG
        return K3D_CONFIGS.get(d_pad, FALLBACK_CONFIG._replace(k3d=True))
    if g_pad >= WIDE_GROUP_ROWS and d_pad <= 128:
        return WIDE_GROUP_MANY_CONFIG if programs >= MANY_PROGRAMS else WIDE_GROUP_CONFIG
    if MANY_PROGRAMS <= programs < MID_PROGRAMS_LIMIT and d_pad <= 128:
        return MID_PROGRAMS_CONFIG
    if programs >= MANY_PROGRAMS and d_pad <= 128:
        return MANY_PROGRAMS_CONFIG
    return DEFAULT_CONFIGS.get(d_pad, FALLBACK_CONFIG)


def pick_chunk(programs_at_max: int, sms: int, config: LaunchConfig, g_pad: int, d_pad: int) -> int:
    """Tokens per program for ``config``, given the programs 512-token chunks would launch
    and the device's SM count (0: unknown, e.g. Triton's interpreter): see CHUNKS."""
    if config.chunk:
        return config.chunk
    if not (sms and config == K3D_MANY_PROGRAMS_CONFIG and g_pad <= 16 and d_pad <= 128):
        return MAX_CHUNK
    slots = K3D_SLOTS_PER_SM * sms
    waves = {c: programs_at_max * (MAX_CHUNK // c) / slots for c in CHUNKS}
    fits = [c for c in CHUNKS if waves[c] <= 1]
    if fits:
        return fits[-1]
    return min(CHUNKS, key=lambda c: (round(-(-waves[c] // 1) / waves[c], 3), -c))


# Balanced items (BALANCED in decode_launch, session 6): one item length for the whole call,
# computed on the device from the lengths' total, so that the full items fill whole waves
# of the config's programs per SM; every sequence adds at most one shorter item.  Runs
# v29-v30 (H200, per call in a 20-call graph, against the chunk rule and compact grid
# above): one sequence in one wave, 1 x 100K 32/8 104.9 -> 100.8 us, 28/4 59.0 -> 56.5;
# a batch of up to BALANCED_MAX_SEQS sequences in two waves, ragged 16 121.8 -> 109.1,
# 8 x 32K 255.6 -> 254.7.  One wave over a batch of items loses: the shorter items finish
# early and the full items that did not fit start a second wave (64 x 4K: 395.6 us).
BALANCED_WAVES = (1, 2)  # waves for one sequence, for a batch; 0 turns balancing off
BALANCED_MAX_SEQS = 16
BALANCED_MIN_CHUNK = 128
# Batches as one stream (STREAM in decode_launch, session 7): the sequences laid end to end
# and cut into equal token ranges, one wave of them, a range crossing sequence ends where
# it falls there, so every program carries the same work whatever the lengths.  Runs
# v36-v38 (H200, per call in a 20-call graph, against session 6's rule, both with the
# one-warp batch reduce): ragged 16 107.1 vs 106.9 us, 8 x 32K 255.6 vs 257.1, ragged 64
# (1-8K tokens) 239.4 vs 246.4, ragged 256 (1-4K) 526.8 vs 585.6; uniform 64 x 4K loses
# 1.2% (260.3 vs 257.3: a range covers two sequences' segments there).  Two or three
# waves were slower at every batch (v34, v36).
BALANCED_STREAM = True
STREAM_WAVES = 1
STREAM_MAX_SEQS = 256
# Head 256, one sequence: two warps (255 registers, 4 programs per SM) in one balanced
# wave beat the table's four-warp config at 512-token chunks: 1 x 100K 16/2 63.7 and 61.8
# us against 64.9 and 64.7 (v29, v30).  Unbalanced, the same config is slower (67.2).
# Only one sequence and 2-byte caches were measured; elsewhere the table's config stays.
K3D_BALANCED_HEAD256_CONFIG = LaunchConfig(32, 2, 1, True, prefetch=1, k3d=True)
BALANCED_FORCE_SLOTS = 0  # benchmarks: this many programs per SM for any config


def balanced_slots(config: LaunchConfig, g_pad: int, d_pad: int) -> int:
    """Programs per SM of ``config`` for balanced items: its own ``slots`` (a tuning
    file's, measured on the target device), else where the config was measured on an
    H200 (its register-limited residency, runs v25 and v29), else 0."""
    if BALANCED_FORCE_SLOTS:
        return BALANCED_FORCE_SLOTS
    if config.slots:
        return config.slots
    if g_pad > 16:
        return 0
    if d_pad <= 128 and config == K3D_MANY_PROGRAMS_CONFIG:
        return K3D_SLOTS_PER_SM
    if d_pad == 256 and config == K3D_BALANCED_HEAD256_CONFIG:
        return 4
    return 0


def balanced_config(config: LaunchConfig, g_pad: int, d_pad: int, seqs: int) -> LaunchConfig:
    """The tables' ``config`` for a launch that may balance: head 256 with one sequence of
    a 16-row group takes K3D_BALANCED_HEAD256_CONFIG (2-byte caches; the caller decides)."""
    if _override is None and seqs == 1 and g_pad <= 16 and d_pad == 256:
        if config == K3D_CONFIGS[256]:
            return K3D_BALANCED_HEAD256_CONFIG
    return config


def balanced_budget(
    config: LaunchConfig, g_pad: int, d_pad: int, sms: int, groups: int, seqs: int = 1
) -> int:
    """Full items (a batch's stream: ranges) per (kv head, group chunk) for a balanced
    launch of ``seqs`` sequences, or 0 for the chunk rule: the config's programs per SM x
    SMs x waves, shared by ``groups``.  An explicit chunk in the config, an unknown SM
    count or an unmeasured config keep the chunk rule."""
    if BALANCED_WAVES == 0:
        return 0
    if seqs > 1 and BALANCED_STREAM:
        waves, most = STREAM_WAVES, STREAM_MAX_SEQS
    else:
        waves = BALANCED_WAVES if isinstance(BALANCED_WAVES, int) else BALANCED_WAVES[seqs > 1]
        most = BALANCED_MAX_SEQS
    if config.chunk or not sms or waves <= 0 or seqs > most:
        return 0
    slots = balanced_slots(config, g_pad, d_pad)
    return max(1, slots * sms * waves // groups) if slots else 0

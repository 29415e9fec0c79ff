"""Launch configs of the fused decode kernel, and the rule that picks one.

Pure Python (no torch, no Triton): the tool's ``tune`` command and the AOT compile check
read these tables without a GPU.  Every default here was timed on an H200 (runs and
numbers: docs/kernel-notes.md) and keeps its shared memory within 48 KB per program, the
BI-V100's limit (checked by scripts/check_triton_compile.py).  A tuning file measured on
the target device (``vllm-codemod tune``) overrides them per shape.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence


class FusedConfig(NamedTuple):
    """How the fused kernel is launched.

    tile: tokens per loop step; warps/stages: Triton's num_warps/num_stages; early_v: issue
    the V load before the QK product; prefetch: block ids one tile ahead; k3d: load K tiles
    in memory order (whole lines per load instruction; Triton >= 3.0 only, ignored before);
    programs_per_sm: the grid is SMs x this (every program gets an equal share of the
    batch's tiles); merge_group: the most partials one program merges (fan-in of the
    two-level in-kernel reduction).
    """

    tile: int
    warps: int
    stages: int = 1
    early_v: bool = True
    prefetch: int = 0
    k3d: bool = True
    programs_per_sm: int = 4
    merge_group: int = 16


# Keyed by padded head size; rows per program <= 32.
DEFAULT_CONFIGS = {
    32: FusedConfig(64, 4, programs_per_sm=4),
    64: FusedConfig(64, 4, programs_per_sm=4),
    128: FusedConfig(64, 4, programs_per_sm=4),
    256: FusedConfig(32, 4, programs_per_sm=2),
}
FALLBACK_CONFIG = FusedConfig(32, 4, programs_per_sm=2)
# 64 rows per program (MQA-sized groups): a [64, TILE] score tile and [64, D] accumulator
# need the smaller tile to stay out of local memory.
WIDE_GROUP_ROWS = 64
WIDE_GROUP_CONFIG = FusedConfig(32, 4, programs_per_sm=4)

_override: Optional[FusedConfig] = None


def set_config_override(config: Optional[Sequence]) -> None:
    """Force one config (a FusedConfig or a tuple of its leading fields) for every launch;
    None restores the tables.  For tests, benchmarks and ``tune``."""
    global _override
    _override = None if config is None else FusedConfig(*config)


def config_override() -> Optional[FusedConfig]:
    return _override


def pick_config(d_pad: int, g_pad: int) -> FusedConfig:
    """The default config for padded head size ``d_pad`` and ``g_pad`` rows per program."""
    if _override is not None:
        return _override
    if g_pad >= WIDE_GROUP_ROWS and d_pad <= 128:
        return WIDE_GROUP_CONFIG
    return DEFAULT_CONFIGS.get(d_pad, FALLBACK_CONFIG)

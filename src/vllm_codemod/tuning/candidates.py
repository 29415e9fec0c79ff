"""Which V2 launch configs to time at a point: the default and a few neighbours.

The search is deliberately small (a budget of seconds to minutes per device): the config
the built-in tables pick for the point, every config the tables hold for the current
load path (k3d or 2-D), and single-step neighbours of the default (each explicit chunk
size first, then the balanced wave planned for other programs-per-SM figures, then tile,
warps, stages, prefetch halved/doubled/toggled). Anything the hardware cannot run (too
much shared memory, too many registers) fails at compile or launch and is listed as
skipped.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from .shapes import Shape

Config = Tuple[Any, ...]
#: At most this many candidates besides the default, per point.
MAX_CANDIDATES = 10
TILES = (16, 32, 64, 128)
WARPS = (1, 2, 4, 8)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def programs(impl: Any, shape: Shape, num_seqs: int, max_seq_len: int, partition: int) -> int:
    qpk = shape.num_heads // shape.num_kv_heads
    g_pad = impl.group_rows(qpk)
    chunks = (qpk + g_pad - 1) // g_pad
    parts = (max_seq_len + partition - 1) // partition
    return num_seqs * shape.num_kv_heads * chunks * parts


def default_config(impl: Any, shape: Shape, num_seqs: int, max_seq_len: int, device: Any) -> Config:
    """What the kernel's own tables pick here (``pick_config`` with no override)."""
    qpk = shape.num_heads // shape.num_kv_heads
    d_pad = max(16, _next_pow2(shape.head_size))
    n = programs(impl, shape, num_seqs, max_seq_len, 512)
    impl.set_config_override(None)
    return tuple(impl.pick_config(n, d_pad, device, impl.group_rows(qpk)))


def _table_configs(impl: Any) -> List[Config]:
    names = (
        ["K3D_CONFIGS", "K3D_MANY_PROGRAMS_CONFIG", "K3D_WIDE_GROUP_CONFIG",
         "K3D_WIDE_GROUP_MANY_CONFIG"]
        if impl.k3d_enabled()
        else ["DEFAULT_CONFIGS", "MANY_PROGRAMS_CONFIG", "MID_PROGRAMS_CONFIG",
              "WIDE_GROUP_CONFIG", "WIDE_GROUP_MANY_CONFIG", "FALLBACK_CONFIG"]
    )  # fmt: skip
    found: List[Config] = []
    for name in names:
        value = getattr(impl, name, None)
        values = value.values() if isinstance(value, dict) else [value]
        found.extend(tuple(v) for v in values if v is not None)
    return found


#: Tokens per program tried beside the built-in rule's choice (LaunchConfig.chunk).
CHUNKS = (512, 256, 128)


def _slots_now(impl: Any, config: Any, shape: Optional[Shape], num_seqs: int) -> Optional[int]:
    """Programs per SM the kernels would balance ``config`` for at this point (0: not
    balanced), or None where balancing cannot apply: a tree whose kernels have no
    ``slots`` field, or where the kernels' own budget rule refuses (an explicit chunk,
    balancing off, a batch past its limit) whatever the figure."""
    tables = getattr(impl, "launch_tables", None)
    if shape is None or "slots" not in config._fields or not hasattr(tables, "balanced_budget"):
        return None
    g_pad = impl.group_rows(shape.num_heads // shape.num_kv_heads)
    d_pad = max(16, _next_pow2(shape.head_size))
    if not tables.balanced_budget(config._replace(slots=1), g_pad, d_pad, 1, 1, num_seqs):
        return None
    return int(tables.balanced_slots(config, g_pad, d_pad))


def _slot_counts(config: Any, now: int) -> List[int]:
    """Other residencies to plan the balanced wave for: around the H200's figure, or for
    a config never measured there (0, e.g. Triton 2.x's tables) two guesses by warps."""
    if now:
        counts = [now // 2, 3 * now // 4, 3 * now // 2]
    else:
        counts = [8 // config.warps, 16 // config.warps]
    return [c for c in dict.fromkeys(counts) if c >= 1 and c != now]


def _neighbours(
    impl: Any, base: Config, shape: Optional[Shape] = None, num_seqs: int = 1
) -> List[Config]:
    config = impl.LaunchConfig(*base)
    out = []
    if "chunk" in config._fields and not config.chunk:  # the chunk rule was measured on an H200
        out += [config._replace(chunk=c) for c in CHUNKS]
    now = _slots_now(impl, config, shape, num_seqs)
    if now is not None:  # so was the residency a balanced launch plans for
        out += [config._replace(slots=n) for n in _slot_counts(config, now)]
    i = TILES.index(config.tile) if config.tile in TILES else None
    if i is not None:
        out += [config._replace(tile=TILES[j]) for j in (i - 1, i + 1) if 0 <= j < len(TILES)]
    w = WARPS.index(config.warps) if config.warps in WARPS else None
    if w is not None:
        out += [config._replace(warps=WARPS[j]) for j in (w - 1, w + 1) if 0 <= j < len(WARPS)]
    out.append(config._replace(stages=2 if config.stages == 1 else 1))
    out.append(config._replace(prefetch=0 if config.prefetch else 1))
    out.append(config._replace(early_v=not config.early_v))
    return [tuple(c) for c in out]


def v2_candidates(
    impl: Any, default: Config, shape: Optional[Shape] = None, num_seqs: int = 1
) -> List[Config]:
    """Candidates other than ``default``, most promising first, without duplicates;
    with ``shape``, also the default balanced for other residencies (``slots``)."""
    seen = {tuple(impl.LaunchConfig(*default))}
    chosen: List[Config] = []
    for config in _neighbours(impl, default, shape, num_seqs) + _table_configs(impl):
        full = tuple(impl.LaunchConfig(*config))
        if full in seen:
            continue
        seen.add(full)
        chosen.append(full)
    return chosen[:MAX_CANDIDATES]

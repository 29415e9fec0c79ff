"""Host side of the prefix-prefill kernel: pick a launch config, size the grid, launch.

The per-call path is short on purpose (prefill calls are milliseconds, but a chunked
prefill of many small sequences calls it often): read shapes and strides, look up the
config, launch.  Configs are (BLOCK_M, BLOCK_N, num_warps, num_stages).  The built-in
defaults fit 48 KB of shared memory per program (the BI-V100's limit; estimated by
:func:`shared_bytes`, checked by ``scripts/check_triton_compile.py``); a tuning file
measured on the device by ``vllm-codemod tune`` may hold larger ones for its device
(:func:`set_prefill_configs`).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch

from . import prefill_gather
from .decode_launch import HAS_PERMUTE  # Triton 3.0+: the 3-D K load
from .log import log
from .prefill_declines import Triton2Refusal
from .prefill_gather import (
    GATHER_WARPS,
    context_copy_args,
    context_copy_launch,
    d_pad_of,
    gather_buffers,
    gathered_bytes,
)
from .prefill_kernels import LOG2E, _prefix_prefill_kernel
from .relaunch import Relauncher, fast_state, misaligned

#: Launch plans by everything Triton specializes on (:class:`_Plan`), and the switch for
#: relaunching their compiled kernels (relaunch.py; off where Triton < 3).
_plans: Dict[tuple, _Plan] = {}
_MAX_PLANS = 1024
_fast = fast_state()

#: Shared memory per program every built-in config must fit (BI-V100: 48 KB per block).
PORTABLE_SHARED_BYTES = 48 * 1024


class PrefillConfig(NamedTuple):
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


#: Built-in configs by padded head size, for 16-bit inputs: each fits 48 KB (the compile
#: check, scripts/check_triton_compile.py, measures it; docs/kernel-notes.md has the table
#: and the H100 sweep they were picked from: the fastest config within 48 KB per head).
DEFAULT_CONFIGS: Dict[int, PrefillConfig] = {
    32: PrefillConfig(128, 64, 4, 2),
    64: PrefillConfig(128, 64, 4, 2),
    128: PrefillConfig(128, 32, 4, 1),
    256: PrefillConfig(64, 16, 4, 1),
}
#: The same for fp32 inputs, whose tiles are twice as large (not measured: the largest
#: tiles of the 16-bit shape that still fit 48 KB).
FP32_CONFIGS: Dict[int, PrefillConfig] = {
    32: PrefillConfig(64, 64, 4, 1),
    64: PrefillConfig(64, 64, 4, 1),
    128: PrefillConfig(32, 32, 4, 1),
    256: PrefillConfig(16, 16, 4, 1),
}

#: 16-bit queries over fp8 caches: where the fp8 -> 16-bit conversion of the tiles needs
#: more shared memory (68 KB at BLOCK_M 128 / head 128 and BLOCK_M 64 / head 256 on sm_80,
#: where Triton has no native fp8 conversion), the largest tiles that stay within 48 KB.
FP8_CACHE_CONFIGS: Dict[int, PrefillConfig] = {
    128: PrefillConfig(64, 64, 4, 1),
    256: PrefillConfig(32, 32, 4, 1),
}

#: Triton 2.x (no ``tl.permute``: the kernel's ``LEGACY`` forms) lays the same tiles out
#: with more shared memory than 3.x (53 KB at the 3.x head-128 default; the compile
#: check on Triton 2.1), so it gets tiles that fit 48 KB there: 16-bit, then fp32 inputs.
#: fp32 at head 256 has none (50 KB at the smallest tiles, 16 x 16): such launches, and
#: fp8 caches, are refused (:class:`Triton2Refusal`; the tree's kernel runs them).
#: Compile-checked only: no GPU with Triton 2.x was reachable to time them.
LEGACY_CONFIGS: Dict[int, PrefillConfig] = {
    32: PrefillConfig(64, 64, 4, 2),
    64: PrefillConfig(64, 64, 4, 2),
    128: PrefillConfig(64, 32, 4, 1),
    256: PrefillConfig(32, 16, 4, 1),
}
LEGACY_FP32_CONFIGS: Dict[int, PrefillConfig] = {
    32: PrefillConfig(32, 32, 4, 1),
    64: PrefillConfig(32, 32, 4, 1),
    128: PrefillConfig(32, 16, 4, 1),
}

#: Configs a tuning file installed for this process: (padded head, element bytes) -> config.
_tuned: Dict[Tuple[int, int], PrefillConfig] = {}
#: Size tiers a tuning file installed: (padded head, element bytes) -> (below, config):
#: launches whose :func:`work_estimate` is under ``below`` take ``config`` (None: the
#: built-in default) instead of ``_tuned``'s.  ``tune`` measured where the tiers part.
_small: Dict[Tuple[int, int], Tuple[int, Optional[PrefillConfig]]] = {}
#: Whether _tuned is settled: read from the tree's tuning tables at the first launch
#: (never at import: the device name needs CUDA), or set by set_prefill_configs.
_tables_read = [False]


def shared_bytes(config: PrefillConfig, d_pad: int, elem_bytes: int) -> int:
    """Shared memory a config needs, estimated: Q once, K and V tiles per pipeline stage."""
    q_tile = config.block_m * d_pad * elem_bytes
    kv_tiles = 2 * config.block_n * d_pad * elem_bytes
    return q_tile + max(config.num_stages, 1) * kv_tiles


def work_estimate(q: torch.Tensor, block_table: torch.Tensor, page: int) -> int:
    """A launch's size as the host knows it without reading lengths off the device: new
    tokens x query heads x the block table's width in tokens (the most keys a query can
    see).  ``tune`` parts its size tiers on this scale (:func:`set_prefill_configs`).

    Why tiers: a small launch does not fill the GPU with the large tiles that win on
    long prompts, and pays the context copy they need; on an H100 the tuned head-128
    config took 207 us at 1K+512 tokens, the built-in one 72 us."""
    return q.shape[0] * q.shape[1] * block_table.shape[1] * page


def _small_tiers(small: Dict[Tuple[int, int], Any]) -> Dict[Tuple[int, int], Any]:
    return {
        key: (int(below), None if cfg is None else PrefillConfig(*cfg))
        for key, (below, cfg) in small.items()
    }


def set_prefill_configs(
    table: Optional[Dict[Tuple[int, int], Any]],
    small: Optional[Dict[Tuple[int, int], Tuple[int, Any]]] = None,
) -> None:
    """Install (or with None, clear) the configs measured for this device, and their
    size tiers (``small``: key -> (below, config or None), see ``_small``); either way
    the tuning tables are not read after this (``reset_prefill_configs`` reads them
    again)."""
    _tuned.clear()
    _small.clear()
    _tables_read[0] = True
    if table:
        _tuned.update({key: PrefillConfig(*cfg) for key, cfg in table.items()})
    if small:
        _small.update(_small_tiers(small))


def reset_prefill_configs() -> None:
    """Forget installed configs; the next launch reads the tuning tables again."""
    _tuned.clear()
    _small.clear()
    _tables_read[0] = False


def _read_tables(device: torch.device) -> None:
    """The tuning tables' prefill entries for this device (``tuned.prefill_configs``
    and ``tuned.prefill_small``), once per process; a table that cannot be read leaves
    the built-in defaults."""
    _tables_read[0] = True
    try:
        from .tuned import prefill_configs, prefill_small

        found = prefill_configs(device)
        small = _small_tiers(prefill_small(device))
    except Exception as exc:  # a damaged table must not take prefill down
        log.warning("vllm-codemod: prefill configs from the tuning tables unused (%s)", exc)
        return
    _tuned.update({key: PrefillConfig(*cfg) for key, cfg in found.items()})
    _small.update(small)
    if found or small:
        log.info("vllm-codemod: prefill launch configs from a tuning table: %s; below a "
                 "size: %s", found, small)  # fmt: skip


def _built_in(d_pad: int, elem_bytes: int, fp8_cache: bool) -> PrefillConfig:
    key = min(max(d_pad, 32), 256)
    if not HAS_PERMUTE:  # Triton 2.x; fp8 caches are refused there (the launch)
        config = (LEGACY_FP32_CONFIGS if elem_bytes > 2 else LEGACY_CONFIGS).get(key)
        if config is None:
            raise Triton2Refusal(
                f"prefill: no {8 * elem_bytes}-bit config for head {d_pad} fits 48 KB "
                "of shared memory under Triton 2.x"
            )
        return config
    if elem_bytes > 2:
        return FP32_CONFIGS[key]
    if fp8_cache and key in FP8_CACHE_CONFIGS:
        return FP8_CACHE_CONFIGS[key]
    return DEFAULT_CONFIGS[key]


def pick_config(d_pad: int, elem_bytes: int, fp8_cache: bool = False) -> PrefillConfig:
    """The tuned config for this head size and element width, else the built-in default
    (for its cache type: fp8 caches have their own where the default would not fit).

    A tuned config applies to caches of the query's dtype only: ``tune`` times 16-bit
    caches, and an fp8 cache's conversion needs shared memory beyond the estimate that
    admitted the config (on sm_80 the 48 KB head-128 default needs 68 KB with fp8
    caches), so a config that fits a device's limit with 16-bit caches may not with fp8
    ones.  (A launch that gathers an fp8 context converts it first, and then takes the
    tuned config: ``_plan``.)  Size tiers are the launcher's (``_plan``); this is the
    config for launches above them."""
    tuned = None if fp8_cache else _tuned.get((d_pad, elem_bytes))
    if tuned is not None:
        return tuned
    return _built_in(d_pad, elem_bytes, fp8_cache)


def _tuned_for(key: Tuple[int, int], work: int) -> Optional[PrefillConfig]:
    """The tuned config for a launch of this size: its size tier's, else the key's
    (None: the built-in default)."""
    tier = _small.get(key)
    if tier is not None and work < tier[0]:
        return tier[1]
    return _tuned.get(key)


def _aligned_run(longest: int, strides: Tuple[int, ...]) -> int:
    """The largest power of two that divides ``longest`` and every stride in ``strides``."""
    run = longest & -longest if longest > 0 else 1
    while run > 1 and any(stride % run for stride in strides):
        run //= 2
    return run


def paged_runs(k_cache: torch.Tensor, v_cache: torch.Tensor, block_n: int) -> Tuple[int, int]:
    """How many cache elements the kernel may read as one contiguous, aligned run.

    K: the ``x`` lanes of a token.  V: the tokens of one page, up to ``block_n`` of them.
    The kernel passes these to the compiler as hints, so they must hold for every tile:
    a run is a power of two that divides the page (or ``x``) and every outer stride, and
    1 where the innermost dimension is not contiguous (a sliced or transposed cache).
    """
    return _runs(k_cache.shape[4], k_cache.stride(), v_cache.shape[3], v_cache.stride(), block_n)


@functools.lru_cache(maxsize=64)  # a deployment has a handful of cache layouts
def _runs(
    x: int, k_strides: Tuple[int, ...], page: int, v_strides: Tuple[int, ...], block_n: int
) -> Tuple[int, int]:
    k_run = _aligned_run(x, k_strides[:4]) if k_strides[4] == 1 else 1
    v_run = 1
    if v_strides[3] == 1:
        v_run = _aligned_run(min(page & -page, block_n), v_strides[:3])
    return k_run, v_run


#: Configs whose launches pack GQA heads (:func:`gqa_pack`) unless told otherwise: the
#: built-in head-128 and head-256 defaults, where an H100 measured +2.5-3.5% packed.  At
#: the other configs measured (8 warps; 64-row tiles at 4 warps) packing gained nothing
#: or lost up to 7%, so they, and configs never measured packed, run unpacked
#: (docs/kernel-notes.md, "Prefix prefill, session 13").
PACKED_CONFIGS = frozenset({PrefillConfig(128, 32, 4, 1), PrefillConfig(64, 16, 4, 1)})


def gqa_pack(group: int, block_m: int) -> int:
    """How many query heads of one kv head a program takes as the rows of its tile.

    Packing them reads each paged K/V tile once per kv head instead of once per query
    head; the tile then holds ``block_m // pack`` queries of each.  The largest
    power-of-two divisor of ``group`` that leaves at least four queries per tile: a group
    of 7 (28/4 heads) packed measured ~2.5% slower (a division by 7 per row, idle rows).
    """
    pack = 1
    while group % (2 * pack) == 0 and 8 * pack <= block_m:
        pack *= 2
    return pack


#: Most bytes the gathered context buffers of one launch may take (both together); a
#: larger context runs the paged loop.  ``VLLM_CODEMOD_PREFILL_GATHER_MB`` overrides it
#: (0: never gather).  At 100K tokens of 8 kv heads of 128 in bf16 they take 410 MB.
GATHER_LIMIT_ENV = "VLLM_CODEMOD_PREFILL_GATHER_MB"
GATHER_LIMIT_BYTES = 1 << 30
_gather_limit: List[int] = []


def gather_limit() -> int:
    """The byte limit for the gathered buffers (read from the environment once)."""
    if not _gather_limit:
        raw = os.environ.get(GATHER_LIMIT_ENV, "").strip()
        try:
            limit = int(float(raw) * (1 << 20)) if raw else GATHER_LIMIT_BYTES
        except ValueError:
            log.warning("vllm-codemod: %s=%r is not a number of MB; using %d MB",
                        GATHER_LIMIT_ENV, raw, GATHER_LIMIT_BYTES >> 20)  # fmt: skip
            limit = GATHER_LIMIT_BYTES
        _gather_limit.append(max(limit, 0))
    return _gather_limit[0]


def wants_gather(config: PrefillConfig, buffer_bytes: int) -> bool:
    """Whether a launch copies its context into contiguous buffers first.

    Only where Triton's pipeliner can then stream the context loop (``num_stages`` 2 or
    more: ``cp.async`` tiles ahead, no registers held): with one stage the paged loop's
    hand prefetch is the faster of the two.  And only while the buffers stay within
    :func:`gather_limit`.
    """
    return config.num_stages >= 2 and 0 < buffer_bytes <= gather_limit()


def _plan(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: torch.Tensor,
    d_pad: int,
    config: Optional[PrefillConfig],
    gather: Optional[bool],
) -> Tuple[PrefillConfig, bool, bool, Optional[torch.dtype]]:
    """(config, gather, whether an fp8 cache took the tuned config, the gathered buffers'
    dtype): ``config`` and ``gather`` where given, else the tuned or built-in config and
    :func:`wants_gather`.

    An fp8 context is gathered in the queries' dtype (``prefill_gather``), so a gathered
    launch over an fp8 cache runs the 16-bit tiles a tuned config was measured on: it
    takes the tuned config where that one gathers; otherwise its own default.
    """
    fp8 = k_cache.element_size() == 1
    gather_dtype = q.dtype if fp8 else None
    buffer_bytes = gathered_bytes(k_cache, block_table, gather_dtype)
    if config is None:
        if not _tables_read[0]:
            _read_tables(q.device)
        key = (d_pad, q.element_size())
        tuned = _tuned_for(key, work_estimate(q, block_table, k_cache.shape[3]))
        if fp8:  # the tuned config only where the context is gathered (16-bit tiles)
            if tuned is not None and gather is not False and wants_gather(tuned, buffer_bytes):
                return tuned, True, True, gather_dtype
            tuned = None
        config = tuned if tuned is not None else _built_in(d_pad, q.element_size(), fp8)
    if gather is None:
        gather = wants_gather(config, buffer_bytes)
    return config, gather, False, gather_dtype


def launch_plan(
    q: torch.Tensor, k_cache: torch.Tensor, block_table: torch.Tensor
) -> Tuple[PrefillConfig, bool]:
    """The config a launch without ``config`` runs and whether it gathers its context
    (before any out-of-memory fallback); benchmarks label their rows with it."""
    d_pad = d_pad_of(q.shape[2])
    cfg, gather, _, _ = _plan(q, k_cache, block_table, d_pad, None, None)
    return cfg, gather


def prefix_prefill_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    max_query_len: int,
    sm_scale: float,
    k_scale: Optional[torch.Tensor] = None,
    v_scale: Optional[torch.Tensor] = None,
    alibi_slopes: Optional[torch.Tensor] = None,
    sliding_window: int = 0,
    skip_decode: bool = False,
    config: Optional[PrefillConfig] = None,
    pack: Optional[int] = None,
    gather: Optional[bool] = None,
    m_last: bool = False,
) -> None:
    """vLLM's ``context_attention_fwd`` on the GPU; writes ``o`` (see prefill_kernels).

    Layouts: q/k/v/o ``[tokens, heads, head_size]``; k_cache ``[blocks, kv_heads,
    head_size // x, page, x]``; v_cache ``[blocks, kv_heads, head_size, page]`` (fp8
    caches already viewed as a float8 dtype); block_table ``[seqs, max_blocks]``;
    query_start ``[seqs + 1]``; seq_lens ``[seqs]`` = cached + new tokens.
    ``pack`` overrides :func:`gqa_pack` (query heads per program; benchmarks and tests);
    ``gather`` whether the context is first copied into contiguous buffers
    (``prefill_gather``); ``m_last`` orders the grid query tile slowest (every head's
    longest tiles first; benchmarks).
    """
    if k_cache.element_size() == 1 and not HAS_PERMUTE:
        # Triton 2.1 has no torch float8 types and segfaults on the reinterpreted ones
        # (docs/kernel-notes.md, "Prefix prefill on Triton 2.1"): the tree's kernel.
        raise Triton2Refusal("prefill: fp8 caches need Triton 3.0 or newer")
    num_seqs = seq_lens.shape[0]
    num_heads, head_size = q.shape[1], q.shape[2]
    d_pad = d_pad_of(head_size)
    cfg, gather, fp8_tuned, gather_dtype = _plan(q, k_cache, block_table, d_pad, config, gather)
    fp8 = k_cache.element_size() == 1
    if cfg.block_m % cfg.block_n:
        raise ValueError(f"prefill config {tuple(cfg)}: BLOCK_M must be a multiple of BLOCK_N")
    qs, ks, vs, os_ = q.stride(), k.stride(), v.stride(), o.stride()
    kcs, vcs = k_cache.stride(), v_cache.stride()
    if (qs[2], ks[2], vs[2], os_[2], kcs[4]) != (1, 1, 1, 1, 1):
        raise ValueError("prefill: head dimension of q/k/v/o and x of k_cache must be contiguous")
    if max_query_len <= 0 or num_seqs == 0:
        return
    window = sliding_window if sliding_window and sliding_window > 0 else 0
    if window >= block_table.shape[1] * v_cache.shape[3] + max_query_len:
        # No (query, key) pair of this call is that far apart: a key lies below the
        # table's capacity, a query less than max_query_len past it.  The window masks
        # nothing, so the plain launch does the work, without the window's edge loops (on
        # an H100 they cost 8% on 8 x (1K + 512) with a window wider than every sequence;
        # where a block table is as wide as the batch's longest sequence needs, short
        # prompts under a model's window get here).
        window = 0
    kg, vg, g_strides = k_cache, v_cache, (0, 0, 0)
    if gather:
        try:
            kg, vg = gather_buffers(k_cache, block_table, gather_dtype)
            g_strides = kg.stride()[:3]
        except torch.cuda.OutOfMemoryError:  # the paged loop needs no buffers
            gather = False
            if fp8_tuned:  # over the fp8 cache itself: its own default (shared memory)
                cfg = _built_in(d_pad, q.element_size(), True)
            log.info("vllm-codemod: no memory for the gathered prefill context; paged loop")
    group = num_heads // k.shape[1]
    if pack is not None:
        heads_per_program = pack
    elif cfg in PACKED_CONFIGS and q.element_size() == 2 and not fp8:
        heads_per_program = gqa_pack(group, cfg.block_m)
    else:
        heads_per_program = 1
    if group % heads_per_program or heads_per_program > cfg.block_m:
        raise ValueError(f"prefill: pack {heads_per_program} must divide {group} and fit BLOCK_M")
    num_m_tiles = -(-max_query_len // (cfg.block_m // heads_per_program))
    pointers = (
        q, k, v, o, k_cache, v_cache, block_table, query_start, seq_lens,
        alibi_slopes if alibi_slopes is not None else q,
        k_scale if fp8 else q, v_scale if fp8 else q,
    )  # fmt: skip
    ints = (window, num_m_tiles) + qs[:2] + ks[:2] + vs[:2] + os_[:2] + kcs[:4] + vcs[:4]
    ints += (block_table.stride(0),)
    k_run, v_run = _runs(k_cache.shape[4], kcs, v_cache.shape[3], vcs, cfg.block_n)
    shape = _LaunchShape(
        num_seqs, num_heads, group, head_size, k_cache.shape[4], v_cache.shape[3], cfg,
        heads_per_program, fp8, alibi_slopes is not None, window > 0, bool(skip_decode),
        k_run, v_run, bool(gather), bool(m_last), HAS_PERMUTE,
    )  # fmt: skip
    # Everything Triton specializes the kernels on (relaunch.py): the launch's shape,
    # every integer argument, each pointer's dtype and 16-byte alignment.
    key = (shape, ints, g_strides, q.device, tuple([t.dtype for t in pointers]), kg.dtype)
    key += (misaligned(*pointers), misaligned(kg, vg))
    key += (_prefix_prefill_kernel, prefill_gather._gather_context_kernel)
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        plan = _plans[key] = _Plan(shape, num_m_tiles, kg)
    if plan.gather is not None:
        plan.gather.launch(
            context_copy_args(k_cache, v_cache, block_table, query_start, seq_lens, kg, vg, window)
        )
    plan.main.launch(pointers + (sm_scale * LOG2E,) + ints + (kg, vg) + g_strides)


class _LaunchShape(NamedTuple):
    """What a launch's grids and constexprs follow besides its integer arguments (the
    two together key its :class:`_Plan`)."""

    num_seqs: int
    num_heads: int
    group: int
    head_size: int
    x: int
    page: int
    config: PrefillConfig
    pack: int
    fp8: bool
    alibi: bool
    windowed: bool
    skip_decode: bool
    k_run: int
    v_run: int
    gathered: bool
    m_last: bool
    k3d: bool  # Triton 3.0+ (HAS_PERMUTE): the 3-D K load, else the LEGACY forms


class _Plan:
    """The kernels of one launch shape: the context copy (when gathered, and there is a
    context) and the attention kernel, each relaunched through its compiled handle from
    the second call on (``relaunch.py``).  Why: a plain launch of either costs tens of
    microseconds of host time, and a short prompt's whole GPU time is about that."""

    __slots__ = ("gather", "main")

    def __init__(self, s: _LaunchShape, num_m_tiles: int, kg: torch.Tensor) -> None:
        cfg = s.config
        self.gather: Optional[Relauncher] = None
        if s.gathered and kg.shape[2] > 0:
            grid, constexprs = context_copy_launch(kg, s.x, s.page, cfg.block_n)
            self.gather = Relauncher(
                prefill_gather._gather_context_kernel,
                grid,
                constexprs,
                {"num_warps": GATHER_WARPS},
                _fast,
            )
        grid = (num_m_tiles, s.num_seqs, s.num_heads // s.pack)
        if s.m_last:
            grid = grid[::-1]
        constexprs = dict(
            GROUP=s.group, HEAD_SIZE=s.head_size, D_PAD=d_pad_of(s.head_size), X=s.x,
            PAGE=s.page, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, FP8=s.fp8, ALIBI=s.alibi,
            WINDOW=s.windowed, SKIP_DECODE=s.skip_decode, K_RUN=s.k_run, V_RUN=s.v_run,
            K_3D=s.k3d, LEGACY=not s.k3d, PACK=s.pack, QUERIES=cfg.block_m // s.pack,
            GATHERED=s.gathered, M_LAST=s.m_last,
        )  # fmt: skip
        self.main = Relauncher(
            _prefix_prefill_kernel,
            grid,
            constexprs,
            {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
            _fast,
        )


__all__ = [
    "DEFAULT_CONFIGS",
    "FP32_CONFIGS",
    "FP8_CACHE_CONFIGS",
    "GATHER_LIMIT_BYTES",
    "GATHER_LIMIT_ENV",
    "LEGACY_CONFIGS",
    "LEGACY_FP32_CONFIGS",
    "PACKED_CONFIGS",
    "PORTABLE_SHARED_BYTES",
    "PrefillConfig",
    "gather_limit",
    "gqa_pack",
    "launch_plan",
    "paged_runs",
    "Triton2Refusal",
    "pick_config",
    "prefix_prefill_triton",
    "reset_prefill_configs",
    "set_prefill_configs",
    "shared_bytes",
    "wants_gather",
    "work_estimate",
]

"""scripts/check_triton_compile.py compiles what the launcher really launches: every case of
its matrix pairs a config with a GQA group that pick_config gives that config, and every
table config appears (no GPU, no compile: the cases and recorded launches only)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from vllm_codemod.kernels import launch_tables  # noqa: E402
from vllm_codemod.tuning.tree_imports import load_file  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_triton_compile.py"


@pytest.fixture(scope="module")
def check():
    interpret = os.environ.get("TRITON_INTERPRET")
    try:  # the script drops TRITON_INTERPRET (it compiles for real)
        module = load_file("check_triton_compile", SCRIPT, keep=False)
    finally:
        if interpret is not None:
            os.environ["TRITON_INTERPRET"] = interpret
    return module


def _reachable(cfg, d_pad, g_pad):
    """Whether pick_config returns cfg for some program count at this head and row count
    (or balanced_config turns the table's choice for one sequence into it); a config with
    its own slots is a table config as a tuning file may carry it."""
    if cfg.slots:
        return _reachable(cfg._replace(slots=0), d_pad, g_pad)
    two = launch_tables.K3D_BALANCED_HEAD256_CONFIG
    if cfg == two and launch_tables.balanced_config(two, g_pad, d_pad, 1) == two:
        return launch_tables.balanced_config(launch_tables.K3D_CONFIGS[256], g_pad, d_pad, 1) == two
    counts = (1, launch_tables.MANY_PROGRAMS, launch_tables.MID_PROGRAMS_LIMIT)
    counts += (launch_tables.K3D_MANY_PROGRAMS, 10**6)
    return any(
        launch_tables.pick_config(p, d_pad, g_pad, k3d) == cfg
        for p in counts
        for k3d in (True, False)
    )


def test_every_case_is_a_launch_the_tables_make(check):
    from vllm_codemod.kernels.decode_launch import group_rows

    seen = set()
    for hs, _dtype, _bs, _alibi, (nh, nkv), _lens, cname, cfg in check.cases(False):
        d_pad = max(16, 1 << (hs - 1).bit_length())
        assert _reachable(cfg, d_pad, group_rows(nh // nkv)), (hs, nh, nkv, cname, cfg)
        seen.add(tuple(cfg))
    lt = launch_tables
    tables = set(lt.K3D_CONFIGS.values()) | set(lt.DEFAULT_CONFIGS.values())
    tables |= {lt.K3D_MANY_PROGRAMS_CONFIG, lt.K3D_WIDE_GROUP_CONFIG}
    tables |= {lt.K3D_WIDE_GROUP_MANY_CONFIG, lt.MANY_PROGRAMS_CONFIG, lt.MID_PROGRAMS_CONFIG}
    tables |= {lt.WIDE_GROUP_CONFIG, lt.WIDE_GROUP_MANY_CONFIG, lt.K3D_BALANCED_HEAD256_CONFIG}
    assert {tuple(c) for c in tables} <= seen


def test_recorded_launches_cover_every_kernel_variant(check):
    fused, single, chunked, compact, balanced = set(), set(), set(), set(), set()
    for case in list(check.cases(False))[:12]:
        launches = check.record_launches(case)
        part_kwargs = launches[0][2]
        if part_kwargs["COMPACT"]:
            compact.add(case[5])
        if part_kwargs["BALANCED"]:
            balanced.add(case[5])
        if part_kwargs["FUSED"]:  # one launch: the last chunk merges
            assert [name for name, _, _ in launches] == ["partition"]
            fused.add(case[5])
            continue
        assert [name for name, _, _ in launches] == ["partition", "reduce"]
        (single if launches[1][2]["SINGLE_PASS"] else chunked).add(case[5])
    # The matrix reaches the fused merge, both reduce variants, and both grids.
    assert fused and single and chunked
    assert compact and compact != set(check.LENS)
    # Balanced items for one sequence (no lengths' vector), a batch as one stream.
    stream = set()
    for case in check.cases(False):
        if case[6] == "k3d-many" and case[0] <= 128 and case[4] == (8, 2):
            part_kwargs = check.record_launches(case)[0][2]
            if part_kwargs["BALANCED"]:
                balanced.add(case[5])
            if part_kwargs["STREAM"]:
                stream.add(case[5])
    assert {(5000,), check.LENS[2]} <= balanced
    assert check.LENS[2] in stream and (5000,) not in stream
    # The 2-D tables balanced through a tuning file's slots, at every head size.
    two_d = [c for c in check.cases(False) if c[6] == "2d-slots"]
    assert {c[0] for c in two_d} == set(check.HEAD_SIZES)
    for case in two_d:
        part_kwargs = check.record_launches(case)[0][2]
        assert not part_kwargs["K_3D"]
        if case[5] != check.LENS[0]:  # the short batch fuses (eager, <= 4 partitions)
            assert part_kwargs["BALANCED"], case
            assert part_kwargs["STREAM"] is (len(case[5]) > 1), case


def test_prefill_matrix_records_every_path_and_default_config(check):
    from vllm_codemod.kernels import prefill_launch

    seen_configs, flags, gathered = set(), set(), 0
    cases = list(check.prefill_cases(False))
    assert {c[0] for c in cases} == {64, 96, 128, 256}
    assert {c[2] for c in cases} == {name for name, _ in check.PREFILL_VARIANTS}
    for case in cases:
        launches, cfg = check.record_prefill_launches(case)
        # the context's copy kernel first where the launcher gathers (2+ stages)
        wants = prefill_launch.wants_gather(cfg, 1)
        assert [n for n, _, _ in launches] == ["prefill_gather"] * wants + ["prefill"]
        name, _args, kwargs = launches[-1]
        assert kwargs["GATHERED"] == wants
        gathered += wants
        assert (kwargs["BLOCK_M"], kwargs["BLOCK_N"]) == (cfg.block_m, cfg.block_n)
        assert (kwargs["num_warps"], kwargs["num_stages"]) == (cfg.num_warps, cfg.num_stages)
        assert kwargs["HEAD_SIZE"] == case[0] and kwargs["GROUP"] == case[4][0] // case[4][1]
        for flag in ("FP8", "ALIBI", "WINDOW", "SKIP_DECODE"):
            if kwargs[flag]:
                flags.add(flag)
        assert kwargs["FP8"] == case[2].startswith("fp8")
        if case[1] != torch.float32:
            seen_configs.add(tuple(cfg))
    assert flags == {"FP8", "ALIBI", "WINDOW", "SKIP_DECODE"}
    assert gathered  # some built-in config gathers, so the copy kernel is compiled
    # every built-in config (16-bit; head 32's equals head 64's) is compiled
    assert {tuple(c) for c in prefill_launch.DEFAULT_CONFIGS.values()} <= seen_configs

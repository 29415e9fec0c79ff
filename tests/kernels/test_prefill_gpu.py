"""The prefix-prefill Triton kernel on a CUDA device against float64 (skipped without one).

The interpreter's small cases (prefill_interpret_check.CASES) at the launcher's default
configs and at small tiles, then long cases checked on a row sample (at the default
config, and at a two-stage config with the context paged and gathered): one 16K-token chunk
over a 16K context (GQA 32/8, head 128), head 256, a batch, ALiBi, a sliding window, and
fp8 caches.  Last, the self-check's prefill cases (what ``verify`` runs), each in a process
of its own, packed and unpacked: a CUDA error poisons the process that meets it, and
session 13's decode suite saw one in ``test_selfcheck_on_gpu`` ("misaligned address")
without naming the case.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")  # the CPU suite runs without torch too

from vllm_codemod.kernels.prefill_selfcheck import case_count  # noqa: E402  (needs torch)

HAS_GPU = torch.cuda.is_available() and importlib.util.find_spec("triton") is not None
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA device and Triton"),
]

if HAS_GPU:
    from vllm_codemod.kernels.prefill_cases import (
        launch_arguments,
        make_prefill_inputs,
        prefill_error,
        sample_rows,
    )
    from vllm_codemod.kernels.prefill_launch import PrefillConfig, prefix_prefill_triton

BF16 = torch.bfloat16
SMALL_CASES = {
    "gqa ragged": ([(5, 3), (37, 40), (16, 17)], 4, 2, 32, 16, {}),
    "mqa": ([(40, 21)], 4, 1, 32, 16, {}),
    "head 96": ([(20, 19), (3, 33)], 2, 1, 96, 16, {}),
    "head 24 page 32": ([(50, 9), (0, 20)], 6, 2, 24, 32, {}),
    "head 256": ([(300, 100)], 4, 2, 256, 16, {}),
    "ctx 0": ([(0, 45)], 2, 1, 32, 16, {}),
    "new 1": ([(70, 1), (0, 1)], 2, 1, 32, 16, {}),
    "ctx not a page multiple": ([(17, 33), (31, 5)], 2, 2, 32, 16, {}),
    "alibi": ([(200, 300), (50, 9)], 4, 2, 128, 16, {"alibi": True}),
    "sliding window": ([(400, 300), (9, 50)], 4, 2, 128, 16, {"sliding_window": 130}),
    "fp8 e4m3": ([(400, 200), (17, 9)], 4, 2, 128, 16, {"kv_cache_dtype": "fp8"}),
    "fp8 e5m2": ([(333, 120)], 4, 2, 128, 16, {"kv_cache_dtype": "fp8_e5m2"}),
    "skip decode": ([(20, 30), (50, 1), (7, 9)], 2, 1, 64, 16, {"skip_decode": True}),
}


@pytest.mark.parametrize("dtype", [BF16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("config", [None, (32, 16, 4, 1)], ids=["default", "small"])
@pytest.mark.parametrize("name", sorted(SMALL_CASES))
def test_small_cases(name, config, dtype):
    lens, hq, hkv, d, page, extra = SMALL_CASES[name]
    a = make_prefill_inputs(lens, hq, hkv, d, page, dtype, device="cuda", seed=7, **extra)
    cfg = PrefillConfig(*config) if config else None
    prefix_prefill_triton(**launch_arguments(a), config=cfg)
    torch.cuda.synchronize()
    err = prefill_error(a, a["o"])
    assert err <= (2e-2 if dtype is BF16 else 5e-3), err


LONG_CASES = {
    "1x(16K+16K) 32/8/128": ([(16384, 16384)], 32, 8, 128, {}),
    "1x(8K+4K) 16/2/256": ([(8192, 4096)], 16, 2, 256, {}),
    "8x(1K+512) 32/8/128": ([(1024, 512)] * 8, 32, 8, 128, {}),
    "alibi 1x(4K+4K)": ([(4096, 4096)], 32, 8, 128, {"alibi": True}),
    "window 1x(8K+4K)": ([(8192, 4096)], 32, 8, 128, {"sliding_window": 4096}),
    "fp8 1x(8K+4K)": ([(8192, 4096)], 32, 8, 128, {"kv_cache_dtype": "fp8"}),
}


@pytest.mark.parametrize("loop", ["default", "paged 2 stages", "gathered"])
@pytest.mark.parametrize("name", sorted(LONG_CASES))
def test_long_cases_on_a_row_sample(name, loop):
    """At the default config, and at a two-stage one both ways: the context through the
    block table, and copied into contiguous buffers first (what 2+ stages get)."""
    lens, hq, hkv, d, extra = LONG_CASES[name]
    a = make_prefill_inputs(lens, hq, hkv, d, 16, BF16, device="cuda", seed=3, **extra)
    config = None if loop == "default" else PrefillConfig(128, 64, 8, 2)
    gather = {"default": None, "paged 2 stages": False, "gathered": True}[loop]
    prefix_prefill_triton(**launch_arguments(a), config=config, gather=gather)
    torch.cuda.synchronize()
    assert not torch.isnan(a["o"]).any()  # every row written
    err = prefill_error(a, a["o"], rows=sample_rows(a), device=torch.device("cuda"))
    assert err <= 2e-2, err


def test_an_fp8_cache_under_a_tuned_config_is_gathered_in_16_bits():
    """With a tuning table's config installed, a launch over an fp8 cache copies its
    context to the queries' dtype and runs that config (``prefill_launch._plan``)."""
    from vllm_codemod.kernels import prefill_launch

    a = make_prefill_inputs(
        [(4096, 2048), (700, 300)], 32, 8, 128, 16, BF16, device="cuda", seed=5,
        kv_cache_dtype="fp8",
    )  # fmt: skip
    args = launch_arguments(a)
    tuned = PrefillConfig(128, 64, 8, 2)
    prefill_launch.set_prefill_configs({(128, 2): tuple(tuned)})
    try:
        plan = prefill_launch.launch_plan(args["q"], args["k_cache"], args["block_table"])
        assert plan == (tuned, True)
        prefix_prefill_triton(**args)
        torch.cuda.synchronize()
    finally:
        prefill_launch.reset_prefill_configs()
    assert not torch.isnan(a["o"]).any()
    err = prefill_error(a, a["o"], rows=sample_rows(a), device=torch.device("cuda"))
    assert err <= 2e-2, err


@pytest.mark.parametrize("config", [None, (64, 32, 4, 2)], ids=["paged default", "gathered"])
def test_relaunched_calls_match_triton_launches_and_follow_moved_pointers(monkeypatch, config):
    """From the second call of a launch shape on, the kernels (the copy too) are relaunched
    through their compiled handles (Triton >= 3): the result is bit-identical to Triton's
    own launch.  Moving q, query_start and seq_lens off 16-byte alignment (vLLM slices
    them) makes another plan, and its calls are right too."""
    from pa_helpers import shifted

    from vllm_codemod.kernels import prefill_launch

    monkeypatch.setattr(prefill_launch, "_plans", {})
    a = make_prefill_inputs([(300, 100), (17, 40)], 8, 2, 128, 16, BF16, device="cuda", seed=11)
    args = launch_arguments(a)
    cfg = PrefillConfig(*config) if config else None
    outs = []
    for fast in (False, True, True):
        monkeypatch.setitem(prefill_launch._fast, "enabled", fast)
        a["o"].fill_(float("nan"))
        prefix_prefill_triton(**args, config=cfg)
        torch.cuda.synchronize()
        outs.append(a["o"].clone())
    assert prefill_launch._fast["enabled"], "a compiled launcher failed"
    (plan,) = prefill_launch._plans.values()
    if prefill_launch.fast_state()["enabled"]:  # Triton >= 3: handles kept
        assert plan.main.compiled is not None
        assert (plan.gather is not None) is bool(config)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    assert prefill_error(a, outs[2]) <= 2e-2
    moved = dict(args)
    for name in ("q", "query_start", "seq_lens"):
        moved[name] = shifted(args[name])
        for _ in range(2):
            a["o"].fill_(float("nan"))
            prefix_prefill_triton(**moved, config=cfg)
            torch.cuda.synchronize()
            assert not torch.isnan(a["o"]).any(), f"{name} moved: rows unwritten"
            assert prefill_error(a, a["o"]) <= 2e-2, f"{name} moved"
    assert len(prefill_launch._plans) == 4


#: One self-check case through the launcher, in a fresh process; exits 1 when it is off.
SELFCHECK_CASE = """
import sys, torch
from vllm_codemod.kernels import prefill_launch, prefill_selfcheck as s
index, pack = int(sys.argv[1]), None if sys.argv[2] == "auto" else int(sys.argv[2])
label, ctx, new, nh, nkv, hs, bs, dtype, extra = s._cases("cuda", False)[index]
case = s.make_case(ctx, new, nh, nkv, hs, bs, dtype, "cuda", seed=index, **extra)
prefill_launch.prefix_prefill_triton(**case.launcher_kwargs(), pack=pack)
torch.cuda.synchronize()
ref = case.reference()
err = float((case.o.double().cpu() - ref).norm() / ref.norm())
print(label, "pack", sys.argv[2], "rel err", err)
sys.exit(0 if err < s.tolerance(dtype, "triton") else 1)
"""


@pytest.mark.parametrize("pack", ["auto", "1"])
@pytest.mark.parametrize("index", range(case_count("cuda", quick=False)))
def test_selfcheck_case_in_its_own_process(index, pack):
    proc = subprocess.run(
        [sys.executable, "-c", SELFCHECK_CASE, str(index), pack],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]

"""The Triton path on a CUDA device against the float64 reference (skipped without one).

Every distinct set of kernel constants costs a Triton compile (seconds), and the whole
file runs in one short device session, so the default run reuses a few shapes (mostly
32 query / 8 kv heads, head 128, bf16, block 16) and the broad sweeps (every head size x
dtype, the whole GQA x ALiBi x block-size grid, every tuning config) run only with
``VLLM_CODEMOD_GPU_FULL=1``.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

torch = pytest.importorskip("torch")  # the CPU suite runs without torch too
from pa_helpers import make_inputs, reference_of, rel_err, shifted, tolerance  # noqa: E402

from vllm_codemod.kernels import call as call_mod  # noqa: E402
from vllm_codemod.kernels import dispatch, launch_tables  # noqa: E402
from vllm_codemod.kernels.launch_tables import LaunchConfig  # noqa: E402
from vllm_codemod.kernels.reference import reference_for_args, reference_partitions  # noqa: E402

HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_GPU = torch.cuda.is_available() and HAS_TRITON
FULL = os.environ.get("VLLM_CODEMOD_GPU_FULL") == "1"
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA device and Triton"),
]
full_only = pytest.mark.skipif(not FULL, reason="broad sweep: set VLLM_CODEMOD_GPU_FULL=1")

RAGGED = [1, 15, 16, 17, 511, 512, 513, 1000, 4096, 8191, 16384, 20000, 32768, 777, 3, 12345]


def _triton_impl():
    from vllm_codemod.kernels import decode_launch

    return decode_launch


@pytest.fixture
def fresh_plans(monkeypatch):
    """An empty plan cache for this test: a plan keeps the reduce variant and constants it
    was built with, so tests that patch module constants must not reuse older plans."""
    ti = _triton_impl()
    monkeypatch.setattr(ti, "_plans", {})
    return ti._plans


@pytest.fixture
def override():
    """Force a LaunchConfig for the test's launches; the tables are restored afterwards."""
    yield launch_tables.set_config_override
    launch_tables.set_config_override(None)


def _reference(a):
    return reference_for_args(a)


def _run_and_check(a, dtype, backend="triton"):
    path = dispatch.paged_attention_v2_with_path(**a, backend=backend)
    torch.cuda.synchronize()
    assert path == backend
    assert not torch.isnan(a["out"]).any(), "some element of out was never written"
    err = rel_err(a["out"], _reference(a))
    assert err < tolerance(dtype), err
    return err


def _check_partition_buffers(a, s):
    """vLLM's partition-buffer contract for sequence s (fp32 inputs): tmp_out normalized by
    the partition's own exp-sum, exp_sums and max_logits as the reference computes them."""
    tmp, sums, maxes = reference_partitions(
        a["query"],
        a["key_cache"],
        a["value_cache"],
        a["block_tables"],
        int(a["seq_lens"][s]),
        s,
        a["scale"],
        a["alibi_slopes"],
    )
    n = tmp.shape[1]
    assert rel_err(a["max_logits"][s, :, :n], maxes) < 1e-5
    assert rel_err(a["exp_sums"][s, :, :n], sums) < 1e-4
    assert rel_err(a["tmp_out"][s, :, :n], tmp) < 1e-4


def _positional(a, style="0.8"):
    """vLLM's positional argument tuple: 0.8-style (17: k_scale, v_scale) or 0.4-style
    (16: one kv_scale in the k_scale slot)."""
    head = [a[k] for k in ("out", "exp_sums", "max_logits", "tmp_out", "query", "key_cache")]
    head += [a[k] for k in ("value_cache", "num_kv_heads", "scale", "block_tables", "seq_lens")]
    head += [a["block_size"], a["max_seq_len"], a["alibi_slopes"], "auto"]
    return tuple(head + ([1.0, 1.0] if style == "0.8" else [1.0]))


# Head sizes x dtypes: the quick set covers padded (80), small (64), the common (128) and
# the largest (256) head, each cache dtype at least once.
QUICK_HEAD_DTYPES = [
    (64, "float32"),
    (80, "bfloat16"),
    (128, "bfloat16"),
    (128, "float16"),
    (256, "bfloat16"),
]
ALL_HEAD_DTYPES = [
    (h, d)
    for h in (32, 64, 80, 96, 112, 120, 128, 192, 256)
    for d in ("bfloat16", "float16", "float32")
]


@pytest.mark.parametrize(
    "head_size,dtype_name",
    [
        pytest.param(h, d, marks=[] if (h, d) in QUICK_HEAD_DTYPES else [full_only])
        for h, d in ALL_HEAD_DTYPES
    ],
)
def test_triton_head_sizes_and_dtypes(head_size, dtype_name):
    dtype = getattr(torch, dtype_name)
    bs = 16 if not FULL else {32: 8, 64: 16, 80: 32, 96: 16, 112: 8, 120: 16}.get(head_size, 16)
    a = make_inputs(
        [1, 512, 1537, 900], 32, 8, head_size, bs, dtype, "cuda", extra_partitions=2, seed=head_size
    )
    _run_and_check(a, dtype)


QUICK_GQA = [(4, False, 16), (1, False, 8), (8, True, 32)]


@pytest.mark.parametrize(
    "group,alibi,block_size",
    [
        pytest.param(g, al, bs, marks=[] if (g, al, bs) in QUICK_GQA else [full_only])
        for g in (1, 4, 8, 32)
        for al in (False, True)
        for bs in (8, 16, 32)
    ],
)
def test_triton_gqa_alibi_block_sizes(group, alibi, block_size):
    a = make_inputs(
        [3, 1024, 2049], 2 * group, 2, 128, block_size, torch.bfloat16, "cuda", alibi=alibi
    )
    _run_and_check(a, torch.bfloat16)


@pytest.mark.parametrize("block_size", [16] + ([8, 32] if FULL else []))
def test_triton_partition_buffers_follow_vllm_semantics(block_size, monkeypatch, fresh_plans):
    """With 512-token chunks the Triton path writes vLLM's partition buffers as vLLM's CUDA
    kernel does (smaller chunks keep their partials in a scratch buffer of ours)."""
    monkeypatch.setattr(launch_tables, "CHUNKS", (512,))
    a = make_inputs([1800, 600, 129], 8, 2, 64, block_size, torch.float32, "cuda", alibi=True)
    _run_and_check(a, torch.float32)
    for s in range(3):
        _check_partition_buffers(a, s)


def test_triton_matches_torch_path_on_gpu():
    a = make_inputs([5000, 17], 32, 8, 128, 16, torch.float16, "cuda", seed=7)
    b = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in a.items()}
    _run_and_check(a, torch.float16, "triton")
    _run_and_check(b, torch.float16, "torch")
    assert rel_err(a["out"], b["out"].double()) < 2e-3


def test_triton_ragged_batch():
    """Sixteen sequences from 1 token to 32K (partition and block edges on both sides)."""
    a = make_inputs(RAGGED, 32, 8, 128, 16, torch.bfloat16, "cuda", seed=17)
    _run_and_check(a, torch.bfloat16)


def test_auto_path_is_triton_on_gpu(monkeypatch):
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)
    a = make_inputs([700], 32, 8, 128, 16, torch.bfloat16, "cuda")
    assert dispatch.paged_attention_v2_with_path(**a) == "triton"


def test_selfcheck_on_gpu():
    from vllm_codemod.kernels.selfcheck import run_selfcheck

    results = run_selfcheck(device="cuda", quick=True)
    assert all(r["ok"] for r in results), results
    assert {r["path"] for r in results} == {"triton"}


@pytest.mark.parametrize("style", ["0.8", "0.4", "0.4-keywords"])
def test_entry_point_with_vllm_positional_arguments(monkeypatch, style):
    """vLLM passes everything positionally: 17 arguments since 0.5 (k_scale, v_scale),
    16 in 0.4 (one kv_scale); 0.4 callers by keyword use context_lens/max_context_len."""
    ti = _triton_impl()
    launches = []
    real_run = ti.run
    monkeypatch.setattr(ti, "run", lambda c, config=None: launches.append(1) or real_run(c, config))
    a = make_inputs([700, 1300, 33], 32, 8, 128, 16, torch.bfloat16, "cuda", seed=3)
    if style == "0.4-keywords":
        kw = dict(a)
        kw["context_lens"] = kw.pop("seq_lens")
        kw["max_context_len"] = kw.pop("max_seq_len")
        kw["exp_sum"] = kw.pop("exp_sums")
        dispatch.paged_attention_v2(**kw, kv_scale=1.0)
    else:
        dispatch.paged_attention_v2(*_positional(a, style))
    torch.cuda.synchronize()
    assert launches == [1], "the entry point did not take the Triton path"
    assert rel_err(a["out"], _reference(a)) < tolerance(torch.bfloat16)


def test_two_calls_are_bit_identical():
    a = make_inputs([4000, 1, 513], 32, 8, 128, 16, torch.bfloat16, "cuda", seed=19)
    dispatch.paged_attention_v2(*_positional(a))
    first = a["out"].clone()
    a["out"].fill_(float("nan"))
    dispatch.paged_attention_v2(*_positional(a))
    torch.cuda.synchronize()
    assert torch.equal(first, a["out"])


def test_cuda_graph_replay_follows_new_queries():
    """vLLM captures decode steps in CUDA graphs: one captured entry-point call, replayed
    with fresh query values copied into the captured tensor, is correct every time."""
    a = make_inputs([700, 1300, 33, 2049], 32, 8, 128, 16, torch.bfloat16, "cuda", seed=23)
    args = _positional(a)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up off the capture: compile, plan, fast path
        dispatch.paged_attention_v2(*args)
        dispatch.paged_attention_v2(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dispatch.paged_attention_v2(*args)
    gen = torch.Generator(device="cuda").manual_seed(29)
    for _ in range(3):
        q = torch.randn(a["query"].shape, device="cuda", generator=gen).to(torch.bfloat16)
        a["query"].copy_(q)
        a["out"].fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert not torch.isnan(a["out"]).any()
        assert rel_err(a["out"], _reference(a)) < tolerance(torch.bfloat16)


@pytest.mark.parametrize("fused", [False, True])
def test_compiled_launcher_fast_path(monkeypatch, fresh_plans, fused):
    """From the second call of a plan on, every kernel goes through its compiled launcher
    (no Triton argument binding); the result is identical to plain launches.  Both the
    two-launch plan and the fused one-launch plan."""
    ti = _triton_impl()
    if ti.TRITON_MAJOR < 3:
        pytest.skip("the compiled-launcher fast path needs Triton >= 3")
    monkeypatch.setitem(ti._fast, "enabled", True)
    monkeypatch.setattr(ti, "FUSE_MAX_CHUNKS", 64 if fused else 0)
    monkeypatch.setattr(launch_tables, "BALANCED_WAVES", 0)  # balanced plans never fuse
    a = make_inputs([3000, 17, 512], 32, 8, 128, 16, torch.bfloat16, "cuda", seed=31)
    c = call_mod.build((), dict(a))
    ti.run(c)
    (plan,) = fresh_plans.values()
    kernels = [plan.partition] + ([] if fused else [plan.reduce])
    assert (plan.reduce is None) is fused
    assert all(k.compiled is not None for k in kernels)

    plain_launches = []

    class Counting:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            plain_launches.append(grid)
            return self.fn[grid]

    for kernel in kernels:
        monkeypatch.setattr(kernel, "fn", Counting(kernel.fn))
    a["out"].fill_(float("nan"))
    ti.run(c)
    torch.cuda.synchronize()
    assert plain_launches == [], "the second call went through Triton's plain launch"
    assert ti._fast["enabled"], "the compiled launcher failed and was switched off"
    fast_out = a["out"].clone()

    monkeypatch.setitem(ti._fast, "enabled", False)
    a["out"].fill_(float("nan"))
    ti.run(c)
    torch.cuda.synchronize()
    assert len(plain_launches) == len(kernels)
    assert torch.equal(fast_out, a["out"])
    assert rel_err(fast_out, _reference(a)) < tolerance(torch.bfloat16)


def test_two_interleaved_shapes_keep_two_plans(fresh_plans):
    a = make_inputs([700, 1300], 32, 8, 128, 16, torch.bfloat16, "cuda", seed=37)
    b = make_inputs([5000, 3, 90, 2048], 32, 8, 128, 16, torch.bfloat16, "cuda", seed=38)
    ref_a, ref_b = _reference(a), _reference(b)
    for _ in range(3):
        for x, ref in ((a, ref_a), (b, ref_b)):
            x["out"].fill_(float("nan"))
            dispatch.paged_attention_v2(*_positional(x))
            torch.cuda.synchronize()
            assert rel_err(x["out"], ref) < tolerance(torch.bfloat16)
    assert len(fresh_plans) == 2


def test_lengths_and_tables_sliced_off_alignment(fresh_plans):
    """vLLM's mixed batches pass ``seq_lens`` and ``block_tables`` sliced past the
    prefills, so the same shapes come with those pointers 16-byte aligned in one call and
    not in the next.  Each gets its own plan (Triton specializes on the alignment, and a
    plan relaunches its compiled kernel unchecked), and every call is right.  16
    sequences: a length mask that is constant over 16 lanes lets the kernels load lengths
    as vectors."""
    a = make_inputs([300 + 37 * i for i in range(16)], 32, 8, 128, 16, torch.bfloat16,
                    "cuda", seed=41)  # fmt: skip
    ref = _reference(a)
    moved_lens = dict(a, seq_lens=shifted(a["seq_lens"]))
    moved_both = dict(moved_lens, block_tables=shifted(a["block_tables"]))
    for x in (a, moved_lens, moved_both, a):
        assert x["seq_lens"].data_ptr() & 15 == (0 if x is a else 4)
        x["out"].fill_(float("nan"))
        dispatch.paged_attention_v2(*_positional(x))
        torch.cuda.synchronize()
        assert rel_err(x["out"], ref) < tolerance(torch.bfloat16)
    assert len(fresh_plans) == 3


QUICK_CONFIGS = [(16, 1, 2, True), (32, 4, 1, True, 1, True)]
TUNING_CONFIGS = [
    (16, 1, 2, True),
    (16, 2, 2, True),
    (64, 2, 1, False),
    (32, 1, 1, True),
    (64, 4, 2, True),
    (16, 1, 1, False),
    (16, 1, 1, True, 1),
    (32, 2, 1, True, 2),
    (16, 1, 1, False, 0, True),
    (16, 1, 2, True, 0, True),
    (32, 4, 1, True, 0, True),
    (32, 4, 1, True, 1, True),
    (64, 2, 1, True, 2, True),
]


@pytest.mark.parametrize(
    "config",
    [pytest.param(c, marks=[] if c in QUICK_CONFIGS else [full_only]) for c in TUNING_CONFIGS],
)
@pytest.mark.parametrize("head_size", [128] + ([80, 256] if FULL else []))
def test_triton_tuning_configs(config, head_size, override):
    override(config)
    a = make_inputs([1, 700, 2600], 32, 8, head_size, 16, torch.bfloat16, "cuda", alibi=True)
    _run_and_check(a, torch.bfloat16)


@pytest.mark.parametrize("prefetch", [0, 1, 2])
def test_triton_table_junk_past_the_sequence_is_never_followed(prefetch, override):
    """Block-table entries past a sequence's last block can hold anything (vLLM reuses
    the table's rows); none of them may become a K/V address, with or without the
    block-id / K-V prefetch."""
    a = make_inputs([700, 1, 513, 1600], 32, 8, 128, 16, torch.bfloat16, "cuda", seed=5)
    override(LaunchConfig(32, 2, 1, True, prefetch, True))
    for junk in (-1, 2**31 - 1):
        for s, n in enumerate(a["seq_lens"].tolist()):
            a["block_tables"][s, -(-n // 16) :] = junk
        a["out"].fill_(float("nan"))
        _run_and_check(a, torch.bfloat16)


def _picked(fresh_plans):
    """The launch configs of the plans built so far (as the tables picked them)."""
    return {plan.config for plan in fresh_plans.values()}


@pytest.mark.parametrize("heads", [(48, 1), (128, 2)] + ([(40, 1), (71, 1)] if FULL else []))
def test_triton_wide_groups_use_the_wide_table_entry(heads, fresh_plans):
    """33-71 query heads per kv head (MQA models): 64 rows per program, in one or two
    group chunks, with the wide-group config of the tables."""
    ti = _triton_impl()
    a = make_inputs([1800, 600, 129], *heads, 128, 16, torch.bfloat16, "cuda", seed=7)
    _run_and_check(a, torch.bfloat16)
    expected = (
        launch_tables.K3D_WIDE_GROUP_CONFIG if ti.k3d_enabled() else launch_tables.WIDE_GROUP_CONFIG
    )
    assert _picked(fresh_plans) == {expected}


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(c, marks=[full_only])
        for c in [
            (32, 4, 1, True, 0, True),
            (32, 4, 1, True, 1, True),
            (16, 4, 1, True, 0, True),
            (64, 4, 1, True, 0, True),
        ]
    ],
)
@pytest.mark.parametrize("heads", [(32, 1), (48, 1), (71, 1), (128, 2)])
def test_triton_large_groups_configs(config, heads, override):
    override(config)
    a = make_inputs([1800, 600, 129], *heads, 128, 16, torch.bfloat16, "cuda", seed=7)
    _run_and_check(a, torch.bfloat16)


def test_k3d_many_programs_tier(monkeypatch, fresh_plans):
    """Past K3D_MANY_PROGRAMS the k3d table switches config (threshold lowered to 0 here, so
    the float64 reference stays small); the wide-group tier likewise."""
    ti = _triton_impl()
    if not ti.k3d_enabled():
        pytest.skip("the k3d tables need Triton >= 3")
    monkeypatch.setattr(launch_tables, "K3D_MANY_PROGRAMS", 0)
    a = make_inputs([3000, 1, 513], 32, 8, 128, 16, torch.float16, "cuda")
    _run_and_check(a, torch.float16)
    b = make_inputs([1800, 3], 64, 1, 128, 16, torch.bfloat16, "cuda", seed=2)
    _run_and_check(b, torch.bfloat16)
    assert _picked(fresh_plans) == {
        launch_tables.K3D_MANY_PROGRAMS_CONFIG,
        launch_tables.K3D_WIDE_GROUP_MANY_CONFIG,
    }


def test_triton_100k_takes_the_table_default(fresh_plans):
    """One 100K sequence at 32/8/128 (1568 programs at 512 tokens each): the tables'
    config for that many programs, balanced items where the config's residency is known
    (one wave of it on this GPU), else the chunk rule for this GPU's SM count."""
    ti = _triton_impl()
    a = make_inputs([100_000], 32, 8, 128, 16, torch.bfloat16, "cuda", seed=22)
    _run_and_check(a, torch.bfloat16)
    expected = launch_tables.pick_config(1568, 128, 16, ti.k3d_enabled())
    sms = ti.sm_count(a["query"].device)
    assert _picked(fresh_plans) == {expected}
    (plan,) = fresh_plans.values()
    budget = launch_tables.balanced_budget(expected, 16, 128, sms, 8, 1)
    assert plan.budget == budget
    if budget:
        assert plan.partition.constexprs["BALANCED"] is True
        assert plan.partition.grid == (8 * (budget + 1), 1, 1)
    else:
        chunk = launch_tables.pick_chunk(1568, sms, expected, 16, 128)
        assert plan.partition.constexprs["PART"] == chunk


@pytest.mark.parametrize(
    "tier,lens,head_size",
    [
        ("default", [1800, 1, 513], 128),  # 3 x 8 x 4 = 96 programs
        ("default", [1800, 1, 513], 256),
        ("mid", [1800, 1, 513], 128),  # MANY_PROGRAMS lowered: mid tier
        ("many", [1800, 1, 513], 128),  # both thresholds lowered: many tier
    ],
)
def test_pre_triton3_tables(monkeypatch, fresh_plans, tier, lens, head_size):
    """The launch tables older Triton gets (2-D K loads), run here with k3d off; the tiers
    are reached by lowering their thresholds (small inputs keep the reference cheap)."""
    ti = _triton_impl()
    monkeypatch.setattr(ti, "HAS_PERMUTE", False)
    if tier in ("mid", "many"):
        monkeypatch.setattr(launch_tables, "MANY_PROGRAMS", 0)
    if tier == "many":
        monkeypatch.setattr(launch_tables, "MID_PROGRAMS_LIMIT", 0)
    a = make_inputs(lens, 32, 8, head_size, 16, torch.bfloat16, "cuda", alibi=True, seed=41)
    _run_and_check(a, torch.bfloat16)
    expected = {
        "default": launch_tables.DEFAULT_CONFIGS[head_size],
        "mid": launch_tables.MID_PROGRAMS_CONFIG,
        "many": launch_tables.MANY_PROGRAMS_CONFIG,
    }[tier]
    assert _picked(fresh_plans) == {expected}
    assert {plan.partition.constexprs["K_3D"] for plan in fresh_plans.values()} == {False}


@pytest.mark.parametrize("many", [False, True])
def test_pre_triton3_wide_groups(monkeypatch, fresh_plans, many):
    """The 64-row configs older Triton gets (2-D K loads), both program-count tiers."""
    ti = _triton_impl()
    monkeypatch.setattr(ti, "HAS_PERMUTE", False)
    if many:
        monkeypatch.setattr(launch_tables, "MANY_PROGRAMS", 0)
    a = make_inputs([20_000, 1, 513], 48, 1, 128, 16, torch.bfloat16, "cuda", seed=43)
    _run_and_check(a, torch.bfloat16)
    expected = launch_tables.WIDE_GROUP_MANY_CONFIG if many else launch_tables.WIDE_GROUP_CONFIG
    assert _picked(fresh_plans) == {expected}


@pytest.mark.parametrize("chunked", [False, True])
def test_triton_reduce_chunked_and_single_pass(monkeypatch, fresh_plans, chunked):
    """Both reduce variants over a batch: all partitions in one load (a tile wide enough
    for 79 of them, forced here) and the chunked loop (this batch's default)."""
    ti = _triton_impl()
    if not chunked:
        monkeypatch.setattr(ti, "REDUCE_BATCH_ROWS", 512)
    a = make_inputs([40_000, 1, 513, 17_000], 32, 8, 128, 16, torch.bfloat16, "cuda", seed=31)
    _run_and_check(a, torch.bfloat16)
    (plan,) = fresh_plans.values()
    assert plan.reduce.constexprs["SINGLE_PASS"] is (not chunked)


def test_triton_long_sequence_chunked_reduce(fresh_plans):
    """Past REDUCE_SINGLE_PASS_MAX chunks the reduce loops over them by default."""
    ti = _triton_impl()
    n = ti.REDUCE_SINGLE_PASS_MAX * 512 + 9_000
    a = make_inputs([n, 700], 8, 1, 128, 32, torch.float16, "cuda", seed=32)
    _run_and_check(a, torch.float16)
    (plan,) = fresh_plans.values()
    assert plan.reduce.constexprs["SINGLE_PASS"] is False


@pytest.mark.parametrize("chunk", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float32"])
def test_triton_chunks_below_vllm_partitions(chunk, dtype_name, override, fresh_plans):
    """Chunks smaller than vLLM's 512-token partitions (partials in our scratch): fused
    merge where a sequence has few chunks, the reduce kernel where it has many."""
    dtype = getattr(torch, dtype_name)
    override(LaunchConfig(16, 1, 1, True, 1, True, chunk))
    a = make_inputs([1, 700, 2600, 33], 32, 8, 128, 16, dtype, "cuda", alibi=True, seed=51)
    _run_and_check(a, dtype)
    (plan,) = fresh_plans.values()
    assert plan.partition.constexprs["PART"] == chunk


@pytest.mark.parametrize("fused", [False, True])
def test_triton_compact_grid_ragged(monkeypatch, fresh_plans, fused):
    """A ragged batch numbers the chunks that exist back to back (COMPACT), with the reduce
    kernel or the fused merge; junk in the table past every sequence's end."""
    ti = _triton_impl()
    monkeypatch.setattr(ti, "FUSE_MAX_CHUNKS", 10**6 if fused else 0)
    monkeypatch.setattr(launch_tables, "BALANCED_WAVES", 0)
    a = make_inputs(RAGGED[:12], 16, 4, 128, 16, torch.bfloat16, "cuda", seed=53)
    for s, n in enumerate(a["seq_lens"].tolist()):
        a["block_tables"][s, -(-n // 16) :] = -1
    for _ in range(2):
        a["out"].fill_(float("nan"))
        _run_and_check(a, torch.bfloat16)
    (plan,) = fresh_plans.values()
    assert plan.partition.constexprs["COMPACT"] is True
    assert plan.partition.constexprs["FUSED"] is fused


def test_fused_merge_counters_reset_across_shapes_and_graphs(monkeypatch, fresh_plans):
    """The fused merge's counters return to zero after every call: many calls of several
    short shapes, eager and replayed from a graph, are each correct."""
    ti = _triton_impl()
    monkeypatch.setattr(ti, "FUSE_MAX_CHUNKS", 64)
    monkeypatch.setattr(launch_tables, "BALANCED_WAVES", 0)
    shapes = [[1024], [3, 1500, 700], [4096, 1], [2049]]
    inputs = [
        make_inputs(s, 32, 8, 128, 16, torch.bfloat16, "cuda", seed=60 + i)
        for i, s in enumerate(shapes)
    ]
    refs = [_reference(a) for a in inputs]
    for _ in range(3):
        for a, ref in zip(inputs, refs):
            a["out"].fill_(float("nan"))
            dispatch.paged_attention_v2(*_positional(a))
            torch.cuda.synchronize()
            assert rel_err(a["out"], ref) < tolerance(torch.bfloat16)
    assert all(p.reduce is None for p in fresh_plans.values())
    a, ref = inputs[1], refs[1]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dispatch.paged_attention_v2(*_positional(a))
    for _ in range(3):
        a["out"].fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(a["out"], ref) < tolerance(torch.bfloat16)


def test_short_eager_calls_fuse_and_captured_calls_do_not(fresh_plans):
    """Up to FUSE_MAX_PARTITIONS partitions an eager call is one launch (the host cost is
    the decode time there); the same call captured in a CUDA graph keeps two launches
    with the chunk rule (GPU time is what counts there).  Both are correct."""
    ti = _triton_impl()
    a = make_inputs([1000, 3, 2000], 32, 8, 128, 16, torch.bfloat16, "cuda", seed=71)
    ref = _reference(a)
    args = _positional(a)
    dispatch.paged_attention_v2(*args)
    torch.cuda.synchronize()
    assert rel_err(a["out"], ref) < tolerance(torch.bfloat16)
    (eager,) = fresh_plans.values()
    assert eager.reduce is None and eager.partition.constexprs["FUSED"] is True
    assert a["max_seq_len"] <= ti.FUSE_MAX_PARTITIONS * 512
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dispatch.paged_attention_v2(*args)
    captured = [p for p in fresh_plans.values() if p is not eager]
    assert len(captured) == 1 and captured[0].reduce is not None
    for _ in range(2):
        a["out"].fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(a["out"], ref) < tolerance(torch.bfloat16)


@pytest.mark.parametrize("fused", [False, True])
def test_empty_sequence_inside_a_batch(monkeypatch, fresh_plans, fused):
    """A zero-length sequence between others: its rows of out are zeros (written by the
    reduce kernel, or by its one program when the merge is fused), the others correct."""
    ti = _triton_impl()
    monkeypatch.setattr(ti, "FUSE_MAX_PARTITIONS", 4 if fused else 0)
    lens = [700, 0, 1300, 5]
    a = make_inputs([700, 1, 1300, 5], 8, 2, 128, 16, torch.bfloat16, "cuda", seed=73)
    a["seq_lens"] = torch.tensor(lens, dtype=torch.int32, device="cuda")
    a["out"].fill_(float("nan"))
    assert dispatch.paged_attention_v2_with_path(**a, backend="triton") == "triton"
    torch.cuda.synchronize()
    (plan,) = fresh_plans.values()
    assert plan.partition.constexprs["FUSED"] is fused
    assert torch.equal(a["out"][1], torch.zeros_like(a["out"][1]))
    keep = [0, 2, 3]
    ref = reference_of(a, keep, lens)
    assert rel_err(a["out"][keep], ref) < tolerance(torch.bfloat16)


@pytest.mark.parametrize(
    "lens,heads,head_size,dtype",
    [
        ([100_000], (32, 8), 128, torch.bfloat16),
        (RAGGED, (32, 8), 128, torch.bfloat16),
        ([100_000], (16, 2), 256, torch.bfloat16),
        ([30_000], (16, 2), 256, torch.float16),
    ],
    ids=["one", "ragged", "head256", "head256-fp16"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["items", "stream"])
def test_balanced_items(monkeypatch, fresh_plans, lens, heads, head_size, dtype, stream):
    """Balanced items (length from the lengths' total, on the device): junk in the table
    past every sequence's end, every output row against the float64 reference; head 256
    with one sequence takes its two-warp config.  ``stream``: a batch cut into equal
    token ranges across sequence ends."""
    ti = _triton_impl()
    if stream and len(lens) == 1:
        pytest.skip("one sequence: a stream is its items")
    monkeypatch.setattr(launch_tables, "BALANCED_STREAM", stream)
    a = make_inputs(lens, *heads, head_size, 16, dtype, "cuda", seed=71)
    for s, n in enumerate(a["seq_lens"].tolist()):
        a["block_tables"][s, -(-n // 16) :] = -1
    for _ in range(2):
        a["out"].fill_(float("nan"))
        _run_and_check(a, dtype)
    (plan,) = fresh_plans.values()
    if not ti.k3d_enabled():
        pytest.skip("balanced items follow the k3d config's residency (Triton >= 3)")
    assert plan.partition.constexprs["BALANCED"] is True
    assert plan.partition.constexprs["STREAM"] is stream
    if head_size == 256:
        assert plan.config == launch_tables.K3D_BALANCED_HEAD256_CONFIG


@pytest.mark.parametrize(
    "config",
    [
        launch_tables.K3D_MANY_PROGRAMS_CONFIG._replace(slots=6),
        launch_tables.MID_PROGRAMS_CONFIG._replace(slots=8),
    ],
    ids=["k3d-6", "2d-8"],
)
@pytest.mark.parametrize("lens", [[100_000], RAGGED], ids=["one", "ragged"])
def test_a_configs_slots_plan_the_balanced_wave(fresh_plans, config, lens):
    """A tuning file's config with ``slots`` (measured on the target device): balanced
    with that many programs per SM, also Triton 2.x's 2-D one-warp config, which the
    H200 tables never balance; every output row against the float64 reference."""
    ti = _triton_impl()
    if config.k3d and not ti.k3d_enabled():
        pytest.skip("k3d config (Triton >= 3)")
    a = make_inputs(lens, 32, 8, 128, 16, torch.bfloat16, "cuda", seed=73)
    c = call_mod.build((), dict(a))
    for _ in range(2):
        a["out"].fill_(float("nan"))
        ti.run(c, config)
        torch.cuda.synchronize()
        ref = reference_of(a, list(range(len(lens))), lens)
        assert rel_err(a["out"], ref) < tolerance(torch.bfloat16)
    (plan,) = fresh_plans.values()
    sms = ti.sm_count(a["query"].device)
    assert plan.partition.constexprs["BALANCED"] is True
    assert plan.budget == config.slots * sms // 8


@pytest.mark.parametrize(
    "lens,stream",
    [([40_000], False), ([9000, 3, 20_000, 517], False), ([9000, 3, 20_000, 517], True)],
    ids=["one", "batch", "stream"],
)
def test_balanced_items_follow_new_lengths_in_a_graph(monkeypatch, fresh_plans, lens, stream):
    """A CUDA graph captured at some lengths and replayed at others (vLLM's decode step):
    the item length is recomputed on the device at every replay, so shorter and longer
    sequences (up to the captured maximum) are each correct."""
    ti = _triton_impl()
    monkeypatch.setattr(launch_tables, "BALANCED_STREAM", stream)
    a = make_inputs(lens, 32, 8, 128, 16, torch.bfloat16, "cuda", seed=72)
    args = _positional(a)
    dispatch.paged_attention_v2(*args)  # warm-up: compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dispatch.paged_attention_v2(*args)
    gen = torch.Generator().manual_seed(5)
    for step in range(4):
        new = [int(torch.randint(0, n + 1, (1,), generator=gen)) for n in lens]
        if step == 0:
            new = list(lens)
        a["seq_lens"].copy_(torch.tensor(new, dtype=torch.int32))
        a["out"].fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        keep = [i for i, n in enumerate(new) if n > 0]
        if keep:
            ref = reference_of(a, keep, new)
            assert rel_err(a["out"][keep], ref) < tolerance(torch.bfloat16)
        for i, n in enumerate(new):
            if n == 0:
                assert torch.equal(a["out"][i], torch.zeros_like(a["out"][i]))
    if ti.k3d_enabled():
        assert all(p.partition.constexprs["BALANCED"] for p in fresh_plans.values())

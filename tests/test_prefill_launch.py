"""The prefill launcher's host-side promises, on CPU: the contiguity runs it hands the
kernel as compiler hints, its built-in configs, how many query heads share a program, and
the self-check's tolerances.

A wrong run would make the compiled kernel read the wrong cache elements on the GPU (the
interpreter ignores hints), so each stride that breaks a promise is tried here.
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")  # the CPU suite runs without torch too
pytest.importorskip("triton")

from vllm_codemod.kernels import prefill_gather, prefill_kernels  # noqa: E402
from vllm_codemod.kernels import prefill_launch as launch  # noqa: E402
from vllm_codemod.kernels.prefill_selfcheck import tolerance  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_plans(monkeypatch):
    """No launch plans from other tests (a plan keeps the kernel objects it was made
    with; these tests record launches with stand-ins)."""
    monkeypatch.setattr(launch, "_plans", {})
    return launch._plans


def caches(blocks=4, heads=2, head=64, page=16, x=8):
    k = torch.zeros(blocks, heads, head // x, page, x, dtype=torch.float16)
    v = torch.zeros(blocks, heads, head, page, dtype=torch.float16)
    return k, v


def test_contiguous_caches_get_whole_runs():
    k, v = caches()
    assert launch.paged_runs(k, v, 64) == (8, 16)
    assert launch.paged_runs(k, v, 16) == (8, 16)
    k32, v32 = caches(page=32)
    assert launch.paged_runs(k32, v32, 16) == (8, 16)  # a tile holds half a page


def test_strides_shrink_or_drop_the_runs():
    k, v = caches()
    sliced_k = torch.zeros(4, 2, 8, 16, 16, dtype=torch.float16)[..., :8]
    assert launch.paged_runs(sliced_k, v, 64)[0] == 8  # lanes contiguous, strides aligned
    transposed_k = torch.zeros(4, 2, 8, 8, 16, dtype=torch.float16).transpose(3, 4)
    assert launch.paged_runs(transposed_k, v, 64)[0] == 1  # lanes not contiguous
    odd_k = torch.zeros(4, 2, 8, 16, 12, dtype=torch.float16)[..., :8]  # tokens every 12
    assert launch.paged_runs(odd_k, v, 64)[0] == 4
    wide_v = torch.zeros(4, 2, 64, 32, dtype=torch.float16)[..., :16]  # rows every 32
    assert launch.paged_runs(k, wide_v, 64)[1] == 16
    odd_v = torch.zeros(4, 2, 64, 24, dtype=torch.float16)[..., :16]  # rows every 24
    assert launch.paged_runs(k, odd_v, 64)[1] == 8  # only 8-token runs stay aligned
    transposed_v = torch.zeros(4, 2, 16, 64, dtype=torch.float16).transpose(2, 3)
    assert launch.paged_runs(k, transposed_v, 64)[1] == 1  # tokens not contiguous
    k12, v12 = caches(page=12)
    assert launch.paged_runs(k12, v12, 64)[1] == 4  # pages of 12 split into runs of 4


def test_built_in_configs_by_element_width():
    for d_pad in (32, 64, 128, 256):
        assert launch.pick_config(d_pad, 2) == launch.DEFAULT_CONFIGS[d_pad]
        assert launch.pick_config(d_pad, 4) == launch.FP32_CONFIGS[d_pad]
    assert launch.pick_config(16, 2) == launch.DEFAULT_CONFIGS[32]
    for d_pad in (32, 64):  # these defaults fit with fp8 caches too
        assert launch.pick_config(d_pad, 2, fp8_cache=True) == launch.DEFAULT_CONFIGS[d_pad]
    for d_pad in (128, 256):
        assert launch.pick_config(d_pad, 2, fp8_cache=True) == launch.FP8_CACHE_CONFIGS[d_pad]
        assert launch.pick_config(d_pad, 4, fp8_cache=True) == launch.FP32_CONFIGS[d_pad]


def test_triton_2_takes_its_own_48kb_configs_and_refuses_what_has_none(monkeypatch):
    """Triton 2.x lays the 3.x defaults out in 50-66 KB; it gets tiles that fit 48 KB
    there (the compile check on 2.1), and refuses fp32 at head 256, which has none."""
    monkeypatch.setattr(launch, "HAS_PERMUTE", False)
    for d_pad in (32, 64, 128, 256):
        assert launch.pick_config(d_pad, 2) == launch.LEGACY_CONFIGS[d_pad]
    for d_pad in (32, 64, 128):
        assert launch.pick_config(d_pad, 4) == launch.LEGACY_FP32_CONFIGS[d_pad]
    with pytest.raises(launch.Triton2Refusal, match="head 256"):
        launch.pick_config(256, 4)
    # a tuning file measured on the device still decides
    tuned = launch.PrefillConfig(32, 32, 2, 1)
    try:
        launch.set_prefill_configs({(256, 4): tuned})
        assert launch.pick_config(256, 4) == tuned
    finally:
        launch.reset_prefill_configs()


@pytest.mark.parametrize(
    "kv_cache_dtype, head, dtype", [("fp8", 64, torch.bfloat16), ("auto", 256, torch.float32)]
)
def test_triton_2_refusals_reach_the_tree_kernel_not_the_gpu(
    monkeypatch, kv_cache_dtype, head, dtype
):
    """fp8 caches (Triton 2.1 has no torch float8 types) and fp32 at head 256 under
    Triton 2.x: the launcher refuses before any kernel or copy runs, and the router
    hands the call to the tree's kernel."""
    from vllm_codemod.kernels import prefill
    from vllm_codemod.kernels.prefill_cases import launch_arguments, make_prefill_inputs

    kernel = _Recorder()
    monkeypatch.setattr(launch, "_prefix_prefill_kernel", kernel)
    monkeypatch.setattr(launch, "HAS_PERMUTE", False)
    a = make_prefill_inputs([(40, 20)], 4, 2, head, 16, dtype, kv_cache_dtype=kv_cache_dtype)
    with pytest.raises(launch.Triton2Refusal):
        launch.prefix_prefill_triton(**launch_arguments(a))
    assert kernel.calls == []
    call = types.SimpleNamespace(
        q=types.SimpleNamespace(is_cuda=True, dtype=dtype),
        k_cache=types.SimpleNamespace(dtype=a["k_cache"].dtype),
        kwargs=lambda: launch_arguments(a),
    )
    monkeypatch.setattr(prefill, "_triton_launch", lambda: launch.prefix_prefill_triton)
    taken = prefill.run(call)
    assert taken.path == "tree" and "Triton" in taken.reason
    assert taken.setup  # the box's Triton, not the call: verify skips such a case
    assert kernel.calls == []


def test_a_launcher_that_refuses_a_plain_call_is_no_setup_limit(monkeypatch):
    """Any other ValueError still sends the call to the tree's kernel, but verify must
    count it as a failure: its cases are calls the launcher should take."""
    from vllm_codemod.kernels import prefill

    def refuses(**kwargs):
        raise ValueError("strided heads")

    monkeypatch.setattr(prefill, "_triton_launch", lambda: refuses)
    call = types.SimpleNamespace(
        q=types.SimpleNamespace(is_cuda=True, dtype=torch.bfloat16),
        k_cache=types.SimpleNamespace(dtype=torch.bfloat16),
        kwargs=dict,
    )
    taken = prefill.run(call)
    assert taken.path == "tree" and "strided heads" in taken.reason
    assert not taken.setup


def test_gqa_pack_takes_power_of_two_groups():
    assert launch.gqa_pack(1, 128) == 1  # MHA: nothing to share
    assert launch.gqa_pack(4, 128) == 4  # 32/8: one program per kv head and 32 queries
    assert launch.gqa_pack(8, 64) == 8  # 16/2 at head 256: 8 queries a tile
    assert launch.gqa_pack(7, 128) == 1  # 28/4: measured slower packed
    assert launch.gqa_pack(6, 128) == 2
    assert launch.gqa_pack(32, 16) == 4  # MQA-like on a small tile: four queries a tile
    assert launch.gqa_pack(32, 128) == 32


def test_only_the_measured_defaults_pack():
    assert launch.DEFAULT_CONFIGS[128] in launch.PACKED_CONFIGS
    assert launch.DEFAULT_CONFIGS[256] in launch.PACKED_CONFIGS
    assert launch.PrefillConfig(128, 128, 8, 2) not in launch.PACKED_CONFIGS  # measured no gain


def test_selfcheck_allows_tf32_on_the_triton_path_only():
    assert tolerance(torch.float32, "torch") == 1e-4
    assert tolerance(torch.float32, "triton") == 5e-3
    assert tolerance(torch.bfloat16, "triton") == tolerance(torch.bfloat16, "torch")


def test_gather_only_where_the_pipeliner_streams_and_within_the_limit(monkeypatch):
    monkeypatch.setattr(launch, "_gather_limit", [1000])
    two_stages, one_stage = launch.PrefillConfig(128, 64, 8, 2), launch.PrefillConfig(128, 32, 4, 1)
    assert launch.wants_gather(two_stages, 1000)
    assert not launch.wants_gather(two_stages, 1001)  # over the limit: the paged loop
    assert not launch.wants_gather(two_stages, 0)  # nothing to copy
    assert not launch.wants_gather(one_stage, 10)  # no cp.async to gain


@pytest.mark.parametrize(
    "raw,limit",
    [("", launch.GATHER_LIMIT_BYTES), ("0", 0), ("512", 512 << 20), ("0.5", 1 << 19),
     ("-3", 0), ("lots", launch.GATHER_LIMIT_BYTES)],
)  # fmt: skip
def test_gather_limit_from_the_environment(monkeypatch, raw, limit):
    monkeypatch.setattr(launch, "_gather_limit", [])
    monkeypatch.setenv(launch.GATHER_LIMIT_ENV, raw)
    assert launch.gather_limit() == limit
    monkeypatch.setenv(launch.GATHER_LIMIT_ENV, "7")
    assert launch.gather_limit() == limit  # read once per process


def test_gathered_bytes_follow_the_table_width():
    from vllm_codemod.kernels.prefill_gather import gathered_bytes

    k, _ = caches(blocks=4, heads=2, head=64, page=16, x=8)
    table = torch.zeros(3, 5, dtype=torch.int32)  # 3 sequences, 5 pages each at most
    assert gathered_bytes(k, table) == 2 * 3 * 2 * (5 * 16) * 64 * 2


class _Recorder:
    """Stands in for a Triton kernel: ``kernel[grid](*args, **kwargs)`` records the call."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((args, kwargs))


class _Copy:
    """Stands in for the context copy: the buffers (``gather_buffers``: records the
    dtype asked for, returns ``buffers`` or zeros, or raises ``fail``) and the copy
    kernel (recorded)."""

    def __init__(self, monkeypatch, buffers=None, fail=None):
        self.dtypes, self.kernel = [], _Recorder()

        def make(k_cache, block_table, dtype=None):
            if fail is not None:
                raise fail
            self.dtypes.append(dtype)
            if buffers is not None:
                return buffers
            blocks, heads, lanes, page, x = k_cache.shape
            shape = (block_table.shape[0], heads, block_table.shape[1] * page, lanes * x)
            dtype = dtype or k_cache.dtype
            return torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)

        monkeypatch.setattr(launch, "gather_buffers", make)
        monkeypatch.setattr(prefill_gather, "_gather_context_kernel", self.kernel)

    def asked(self):
        """(window, ALIGN) of each copy launched: the window the copy was told (0 for
        none) and the key tile its first written row is aligned to."""
        out = []
        for args, kwargs in self.kernel.calls:
            window = args[-1]
            out.append((0 if window == prefill_gather.NO_WINDOW else window, kwargs["ALIGN"]))
        return out


def _launch(monkeypatch, config, gather=None):
    """One CPU launch with the kernel recorded; returns its constexprs and the K/V
    buffers it was handed (positions of KG, VG in the kernel's signature).  A
    :class:`_Copy` made before it stands in for the context copy."""
    from vllm_codemod.kernels.prefill_cases import launch_arguments, make_prefill_inputs

    kernel = _Recorder()
    monkeypatch.setattr(launch, "_prefix_prefill_kernel", kernel)
    a = make_prefill_inputs([(40, 20)], 4, 2, 64, 16, torch.float16)
    launch.prefix_prefill_triton(
        **launch_arguments(a), config=launch.PrefillConfig(*config), gather=gather
    )
    ((args, kwargs),) = kernel.calls
    names = prefill_kernels._prefix_prefill_kernel.arg_names  # positional, in order
    return kwargs, args[names.index("KG")], args[names.index("VG")], a


def test_a_two_stage_launch_reads_the_gathered_buffers(monkeypatch):
    monkeypatch.setattr(launch, "_gather_limit", [1 << 30])
    kg = torch.zeros(1, 2, 48, 64, dtype=torch.float16)
    vg = torch.ones(1, 2, 48, 64, dtype=torch.float16)
    copy = _Copy(monkeypatch, buffers=(kg, vg))
    kwargs, k_arg, v_arg, _ = _launch(monkeypatch, (64, 32, 4, 2))
    assert kwargs["GATHERED"] and k_arg is kg and v_arg is vg
    assert copy.asked() == [(0, 64)]


def test_one_stage_or_gather_false_reads_the_paged_caches(monkeypatch):
    monkeypatch.setattr(launch, "_gather_limit", [1 << 30])

    never = _Copy(monkeypatch, fail=AssertionError("gathered although not wanted"))
    for config, gather in (((64, 32, 4, 1), None), ((64, 32, 4, 2), False)):
        kwargs, k_arg, v_arg, a = _launch(monkeypatch, config, gather)
        assert not kwargs["GATHERED"] and never.kernel.calls == []
        assert k_arg is a["k_cache"] and v_arg is a["v_cache"]


def test_no_memory_for_the_buffers_falls_back_to_the_paged_loop(monkeypatch):
    monkeypatch.setattr(launch, "_gather_limit", [1 << 30])

    copy = _Copy(monkeypatch, fail=torch.cuda.OutOfMemoryError("CUDA out of memory"))
    kwargs, k_arg, _, a = _launch(monkeypatch, (64, 32, 4, 2))
    assert not kwargs["GATHERED"] and k_arg is a["k_cache"] and copy.kernel.calls == []


def test_gathered_bytes_in_the_dtype_asked_for():
    from vllm_codemod.kernels.prefill_gather import gathered_bytes

    k, _ = caches(blocks=4, heads=2, head=64, page=16, x=16)
    k = k.to(torch.uint8)  # an fp8 cache's raw bytes
    table = torch.zeros(3, 5, dtype=torch.int32)
    assert gathered_bytes(k, table) == 2 * 3 * 2 * (5 * 16) * 64
    assert gathered_bytes(k, table, torch.bfloat16) == 2 * 3 * 2 * (5 * 16) * 64 * 2


TUNED_128 = launch.PrefillConfig(128, 128, 8, 2)


def _fp8_launch(monkeypatch, limit, gather=None):
    """A head-128 launch over an fp8 cache with no config given, a tuning table holding
    TUNED_128 for 16-bit head 128; a :class:`_Copy` made before it stands in for the
    context copy."""
    from vllm_codemod.kernels.prefill_cases import launch_arguments, make_prefill_inputs

    kernel = _Recorder()
    monkeypatch.setattr(launch, "_prefix_prefill_kernel", kernel)
    monkeypatch.setattr(launch, "_gather_limit", [limit])
    monkeypatch.setattr(launch, "_tuned", {(128, 2): TUNED_128})
    monkeypatch.setattr(launch, "_tables_read", [True])
    a = make_prefill_inputs([(40, 20)], 4, 2, 128, 16, torch.float16, kv_cache_dtype="fp8")
    args = launch_arguments(a)
    assert launch.launch_plan(args["q"], args["k_cache"], args["block_table"]) == (
        (TUNED_128, True) if limit else (launch.FP8_CACHE_CONFIGS[128], False)
    )
    launch.prefix_prefill_triton(**args, gather=gather)
    ((_, kwargs),) = kernel.calls
    config = (kwargs["BLOCK_M"], kwargs["BLOCK_N"], kwargs["num_warps"], kwargs["num_stages"])
    assert kwargs["FP8"]
    return kwargs, config


def test_an_fp8_context_is_gathered_in_the_query_dtype_at_the_tuned_config(monkeypatch):
    """Converted once by the copy, the context loop reads the 16-bit tiles the tuned
    config was measured on."""
    copy = _Copy(monkeypatch)
    kwargs, config = _fp8_launch(monkeypatch, 1 << 30)
    assert kwargs["GATHERED"] and config == tuple(TUNED_128)
    assert copy.dtypes == [torch.float16] and copy.asked() == [(0, 128)]


def test_a_windowed_gather_is_told_the_window_and_the_key_tile(monkeypatch):
    """The copy skips the rows below the window, aligned to the kernel's key tile (the
    context loop starts at a tile boundary; the rows it reads must be written)."""
    from vllm_codemod.kernels.prefill_cases import launch_arguments, make_prefill_inputs

    monkeypatch.setattr(launch, "_prefix_prefill_kernel", _Recorder())
    a = make_prefill_inputs([(300, 20)], 4, 2, 64, 16, torch.float16, sliding_window=50)
    for config, align in (((64, 32, 4, 2), 64), ((128, 128, 4, 2), 128)):
        copy = _Copy(monkeypatch)
        launch.prefix_prefill_triton(
            **launch_arguments(a), config=launch.PrefillConfig(*config), gather=True
        )
        # ALIGN: the larger of the copy's own 64-token rows and the kernel's key tile
        assert copy.dtypes == [None] and copy.asked() == [(50, align)]


@pytest.mark.parametrize("window, kept", [(339, True), (340, False), (10**6, False)])
def test_a_window_no_pair_can_reach_launches_as_no_window(monkeypatch, window, kept):
    """20 pages of 16 tokens and 20 new: the last query is at most 339 tokens past a key,
    so from 340 on the window masks nothing and the plain launch (no edge loops, the
    whole context copied) does the work."""
    from vllm_codemod.kernels.prefill_cases import launch_arguments, make_prefill_inputs

    copy = _Copy(monkeypatch)
    kernel = _Recorder()
    monkeypatch.setattr(launch, "_prefix_prefill_kernel", kernel)
    a = make_prefill_inputs([(300, 20)], 4, 2, 64, 16, torch.float16, sliding_window=window)
    assert a["block_table"].shape[1] == 20
    launch.prefix_prefill_triton(
        **launch_arguments(a), config=launch.PrefillConfig(64, 32, 4, 2), gather=True
    )
    ((args, kwargs),) = kernel.calls
    assert kwargs["WINDOW"] is kept
    # the kernel's window argument, and the copy's
    assert args[13] == copy.asked()[0][0] == (window if kept else 0)


def test_an_fp8_cache_read_in_place_keeps_its_own_default(monkeypatch):
    """No gather (limit 0, gather=False, or no memory for the buffers): the paged loop
    over fp8 tiles, at the fp8 default that fits 48 KB with their conversion."""

    fp8_default = tuple(launch.FP8_CACHE_CONFIGS[128])
    for limit, gather in ((0, None), (1 << 30, False)):
        never = _Copy(monkeypatch, fail=AssertionError("gathered although not wanted"))
        kwargs, config = _fp8_launch(monkeypatch, limit, gather)
        assert not kwargs["GATHERED"] and config == fp8_default and never.kernel.calls == []
    out_of_memory = _Copy(monkeypatch, fail=torch.cuda.OutOfMemoryError("CUDA out of memory"))
    kwargs, config = _fp8_launch(monkeypatch, 1 << 30)
    assert not kwargs["GATHERED"] and config == fp8_default and out_of_memory.kernel.calls == []


def test_every_stride_reaches_the_kernel_under_its_own_name(monkeypatch):
    """The launch reads each tensor's strides once (host time); this pins them by name,
    with q/k/v/o sliced from wider tensors so no two strides coincide."""
    from vllm_codemod.kernels.prefill_cases import launch_arguments, make_prefill_inputs

    kernel = _Recorder()
    monkeypatch.setattr(launch, "_prefix_prefill_kernel", kernel)
    a = make_prefill_inputs([(40, 20)], 4, 2, 64, 16, torch.float16)
    args = launch_arguments(a)
    for name, extra in (("q", 3), ("k", 5), ("v", 7), ("o", 9)):
        t = args[name]
        wide = torch.zeros(t.shape[0], t.shape[1] + 1, t.shape[2] + extra, dtype=t.dtype)
        args[name] = wide[:, : t.shape[1], : t.shape[2]]
    launch.prefix_prefill_triton(**args, config=launch.PrefillConfig(64, 32, 4, 1))
    ((got, _),) = kernel.calls
    named = dict(zip(prefill_kernels._prefix_prefill_kernel.arg_names, got))
    for name, tensor in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "o")):
        assert (named[f"stride_{name}t"], named[f"stride_{name}h"]) == args[tensor].stride()[:2]
    assert tuple(named[f"stride_kc{d}"] for d in "bhdt") == args["k_cache"].stride()[:4]
    assert tuple(named[f"stride_vc{d}"] for d in "bhdt") == args["v_cache"].stride()[:4]
    assert named["stride_btb"] == args["block_table"].stride(0)


def test_a_head_dimension_that_is_not_contiguous_is_refused(monkeypatch):
    from vllm_codemod.kernels.prefill_cases import launch_arguments, make_prefill_inputs

    monkeypatch.setattr(launch, "_prefix_prefill_kernel", _Recorder())
    a = make_prefill_inputs([(40, 20)], 4, 2, 64, 16, torch.float16)
    args = launch_arguments(a)
    args["k"] = torch.zeros(20, 2, 128, dtype=torch.float16)[:, :, ::2]  # stride 2
    with pytest.raises(ValueError, match="contiguous"):
        launch.prefix_prefill_triton(**args, config=launch.PrefillConfig(64, 32, 4, 1))


def test_launches_below_a_size_tier_take_its_config(monkeypatch):
    """``tune`` measured where a large config stops paying; smaller launches (by the
    host's work estimate) run the tier's config, None meaning the built-in one."""
    from vllm_codemod.kernels.prefill_cases import make_prefill_inputs

    monkeypatch.setattr(launch, "_gather_limit", [1 << 30])
    big = launch.PrefillConfig(128, 128, 8, 3)
    short = make_prefill_inputs([(40, 20)], 4, 2, 128, 16, torch.float16)
    long = make_prefill_inputs([(400, 200)], 4, 2, 128, 16, torch.float16)
    work = [launch.work_estimate(a["q"], a["block_table"], 16) for a in (short, long)]
    assert work == [20 * 4 * 4 * 16, 200 * 4 * 26 * 16]  # tables of 3 and 26 pages
    below = work[1]  # the long one is not below: >= takes the large config
    try:
        launch.set_prefill_configs({(128, 2): big}, small={(128, 2): (below, None)})
        plans = [launch.launch_plan(a["q"], a["k_cache"], a["block_table"]) for a in (short, long)]
        assert plans == [(launch.DEFAULT_CONFIGS[128], False), (big, True)]
        tier = launch.PrefillConfig(64, 32, 4, 2)
        launch.set_prefill_configs({(128, 2): big}, small={(128, 2): (below, tier)})
        assert launch.launch_plan(short["q"], short["k_cache"], short["block_table"]) == (
            tier,
            True,
        )
        # a tier alone (the default won the long points)
        launch.set_prefill_configs({}, small={(128, 2): (below, tier)})
        assert launch.launch_plan(long["q"], long["k_cache"], long["block_table"]) == (
            launch.DEFAULT_CONFIGS[128],
            False,
        )
        # fp32 queries are another key: untouched
        launch.set_prefill_configs(None)
        q32 = short["q"].float()
        assert (
            launch.launch_plan(q32, short["k_cache"], short["block_table"])[0]
            == (launch.FP32_CONFIGS[128])
        )
    finally:
        launch.reset_prefill_configs()


def test_an_fp8_launch_below_a_tier_keeps_the_fp8_default(monkeypatch):
    """Under the tier the built-in config runs, and over an fp8 cache that is the fp8
    one (one stage: the paged loop, no copy)."""
    from vllm_codemod.kernels.prefill_cases import make_prefill_inputs

    monkeypatch.setattr(launch, "_gather_limit", [1 << 30])
    a = make_prefill_inputs([(40, 20)], 4, 2, 128, 16, torch.float16, kv_cache_dtype="fp8")
    k_cache = a["k_cache"].view(a["fp8_dtype"])
    try:
        launch.set_prefill_configs(
            {(128, 2): launch.PrefillConfig(128, 128, 8, 3)}, small={(128, 2): (1 << 40, None)}
        )
        assert launch.launch_plan(a["q"], k_cache, a["block_table"]) == (
            launch.FP8_CACHE_CONFIGS[128],
            False,
        )
    finally:
        launch.reset_prefill_configs()

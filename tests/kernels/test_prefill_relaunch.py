"""The prefill launcher's plans, on CPU with stand-in kernels: the first call of a launch
shape goes through Triton (which binds and specializes every argument), later ones
relaunch the compiled kernels with the same arguments, and anything Triton specializes
on makes another plan."""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")  # the CPU suite runs without torch too
pytest.importorskip("triton")
from pa_helpers import FakeCompiled, FakeJit, shifted  # noqa: E402

from vllm_codemod.kernels import decode_kernels, prefill_gather, prefill_kernels  # noqa: E402
from vllm_codemod.kernels import prefill_launch as launch  # noqa: E402
from vllm_codemod.kernels.log import log as kernel_log  # noqa: E402
from vllm_codemod.kernels.prefill_cases import launch_arguments, make_prefill_inputs  # noqa: E402

GATHERED = launch.PrefillConfig(64, 32, 4, 2)  # two stages: the context is copied first
PAGED = launch.PrefillConfig(64, 32, 4, 1)


@pytest.fixture
def kernels(monkeypatch):
    """Stand-ins for the attention and the copy kernels, an empty plan cache, the fast
    path on; returns (attention, copy)."""
    monkeypatch.setattr(launch, "_plans", {})
    monkeypatch.setattr(launch, "_fast", {"enabled": True})
    monkeypatch.setattr(launch, "_gather_limit", [1 << 30])
    main = FakeJit(prefill_kernels._prefix_prefill_kernel, FakeCompiled())
    copy = FakeJit(prefill_gather._gather_context_kernel, FakeCompiled())
    monkeypatch.setattr(launch, "_prefix_prefill_kernel", main)
    monkeypatch.setattr(prefill_gather, "_gather_context_kernel", copy)
    return main, copy


def _args(lens=((40, 20),), **kw):
    return launch_arguments(make_prefill_inputs(list(lens), 4, 2, 64, 16, torch.float16, **kw))


def _in_param_order(fn, kwargs):
    return tuple(kwargs[p.name] for p in fn.params if p.is_constexpr)


def _same(a, b):
    """Argument tuples alike element by element: tensors by shape, strides and dtype (a
    gathered call's buffers are new each call), everything else by value."""

    def form(x):
        return (x.shape, x.stride(), x.dtype) if isinstance(x, torch.Tensor) else x

    return len(a) == len(b) and all(form(x) == form(y) for x, y in zip(a, b))


@pytest.mark.parametrize("config", [GATHERED, PAGED])
def test_the_second_call_relaunches_the_compiled_kernels(kernels, config):
    main, copy = kernels
    args = _args()
    launch.prefix_prefill_triton(**args, config=config)
    assert len(main.launches) == 1 and len(copy.launches) == (config is GATHERED)
    assert main.compiled.launches == [] and copy.compiled.launches == []
    launch.prefix_prefill_triton(**args, config=config)
    assert len(main.launches) == 1 and len(copy.launches) == (config is GATHERED)
    for jit in (main, copy) if config is GATHERED else (main,):
        ((grid, plain, kwargs),) = jit.launches
        ((grid2, fast),) = jit.compiled.launches
        # the runtime arguments again, then every constexpr in the kernel's order
        assert grid2 == grid and _same(fast, plain + _in_param_order(jit, kwargs))
    ((_, fast),) = main.compiled.launches
    assert fast[0] is args["q"] and fast[3] is args["o"]  # this call's tensors
    if config is GATHERED:  # and this call's buffers, as the copy filled them
        ((_, copied),) = copy.compiled.launches
        names = prefill_kernels._prefix_prefill_kernel.arg_names
        assert fast[names.index("KG")] is copied[5] and fast[names.index("VG")] is copied[6]
    assert len(launch._plans) == 1


def test_new_lengths_keep_the_plan_and_what_triton_specializes_on_does_not(kernels):
    main, _ = kernels
    base = _args(((40, 20), (7, 9)))
    launch.prefix_prefill_triton(**base, config=GATHERED)
    other_lengths = dict(base, seq_lens=base["seq_lens"].clone())
    other_lengths["seq_lens"][1] -= 1
    launch.prefix_prefill_triton(**other_lengths, config=GATHERED)
    assert len(launch._plans) == 1 and len(main.launches) == 1
    variants = {
        "q moved off 16-byte alignment": dict(base, q=shifted(base["q"])),
        "seq_lens moved": dict(base, seq_lens=shifted(base["seq_lens"])),
        "block_table moved": dict(base, block_table=shifted(base["block_table"])),
        "more query tiles": _args(((40, 90), (7, 9))),
        "a wider block table": _args(((400, 20), (7, 9))),
        "ALiBi": _args(((40, 20), (7, 9)), alibi=True),
        "another dtype": launch_arguments(
            make_prefill_inputs([(40, 20), (7, 9)], 4, 2, 64, 16, torch.bfloat16)
        ),
    }
    for n, (label, args) in enumerate(variants.items(), start=2):
        launch.prefix_prefill_triton(**args, config=GATHERED)
        assert len(launch._plans) == n, label
        assert len(main.launches) == n, f"{label}: no plain launch of its own"


def test_a_launcher_that_refuses_its_arguments_turns_the_fast_path_off(kernels, caplog):
    main, copy = kernels
    main.compiled.fail = True
    caplog.set_level(logging.INFO, logger=kernel_log.name)
    args = _args()
    for _ in range(3):
        launch.prefix_prefill_triton(**args, config=GATHERED)
    assert launch._fast["enabled"] is False
    assert len(main.launches) == 3  # the failed relaunch went through Triton instead
    assert len(copy.compiled.launches) == 1 and len(copy.launches) == 2
    refused = [r for r in caplog.records if "launcher is unusable" in r.getMessage()]
    assert len(refused) == 1


@pytest.mark.parametrize(
    "fn",
    [
        prefill_kernels._prefix_prefill_kernel,
        prefill_gather._gather_context_kernel,
        decode_kernels.partition_kernel,
        decode_kernels.reduce_kernel,
    ],
    ids=["prefill", "copy", "partition", "reduce"],
)
def test_relaunched_kernels_take_their_constexprs_last(fn):
    """A relaunch passes the constexprs after the runtime arguments."""
    kinds = [p.is_constexpr for p in fn.params]
    assert kinds == sorted(kinds), "a constexpr parameter before a runtime one"

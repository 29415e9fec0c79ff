"""Decode tuning logic with a fake Triton module and a fake clock: who may win, and why."""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional

import pytest

torch = pytest.importorskip("torch")

from vllm_codemod.kernels import dispatch, launch_tables, reference  # noqa: E402
from vllm_codemod.tuning.measure import (  # noqa: E402
    DecodeKernels,
    DecodeTuner,
    _as_list,
    batch_lengths,
    batch_sizes,
    length_grid,
    measure_decode,
    plan_points,
)
from vllm_codemod.tuning.progress import Budget, Progress  # noqa: E402
from vllm_codemod.tuning.shapes import Deployment, Shape  # noqa: E402
from vllm_codemod.tuning.timing import GraphUnavailable  # noqa: E402


class LaunchConfig(NamedTuple):
    tile: int
    warps: int
    stages: int
    early_v: bool = True
    prefetch: int = 0
    k3d: bool = False


DEFAULT = LaunchConfig(64, 2, 1, True, 0, True)
FAST = DEFAULT._replace(warps=4)  # a neighbour: 40% faster
WRONG = DEFAULT._replace(tile=32)  # even faster, but computes garbage
BROKEN = DEFAULT._replace(tile=128)  # fails to compile
K3D_FAILS = DEFAULT._replace(stages=2)  # falls back to the 2-D load inside the kernel
NOISE = DEFAULT._replace(prefetch=1)  # 1% faster: within the noise margin


class FakeTriton:
    """The parts of decode_launch that tune touches."""

    LaunchConfig = LaunchConfig
    K3D_CONFIGS = {128: DEFAULT}
    K3D_MANY_PROGRAMS_CONFIG = LaunchConfig(32, 1, 1, True, prefetch=1, k3d=True)

    def __init__(self) -> None:
        self.override: Optional[LaunchConfig] = None
        self._k3d_state = {"disabled": False}
        self.last: Any = None

    def set_config_override(self, config) -> None:
        self.override = None if config is None else LaunchConfig(*config)

    def pick_config(self, programs, d_pad, device=None, g_pad=16):
        return self.override or DEFAULT

    def group_rows(self, qpk: int) -> int:
        return max(16, qpk)

    def k3d_enabled(self) -> bool:
        return True


class FakeDispatch:
    def __init__(self, impl: FakeTriton) -> None:
        self.impl = impl

    def paged_attention_v2_with_path(self, backend=None, **args):
        config = self.impl.override or DEFAULT
        self.impl.last = config
        if config == BROKEN:
            raise RuntimeError("out of resources: shared memory, Required: 300000")
        dispatch.paged_attention_v2_with_path(**args, backend="torch")
        if config == WRONG:
            args["out"].mul_(1.5)
        if config == K3D_FAILS:
            self.impl._k3d_state["disabled"] = True
        return "triton"


SPEED = {DEFAULT: 100.0, FAST: 60.0, WRONG: 10.0, NOISE: 99.0, "v1": 50.0}


class FakeTimer:
    """Eager/graph 'times' by which candidate ran last; V1 cannot be graphed."""

    device = "cpu"
    cuda = True  # pretend, so graph timing is attempted

    def __init__(self, impl: FakeTriton, budget: Optional[Budget] = None) -> None:
        self.impl = impl
        self.budget = budget

    def sync(self) -> None:
        pass

    def eager_us(self, fns) -> float:
        for fn in fns:
            fn()
        if self.budget is not None:
            self.budget.seconds = 0  # the budget runs out after the first timing
        return SPEED.get(self.impl.last, 200.0)

    def graph_us(self, fns) -> float:
        for fn in fns:
            fn()
        if self.impl.last == "v1":
            raise GraphUnavailable("capture failed: vendor op syncs")
        return SPEED.get(self.impl.last, 200.0) * 0.5


def _tuner(v1_speed: Optional[float] = None, budget: Optional[Budget] = None):
    impl = FakeTriton()

    def v1(args: Dict[str, Any]) -> None:
        impl.last = "v1"
        dispatch.paged_attention_v2_with_path(**args, backend="torch")

    kernels = DecodeKernels(FakeDispatch(impl), reference, impl, v1 if v1_speed else None)
    timer = FakeTimer(impl, budget)
    tuner = DecodeTuner(
        kernels, "cpu", timer, budget or Budget(None), Progress(1, enabled=False), use_triton=True
    )
    return tuner, kernels


SHAPE = Shape(4, 2, 64, "float32")


def test_fastest_correct_candidate_wins_and_the_rest_are_listed(monkeypatch):
    monkeypatch.setattr(
        "vllm_codemod.tuning.measure.v2_candidates",
        lambda impl, default, *where: [WRONG, BROKEN, K3D_FAILS, NOISE, FAST],
    )
    tuner, _ = _tuner(v1_speed=50.0)
    point = tuner.measure_point(SHAPE, 1, 600)
    by_config = {
        tuple(c["config"]) if c["config"] else c["backend"]: c for c in point["candidates"]
    }
    assert by_config[tuple(WRONG)]["status"] == "wrong"
    assert "relative error" in by_config[tuple(WRONG)]["reason"]
    assert by_config[tuple(BROKEN)]["status"] == "failed"
    assert "shared memory" in by_config[tuple(BROKEN)]["reason"]
    assert by_config[tuple(K3D_FAILS)]["status"] == "failed"
    assert "k3d" in by_config[tuple(K3D_FAILS)]["reason"]
    assert by_config[tuple(FAST)]["graph_us"] == 30.0
    assert "graph_reason" in by_config["v1"]
    assert point["mode"] == "graph"
    assert point["winner"] == {"backend": "v2", "config": list(FAST), "us": 30.0}
    assert point["default"]["us"] == 50.0 and point["default"]["config"] == list(DEFAULT)
    # without graphs the vendor kernel (50 us eager) beats FAST (60 us)
    assert point["eager_winner"] == {"backend": "v1", "config": None, "us": 50.0}


def test_a_batch_point_times_a_ragged_batch(monkeypatch):
    """A batch is timed with lengths rising evenly to the point's length (a server's
    batches are ragged); one sequence at the length itself."""
    assert batch_lengths(1, 600) == [600]
    assert batch_lengths(4, 600) == [150, 300, 450, 600]
    assert batch_lengths(3, 2) == [1, 1, 2]
    import vllm_codemod.tuning.measure as measure

    seen = []
    real = measure.make_decode_case

    def spy(shape, seq_lens, device, **kwargs):
        seen.append(list(seq_lens))
        return real(shape, seq_lens, device, **kwargs)

    monkeypatch.setattr(measure, "make_decode_case", spy)
    tuner, _ = _tuner()
    assert tuner.measure_point(SHAPE, 4, 600) is not None
    assert seen == [[150, 300, 450, 600]]


def test_noise_never_moves_the_choice_off_the_default(monkeypatch):
    monkeypatch.setattr(
        "vllm_codemod.tuning.measure.v2_candidates", lambda impl, default, *where: [NOISE]
    )
    tuner, _ = _tuner()
    point = tuner.measure_point(SHAPE, 1, 600)
    assert point["winner"] == {"backend": "v2", "config": None, "us": 50.0}


def test_a_wrong_default_skips_the_shape():
    tuner, kernels = _tuner()
    tuner.k.dispatch.impl.set_config_override(None)
    original = FakeDispatch.paged_attention_v2_with_path

    def broken(self, backend=None, **args):
        original(self, backend, **args)
        args["out"].zero_()

    tuner.k.dispatch.paged_attention_v2_with_path = broken.__get__(tuner.k.dispatch)
    deployment = Deployment([SHAPE], 1024, 1, "test")
    entries = measure_decode(tuner, deployment, plan_points(deployment))
    assert entries == []
    assert any("default V2 kernel wrong" in s for s in kernels.skipped)


def test_budget_stops_measuring_and_keeps_what_was_measured(monkeypatch):
    monkeypatch.setattr(
        "vllm_codemod.tuning.measure.v2_candidates", lambda impl, default, *where: [FAST, NOISE]
    )
    budget = Budget(3600)
    tuner, kernels = _tuner(budget=budget)
    deployment = Deployment([SHAPE], 2048, 1, "test")
    entries = measure_decode(tuner, deployment, plan_points(deployment))
    assert len(entries) == 1 and len(entries[0]["points"]) == 1  # 1 of 3 lengths
    assert [c["config"] for c in entries[0]["points"][0]["candidates"]] == [list(DEFAULT)]
    assert any("budget of 0 s spent after 1 of 3 points" in s for s in kernels.skipped)


def test_grid():
    assert length_grid(4096) == [512, 1024, 2048, 4096]
    assert length_grid(5000) == [512, 1024, 2048, 4096, 5000]
    assert length_grid(100) == [100]
    assert batch_sizes(1) == [1] and batch_sizes(256) == [1, 16] and batch_sizes(4) == [1, 4]
    d = Deployment([Shape(32, 8, 128), Shape(16, 2, 256)], 1 << 17, 256, "t")
    points = plan_points(d)
    assert points[:2] == [(Shape(32, 8, 128), 1, 512), (Shape(16, 2, 256), 1, 512)]
    assert all(n * length <= 1 << 20 for _, n, length in points)
    assert (Shape(32, 8, 128), 1, 1 << 17) in points


@pytest.fixture
def real_tables():
    """kernels/decode_launch.py imported with a stand-in ``triton`` (jit = identity) and
    no kernels: its LaunchConfig, tables and pick_config are plain Python, so the
    candidate search can be checked against the real tables without a GPU."""
    import types
    from pathlib import Path

    import vllm_codemod.kernels as kernels_pkg
    from vllm_codemod.tuning.tree_imports import load_file

    triton = types.ModuleType("triton")
    language = types.ModuleType("triton.language")
    language.constexpr = object
    language.permute = object()  # a Triton >= 3.0: the k3d tables
    triton.jit = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)
    triton.language = language
    stand_ins = {"triton": triton, "triton.language": language}
    stand_ins["vllm_codemod.kernels.decode_kernels"] = types.ModuleType("decode_kernels")
    path = Path(kernels_pkg.__file__).parent / "decode_launch.py"
    name = "vllm_codemod.kernels._tune_test_decode_launch"
    return load_file(name, path, stand_ins=stand_ins, keep=False)


@pytest.mark.parametrize(
    "shape, seqs, length",
    [(Shape(32, 8, 128), 1, 4096), (Shape(16, 2, 256), 1, 100_000), (Shape(64, 1, 128), 16, 8192)],
)
def test_candidates_from_the_real_tables(real_tables, shape, seqs, length):
    from vllm_codemod.tuning.candidates import MAX_CANDIDATES, default_config, v2_candidates

    impl = real_tables
    default = default_config(impl, shape, seqs, length, torch.device("cpu"))
    qpk = shape.num_heads // shape.num_kv_heads
    d_pad = max(16, 1 << (shape.head_size - 1).bit_length())
    programs = seqs * shape.num_kv_heads * -(-qpk // impl.group_rows(qpk)) * -(-length // 512)
    assert default == tuple(impl.pick_config(programs, d_pad, None, impl.group_rows(qpk)))
    candidates = v2_candidates(impl, default)
    assert 3 <= len(candidates) <= MAX_CANDIDATES
    assert default not in candidates and len(set(candidates)) == len(candidates)
    for config in candidates:
        full = impl.LaunchConfig(*config)  # every candidate is a valid launch config
        assert full.k3d is True
        assert full.tile in (16, 32, 64, 128) and full.warps in (1, 2, 4, 8)
    impl.set_config_override(candidates[0])
    assert tuple(impl.pick_config(programs, d_pad, None, 16)) == candidates[0]
    impl.set_config_override(None)


def test_a_k3d_fallback_of_the_default_stands_and_is_noted(monkeypatch):
    monkeypatch.setattr(
        "vllm_codemod.tuning.measure.v2_candidates", lambda impl, default, *where: [FAST]
    )
    tuner, kernels = _tuner()
    impl = tuner.k.dispatch.impl
    original = FakeDispatch.paged_attention_v2_with_path

    def falls_back(self, backend=None, **args):
        if impl.override is None:
            impl._k3d_state["disabled"] = True  # the kernel's own retry with the 2-D load
        return original(self, backend, **args)

    tuner.k.dispatch.paged_attention_v2_with_path = falls_back.__get__(tuner.k.dispatch)
    point = tuner.measure_point(SHAPE, 1, 600)
    assert point is not None and point["candidates"][1]["status"] == "ok"
    assert impl._k3d_state["disabled"] is True
    assert sum("fell back to the 2-D load" in s for s in kernels.skipped) == 1


def test_the_file_leaves_out_a_slots_of_zero():
    """So a config without a measured residency reads the same in every tree."""
    assert _as_list(tuple(launch_tables.K3D_MANY_PROGRAMS_CONFIG)) == [32, 1, 1, True, 1, True, 0]
    assert _as_list(tuple(launch_tables.K3D_MANY_PROGRAMS_CONFIG._replace(slots=6))) == [
        32, 1, 1, True, 1, True, 0, 6,
    ]  # fmt: skip
    assert _as_list((64, 2, 1)) == [64, 2, 1] and _as_list(None) is None

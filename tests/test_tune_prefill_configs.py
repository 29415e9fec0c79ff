"""Launch configs of the bundled prefill kernel: candidates, who may win (a fake launcher
and a fake clock), the tuning file's ``prefill_configs`` round trip, and the launcher
reading them back."""

from __future__ import annotations

import importlib.util
import json
from typing import Any, Dict, NamedTuple, Optional

import pytest

torch = pytest.importorskip("torch")

from vllm_codemod.kernels import prefill_cases, tuning_table  # noqa: E402
from vllm_codemod.kernels.prefill_torch import prefix_prefill_torch  # noqa: E402
from vllm_codemod.tuning import prefill_configs as pc  # noqa: E402
from vllm_codemod.tuning import table  # noqa: E402
from vllm_codemod.tuning.progress import Budget, Progress  # noqa: E402
from vllm_codemod.tuning.shapes import Deployment, Shape  # noqa: E402

HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="prefill_launch imports Triton")


class PrefillConfig(NamedTuple):
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


DEFAULT = PrefillConfig(64, 64, 4, 1)
FAST = PrefillConfig(64, 32, 4, 1)  # 40% faster
WRONG = PrefillConfig(32, 32, 4, 1)  # fastest, but computes garbage
BROKEN = PrefillConfig(128, 64, 4, 1)  # fails to launch
NOISE = PrefillConfig(64, 64, 8, 1)  # 1% faster: within the noise margin
SPEED = {DEFAULT: 100.0, FAST: 60.0, WRONG: 10.0, NOISE: 99.0}


class FakeLaunch:
    """The parts of prefill_launch the tuner touches; runs the torch path."""

    PrefillConfig = PrefillConfig
    DEFAULT_CONFIGS = {64: DEFAULT, 128: DEFAULT}

    def __init__(self, default: PrefillConfig = DEFAULT) -> None:
        self.default = default
        self.last: Optional[PrefillConfig] = None
        self.installed: Any = "untouched"
        self.reset = False

    @staticmethod
    def shared_bytes(config, d_pad, elem_bytes):
        return (config.block_m + 2 * config.block_n * config.num_stages) * d_pad * elem_bytes

    def set_prefill_configs(self, table):
        self.installed = table

    def reset_prefill_configs(self):
        self.reset = True

    def pick_config(self, d_pad, elem_bytes):
        assert self.installed == {}, "the default must come from the built-in table"
        return self.default

    def prefix_prefill_triton(self, config=None, **args):
        self.last = config
        if config == BROKEN:
            raise RuntimeError("out of resources: shared memory, Required: 300000")
        prefix_prefill_torch(**args)
        if config == WRONG:
            args["o"].mul_(1.5)


class FakeTimer:
    device = "cpu"
    cuda = False

    def __init__(self, launch: FakeLaunch, clock: Optional[FakeClock] = None) -> None:
        self.launch, self.clock, self.timed = launch, clock, []

    def sync(self) -> None:
        pass

    def eager_us(self, fns) -> float:
        for fn in fns:
            fn()
        self.timed.append(self.launch.last)
        if self.clock is not None:
            self.clock.now += self.clock.per_timing
        return SPEED.get(self.launch.last, 200.0)


class FakeClock:
    """Seconds that pass only when a config is timed."""

    def __init__(self, per_timing: float) -> None:
        self.now, self.per_timing = 0.0, per_timing

    def __call__(self) -> float:
        return self.now


SHAPE = Shape(4, 2, 64, "float32")
DEPLOY = Deployment([SHAPE], 4096, 8, "test")
POINTS = [(2, 20, 30)]


def _tuner(candidates, monkeypatch, budget=None, default=DEFAULT):
    monkeypatch.setattr(pc, "prefill_candidates", lambda *a: list(candidates))
    monkeypatch.setattr(pc, "CHECK_LENS", ((20, 40), (0, 9), (17, 1)))
    launch = FakeLaunch(default)
    timer = FakeTimer(launch, None if budget is None else budget.clock)
    tuner = pc.PrefillConfigTuner(
        launch, prefill_cases, "cpu", timer, budget or Budget(None), Progress(1, enabled=False)
    )
    return tuner, launch, timer


def _by_config(entry) -> Dict[tuple, Dict[str, Any]]:
    return {tuple(c["config"]): c for c in entry["candidates"]}


def test_fastest_correct_config_wins_and_the_rest_are_listed(monkeypatch):
    tuner, launch, timer = _tuner([WRONG, BROKEN, NOISE, FAST], monkeypatch)
    (entry,) = tuner.run_cases(DEPLOY, POINTS)
    found = _by_config(entry)
    assert found[tuple(WRONG)]["status"] == "wrong"
    assert "relative error" in found[tuple(WRONG)]["reason"]
    assert found[tuple(BROKEN)]["status"] == "failed"
    assert "shared memory" in found[tuple(BROKEN)]["reason"]
    assert WRONG not in timer.timed and BROKEN not in timer.timed  # checked before timed
    assert entry["config"] == list(FAST) and entry["us"] == 60.0
    assert entry["default"] == list(DEFAULT) and entry["default_us"] == 100.0
    assert (entry["head_size_padded"], entry["dtype"]) == (64, "float32")
    assert entry["points"] == [
        {"shape": SHAPE.label(), "num_seqs": 2, "context_len": 20, "query_len": 30}
    ]
    assert found[tuple(FAST)]["shared_bytes"] == FakeLaunch.shared_bytes(FAST, 64, 4)
    assert launch.reset  # the process reads the tuning tables again afterwards
    assert table.rejected({"prefill_configs": [entry]}) == {"wrong": 1, "failed": 1}
    (row,) = table.summary_rows({"prefill_configs": [entry]})
    assert row["speedup"] == "1.67x" and "64,32,4,1" in row["tuned"]


def test_noise_keeps_the_built_in_default(monkeypatch):
    tuner, _, _ = _tuner([NOISE], monkeypatch)
    (entry,) = tuner.run_cases(DEPLOY, POINTS)
    assert entry["config"] is None and entry["us"] == 100.0  # null: the built-in table


def test_a_wrong_default_chooses_nothing(monkeypatch):
    tuner, _, _ = _tuner([FAST], monkeypatch, default=WRONG)
    (entry,) = tuner.run_cases(DEPLOY, POINTS)
    assert entry["config"] is None and entry["us"] is None
    assert any("nothing chosen" in s for s in tuner.skipped)


def test_a_spent_budget_keeps_what_was_measured(monkeypatch):
    budget = Budget(1000.0, FakeClock(per_timing=1000.0))  # spent by the first timing
    tuner, _, _ = _tuner([FAST, NOISE], monkeypatch, budget=budget)
    (entry,) = tuner.run_cases(DEPLOY, POINTS)
    assert [c["config"] for c in entry["candidates"]] == [list(DEFAULT)]
    assert entry["config"] is None
    assert any("not measured" in s for s in tuner.skipped)


def test_what_later_phases_leave_resumes_a_cut_group(monkeypatch):
    """The share ran out after the default; the time decode left measures the rest
    (the default is not timed again) and the cut note goes away."""
    clock = FakeClock(per_timing=1000.0)
    tuner, _, timer = _tuner([NOISE, FAST], monkeypatch, budget=Budget(1000.0, clock))
    entries = tuner.run_cases(DEPLOY, POINTS)
    assert [c["config"] for c in entries[0]["candidates"]] == [list(DEFAULT)]
    assert any("1 of 3 configs" in s for s in tuner.skipped)
    (entry,) = tuner.resume(entries, Budget(None, clock))
    assert [c["config"] for c in entry["candidates"]] == [list(c) for c in (DEFAULT, NOISE, FAST)]
    assert entry["config"] == list(FAST) and entry["default_us"] == 100.0
    assert timer.timed == [DEFAULT, NOISE, FAST] and tuner.skipped == []
    assert tuner.pending == []


def test_the_progress_bar_counts_each_candidate_once(monkeypatch):
    """The bar's total grows by a group's candidates on its first pass only, so a
    resumed group fills it instead of running past it."""
    clock = FakeClock(per_timing=1000.0)
    tuner, _, _ = _tuner([NOISE, FAST], monkeypatch, budget=Budget(1000.0, clock))
    tuner.progress = Progress(2, enabled=False)  # two steps of the phases before
    entries = tuner.run_cases(DEPLOY, POINTS)
    assert (tuner.progress.done, tuner.progress.total) == (1, 5)
    tuner.resume(entries, Budget(None, clock))
    assert (tuner.progress.done, tuner.progress.total) == (3, 5)


def test_a_resume_without_time_changes_nothing(monkeypatch):
    clock = FakeClock(per_timing=1000.0)
    tuner, _, timer = _tuner([FAST], monkeypatch, budget=Budget(1000.0, clock))
    entries = tuner.run_cases(DEPLOY, POINTS)
    assert tuner.resume(entries, Budget(0.0, clock)) == entries
    assert timer.timed == [DEFAULT] and len(tuner.pending) == 1
    assert any("not measured" in s for s in tuner.skipped)


def test_a_resume_cut_again_says_how_far_it_got(monkeypatch):
    """Two timings per share: the first run times the default, the resume one more."""
    clock = FakeClock(per_timing=600.0)
    tuner, _, timer = _tuner([NOISE, FAST], monkeypatch, budget=Budget(500.0, clock))
    entries = tuner.run_cases(DEPLOY, POINTS)
    (entry,) = tuner.resume(entries, Budget(500.0, clock))
    assert [c["config"] for c in entry["candidates"]] == [list(DEFAULT), list(NOISE)]
    assert timer.timed == [DEFAULT, NOISE]
    assert [s for s in tuner.skipped if "not measured" in s] == [
        "prefill configs d64 float32: budget of 500 s spent after 2 of 3 configs; "
        "the rest were not measured"
    ]


def test_each_group_gets_its_share_of_the_budget(monkeypatch):
    """Two head sizes, a budget of three timings and a bit: the first group stops after
    its half (two timings), so the second still chooses (without shares the first takes
    three and the second times only its default: an H100 run spent it all on the first
    group's compiles and left head 256 unmeasured)."""
    budget = Budget(1000.0, FakeClock(per_timing=300.0))
    tuner, _, timer = _tuner([FAST, NOISE], monkeypatch, budget=budget)
    two = Deployment([SHAPE, Shape(4, 2, 128, "float32")], 4096, 8, "test")
    first, second = tuner.run_cases(two, POINTS)
    assert [c["config"] for c in first["candidates"]] == [list(DEFAULT), list(FAST)]
    assert first["config"] == list(FAST)
    assert [c["config"] for c in second["candidates"]] == [list(DEFAULT), list(FAST)]
    assert (second["head_size_padded"], second["config"]) == (128, list(FAST))
    assert len(timer.timed) == 4 and sum("not measured" in s for s in tuner.skipped) == 2


def test_a_share_is_of_what_is_left():
    clock = FakeClock(per_timing=0.0)
    budget = Budget(100.0, clock)
    clock.now = 40.0
    assert budget.share(3).seconds == 20.0 and budget.share(1).seconds == 60.0
    clock.now = 150.0
    assert budget.share(2).seconds == 0.0 and budget.share(2).exhausted()
    assert Budget(None, clock).share(4).seconds is None


def test_choose_totals_over_the_points():
    ok = [{"status": "ok", "us": t, "config": [i]} for i, t in enumerate((100.0, 97.0, 90.0))]
    assert pc.choose(ok)["config"] == [2]
    assert pc.choose(ok[:2])["config"] == [1]  # 3% faster: beyond the 2% margin
    assert pc.choose([ok[0], dict(ok[1], us=99.0)])["config"] == [0]  # 1%: noise
    assert pc.choose([{"status": "wrong", "us": None}]) is None


def test_groups_share_a_padded_head_size():
    shapes = [Shape(32, 8, 128), Shape(16, 2, 96), Shape(16, 2, 256), Shape(8, 8, 128, "float16")]
    assert pc.group_count(Deployment(shapes, 1024, 1, "t")) == 3
    assert [pc.d_pad_of(h) for h in (24, 32, 80, 96, 128, 192, 256)] == [
        32, 32, 128, 128, 128, 256, 256,
    ]  # fmt: skip


@needs_triton
@pytest.mark.parametrize("elem", [2, 4])
def test_candidates_fit_the_limit_and_the_kernel(elem):
    from vllm_codemod.kernels import prefill_launch as launch

    for d_pad in (32, 64, 128, 256):
        default = tuple(launch.pick_config(d_pad, elem))
        found = pc.prefill_candidates(launch, default, d_pad, elem, pc.DEFAULT_SHARED_LIMIT)
        assert found and len(found) <= pc.MAX_CANDIDATES and default not in found
        assert len(set(found)) == len(found)
        for config in found:
            cfg = launch.PrefillConfig(*config)
            assert launch.shared_bytes(cfg, d_pad, elem) <= 48 * 1024, (d_pad, cfg)
            assert cfg.block_m % cfg.block_n == 0 and cfg.block_n >= 16
    # An H200's 227 KB admits the published three-stage configs the BI-V100's 48 KB does not.
    wide = pc.prefill_candidates(launch, (64, 64, 4, 1), 128, 2, 227 * 1024)
    narrow = pc.prefill_candidates(launch, (64, 64, 4, 1), 128, 2, 48 * 1024)
    assert (128, 64, 8, 3) in wide and (128, 64, 8, 3) not in narrow


def _document(entries):
    entry = table.device_header("NVIDIA H200", [9, 0], {}, {}, {})
    entry["prefill_configs"] = entries
    return table.build_document(entry)


def _entry(d_pad=128, dtype="bfloat16", config=(128, 64, 8, 2)):
    return {
        "head_size_padded": d_pad, "dtype": dtype, "shapes": [], "points": [],
        "shared_limit": 232448, "default": [64, 64, 4, 1], "default_us": 10.0,
        "config": None if config is None else list(config), "us": 8.0, "candidates": [],
    }  # fmt: skip


def test_file_round_trip(tmp_path):
    path = tmp_path / "t.json"
    entries = [_entry(), _entry(256, "float16", None), _entry(64, "float32", (32, 32, 2, 1))]
    table.write(path, _document(entries))
    device = tuning_table.load(path).for_device("NVIDIA H200")
    assert device.prefill_configs == {(128, 2): (128, 64, 8, 2), (64, 4): (32, 32, 2, 1)}
    # bf16 and fp16 share a key: the first entry in the file wins
    both = [_entry(), _entry(128, "float16", (32, 16, 2, 1))]
    assert table.validate(_document(both), "x").devices[0].prefill_configs == {
        (128, 2): (128, 64, 8, 2)
    }


def test_files_without_the_section_mean_the_built_in_defaults(tmp_path):
    document = _document([])
    del document["devices"][0]["prefill_configs"]  # a file from before this section
    path = tmp_path / "old.json"
    path.write_text(json.dumps(document))
    assert tuning_table.load(path).devices[0].prefill_configs == {}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"config": [64, 48, 4, 1]}, "power of two"),
        ({"config": [32, 64, 4, 1]}, "not a multiple"),
        ({"config": [64, 64, 3, 1]}, "num_warps"),
        ({"config": [64, 64, 4, 0]}, "num_stages"),
        ({"config": [64, 64, 4]}, "4 fields"),
        ({"head_size_padded": 96}, "head_size_padded"),
        ({"dtype": "int8"}, "dtype"),
    ],
)
def test_bad_prefill_configs_are_rejected(change, message):
    bad = dict(_entry(), **change)
    with pytest.raises(Exception) as info:
        table.validate(_document([bad]), "bad.json")
    assert message in str(info.value) and "prefill_configs[0]" in str(info.value)


@needs_triton
def test_the_launcher_reads_the_tables_once(tmp_path, monkeypatch):
    from vllm_codemod.kernels import prefill_launch as launch
    from vllm_codemod.kernels import tuned

    path = tmp_path / "tuning.json"
    table.write(path, _document([_entry()]))
    monkeypatch.setattr(tuned, "TABLE_FILE", str(path))
    monkeypatch.setattr(tuned, "BUNDLED_FILES", ())
    monkeypatch.setattr(tuned, "_state", {"present": None, "tables": None, "devices": {}})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA H200")
    assert tuned.prefill_configs(torch.device("cpu")) == {}
    assert tuned.prefill_configs(torch.device("cuda", 0)) == {(128, 2): (128, 64, 8, 2)}

    built_in = launch.pick_config(128, 2)
    launch.reset_prefill_configs()
    try:
        launch._read_tables(torch.device("cuda", 0))
        assert launch.pick_config(128, 2) == launch.PrefillConfig(128, 64, 8, 2)
        # measured on 16-bit caches only: fp8 caches keep their built-in config
        assert launch.pick_config(128, 2, True) == launch.FP8_CACHE_CONFIGS[128]
        assert launch.pick_config(128, 4) == launch.pick_config(128, 4)  # unmeasured: built in
        assert launch.pick_config(64, 2) == launch.DEFAULT_CONFIGS[64]
        assert launch._tables_read[0]
        launch.set_prefill_configs(None)
        assert launch.pick_config(128, 2) == built_in
    finally:
        launch.reset_prefill_configs()


def test_every_built_in_config_fits_48_kb_by_estimate():
    """The default path must run on the BI-V100 (48 KB per program); the compile check
    (scripts/check_triton_compile.py --kernels prefill) measures the real figure."""
    from vllm_codemod.kernels import prefill_launch as launch

    for d_pad in (32, 64, 128, 256):
        for elem in (2, 4):
            for fp8 in (False, True):
                config = launch.pick_config(d_pad, elem, fp8)
                assert launch.shared_bytes(config, d_pad, elem) <= 48 * 1024, (d_pad, elem, fp8)


# ---------------------------------------------------------------------- size tiers


def _timed(times, config):
    return {"status": "ok", "config": list(config), "point_us": list(times), "us": sum(times)}


def test_two_tiers_where_small_and_large_points_disagree():
    """The H100's shape of the problem: the built-in config wins the short points, a
    large one the long points (session 15: 72 against 207 us at 1K+512)."""
    default = _timed([72.0, 300.0, 1950.0], DEFAULT)
    big = _timed([207.0, 250.0, 1250.0], FAST)
    works = [500_000, 130_000_000, 1_000_000_000]
    small, large, below, total = pc.choose_tiers([default, big], works)
    assert small is default and large is big
    assert 500_000 < below <= 130_000_000 and below == int((500_000 * 130_000_000) ** 0.5)
    assert total == 72.0 + 250.0 + 1250.0
    # the points' order in the list does not matter, only their work
    runs = (([72.0, 300.0, 1950.0], DEFAULT), ([207.0, 250.0, 1250.0], FAST))
    shuffled = [_timed([t[2], t[0], t[1]], c) for t, c in runs]
    tiers = pc.choose_tiers(shuffled, [works[2], works[0], works[1]])
    assert tiers is not None and tiers[2] == below


def test_no_tiers_when_one_config_wins_everywhere_or_the_gain_is_noise():
    works = [1_000, 2_000_000]
    assert pc.choose_tiers([_timed([100, 1000], DEFAULT), _timed([60, 600], FAST)], works) is None
    # FAST gains 1% on the long point: within the margin, so the default keeps both sides
    assert pc.choose_tiers([_timed([100, 1000], DEFAULT), _timed([110, 990], FAST)], works) is None
    # equal works cannot be parted
    tied = [_timed([72, 1950], DEFAULT), _timed([207, 1250], FAST)]
    assert pc.choose_tiers(tied, [5, 5]) is None
    # a config not timed on every point takes no part
    partial = dict(_timed([207, 1250], FAST), point_us=[207])
    assert pc.choose_tiers([_timed([72, 1950], DEFAULT), partial], works) is None


def test_a_tier_is_judged_on_its_own_points_not_on_the_total():
    """Session 20's H100 head-128 points (us; 1K+512, 4K+1K, 16K+2K, then the ALiBi
    shape's): the 1-stage config ran the short launches 1.85x faster, a gain of 1.3% of
    the total, which the long points' milliseconds drowned under a margin on the total."""
    gathered = _timed([103.6, 203.4, 1270.1, 103.5, 377.8, 1987.8], PrefillConfig(128, 128, 8, 3))
    one_stage = _timed([55.9, 296.3, 1925.9, 99.3, 413.2, 2377.2], PrefillConfig(128, 64, 8, 1))
    default = _timed([87.4, 293.0, 1940.0, 105.0, 534.0, 3091.9], PrefillConfig(128, 32, 4, 1))
    works = [17_039_360, 134_742_016, 1_074_790_400, 21_299_200, 168_427_520, 1_343_488_000]
    results = [default, gathered, one_stage]
    assert pc.choose(results) is gathered
    small, large, below, total = pc.choose_tiers(results, works)
    assert small is one_stage and large is gathered
    assert 21_299_200 < below < 134_742_016  # the two 1K+512 points below, the rest above
    assert total == pytest.approx(55.9 + 99.3 + 203.4 + 1270.1 + 377.8 + 1987.8)


def test_no_tier_where_the_small_side_gains_only_noise():
    """Per side, the 2% margin still holds: 1% on the short points is no tier, however
    the total compares."""
    default = _timed([100.0, 1000.0], DEFAULT)
    big = _timed([101.0, 500.0], FAST)  # the short point: 1% slower, within the noise
    assert pc.choose_tiers([default, big], [1_000, 2_000_000]) is None
    big = _timed([103.0, 500.0], FAST)  # 3% slower there: the default keeps the short ones
    tiers = pc.choose_tiers([default, big], [1_000, 2_000_000])
    assert tiers is not None and tiers[0] is default and tiers[1] is big


class SizedLaunch(FakeLaunch):
    """A launcher whose FAST config is slow on small launches (the timer asks it)."""

    @staticmethod
    def work_estimate(q, block_table, page):
        return q.shape[0] * q.shape[1] * block_table.shape[1] * page


class SizedTimer(FakeTimer):
    def eager_us(self, fns) -> float:
        super().eager_us(fns)
        small = self.launch.last_work < 10_000
        return {DEFAULT: 10.0 if small else 100.0, FAST: 30.0 if small else 60.0}.get(
            self.launch.last, 500.0
        )


def test_the_tuner_writes_a_tier_the_file_and_the_launcher_read(monkeypatch, tmp_path):
    monkeypatch.setattr(pc, "prefill_candidates", lambda *a: [FAST])
    monkeypatch.setattr(pc, "CHECK_LENS", ((20, 40), (0, 9), (17, 1)))
    launch = SizedLaunch()
    original = launch.prefix_prefill_triton

    def recording(config=None, **args):
        launch.last_work = launch.work_estimate(args["q"], args["block_table"], 16)
        original(config=config, **args)

    launch.prefix_prefill_triton = recording
    tuner = pc.PrefillConfigTuner(
        launch, prefill_cases, "cpu", SizedTimer(launch), Budget(None), Progress(1, False)
    )
    (entry,) = tuner.run_cases(DEPLOY, [(1, 16, 8), (2, 200, 300)])
    works = [p["work"] for p in entry["points"]]
    assert works[0] < 10_000 <= works[1]
    assert entry["small"]["config"] is None and entry["config"] == list(FAST)
    assert works[0] < entry["small"]["below"] <= works[1]
    assert entry["us"] == 10.0 + 60.0
    (row,) = table.summary_rows({"prefill_configs": [entry]})
    assert "default below work" in row["tuned"] and "else 64,32,4,1" in row["tuned"]
    path = tmp_path / "t.json"
    table.write(path, _document([entry]))
    device = tuning_table.load(path).for_device("NVIDIA H200")
    assert device.prefill_configs == {(64, 4): tuple(FAST)}
    assert device.prefill_small == {(64, 4): (entry["small"]["below"], None)}


@pytest.mark.parametrize(
    "small, message",
    [
        ({"below": 0, "config": None}, "positive"),
        ({"config": None}, "below"),
        ({"below": 10, "config": [64, 64, 3, 1]}, "small.config[2]"),
        ([10], "small"),
    ],
)
def test_bad_tiers_are_rejected(small, message):
    bad = dict(_entry(), small=small)
    with pytest.raises(Exception) as info:
        table.validate(_document([bad]), "bad.json")
    assert message in str(info.value) and "prefill_configs[0]" in str(info.value)


def test_a_tier_without_a_config_of_its_own_is_kept(tmp_path):
    """The default won the long points, another config the short ones."""
    entry = dict(_entry(config=None), small={"below": 1000, "config": [64, 32, 4, 1]})
    device = table.validate(_document([entry]), "x").devices[0]
    assert device.prefill_configs == {} and device.prefill_small == {
        (128, 2): (1000, (64, 32, 4, 1))
    }


@needs_triton
def test_the_launcher_reads_a_tier_from_the_tables(tmp_path, monkeypatch):
    from vllm_codemod.kernels import prefill_launch as launch
    from vllm_codemod.kernels import tuned

    path = tmp_path / "tuning.json"
    table.write(path, _document([dict(_entry(), small={"below": 5000, "config": None})]))
    monkeypatch.setattr(tuned, "TABLE_FILE", str(path))
    monkeypatch.setattr(tuned, "BUNDLED_FILES", ())
    monkeypatch.setattr(tuned, "_state", {"present": None, "tables": None, "devices": {}})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA H200")
    assert tuned.prefill_small(torch.device("cpu")) == {}
    assert tuned.prefill_small(torch.device("cuda", 0)) == {(128, 2): (5000, None)}
    launch.reset_prefill_configs()
    try:
        launch._read_tables(torch.device("cuda", 0))
        assert launch._tuned_for((128, 2), 4999) is None  # the built-in config
        assert launch._tuned_for((128, 2), 5000) == launch.PrefillConfig(128, 64, 8, 2)
    finally:
        launch.reset_prefill_configs()

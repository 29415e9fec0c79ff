"""Launch configs of the bundled prefix-prefill kernel (ours, not the tree's), measured.

``kernels/prefill_launch.py`` launches with a ``PrefillConfig(block_m, block_n,
num_warps, num_stages)`` picked by padded head size and element width (``pick_config``:
the built-in ``DEFAULT_CONFIGS``, or what a tuning file installed).  For every (padded
head size, dtype) of the deployment's shapes this times the built-in default and a few
candidates around it: single-step neighbours, the other heads' defaults and published
starting points, each kept only where its shared memory (``shared_bytes``, an
estimate) fits the device's per-program limit (48 KB, the BI-V100's, where the device
does not say).  A candidate is timed (``timing.Timer``, eager, two input copies) only
after it matched the float64 reference on a check case (every row) and on the first
timed input (a sample of rows); a wrong or failing one is listed and never chosen.  The
fastest in total over the deployment's prefill cases wins if it beats the default by
``MARGIN``; the file then holds it under ``prefill_configs`` and the tree's launcher
uses it (``tuned.prefill_configs``).  A default that wins is written as ``null``: the
built-in table stays in charge.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .decode_inputs import TOLERANCE
from .measure import MARGIN, _failure
from .prefill import prefill_cases
from .progress import Budget, BudgetExhausted, Progress
from .shapes import Deployment, Shape
from .timing import Timer

Config = Tuple[int, int, int, int]
#: Shared memory per program where the device does not report its limit (BI-V100: 48 KB).
DEFAULT_SHARED_LIMIT = 48 * 1024
#: At most this many candidates besides the default, per (padded head, dtype).
MAX_CANDIDATES = 12
BLOCKS = (16, 32, 64, 128)
WARPS = (2, 4, 8)
STAGES = (1, 2, 3)
#: Published starting points (issue #25): FlexAttention's H100 bf16 defaults for head
#: 64 / 128 / 256, and the 64 x 64, one-stage tiles of an Iluvatar Triton fork.
PUBLISHED: Tuple[Config, ...] = ((128, 128, 4, 3), (128, 64, 8, 3), (64, 32, 4, 3), (64, 64, 4, 1))
#: The fastest configs measured (docs/kernel-notes.md: "Prefix prefill: the H100 sweep",
#: sessions 12, 14 and 15), fastest first: beyond 48 KB, (128, 128, 8, 3) and
#: (128, 128, 8, 2) at head 128 and (128, 64, 8, 2) at head 256 (with two stages or more
#: the launcher gathers the context: 70-75%, 67-69% and 73% of an H100's matmul rate,
#: `tune` chose the first there); then the 48 KB defaults and earlier winners.
MEASURED: Tuple[Config, ...] = (
    (128, 128, 8, 3),
    (128, 128, 8, 2),
    (128, 64, 8, 2),
    (128, 64, 8, 1),
    (128, 32, 4, 1),
    (64, 16, 4, 1),
    (128, 32, 8, 2),
    (64, 32, 4, 2),
)
#: (cached, new) tokens of the check case: several query tiles at every BLOCK_M tried
#: (loops B and C), a context that is no multiple of the page, a context of 0, and one
#: new token.
CHECK_LENS: Tuple[Tuple[int, int], ...] = ((40, 150), (0, 33), (77, 1))
#: (sequences, cached, new tokens) timed per config: the warps tuner's two sizes (a
#: batch of short prompts, one long prompt), one short prompt, and one between, so a
#: size tier (:func:`choose_tiers`) has measured points on both sides of where it parts.
CONFIG_POINTS: Tuple[Tuple[int, int, int], ...] = (
    (1, 1024, 512),
    (8, 1024, 512),
    (1, 4096, 1024),
    (1, 16384, 2048),
)
ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
COPIES = 2


def d_pad_of(head_size: int) -> int:
    return max(16, 1 << max(0, (int(head_size) - 1).bit_length()))


def shared_limit(device: str) -> int:
    """Shared memory one program may use on ``device`` (opt-in maximum per block)."""
    if not device.startswith("cuda"):
        return DEFAULT_SHARED_LIMIT
    try:
        import torch

        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        value = getattr(props, "shared_memory_per_block_optin", None)
        if value:
            return int(value)
        import triton

        driver = triton.runtime.driver
        utils = driver.active.utils if hasattr(driver, "active") else driver.utils
        return int(utils.get_device_properties(index)["max_shared_mem"])
    except Exception:
        return DEFAULT_SHARED_LIMIT


def _valid(config: Config) -> bool:
    block_m, block_n, warps, stages = config
    return (
        block_m in BLOCKS
        and block_n in BLOCKS
        and block_m % block_n == 0
        and warps in WARPS
        and stages in STAGES
    )


def _neighbours(config: Config) -> List[Config]:
    """Single-step changes of one field: tiles halved/doubled, warps, stages."""
    block_m, block_n, warps, stages = config
    out: List[Config] = []
    for m in (block_m // 2, block_m * 2):
        out.append((m, block_n, warps, stages))
    for n in (block_n // 2, block_n * 2):
        out.append((block_m, n, warps, stages))
    for w in (warps // 2, warps * 2):
        out.append((block_m, block_n, w, stages))
    for s in (stages + 1, stages - 1):
        out.append((block_m, block_n, warps, s))
    return out


def prefill_candidates(
    launch: Any, default: Config, d_pad: int, elem_bytes: int, limit: int
) -> List[Config]:
    """Candidates other than ``default``, most promising first, without duplicates:
    ``MEASURED`` and ``PUBLISHED``, then its neighbours and the built-in configs of the
    other head sizes; only those valid for the kernel whose estimated shared memory fits
    ``limit``."""
    seen = {tuple(default)}
    chosen: List[Config] = []
    pool = list(MEASURED) + list(PUBLISHED) + _neighbours(tuple(default))
    for config in pool + [tuple(c) for c in launch.DEFAULT_CONFIGS.values()]:
        config = tuple(int(v) for v in config)
        if config in seen or not _valid(config):
            continue
        seen.add(config)
        if launch.shared_bytes(launch.PrefillConfig(*config), d_pad, elem_bytes) > limit:
            continue
        chosen.append(config)
    return chosen[:MAX_CANDIDATES]


def _fastest(
    ok: Sequence[Dict[str, Any]], default: Dict[str, Any], total: Callable[[Dict[str, Any]], float]
) -> Dict[str, Any]:
    """The result of smallest ``total`` among ``ok`` (which holds ``default``); the
    default unless beaten by ``MARGIN``, and on ties."""
    best = min(ok, key=total)  # the first of equals: the default comes first
    if best is not default and total(best) > total(default) * (1 - MARGIN):
        return default
    return best


def choose(results: Sequence[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The winning result: ``results[0]`` is the default; a candidate timed "ok" on every
    point with the smallest total wins if it beats the default's total by ``MARGIN``.
    None when the default itself has no time."""
    default = results[0]
    if default.get("status") != "ok" or default.get("us") is None:
        return None
    ok = [default] + [r for r in results[1:] if r.get("status") == "ok" and r.get("us") is not None]
    return _fastest(ok, default, lambda result: result["us"])


def _over(points: Sequence[int]) -> Callable[[Dict[str, Any]], float]:
    """A result's total time over ``points`` (indices into its ``point_us``)."""
    return lambda result: sum(result["point_us"][i] for i in points)


def choose_tiers(
    results: Sequence[Dict[str, Any]], works: Sequence[int]
) -> Optional[Tuple[Dict[str, Any], Dict[str, Any], int, float]]:
    """(small winner, large winner, below, total us) where two size tiers beat the one
    config of :func:`choose`, else None.

    ``works[i]`` is point i's ``work_estimate``.  Each way of parting the points by
    size is tried (a part falls between two points of different work); each side takes
    its own fastest config (the default unless beaten by ``MARGIN``), and the parting
    of smallest total wins.  Its two configs must each beat the other by ``MARGIN`` on
    their own side's points, and the total must be under the one config's.  The margin
    is judged per side because timing noise is relative to each launch: over the whole
    total the long points' milliseconds drown the short ones, and an H100 run kept one
    config although another ran the short launches 1.85x faster (56 against 104 us at
    1 x (1K + 512); the gain was 1.3% of the total).  The tiers part at the geometric
    mean of the two points' work: the one place between them nothing measured favours.
    Only results timed "ok" on every point take part.
    """
    single = choose(results)
    default = results[0]
    if single is None:
        return None
    n = len(works)
    ok = [r for r in results if r.get("status") == "ok" and len(r.get("point_us") or ()) == n]
    if not any(r is default for r in ok):
        return None
    order = sorted(range(n), key=lambda i: works[i])
    best: Optional[Tuple[Dict[str, Any], Dict[str, Any], int, float]] = None
    for k in range(1, n):
        low, high = works[order[k - 1]], works[order[k]]
        if low >= high:
            continue
        over_small, over_large = _over(order[:k]), _over(order[k:])
        small = _fastest(ok, default, over_small)
        large = _fastest(ok, default, over_large)
        if small is large or not (
            over_small(small) < over_small(large) * (1 - MARGIN)
            and over_large(large) < over_large(small) * (1 - MARGIN)
        ):
            continue
        total = over_small(small) + over_large(large)
        if best is None or total < best[3]:
            best = (small, large, max(math.isqrt(low * high), low + 1), total)
    if best is None or best[3] >= single["us"]:
        return None
    return best


class PrefillConfigTuner:
    """Times the bundled prefill kernel's launch configs through ``launch`` (the tree's
    ``prefill_launch``) with inputs from ``cases`` (its ``prefill_cases``)."""

    def __init__(
        self,
        launch: Any,
        cases: Any,
        device: str,
        timer: Timer,
        budget: Budget,
        progress: Progress,
        limit: Optional[int] = None,
    ) -> None:
        self.launch = launch
        self.cases = cases
        self.device = device
        self.timer = timer
        self.budget = budget
        self.progress = progress
        self.limit = shared_limit(device) if limit is None else int(limit)
        #: what each group's latest measurement left out or could not decide, by
        #: (padded head, dtype): a resumed group's notes replace its earlier ones
        self._notes: Dict[Tuple[int, str], List[str]] = {}
        #: groups the budget cut: (d_pad, dtype, shapes, points, results so far)
        self.pending: List[Tuple[int, str, List[Shape], List[Any], List[Dict[str, Any]]]] = []

    @property
    def skipped(self) -> List[str]:
        """The reasons for what was not measured or chosen (the file's ``skipped``)."""
        return [note for notes in self._notes.values() for note in notes]

    # ------------------------------------------------------------------ pieces

    def _inputs(self, shape: Shape, lens: Sequence[Tuple[int, int]], seed: int) -> Dict[str, Any]:
        from ..kernels.paged_inputs import torch_dtype

        return self.cases.make_prefill_inputs(
            list(lens), shape.num_heads, shape.num_kv_heads, shape.head_size,
            dtype=torch_dtype(shape.dtype), device=self.device, alibi=shape.alibi, seed=seed,
        )  # fmt: skip

    def _launch(self, a: Dict[str, Any], config: Config) -> None:
        self.launch.prefix_prefill_triton(
            **self.cases.launch_arguments(a), config=self.launch.PrefillConfig(*config)
        )

    def _error(self, a: Dict[str, Any], config: Config, rows: Optional[List[int]]) -> float:
        a["o"].fill_(float("nan"))
        self._launch(a, config)
        self.timer.sync()
        return self.cases.prefill_error(a, a["o"], rows=rows, device=a["o"].device)

    def _check(self, shape: Shape, check: Dict[str, Any], config: Config) -> Optional[str]:
        """None when ``config`` matches the float64 reference on the check case."""
        try:
            err = self._error(check, config, None)
        except Exception as exc:
            return f"failed: {_failure(exc)}"
        limit = TOLERANCE[shape.dtype]
        return None if err < limit else f"wrong: relative error {err:.2e} > {limit:g}"

    # ------------------------------------------------------------------ one group

    def measure_group(
        self,
        d_pad: int,
        dtype: str,
        shapes: Sequence[Shape],
        points: Sequence[Tuple[int, int, int]],
        budget: Optional[Budget] = None,
        results: Optional[List[Dict[str, Any]]] = None,
    ) -> Optional[Dict[str, Any]]:
        """One ``prefill_configs`` entry: every candidate over every (shape, point),
        within ``budget`` (default: the tuner's).  ``results`` are the candidates a
        cut run measured already: only the rest are measured (its inputs are made again
        from the same seeds, so the timings stay comparable).  A group the budget cuts
        is kept in ``pending`` for :meth:`resume`."""
        budget = self.budget if budget is None else budget
        notes = self._notes[(d_pad, dtype)] = []
        elem = ELEMENT_BYTES[dtype]
        self.launch.set_prefill_configs({})  # the built-in table, not a file's
        default = tuple(int(v) for v in self.launch.pick_config(d_pad, elem))
        configs = [default] + prefill_candidates(self.launch, default, d_pad, elem, self.limit)
        checks = {s: self._inputs(s, CHECK_LENS, seed=7) for s in shapes}
        timed: List[Tuple[Shape, Tuple[int, int, int], List[Dict[str, Any]]]] = []
        for shape in shapes:
            for seqs, ctx, new in points:
                lens = [(ctx, new)] * seqs
                try:
                    copies = [self._inputs(shape, lens, seed=s) for s in range(COPIES)]
                except (RuntimeError, MemoryError) as exc:  # no memory for the inputs
                    notes.append(
                        f"prefill configs {shape.label()} {seqs}x({ctx}+{new}): "
                        f"no memory for the inputs ({_failure(exc)})"
                    )
                    continue
                timed.append((shape, (seqs, ctx, new), copies))
        if not timed:
            return None
        works = self._works(timed)
        if results is None:  # a resumed group's candidates were counted the first time
            self.progress.add(len(configs))
            results = []
        else:
            results = list(results)
        try:
            for config in configs[len(results) :]:
                budget.check()
                self.progress.step(f"prefill config d{d_pad} {dtype} {config}")
                results.append(self._measure(config, checks, timed))
        except BudgetExhausted as exc:
            self.pending.append((d_pad, dtype, list(shapes), list(points), results))
            notes.append(
                f"prefill configs d{d_pad} {dtype}: {exc} after {len(results)} of "
                f"{len(configs)} configs; the rest were not measured"
            )
        if not results:
            return None
        return self._entry(d_pad, dtype, shapes, timed, works, default, results, notes)

    def _entry(
        self,
        d_pad: int,
        dtype: str,
        shapes: Sequence[Shape],
        timed: Sequence[Tuple[Shape, Tuple[int, int, int], Any]],
        works: Optional[List[int]],
        default: Config,
        results: List[Dict[str, Any]],
        notes: List[str],
    ) -> Dict[str, Any]:
        """The file's entry from the measured candidates (the default first)."""
        winner = choose(results)
        if winner is None:
            notes.append(
                f"prefill configs d{d_pad} {dtype}: the default {list(default)} "
                f"{results[0]['status']} ({results[0].get('reason')}); nothing chosen"
            )
        tiers = None if winner is None or works is None else choose_tiers(results, works)
        entry: Dict[str, Any] = {
            "head_size_padded": d_pad,
            "dtype": dtype,
            "shapes": [s.label() for s in shapes],
            "points": [
                {"shape": s.label(), "num_seqs": p[0], "context_len": p[1], "query_len": p[2]}
                for s, p, _ in timed
            ],
            "shared_limit": self.limit,
            "default": list(default),
            "default_us": results[0].get("us"),
            "config": None if winner is None or winner is results[0] else winner["config"],
            "us": None if winner is None else winner["us"],
            "candidates": results,
        }
        if works is not None:
            for point, work in zip(entry["points"], works):
                point["work"] = work
        if tiers is not None:
            small, large, below, total = tiers
            entry["config"] = None if large is results[0] else large["config"]
            entry["us"] = total
            entry["small"] = {
                "below": below,
                "config": None if small is results[0] else small["config"],
            }
        return entry

    def _works(
        self, timed: Sequence[Tuple[Shape, Any, List[Dict[str, Any]]]]
    ) -> Optional[List[int]]:
        """Each timed point's ``work_estimate`` (None for kernels that predate size tiers)."""
        estimate = getattr(self.launch, "work_estimate", None)
        if estimate is None:
            return None
        return [
            int(estimate(a["q"], a["block_table"], a["k_cache"].shape[3]))
            for _, _, (a, *_rest) in timed
        ]

    def _measure(
        self,
        config: Config,
        checks: Dict[Shape, Dict[str, Any]],
        timed: Sequence[Tuple[Shape, Any, List[Dict[str, Any]]]],
    ) -> Dict[str, Any]:
        d_pad = d_pad_of(timed[0][0].head_size)
        elem = ELEMENT_BYTES[timed[0][0].dtype]
        cfg = self.launch.PrefillConfig(*config)
        result: Dict[str, Any] = {
            "config": list(config),
            "shared_bytes": int(self.launch.shared_bytes(cfg, d_pad, elem)),
        }
        for shape, check in checks.items():
            problem = self._check(shape, check, config)
            if problem is not None:
                status, _, reason = problem.partition(": ")
                result.update(status=status, reason=reason, us=None)
                return result
        times: List[float] = []
        try:
            for shape, _, copies in timed:
                first = copies[0]
                err = self._error(first, config, self.cases.sample_rows(first))
                if err >= TOLERANCE[shape.dtype]:
                    result.update(
                        status="wrong", reason=f"relative error {err:.2e} on the timed input",
                        us=None,
                    )  # fmt: skip
                    return result
                fns = [(lambda a=a: self._launch(a, config)) for a in copies]
                times.append(self.timer.eager_us(fns))
        except BudgetExhausted:
            raise
        except Exception as exc:
            result.update(status="failed", reason=_failure(exc), us=None)
            return result
        result.update(status="ok", us=float(sum(times)), point_us=times)
        return result

    # ------------------------------------------------------------------ the deployment

    def run(self, deployment: Deployment) -> List[Dict[str, Any]]:
        return self.run_cases(deployment, prefill_cases(deployment, CONFIG_POINTS))

    def run_cases(
        self, deployment: Deployment, points: Sequence[Tuple[int, int, int]]
    ) -> List[Dict[str, Any]]:
        """``prefill_configs`` entries, one per (padded head size, dtype) of the shapes."""
        groups: Dict[Tuple[int, str], List[Shape]] = {}
        for shape in deployment.shapes:
            groups.setdefault((d_pad_of(shape.head_size), shape.dtype), []).append(shape)
        entries: List[Dict[str, Any]] = []
        try:
            for i, ((d_pad, dtype), shapes) in enumerate(groups.items()):
                # each group an equal share of what is left: the first (its compiles
                # alone can take a minute) must not leave the others nothing
                share = self.budget.share(len(groups) - i)
                entry = self.measure_group(d_pad, dtype, shapes, points, share)
                if entry is not None:
                    entries.append(entry)
        finally:
            self.launch.reset_prefill_configs()  # the process reads the tables again
        return entries

    def resume(self, entries: List[Dict[str, Any]], budget: Budget) -> List[Dict[str, Any]]:
        """``entries`` with the groups the budget cut measured further, within ``budget``
        (what the phases after this one left: an H100 run ended 76 s under its budget
        with 7 of 13 candidates of one group and 4 of another never timed)."""
        if not self.pending or budget.exhausted():
            return entries
        pending, self.pending = self.pending, []
        done = {(e["head_size_padded"], e["dtype"]): e for e in entries}
        try:
            for i, group in enumerate(pending):
                share = budget.share(len(pending) - i)
                if share.exhausted():
                    self.pending.append(group)
                    continue
                d_pad, dtype, shapes, points, results = group
                entry = self.measure_group(d_pad, dtype, shapes, points, share, results)
                if entry is not None:
                    done[(d_pad, dtype)] = entry
        finally:
            self.launch.reset_prefill_configs()
        return list(done.values())


def group_count(deployment: Deployment) -> int:
    """How many ``prefill_configs`` entries a run can write (for the progress bar)."""
    return len({(d_pad_of(s.head_size), s.dtype) for s in deployment.shapes})


#: The part of tune's budget these measurements may use (after the tree's warps).
BUDGET_SHARE = 0.3


def measure_tree(
    package: str,
    deployment: Deployment,
    device: str,
    timer: Timer,
    budget_s: Optional[float],
    progress: Progress,
) -> Tuple[List[Dict[str, Any]], List[str], Optional[PrefillConfigTuner]]:
    """``prefill_configs`` entries for the tree whose kernels are imported as ``package``
    (``verify``'s private name), the reasons for what was not measured, and the tuner
    (None where nothing could be measured) to :meth:`~PrefillConfigTuner.resume` with
    the time the later phases leave."""
    import importlib

    if not device.startswith("cuda"):
        return (
            [],
            ["prefill configs: the bundled prefill kernel is Triton; needs a CUDA device"],
            None,
        )
    try:
        launch = importlib.import_module(f"{package}.prefill_launch")
        cases = importlib.import_module(f"{package}.prefill_cases")
        launch.set_prefill_configs  # noqa: B018  (kernels that predate tuned prefill configs)
    except Exception as exc:
        reason = (
            "prefill configs: the tree's bundled prefill kernel does not import here "
            f"({_failure(exc)}); not measured"
        )
        return [], [reason], None
    budget = Budget(None if budget_s is None else budget_s * BUDGET_SHARE)
    tuner = PrefillConfigTuner(launch, cases, device, timer, budget, progress)
    entries = tuner.run(deployment)
    return entries, tuner.skipped, tuner

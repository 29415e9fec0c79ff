"""Decode measurements: V2 launch configs and the vendor V1 kernel, per shape and length.

For every point (shape, batch, context length) the bundled entry point's default choice
is timed, then each launch-config candidate (forced through ``set_config_override``) and
the tree's own ``paged_attention_v1`` when it can be called.  A candidate is timed only
after it matched the float64 reference on a check case and the default's output on the
timed inputs, so a wrong candidate can never win; one that fails to compile or launch is
listed with the reason.  A non-default choice must beat the default by ``MARGIN``:
timing noise never moves the table off the built-in choice.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .candidates import default_config, v2_candidates
from .decode_inputs import TOLERANCE, make_check_case, make_decode_case, relative_error
from .progress import Budget, BudgetExhausted, Progress
from .shapes import Deployment, Shape
from .timing import GraphUnavailable, Timer

#: A non-default candidate must be this much faster than the default to be chosen.
MARGIN = 0.02
#: Timing cases hold at most this many tokens (batch x length) per KV-cache copy.
TOKEN_CAP = 1 << 20
FIRST_LENGTH = 512
COPIES = 2


def length_grid(max_model_len: int) -> List[int]:
    """512, 1K, 2K, ... up to ``max_model_len``, and ``max_model_len`` itself."""
    lengths = []
    n = FIRST_LENGTH
    while n < max_model_len:
        lengths.append(n)
        n *= 2
    lengths.append(max_model_len)
    return lengths


def batch_sizes(max_num_seqs: int) -> List[int]:
    """Single-sequence decode, and a busy batch (capped: the grid must fit a budget)."""
    return [1] if max_num_seqs <= 1 else [1, min(max_num_seqs, 16)]


def batch_lengths(num_seqs: int, length: int) -> List[int]:
    """Sequence lengths of a timed point: one sequence of ``length`` tokens, or a batch
    whose lengths rise evenly to ``length`` (1/n, 2/n, ... of it).  A server's batches are
    ragged, and the kernels treat ragged and uniform batches differently (a uniform batch
    favours per-sequence chunks, a ragged one the balanced stream: docs/kernel-notes.md,
    session 7), so a uniform batch would tune for traffic that rarely comes."""
    return [max(1, length * (i + 1) // num_seqs) for i in range(num_seqs)]


def plan_points(deployment: Deployment) -> List[Tuple[Shape, int, int]]:
    """(shape, num_seqs, length), round-robin over shapes so a budget cut spreads evenly."""
    points = []
    for num_seqs in batch_sizes(deployment.max_num_seqs):
        for length in length_grid(deployment.max_model_len):
            if num_seqs * length > TOKEN_CAP:
                continue
            for shape in deployment.shapes:
                points.append((shape, num_seqs, length))
    return points


@dataclass
class DecodeKernels:
    """What can be timed: the tree's bundled kernels and, if callable, its vendor V1."""

    dispatch: Any
    reference: Any
    triton_impl: Optional[Any]
    v1: Optional[Callable[[Dict[str, Any]], Any]]
    skipped: List[str] = field(default_factory=list)


class _Shape:
    """Per-shape state: the check case, its reference, and check results per candidate."""

    def __init__(self, shape: Shape, device: str, reference: Any) -> None:
        self.case = make_check_case(shape, device)
        c = self.case
        self.ref = reference.reference_paged_attention(
            c["query"], c["key_cache"], c["value_cache"], c["block_tables"],
            c["seq_lens"].tolist(), c["scale"], c["alibi_slopes"],
        )  # fmt: skip
        self.checked: Dict[Any, Optional[str]] = {}  # candidate key -> None ok / reason


def _failure(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


class DecodeTuner:
    def __init__(
        self,
        kernels: DecodeKernels,
        device: str,
        timer: Timer,
        budget: Budget,
        progress: Progress,
        use_triton: Optional[bool] = None,
    ) -> None:
        self.k = kernels
        self.device = device
        self.timer = timer
        self.budget = budget
        self.progress = progress
        if use_triton is None:
            use_triton = device.startswith("cuda") and kernels.triton_impl is not None
        self.use_triton = use_triton
        self._shapes: Dict[Shape, _Shape] = {}
        self._broken: Dict[Shape, str] = {}
        self._fp32_noted: set = set()

    # ---------------------------------------------------------------- candidates as calls

    def _triton_for(self, shape: Shape) -> bool:
        """Whether this shape's V2 runs on Triton here.  fp32 caches below compute
        capability 8.0 abort the process inside Triton 2.1 (the dispatcher never sends them
        there either), so they are timed on the PyTorch path."""
        if not self.use_triton:
            return False
        if shape.dtype == "float32" and self.device.startswith("cuda"):
            if tuple(torch.cuda.get_device_capability()) < (8, 0):
                if shape not in self._fp32_noted:
                    self._fp32_noted.add(shape)
                    self.k.skipped.append(
                        f"v2 launch configs for {shape.label()}: fp32 caches stay on the "
                        "PyTorch path below compute capability 8.0"
                    )
                return False
        return True

    def _memory_problem(self, shape: Shape, num_seqs: int, length: int) -> Optional[str]:
        """Why the timing inputs would not fit in device memory (None: they fit)."""
        if not self.device.startswith("cuda"):
            return None
        elem = 4 if shape.dtype == "float32" else 2
        need = COPIES * 2 * num_seqs * length * shape.num_kv_heads * shape.head_size * elem
        try:
            free, _ = torch.cuda.mem_get_info()
        except Exception:
            return None
        if need > free // 2:
            return (
                f"the KV caches need {need / 2**30:.1f} GiB, more than half of the "
                f"{free / 2**30:.1f} GiB free; not measured"
            )
        return None

    def _v2(self, shape: Shape) -> Callable[[Dict[str, Any]], Any]:
        """Our entry point on the path this shape uses (a forced config is set around it)."""
        backend = "triton" if self._triton_for(shape) else "torch"
        dispatch = self.k.dispatch

        def call(args: Dict[str, Any]) -> Any:
            return dispatch.paged_attention_v2_with_path(**args, backend=backend)

        return call

    def _with_config(self, config: Optional[Tuple[Any, ...]], body: Callable[[], Any]) -> Any:
        """Run ``body`` with the launch config forced (None: the tables).

        On Triton >= 3 a k3d launch that fails is retried by the kernel with the 2-D load,
        and k3d stays off for the process.  For a forced config that is this candidate's
        failure (and k3d is switched back on); for the default it is what the entry point
        itself would do, so it stands (and is noted once).
        """
        impl = self.k.triton_impl
        if not self.use_triton or impl is None:
            return body()
        state = getattr(impl, "_k3d_state", None)
        was_disabled = bool(state and state.get("disabled"))
        impl.set_config_override(config)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", RuntimeWarning)
                result = body()
            if state is not None and state.get("disabled") and not was_disabled:
                if config is not None:
                    state["disabled"] = False
                    raise RuntimeError("the k3d kernel failed to compile or launch for this config")
                self.k.skipped.append(
                    "k3d K loads: the kernel fell back to the 2-D load on this Triton "
                    f"({'; '.join(str(w.message)[:160] for w in caught) or 'no message'}); "
                    "measured without them, as the entry point will run"
                )
            return result
        finally:
            impl.set_config_override(None)

    # ---------------------------------------------------------------- checks and timing

    def _check(self, shape: Shape, key: Any, fn: Callable[[Dict[str, Any]], Any],
               config: Optional[Tuple[Any, ...]]) -> Optional[str]:  # fmt: skip
        """None if ``fn`` matches the float64 reference on the shape's check case."""
        state = self._shapes[shape]
        if key not in state.checked:
            case = state.case
            case["out"].fill_(float("nan"))
            try:
                self._with_config(config, lambda: fn(case))
                self.timer.sync()
                err = relative_error(case["out"], state.ref)
                limit = TOLERANCE[shape.dtype]
                state.checked[key] = (
                    None if err < limit else f"wrong: relative error {err:.2e} > {limit:g}"
                )
            except Exception as exc:
                state.checked[key] = f"failed: {_failure(exc)}"
        return state.checked[key]

    def _measure(
        self,
        config: Optional[Tuple[Any, ...]],
        fn: Callable[[Dict[str, Any]], Any],
        cases: Sequence[Dict[str, Any]],
        baseline: Optional[torch.Tensor],
        shape: Shape,
        graphs: bool,
    ) -> Dict[str, Any]:
        """Times of one checked candidate on the timing cases (or why it has none)."""
        result: Dict[str, Any] = {"status": "ok", "eager_us": None, "graph_us": None}
        fns = [(lambda a=a: fn(a)) for a in cases]
        try:
            if baseline is not None:
                self._with_config(config, lambda: fn(cases[0]))
                self.timer.sync()
                err = relative_error(cases[0]["out"], baseline)
                if err >= TOLERANCE[shape.dtype]:
                    return {"status": "wrong", "reason": f"differs from the default by {err:.2e}"}
            result["eager_us"] = self._with_config(config, lambda: self.timer.eager_us(fns))
            if graphs:
                try:
                    result["graph_us"] = self._with_config(config, lambda: self.timer.graph_us(fns))
                except GraphUnavailable as exc:
                    result["graph_reason"] = str(exc)
        except BudgetExhausted:
            raise
        except Exception as exc:
            return {"status": "failed", "reason": _failure(exc)}
        return result

    # ---------------------------------------------------------------- one point

    def measure_point(self, shape: Shape, num_seqs: int, length: int) -> Optional[Dict[str, Any]]:
        if shape in self._broken:
            return None
        if shape not in self._shapes:
            self._shapes[shape] = _Shape(shape, self.device, self.k.reference)
        default_fn = self._v2(shape)
        problem = self._check(shape, "default", default_fn, None)
        if problem is not None:
            self._broken[shape] = f"decode {shape.label()}: the default V2 kernel {problem}"
            return None
        too_big = self._memory_problem(shape, num_seqs, length)
        if too_big is not None:
            self.k.skipped.append(f"decode {shape.label()} {num_seqs}x{length}: {too_big}")
            return None
        try:
            cases = make_decode_case(
                shape, batch_lengths(num_seqs, length), self.device, copies=COPIES
            )
        except (RuntimeError, MemoryError) as exc:  # torch's OutOfMemoryError is a RuntimeError
            self.k.skipped.append(
                f"decode {shape.label()} {num_seqs}x{length}: no memory for the inputs "
                f"({_failure(exc)})"
            )
            return None
        default_cfg = None
        if self._triton_for(shape):
            try:
                default_cfg = default_config(
                    self.k.triton_impl, shape, num_seqs, length, cases[0]["query"].device
                )
            except Exception as exc:  # a tree whose kernels predate these launch tables
                if "launch tables" not in " ".join(self.k.skipped):
                    self.k.skipped.append(
                        f"v2 launch configs: cannot read the tree's launch tables "
                        f"({_failure(exc)}); timing the default only"
                    )
        default = self._measure(None, default_fn, cases, None, shape, graphs=self.timer.cuda)
        if default["status"] != "ok":
            self.k.skipped.append(
                f"decode {shape.label()} {num_seqs}x{length}: the default failed "
                f"({default.get('reason')})"
            )
            return None
        self._with_config(None, lambda: default_fn(cases[0]))
        self.timer.sync()
        baseline = cases[0]["out"].detach().clone()
        graphs = default["graph_us"] is not None
        candidates: List[Dict[str, Any]] = [
            {"backend": "v2", "config": _as_list(default_cfg), "default": True, **default}
        ]
        options: List[Tuple[str, Optional[Tuple[Any, ...]], Any]] = []
        if default_cfg is not None:
            options += [
                ("v2", c, self._v2(shape))
                for c in v2_candidates(self.k.triton_impl, default_cfg, shape, num_seqs)
            ]
        if self.k.v1 is not None:
            options.append(("v1", None, self.k.v1))
        try:
            for backend, config, fn in options:
                self.budget.check()
                entry: Dict[str, Any] = {"backend": backend, "config": _as_list(config)}
                key = (backend, config)
                problem = self._check(shape, key, fn, config)
                if problem is not None:
                    status, _, reason = problem.partition(": ")
                    entry.update(status=status, reason=reason)
                else:
                    entry.update(self._measure(config, fn, cases, baseline, shape, graphs))
                candidates.append(entry)
        except BudgetExhausted:
            pass  # keep the point with what it measured
        return _point(length, graphs, candidates)


def _as_list(config: Optional[Tuple[Any, ...]]) -> Optional[List[Any]]:
    """A config as the file holds it; a ``slots`` of 0 (the eighth field: the kernels'
    own figure) is left out, so such a config reads the same in trees whose kernels
    predate the field."""
    if config is None:
        return None
    values = [v if isinstance(v, bool) else int(v) for v in config]
    return values[:7] if len(values) == 8 and values[7] == 0 else values


def _decision(entry: Dict[str, Any], us: float) -> Dict[str, Any]:
    if entry.get("default"):
        return {"backend": "v2", "config": None, "us": us}
    return {"backend": entry["backend"], "config": entry["config"], "us": us}


def _winner(candidates: Sequence[Dict[str, Any]], key: str) -> Dict[str, Any]:
    default = candidates[0]
    best, best_us = default, default[key]
    for entry in candidates[1:]:
        us = entry.get(key)
        if entry.get("status") == "ok" and us is not None and us < best_us:
            best, best_us = entry, us
    if best is not default and best_us > default[key] * (1 - MARGIN):
        best, best_us = default, default[key]
    return _decision(best, best_us)


def _point(length: int, graphs: bool, candidates: List[Dict[str, Any]]) -> Dict[str, Any]:
    key = "graph_us" if graphs else "eager_us"
    default = candidates[0]
    point: Dict[str, Any] = {
        "max_seq_len": length,
        "mode": "graph" if graphs else "eager",
        "winner": _winner(candidates, key),
        "default": {"backend": "v2", "config": default["config"], "us": default[key]},
        "candidates": candidates,
    }
    if graphs:
        point["eager_winner"] = _winner(candidates, "eager_us")
        point["default"]["eager_us"] = default["eager_us"]
    return point


def measure_decode(
    tuner: DecodeTuner, deployment: Deployment, points: Sequence[Tuple[Shape, int, int]]
) -> List[Dict[str, Any]]:
    """Decode entries for the tuning file, grouped by (shape, batch), lengths ascending."""
    grouped: Dict[Tuple[Shape, int], List[Dict[str, Any]]] = {}
    done = 0
    for shape, num_seqs, length in points:
        if tuner.budget.exhausted():
            tuner.k.skipped.append(
                f"decode: budget of {tuner.budget.seconds:g} s spent after {done} of "
                f"{len(points)} points; the rest were not measured"
            )
            break
        tuner.progress.step(f"decode {shape.label()} {num_seqs}x{length}")
        point = tuner.measure_point(shape, num_seqs, length)
        done += 1
        if tuner.device.startswith("cuda"):
            torch.cuda.empty_cache()  # the next point's caches may be much larger
        if point is not None:
            grouped.setdefault((shape, num_seqs), []).append(point)
    tuner.k.skipped.extend(tuner._broken.values())
    entries = []
    for (shape, num_seqs), pts in grouped.items():
        entries.append(
            {
                "num_heads": shape.num_heads,
                "num_kv_heads": shape.num_kv_heads,
                "head_size": shape.head_size,
                "dtype": shape.dtype,
                "alibi": shape.alibi,
                "num_seqs": num_seqs,
                "points": sorted(pts, key=lambda p: p["max_seq_len"]),
            }
        )
    return entries

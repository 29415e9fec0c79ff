"""Prefix-prefill warps for the tree's own Triton kernels (main and ALiBi).

The codemod sets ``NUM_WARPS`` in ``vllm/attention/ops/prefix_prefill.py``; which value is
fastest depends on the part (on an H200 the ALiBi kernel runs 1.7x slower at 4 warps
than at 8).  The tree's module is imported as vLLM would, its module-level ``NUM_WARPS``
is set to each candidate in turn, and ``context_attention_fwd`` is timed at the
deployment's prefill shapes after its output matched a float64 reference.  Trees whose
warps are not a module constant, or whose signature predates the 0.8 layout, are skipped
with the reason.

In a tree the prefix-prefill-route codemod patched, ``context_attention_fwd`` first
offers each call to the bundled kernel, which ignores ``NUM_WARPS``; NUM_WARPS governs
only what the bundled kernel declines.  The calls here therefore run with the bundled
kernel's backend set to ``tree`` (it declines every call), so the warps are measured on
the kernel they govern.  (From the route codemod, fd32b66, until this was added, tune
timed the bundled kernel here: the warps in the tables of that time are noise.)
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from ..kernels.paged_inputs import alibi_slopes, block_tables, cache_sizes, torch_dtype
from ..kernels.prefill import BACKEND_ENV
from ..kernels.reference import reference_prefix_prefill
from .decode_inputs import BLOCK_SIZE, TOLERANCE, relative_error
from .progress import Budget, BudgetExhausted, Progress
from .shapes import Deployment, Shape
from .timing import Timer
from .tree_imports import TreeImportError, TreeModules

MODULE = "vllm.attention.ops.prefix_prefill"
WARPS = (2, 4, 8)
MARGIN = 0.02
#: (sequences, cached tokens, new tokens): a batch of short prompts over a cached prefix,
#: and one long prompt with a long prefix (the issue's two H200 measurements).
_CASES = ((8, 1024, 512), (1, 16384, 2048))
_CHECK = ((2, 100, 37), (1, 0, 19))
_NEEDED = ("kv_cache_dtype", "b_start_loc", "b_seq_len", "max_input_len", "k_scale", "v_scale")


def prefill_cases(
    deployment: Deployment, points: Sequence[Tuple[int, int, int]] = _CASES
) -> List[Tuple[int, int, int]]:
    """``points`` (sequences, cached, new tokens) clamped to the deployment's model
    length and sequences, without repeats."""
    cases: List[Tuple[int, int, int]] = []
    for seqs, ctx, new in points:
        new = min(new, deployment.max_model_len)
        if ctx + new > deployment.max_model_len:
            ctx = max(0, deployment.max_model_len - new)
        seqs = min(seqs, deployment.max_num_seqs)
        if (seqs, ctx, new) not in cases:
            cases.append((seqs, ctx, new))
    return cases


def _inputs(shape: Shape, groups: Sequence[Tuple[int, int, int]], device: str, seed: int = 0):
    """Arguments of context_attention_fwd for sequences of (cached, new) tokens."""
    dtype = torch_dtype(shape.dtype)
    gen = torch.Generator().manual_seed(seed)
    lens = [(ctx, new) for seqs, ctx, new in groups for _ in range(seqs)]
    hq, hkv, d = shape.num_heads, shape.num_kv_heads, shape.head_size
    table, num_blocks = block_tables([ctx for ctx, _ in lens], BLOCK_SIZE, gen)
    elem = torch.tensor([], dtype=dtype).element_size()
    key_size, value_size = cache_sizes(num_blocks, hkv, d, BLOCK_SIZE, elem)
    total = sum(new for _, new in lens)

    # Random data generated on the device: a 16K-token cache is ~100M elements.
    dev_gen = torch.Generator(device=device).manual_seed(seed + 1)

    def rnd(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=dev_gen, device=device).to(dtype)

    starts = [0]
    for _, new in lens:
        starts.append(starts[-1] + new)
    return {
        "q": rnd(total, hq, d),
        "k": rnd(total, hkv, d),
        "v": rnd(total, hkv, d),
        "o": torch.empty(total, hq, d, dtype=dtype, device=device),
        "kv_cache_dtype": "auto",
        "k_cache": rnd(*key_size),
        "v_cache": rnd(*value_size),
        "b_loc": table.to(device),
        "b_start_loc": torch.tensor(starts, dtype=torch.int32, device=device),
        "b_seq_len": torch.tensor([c + n for c, n in lens], dtype=torch.int32, device=device),
        "max_seq_len": max(c + n for c, n in lens),
        "max_input_len": max(n for _, n in lens),
        "k_scale": torch.tensor(1.0, dtype=torch.float32, device=device),
        "v_scale": torch.tensor(1.0, dtype=torch.float32, device=device),
        "alibi_slopes": alibi_slopes(hq).to(device) if shape.alibi else None,
    }


def reference_prefill(a: Dict[str, Any]) -> torch.Tensor:
    """The float64 reference (kernels/reference.py) of context_attention_fwd's arguments."""
    return reference_prefix_prefill(
        a["q"],
        a["k"],
        a["v"],
        a["k_cache"],
        a["v_cache"],
        a["b_loc"],
        a["b_start_loc"].tolist(),
        a["b_seq_len"].tolist(),
        1.0 / math.sqrt(a["q"].shape[2]),
        a["alibi_slopes"],
    )


@contextlib.contextmanager
def tree_kernel_only() -> Iterator[None]:
    """The bundled prefill kernel declines every call while this runs (a routed tree's
    ``context_attention_fwd`` then runs its own kernel); the environment is restored."""
    before = os.environ.get(BACKEND_ENV)
    os.environ[BACKEND_ENV] = "tree"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(BACKEND_ENV, None)
        else:
            os.environ[BACKEND_ENV] = before


class PrefillTuner:
    #: the tree's kernels are Triton: without CUDA there is nothing to time
    needs_cuda = True

    def __init__(
        self, modules: TreeModules, device: str, timer: Timer, budget: Budget, progress: Progress
    ) -> None:
        self.modules = modules
        self.device = device
        self.timer = timer
        self.budget = budget
        self.progress = progress
        self.skipped: List[str] = []
        self._accepted: set = set()

    def _module(self) -> Optional[Any]:
        if self.needs_cuda and not self.device.startswith("cuda"):
            self.skipped.append("prefix prefill: the tree's Triton kernels need a CUDA device")
            return None
        try:
            module = self.modules.load(MODULE)
        except TreeImportError as exc:
            self.skipped.append(f"prefix prefill: {exc}")
            return None
        warps = getattr(module, "NUM_WARPS", None)
        fn = getattr(module, "context_attention_fwd", None)
        if not isinstance(warps, int) or isinstance(warps, bool) or fn is None:
            self.skipped.append(
                "prefix prefill: this tree's prefix_prefill.py has no module-level NUM_WARPS "
                "(or no context_attention_fwd); its warps cannot be varied here"
            )
            return None
        params = inspect.signature(fn).parameters
        missing = [n for n in _NEEDED if n not in params]
        if missing:
            self.skipped.append(
                "prefix prefill: context_attention_fwd predates the 0.8 signature "
                f"(no {', '.join(missing)}); not measured"
            )
            return None
        self._accepted = set(params)
        return module

    def _call(self, module: Any, args: Dict[str, Any]) -> None:
        accepted = self._accepted
        module.context_attention_fwd(**{n: v for n, v in args.items() if n in accepted})

    def run(self, deployment: Deployment) -> Tuple[List[Dict[str, Any]], Optional[int]]:
        """Entries per (shape, prefill case) and the one NUM_WARPS chosen (None: none)."""
        return self.run_cases(deployment, prefill_cases(deployment))

    def run_cases(
        self, deployment: Deployment, cases: Sequence[Tuple[int, int, int]]
    ) -> Tuple[List[Dict[str, Any]], Optional[int]]:
        module = self._module()
        if module is None:
            return [], None
        default_warps = int(module.NUM_WARPS)
        warps = sorted(set(WARPS) | {default_warps})
        entries: List[Dict[str, Any]] = []
        try:
            with tree_kernel_only():
                self._measure(module, deployment, cases, warps, default_warps, entries)
        except BudgetExhausted as exc:
            self.skipped.append(f"prefix prefill: {exc}; the rest was not measured")
        finally:
            module.NUM_WARPS = default_warps
        return entries, _overall(entries, default_warps)

    def _measure(self, module: Any, deployment: Deployment,
                 cases: Sequence[Tuple[int, int, int]], warps: Sequence[int],
                 default_warps: int, entries: List[Dict[str, Any]]) -> None:  # fmt: skip
        for shape in deployment.shapes:
            for seqs, ctx, new in cases:
                self.budget.check()
                self.progress.step(f"prefill {shape.label()} {seqs}x({ctx}+{new})")
                try:
                    entries.append(
                        self._entry(module, shape, (seqs, ctx, new), warps, default_warps)
                    )
                except (RuntimeError, MemoryError) as exc:  # no memory for the inputs
                    self.skipped.append(
                        f"prefix prefill {shape.label()} {seqs}x({ctx}+{new}): "
                        f"{type(exc).__name__}: {str(exc)[:160]}"
                    )

    def _entry(self, module: Any, shape: Shape, case: Tuple[int, int, int],
               warps: Sequence[int], default_warps: int) -> Dict[str, Any]:  # fmt: skip
        seqs, ctx, new = case
        check = _inputs(shape, _CHECK, self.device, seed=1)
        ref = reference_prefill(check)
        timed = [_inputs(shape, [case], self.device, seed=s) for s in range(2)]
        candidates = []
        for w in warps:
            entry: Dict[str, Any] = {"num_warps": w}
            module.NUM_WARPS = w
            try:
                check["o"].fill_(float("nan"))
                self._call(module, check)
                self.timer.sync()
                err = relative_error(check["o"], ref)
                if err >= TOLERANCE[shape.dtype]:
                    entry.update(status="wrong", reason=f"relative error {err:.2e}")
                else:
                    fns = [(lambda a=a: self._call(module, a)) for a in timed]
                    entry.update(status="ok", us=self.timer.eager_us(fns))
            except Exception as exc:
                entry.update(status="failed", reason=f"{type(exc).__name__}: {str(exc)[:200]}")
            candidates.append(entry)
        module.NUM_WARPS = default_warps
        ok = {c["num_warps"]: c["us"] for c in candidates if c["status"] == "ok"}
        winner = None
        if default_warps in ok:
            best = min(ok, key=lambda w: ok[w])
            winner = best if ok[best] < ok[default_warps] * (1 - MARGIN) else default_warps
        return {
            "kernel": "alibi" if shape.alibi else "main",
            "num_heads": shape.num_heads,
            "num_kv_heads": shape.num_kv_heads,
            "head_size": shape.head_size,
            "dtype": shape.dtype,
            "num_seqs": seqs,
            "context_len": ctx,
            "query_len": new,
            "default_warps": default_warps,
            "default_us": ok.get(default_warps),
            "winner_warps": winner,
            "winner_us": ok.get(winner) if winner is not None else None,
            "candidates": candidates,
        }


def _overall(entries: Sequence[Dict[str, Any]], default_warps: int) -> Optional[int]:
    """One NUM_WARPS for the tree (the codemod sets one value): the fastest in total over
    every measured case, if it beats the default's total by MARGIN; else the default."""
    usable = [e for e in entries if e["default_us"] is not None]
    if not usable:
        return None
    totals: Dict[int, float] = {}
    for w in {c["num_warps"] for e in usable for c in e["candidates"]}:
        times = [
            next(
                (c["us"] for c in e["candidates"] if c["num_warps"] == w and c["status"] == "ok"),
                None,
            )
            for e in usable
        ]
        if all(t is not None for t in times):
            totals[w] = sum(times)  # type: ignore[arg-type]
    best = min(totals, key=lambda w: totals[w])
    return best if totals[best] < totals[default_warps] * (1 - MARGIN) else default_warps

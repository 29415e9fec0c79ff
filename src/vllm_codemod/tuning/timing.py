"""Per-call times of a kernel, the way vLLM runs it: eager, and inside a CUDA graph.

The method of benchmarks/bench_paged_attention.py: warm-up first, then the median of
several repeats; every repeat cycles through at least two input sets (separate KV-cache
copies) so no call finds the previous call's K/V in L2.  Eager repeats are timed with
CUDA events around a run of calls, so host launch overhead counts as it does in an
eager decode step; graph repeats replay one graph holding a run of calls (vLLM captures
a whole decode step), so the graph's own launch latency is spread over them.  On the
CPU, wall-clock time of the same runs.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

import torch

Fn = Callable[[], object]


class GraphUnavailable(Exception):
    """CUDA graphs cannot capture this call here; the message says why."""


class Timer:
    def __init__(self, device: str, repeats: int = 7, calls: int = 20, warmup: int = 3) -> None:
        self.device = device
        self.repeats = repeats
        self.calls = calls
        self.warmup = warmup

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def _run(self, fns: Sequence[Fn], n: int) -> None:
        for i in range(n):
            fns[i % len(fns)]()

    def eager_us(self, fns: Sequence[Fn]) -> float:
        """Median microseconds per call, eager."""
        for _ in range(self.warmup):
            self._run(fns, len(fns))
        self.sync()
        samples = []
        for _ in range(self.repeats):
            if self.cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                self._run(fns, self.calls)
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) * 1e3 / self.calls)
            else:
                t0 = time.perf_counter()
                self._run(fns, self.calls)
                samples.append((time.perf_counter() - t0) * 1e6 / self.calls)
        return float(statistics.median(samples))

    def graph_us(self, fns: Sequence[Fn]) -> float:
        """Median microseconds per call, replaying one CUDA graph of ``calls`` calls."""
        if not self.cuda:
            raise GraphUnavailable("no CUDA graphs on the CPU")
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self._run(fns, len(fns))  # warm-up on a side stream, as capture needs
            torch.cuda.current_stream().wait_stream(stream)
            self.sync()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._run(fns, self.calls)
            self.sync()
        except Exception as exc:
            self._recover()
            raise GraphUnavailable(
                f"capture failed: {type(exc).__name__}: {str(exc)[:160]}"
            ) from None
        try:
            for _ in range(self.warmup):
                graph.replay()
            self.sync()
            samples = []
            for _ in range(self.repeats):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) * 1e3 / self.calls)
        finally:
            del graph
        return float(statistics.median(samples))

    def _recover(self) -> None:
        """After a failed capture: make sure no stream is left capturing."""
        try:
            self.sync()
        except Exception:
            pass

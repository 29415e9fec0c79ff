"""The run's clock (``--budget``) and a one-line progress bar on a TTY (stderr)."""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO


class BudgetExhausted(Exception):
    """The time budget is spent: stop measuring, keep what was measured."""


class Budget:
    def __init__(
        self, seconds: Optional[float], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.seconds = seconds
        self.clock = clock
        self.start = clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def exhausted(self) -> bool:
        return self.seconds is not None and self.elapsed() >= self.seconds

    def check(self) -> None:
        if self.exhausted():
            raise BudgetExhausted(f"budget of {self.seconds:g} s spent")

    def share(self, parts: int) -> Budget:
        """A budget for the first of ``parts`` equal pieces of what is left, so one group
        of measurements cannot spend the time of the groups after it (what a piece leaves
        unused goes to the pieces after it)."""
        if self.seconds is None:
            return Budget(None, self.clock)
        left = max(0.0, self.seconds - self.elapsed())
        return Budget(round(left / max(1, parts), 1), self.clock)


class Progress:
    """``[#####.....] 12/40 label``, redrawn in place; silent when stderr is not a TTY."""

    def __init__(self, total: int, stream: Optional[TextIO] = None, enabled: Optional[bool] = None):
        self.total = max(1, total)
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled

    def add(self, steps: int) -> None:
        """Count ``steps`` more that were not known when the bar was made (the prefill
        configs' candidates: how many depends on the device's shared memory)."""
        self.total += max(0, steps)

    def step(self, label: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        width = 24
        filled = min(width, width * self.done // self.total)
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label}"
        self.stream.write("\r" + line[:110].ljust(110))
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * 110 + "\r")
            self.stream.flush()

"""The run's clock (``--budget``) and a one-line progress bar on a TTY (stderr)."""

from __future__ import annotations

import sys
import time
from typing import Optional, TextIO


class BudgetExhausted(Exception):
    """The time budget is spent: stop measuring, keep what was measured."""


class Budget:
    def __init__(self, seconds: Optional[float]) -> None:
        self.seconds = seconds
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def exhausted(self) -> bool:
        return self.seconds is not None and self.elapsed() >= self.seconds

    def check(self) -> None:
        if self.exhausted():
            raise BudgetExhausted(f"budget of {self.seconds:g} s spent")


class Progress:
    """``[#####.....] 12/40 label``, redrawn in place; silent when stderr is not a TTY."""

    def __init__(self, total: int, stream: Optional[TextIO] = None, enabled: Optional[bool] = None):
        self.total = max(1, total)
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled

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

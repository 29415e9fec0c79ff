"""One run at a time per tree: the lock every command that reads or writes holds."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from ..discovery import VllmTree
from ..errors import UserError
from ..fsutil import tree_lock

LOCK_TIMEOUT_ENV = "VLLM_CODEMOD_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 30.0


def lock_timeout() -> float:
    raw = os.environ.get(LOCK_TIMEOUT_ENV)
    if raw is None or raw == "":
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (0 <= value < 1e6):
        raise UserError(
            f"{LOCK_TIMEOUT_ENV}={raw!r}: not a number of seconds; set it to e.g. 30 or unset it"
        )
    return value


@contextmanager
def lock(tree: VllmTree) -> Iterator[None]:
    """Hold the tree's lock (waits up to ``VLLM_CODEMOD_LOCK_TIMEOUT`` seconds)."""
    with tree_lock(tree.root, lock_timeout()):
        yield

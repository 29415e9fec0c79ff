"""Small filesystem primitives the engine's crash-safety rests on."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from .errors import CodemodError


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> Optional[str]:
    """Hash of a file's bytes, or None when it does not exist."""
    try:
        return sha256_bytes(path.read_bytes())
    except FileNotFoundError:
        return None


def atomic_write(path: Path, data: bytes, mode: Optional[int] = None) -> None:
    """Replace ``path`` with ``data`` so that readers (and a crash) see old or new, never half.

    The temp file lives in the same directory so ``os.replace`` is a rename on one
    filesystem.  The file's permission bits survive unless ``mode`` says otherwise.
    """
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise


def remove_file(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def remove_empty_dirs(start: Path, stop: Path) -> None:
    """Remove ``start`` and its parents while they are empty, never going above ``stop``."""
    current = start
    while current != stop and stop in current.parents:
        try:
            current.rmdir()
        except OSError:
            return
        current = current.parent


@contextmanager
def tree_lock(directory: Path, timeout: float) -> Iterator[None]:
    """Hold an exclusive advisory lock on the vllm package directory itself.

    Locking the directory's own file descriptor instead of a lock file means the
    lock leaves nothing behind in the tree, so revert can be byte-exact.
    """
    fd = os.open(directory, os.O_RDONLY)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                if time.monotonic() >= deadline:
                    raise CodemodError(
                        f"{directory}: another vllm-codemod run holds the lock; "
                        "wait for it to finish and run again"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)

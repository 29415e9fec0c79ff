"""The one place where an exception becomes an exit status and a line on stderr.

A Dockerfile or CI script can only act on the exit status, so each status must mean
one thing (see :data:`EXIT_CODES`): 1 is reserved for "changes pending" and never
produced here, and a bug (3) is told apart from a user's mistake (2) by a saved
traceback rather than by a wall of text in a build log.
"""

from __future__ import annotations

import datetime
import errno as errno_module
import os
import signal
import sys
import tempfile
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple

import click

from .errors import CodemodError

SUCCESS = 0
CHANGES_PENDING = 1
USER_ERROR = 2
INTERNAL_ERROR = 3
INTERRUPTED = 130

#: (status, meaning): rendered in README and in the top-level ``--help``.
EXIT_CODES: List[Tuple[int, str]] = [
    (SUCCESS, "success / nothing pending"),
    (
        CHANGES_PENDING,
        "check, diff (and tune-config --diff) only: changes pending; with status: an "
        "interrupted run",
    ),
    (USER_ERROR, "user error, bad input, refusal, conflict, environment problem"),
    (INTERNAL_ERROR, "internal error (a bug): one line + the path of a saved traceback"),
    (INTERRUPTED, "interrupted (Ctrl-C / SIGTERM): nothing half-written, lock released"),
]

PREFIX = "vllm-codemod"
CRASH_DIR_ENV = "VLLM_CODEMOD_CRASH_DIR"

#: Top-level module -> the requirement in pyproject.toml that provides it.  A run that
#: cannot import one of these has an incomplete install (say, ``pip install --no-deps``
#: into an image), an environment problem to fix, not a bug to report.
DEPENDENCIES = {
    "click": "click>=8.0",
    "libcst": "libcst>=1.1",
    "packaging": "packaging>=22",
    "ruamel": "ruamel.yaml>=0.17.21",
}


def exit_code_table() -> str:
    """The table as plain text for ``--help`` (click keeps ``\\b`` paragraphs verbatim)."""
    rows = "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES)
    return "\b\nExit status:\n" + rows


def describe_os_error(exc: OSError) -> str:
    """``FILE: strerror [ENAME]; what to do``: the one line an OSError deserves."""
    where = exc.filename if exc.filename is not None else "(file not named by the system)"
    code = exc.errno
    name = errno_module.errorcode.get(code, "") if code is not None else ""
    what = exc.strerror or (os.strerror(code) if code is not None else str(exc))
    hints = {
        errno_module.ENOSPC: "free some space and run again",
        errno_module.EROFS: "the filesystem is read-only; run where the tree is writable",
        errno_module.EACCES: "check the permissions (or run as the tree's owner)",
        errno_module.EPERM: "check the permissions (or run as the tree's owner)",
        errno_module.EDQUOT: "the disk quota is exhausted; free some space and run again",
    }
    hint = hints.get(code or -1, "fix that and run again")
    return f"{where}: {what}" + (f" [{name}]" if name else "") + f"; {hint}"


def save_traceback(exc: BaseException) -> Optional[Path]:
    """Write the traceback of ``exc`` to a temp file; None when even that fails."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    directory = os.environ.get(CRASH_DIR_ENV) or tempfile.gettempdir()
    from . import __version__

    header = (
        f"vllm-codemod {__version__}, Python {sys.version.split()[0]} on {sys.platform}\n"
        f"argv: {sys.argv!r}\n\n"
    )
    text = header + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        fd, name = tempfile.mkstemp(
            prefix=f"vllm-codemod-crash-{stamp}-", suffix=".txt", dir=directory
        )
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError:
        return None
    return Path(name)


def say(message: str) -> None:
    try:
        click.echo(f"{PREFIX}: {message}", err=True)
    except OSError:
        pass  # stderr is gone (closed pipe): the status is all that is left to tell


def classify(exc: BaseException) -> Tuple[int, Optional[str]]:
    """The exit status for ``exc`` and the one line to print (None: print nothing).

    Called once per failed run: an internal error saves its traceback here.
    """
    if isinstance(exc, click.exceptions.Exit):
        return exc.exit_code, None
    if isinstance(exc, (KeyboardInterrupt, click.Abort)):
        return INTERRUPTED, (
            "interrupted; a write that had begun is finished (or undone) by the next "
            "`vllm-codemod apply` or `vllm-codemod revert`"
        )
    if isinstance(exc, click.UsageError):
        command = exc.ctx.command_path if exc.ctx is not None else PREFIX
        return USER_ERROR, f"error: {exc.format_message()} (see `{command} --help`)"
    if isinstance(exc, click.ClickException):
        return USER_ERROR, f"error: {exc.format_message()}"
    if isinstance(exc, CodemodError):
        return USER_ERROR, f"error: {exc}"
    if isinstance(exc, BrokenPipeError):
        # `vllm-codemod diff | head`: the reader went away; nothing of ours failed.
        _silence_stdout()
        return USER_ERROR, None
    if isinstance(exc, OSError):
        return USER_ERROR, f"error: {describe_os_error(exc)}"
    missing = _missing_dependency(exc)
    if missing is not None:
        return USER_ERROR, (
            f"error: this interpreter ({sys.executable}) cannot import {missing[0]!r}, "
            f"which vllm-codemod needs; install it (pip install '{missing[1]}') or "
            "reinstall vllm-codemod with its dependencies"
        )
    saved = save_traceback(exc)
    where = (
        f"traceback saved to {saved}"
        if saved is not None
        else "the traceback could not be saved (temp directory not writable)"
    )
    return INTERNAL_ERROR, (
        f"internal error: {type(exc).__name__}: {_first_line(exc)} (a bug in vllm-codemod; "
        f"{where}; please report it with that file)"
    )


def _missing_dependency(exc: BaseException) -> Optional[Tuple[str, str]]:
    """(module, requirement) when ``exc`` is a declared dependency failing to import."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    requirement = DEPENDENCIES.get(top)
    return None if requirement is None else (exc.name, requirement)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no message"


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Let SIGTERM unwind like Ctrl-C, so context managers release locks and temp files.

    ``docker stop`` and CI cancellation send SIGTERM; Python's default dies on the
    spot.  Only the main thread may install handlers; elsewhere this does nothing.
    """
    try:
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

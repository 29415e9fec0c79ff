"""The output options every command shares, and the renderer of its :class:`Report`.

``--json``, ``-q``/``-v`` and ``--color/--no-color`` mean the same on every command
because one decorator adds them and one function prints the report.  A failed run
under ``--json`` still prints one JSON document (with ``error``), so a script
reading stdout never has to parse an empty string.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

import click

from ..boundary import classify, say
from ..report import ERROR, Report, dumps, error_document

LOGGER_NAME = "vllm_codemod"
NO_COLOR_ENV = "NO_COLOR"
_META_KEY = "vllm_codemod.output"


@dataclass(frozen=True)
class Output:
    """How this run prints: JSON or text, how much, and whether in colour."""

    as_json: bool = False
    #: -1 with -q (errors only), 0 by default, 1+ per -v
    verbosity: int = 0
    #: True/False when decided (flag or NO_COLOR), None: colour only on a terminal
    color: Optional[bool] = None

    @property
    def interactive(self) -> bool:
        """Whether progress may be drawn: text mode, not quiet, stderr a terminal."""
        return not self.as_json and self.verbosity >= 0 and _isatty(sys.stderr)

    def render(self, report: Report) -> None:
        if self.as_json:
            click.echo(dumps(report.to_json()))
            return
        if report.body and self.verbosity >= 0:
            click.echo(report.body, nl=False, color=self.color)
        for line in report.lines:
            if line.level <= self.verbosity + 1 or line.level == ERROR:
                click.echo(line.text, err=line.err, color=self.color)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def resolve_color(flag: Optional[bool]) -> Optional[bool]:
    """``--color``/``--no-color`` win; else ``NO_COLOR`` (any value) turns colour off."""
    if flag is not None:
        return flag
    if os.environ.get(NO_COLOR_ENV):
        return False
    return None


def configure_logging(verbosity: int) -> Callable[[], None]:
    """Route the ``vllm_codemod`` logger to stderr at the level -q/-v asked for.

    One handler, replaced on every run, so repeated in-process runs (tests, the
    Python API) neither duplicate lines nor write to a stale stderr.  Returns the undo
    (the command registers it to run on close): an in-process run must not leave the
    logger silenced or detached from the root for the caller's own logging.
    """
    logger = logging.getLogger(LOGGER_NAME)
    before = (logger.level, logger.propagate)
    for handler in list(logger.handlers):
        if getattr(handler, "_vllm_codemod", False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler._vllm_codemod = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("vllm-codemod: %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(
        logging.ERROR
        if verbosity < 0
        else logging.WARNING
        if verbosity == 0
        else logging.INFO
        if verbosity == 1
        else logging.DEBUG
    )
    logger.propagate = False

    def restore() -> None:
        logger.removeHandler(handler)
        logger.setLevel(before[0])
        logger.propagate = before[1]

    return restore


def current_output() -> Output:
    """The output settings of the command being run (defaults outside a command)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return Output()
    return ctx.find_root().meta.get(_META_KEY, Output())


def reporting(command: str) -> Callable[[Callable[..., Report]], Callable[..., None]]:
    """Add --json/-q/-v/--color to a command that returns a :class:`Report`, and print it."""

    def decorate(func: Callable[..., Report]) -> Callable[..., None]:
        @functools.wraps(func)
        def wrapper(
            *args: Any,
            as_json: bool,
            quiet: bool,
            verbose: int,
            color: Optional[bool],
            **kwargs: Any,
        ) -> None:
            ctx = click.get_current_context()
            verbose += ctx.find_root().meta.get("vllm_codemod.verbose", 0)  # vllm-codemod -v CMD
            if quiet and verbose:
                raise click.UsageError("pass -q or -v, not both")
            output = Output(as_json, -1 if quiet else verbose, resolve_color(color))
            ctx.find_root().meta[_META_KEY] = output
            ctx.call_on_close(configure_logging(output.verbosity))
            try:
                report = func(*args, **kwargs)
            except Exception as exc:
                if not as_json:
                    raise
                _fail_as_json(command, exc)
            except KeyboardInterrupt as exc:
                if not as_json:
                    raise
                _fail_as_json(command, exc)
            output.render(report)
            ctx.exit(report.exit_code)

        wrapper = click.option(
            "--color/--no-color",
            "color",
            default=None,
            help="Colour the output (default: on a terminal, unless NO_COLOR is set).",
        )(wrapper)
        wrapper = click.option(
            "-v", "--verbose", count=True, help="More detail (per-file); repeat for debug logs."
        )(wrapper)
        wrapper = click.option(
            "-q", "--quiet", is_flag=True, help="Print errors only; the exit status says the rest."
        )(wrapper)
        wrapper = click.option(
            "--json",
            "as_json",
            is_flag=True,
            help="Print one JSON document (schema_version 1; see docs/json.md).",
        )(wrapper)
        return wrapper

    return decorate


def _fail_as_json(command: str, exc: BaseException) -> None:
    if isinstance(exc, click.exceptions.Exit):
        raise exc
    code, message = classify(exc)
    if message is not None:
        say(message)
    text = message or type(exc).__name__
    if text.startswith("error: "):
        text = text[len("error: ") :]
    click.echo(dumps(error_document(command, code, text)))
    raise click.exceptions.Exit(code)

"""What every tree-facing command shares: tree options, selection, the error boundary."""

from __future__ import annotations

import functools
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import click
from packaging.version import Version

from ..discovery import VllmTree, locate_tree
from ..errors import CodemodError

SITE_PACKAGES_ENV = "VLLM_CODEMOD_SITE_PACKAGES"


def _all_transforms() -> Sequence[Any]:
    from vllm_codemod.transforms import ALL_TRANSFORMS

    return ALL_TRANSFORMS


def tree_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--site-packages / --vllm-root: which tree to work on."""
    func = click.option(
        "--vllm-root",
        type=click.Path(path_type=Path, file_okay=False),
        help="The vllm package directory itself (alternative to --site-packages).",
    )(func)
    func = click.option(
        "--site-packages",
        type=click.Path(path_type=Path, file_okay=False),
        envvar=SITE_PACKAGES_ENV,
        show_envvar=True,
        help="Directory holding vllm/ and vllm-*.dist-info. Default: the vllm of this "
        "interpreter, located without importing it.",
    )(func)
    return func


def selection_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--only/--skip, --force, and every transform's own options."""
    for transform in reversed(list(_all_transforms())):
        for opt in reversed(transform.options):
            func = click.option(
                opt.flag,
                opt.name,
                type=click.Choice([str(c) for c in opt.choices]) if opt.choices else opt.type,
                default=None,
                help=f"[{transform.name}] {opt.help} (default: {opt.default})",
            )(func)
    names = [t.name for t in _all_transforms()]
    func = click.option(
        "--force",
        is_flag=True,
        help="Accept a tree whose vLLM version is unknown or outside the known range.",
    )(func)
    func = click.option(
        "--skip",
        multiple=True,
        metavar="NAME",
        help=f"Leave this transform out (repeatable). One of: {', '.join(names)}.",
    )(func)
    func = click.option(
        "--only",
        multiple=True,
        metavar="NAME",
        help="Run only this transform (repeatable).",
    )(func)
    return func


def json_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")(func)


def user_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a :class:`CodemodError` into one line on stderr and exit status 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except CodemodError as exc:
            click.echo(f"vllm-codemod: error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


def plan_options(
    only: Tuple[str, ...], skip: Tuple[str, ...], force: bool, raw: Dict[str, Any]
) -> Any:
    """The engine's options from the command line (values not given stay unset)."""
    from ..engine import PlanOptions

    values = {name: value for name, value in raw.items() if value is not None}
    return PlanOptions(
        only=tuple(only), skip=tuple(skip), values=values, accept_unknown_version=force
    )


def open_tree(site_packages: Optional[Path], vllm_root: Optional[Path]) -> VllmTree:
    return locate_tree(site_packages, vllm_root)


@contextmanager
def locked(tree: VllmTree) -> Iterator[None]:
    from ..engine import lock

    with lock(tree):
        yield


def emit_json(payload: Dict[str, Any]) -> None:
    click.echo(json.dumps(payload, indent=2, sort_keys=False))


def describe_tree(tree: VllmTree, version: Optional[Version]) -> str:
    shown = version if version is not None else "unknown version"
    return f"vLLM {shown} at {tree.root}"


def report_recovery(recovery: Any) -> None:
    if recovery.finished:
        click.echo(f"finished an interrupted {recovery.finished} first", err=True)

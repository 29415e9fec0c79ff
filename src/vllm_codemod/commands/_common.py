"""What every tree-facing command shares: tree options, selection, the error boundary."""

from __future__ import annotations

import functools
import json
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import click
from packaging.version import Version

from ..discovery import VllmTree, locate_tree
from ..errors import CodemodError
from ..fsutil import tree_lock
from ..versions import gate_version, read_version

SITE_PACKAGES_ENV = "VLLM_CODEMOD_SITE_PACKAGES"
LOCK_TIMEOUT_ENV = "VLLM_CODEMOD_LOCK_TIMEOUT"


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
        help="Work on a tree whose vLLM version is unknown or outside the known range.",
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


@dataclass
class Selection:
    transforms: List[Any]
    options: Dict[str, Any]
    only: Tuple[str, ...] = ()  # named with --only: fork remedies run even upstream


def select_transforms(
    only: Tuple[str, ...], skip: Tuple[str, ...], raw: Dict[str, Any]
) -> Selection:
    """Validate --only/--skip names and per-transform option values."""
    transforms = list(_all_transforms())
    known = {t.name for t in transforms}
    for name in (*only, *skip):
        if name not in known:
            raise CodemodError(
                f"unknown transform {name!r}; known: {', '.join(sorted(known))} "
                "(see `vllm-codemod list`)"
            )
    chosen = [t for t in transforms if (not only or t.name in only) and t.name not in skip]
    if not chosen:
        raise CodemodError("--only/--skip left no transform to run; check the names")
    options: Dict[str, Any] = {}
    for transform in transforms:
        for opt in transform.options:
            value = raw.get(opt.name)
            if value is None:
                continue
            if opt.choices:
                value = opt.type(value)
            if opt.minimum is not None and value < opt.minimum:
                raise CodemodError(f"{opt.flag} {value}: must be at least {opt.minimum}")
            options[opt.name] = value
    return Selection(chosen, options, tuple(only))


@dataclass
class Session:
    tree: VllmTree
    version: Optional[Version]
    version_source: str


def open_session(
    site_packages: Optional[Path], vllm_root: Optional[Path], force: bool, gate: bool = True
) -> Session:
    tree = locate_tree(site_packages, vllm_root)
    try:
        version, source = read_version(tree)
    except CodemodError:
        if not force:
            raise
        version, source = None, ""
    if gate:
        gate_version(tree, version, force)
    return Session(tree, version, source)


@contextmanager
def locked(tree: VllmTree) -> Iterator[None]:
    timeout = float(os.environ.get(LOCK_TIMEOUT_ENV, "30"))
    with tree_lock(tree.root, timeout):
        yield


def emit_json(payload: Dict[str, Any]) -> None:
    click.echo(json.dumps(payload, indent=2, sort_keys=False))


def plan_changes(session: Session, selection: Selection, finish_interrupted: bool) -> Any:
    """Plan under the caller's lock.  Read-only commands refuse a half-finished tree."""
    from ..planner import build_change_set
    from ..transaction import StateDir, recover

    state = StateDir(session.tree)
    if finish_interrupted:
        op = recover(session.tree)
        if op:
            click.echo(f"finished an interrupted {op} first", err=True)
    elif state.has_journal():
        raise CodemodError(
            f"{state.journal_path}: an earlier run was interrupted; run `vllm-codemod apply` "
            "or `vllm-codemod revert` to finish it"
        )
    manifest = state.load_manifest()
    previously_added = {
        rel: (entry["sha256"], entry["transform"]) for rel, entry in manifest["added"].items()
    }
    return build_change_set(
        session.tree,
        session.version,
        selection.transforms,
        selection.options,
        previously_added,
        registry=_all_transforms(),
        explicit=selection.only,
    )


def describe_tree(session: Session) -> str:
    version = session.version if session.version is not None else "unknown version"
    return f"vLLM {version} at {session.tree.root}"


def result_rows(change_set: Any) -> List[Dict[str, Any]]:
    return [
        {
            "name": r.transform.name,
            "target": r.target,
            "status": r.status.value,
            "reason": r.reason,
            "details": r.details,
        }
        for r in change_set.results
    ]


def conflict_error(change_set: Any) -> CodemodError:
    lines = [f"{r.target}: {r.transform.name}: {r.reason}" for r in change_set.conflicts]
    return CodemodError("; ".join(lines) + "; nothing was changed")

"""What every tree-facing command shares: which tree, which transforms, with which values.

Commands parse options here and hand plain values to :mod:`vllm_codemod.engine`;
errors are raised, never printed: the boundary in :mod:`vllm_codemod.boundary` turns
them into one line and an exit status, and :mod:`._output` prints the report.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import click
from packaging.version import Version

from ..discovery import VllmTree, locate_tree
from ..errors import CodemodError, UserError
from ..report import Report

SITE_PACKAGES_ENV = "VLLM_CODEMOD_SITE_PACKAGES"

#: vLLM keeps sequence lengths in int32 tensors: a larger threshold means nothing.
INT32_MAX = 2**31 - 1


def _all_transforms() -> Sequence[Any]:
    from vllm_codemod.transforms import ALL_TRANSFORMS

    return ALL_TRANSFORMS


def transform_names() -> str:
    return ", ".join(t.name for t in _all_transforms())


def tree_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--site-packages / --vllm-root / --python: which tree to work on."""
    func = click.option(
        "--python",
        "python",
        type=click.Path(path_type=Path, dir_okay=False),
        help="Work on the vllm that this interpreter imports (its site directories, found "
        "without importing vllm), e.g. /opt/venv/bin/python.",
    )(func)
    func = click.option(
        "--vllm-root",
        type=click.Path(path_type=Path, file_okay=False),
        help="The vllm package directory itself (alternative to --site-packages).",
    )(func)
    func = click.option(
        "--site-packages",
        # Checked in open_tree, not by click: click's message names the variable even
        # when the value came from the option, and fails on a variable that --vllm-root
        # or --python overrides.
        type=click.Path(path_type=Path),
        envvar=SITE_PACKAGES_ENV,
        show_envvar=True,
        help="Directory holding vllm/ and vllm-*.dist-info. Default: the vllm of this "
        "interpreter, located without importing it.",
    )(func)
    return func


def _known_names(ctx: click.Context, param: click.Parameter, value: Tuple[str, ...]) -> Any:
    """Reject an unknown --only/--skip name at parse time, listing the known ones."""
    known = [t.name for t in _all_transforms()]
    for name in value:
        if name not in known:
            raise click.BadParameter(
                f"unknown transform {name!r}; known: {', '.join(known)} (see `vllm-codemod list`)"
            )
    return value


def _option_type(opt: Any) -> Any:
    """Choices stay choices; integers get bounds, so a nonsense value fails at parse time."""
    if opt.choices:
        return click.Choice([str(c) for c in opt.choices])
    if opt.type is int:
        maximum = getattr(opt, "maximum", None)
        return click.IntRange(
            min=opt.minimum if opt.minimum is not None else 0,
            max=maximum if maximum is not None else INT32_MAX,
        )
    return opt.type


def selection_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--only/--skip, --force, and every transform's own options."""
    for transform in reversed(list(_all_transforms())):
        for opt in reversed(transform.options):
            func = click.option(
                opt.flag,
                opt.name,
                type=_option_type(opt),
                default=None,
                help=f"[{transform.name}] {opt.help} (default: {opt.default})",
            )(func)
    names = transform_names()
    func = click.option(
        "--force",
        is_flag=True,
        help="Accept a tree whose vLLM version is unknown or outside the known range.",
    )(func)
    func = click.option(
        "--skip",
        multiple=True,
        metavar="NAME",
        callback=_known_names,
        help=f"Leave this transform out (repeatable). One of: {names}.",
    )(func)
    func = click.option(
        "--only",
        multiple=True,
        metavar="NAME",
        callback=_known_names,
        help=f"Run only this transform (repeatable). One of: {names}.",
    )(func)
    return func


def plan_options(
    only: Tuple[str, ...],
    skip: Tuple[str, ...],
    force: bool,
    raw: Dict[str, Any],
    command: str = "apply",
) -> Any:
    """The engine's options from the command line (values not given stay unset);
    ``command`` is the one the user ran, so messages name its way on."""
    from ..engine import PlanOptions

    values = {name: value for name, value in raw.items() if value is not None}
    return PlanOptions(
        only=tuple(only),
        skip=tuple(skip),
        values=values,
        accept_unknown_version=force,
        command=command,
    )


def forced_version_note(plan: Any, force: bool) -> Optional[str]:
    """A line saying that the tree's version is outside the known range and what let it
    through (``--force`` now, or the ``apply --force`` the manifest records); None when the
    version is known."""
    if plan.version_problem is None:
        return None
    from ..versions import KNOWN_RANGE_TEXT

    shown = plan.forced_version or "unknown"
    recorded = plan.manifest_before.forced_version == plan.forced_version
    why = (
        "patched with `vllm-codemod apply --force`, recorded in the manifest"
        if recorded and plan.manifest_before.patched
        else "accepted by --force"
        if force
        else "`vllm-codemod apply --force` patches it anyway"
    )
    return f"vLLM {shown} is outside the versions this tool knows ({KNOWN_RANGE_TEXT}); {why}"


def _from_environment(name: str) -> bool:
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return False
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "ENVIRONMENT"


def open_tree(
    site_packages: Optional[Path], vllm_root: Optional[Path], python: Optional[Path] = None
) -> VllmTree:
    """The tree the user named; an error says which option or variable named it."""
    if site_packages is not None and _from_environment("site_packages"):
        if vllm_root is not None or python is not None:
            # The variable is a default; an explicit option on the command line wins.
            site_packages = None
    given = [
        flag
        for flag, value in (
            ("--site-packages", site_packages),
            ("--vllm-root", vllm_root),
            ("--python", python),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise UserError(f"{' and '.join(given)} each name the tree; pass only one")
    if python is not None:
        from ..interpreter import locate_for_interpreter

        return locate_for_interpreter(python)
    try:
        return locate_tree(site_packages, vllm_root)
    except CodemodError as exc:
        if site_packages is not None and _from_environment("site_packages"):
            raise UserError(
                f"{SITE_PACKAGES_ENV}={site_packages}: {exc}; fix or unset the variable"
            ) from None
        raise


@contextmanager
def locked(tree: VllmTree) -> Iterator[None]:
    from ..engine import lock

    with lock(tree):
        yield


def describe_tree(tree: VllmTree, version: Optional[Version]) -> str:
    shown = version if version is not None else "unknown version"
    return f"vLLM {shown} at {tree.root}"


def tree_data(tree: VllmTree, version: Optional[Version]) -> Dict[str, Any]:
    """The keys every tree command's JSON starts with."""
    return {"vllm_root": str(tree.root), "version": str(version) if version else None}


def note_recovery(report: Report, recovery: Any) -> None:
    """Say (on stderr) what recovery did before this run: a finished run, removed debris."""
    report.data["recovery"] = recovery.to_dict()
    if recovery.finished:
        report.warn(f"finished an interrupted {recovery.finished} first")
    for rel in recovery.removed:
        report.detail(f"removed leftover {rel}", err=True)


def note_debris(report: Report, tree: VllmTree, debris: Sequence[str]) -> None:
    """Read-only commands leave an interrupted run's leftovers alone and say so, in one
    line on stderr (each path with -v); ``apply`` or ``revert`` removes them."""
    report.data["debris"] = list(debris)
    if not debris:
        return
    report.warn(
        f"leftover files from an interrupted run at {tree.root} ({len(debris)}, e.g. "
        f"{debris[0]}); run `vllm-codemod apply` or `vllm-codemod revert` to recover"
    )
    for rel in debris:
        report.detail(f"  leftover {rel}", err=True)


def note_check_recovery(report: Report, tree: VllmTree, removed: Sequence[str]) -> None:
    """``check`` removes those leftovers itself (docs/engine.md, guarantee 3): say so."""
    report.data["recovery"] = {"finished": None, "removed": list(removed)}
    if not removed:
        return
    report.warn(
        f"removed {len(removed)} leftover file(s) of an interrupted run at {tree.root} "
        f"(e.g. {removed[0]}); the tree is as that run found it"
    )
    for rel in removed:
        report.detail(f"  removed leftover {rel}", err=True)


def interrupted_report(command: str, tree: VllmTree, op: str, **data: Any) -> Report:
    """What a read-only command says about a tree with an unfinished run (a journal):
    the state and the way on, on the exit status of a pending change; only ``apply``
    and ``revert`` finish it.  ``data`` fills the command's own JSON keys."""
    from ..engine import interrupted_text
    from ..versions import read_version

    try:
        version = read_version(tree)[0]
    except CodemodError:
        version = None
    report = Report(command)
    report.exit_code = 1
    report.data.update(tree_data(tree, version))
    report.data.update(data)
    report.data["interrupted"] = {"op": op}
    report.say(describe_tree(tree, version))
    report.say(f"  {interrupted_text(op)}")
    return report


def allow_owner_change_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--allow-owner-change`` (apply, revert)."""
    return click.option(
        "--allow-owner-change",
        is_flag=True,
        help="Replace files owned by another user even where the OS will not let the "
        "replacement keep that owner (it becomes yours). Without it such a run is refused "
        "before anything is written.",
    )(func)


def read_only_notes(plan: Any) -> List[Tuple[str, str]]:
    """(path, line) for each read-only file (no write bit) the plan replaces."""
    import os

    notes = []
    for rel in plan.read_only:
        mode = os.stat(plan.tree.path(rel)).st_mode & 0o7777
        notes.append(
            (
                rel,
                f"note: {rel} is read-only (mode {mode:04o}); it is replaced all the same "
                "and keeps its mode",
            )
        )
    return notes

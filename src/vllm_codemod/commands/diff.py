"""``vllm-codemod diff``: the exact bytes apply would write, as a unified diff."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

import click

from ..report import Report
from ._common import (
    interrupted_report,
    locked,
    note_debris,
    open_tree,
    plan_options,
    read_only_notes,
    selection_options,
    tree_data,
    tree_options,
)
from ._output import reporting
from ._tuning_option import tuning_options, with_tuning


def _text(data: Optional[bytes]) -> Optional[str]:
    return None if data is None else data.decode("utf-8")


def unified_diff(changes: Iterable[Any]) -> str:
    """git-style diff; paths are relative to the directory that holds vllm/.

    ``git apply`` and ``patch -p1`` accept it, so a reviewed diff can be applied by hand.
    """
    from ..udiff import tree_diff

    return tree_diff((c.path, c.old, c.new) for c in changes)


def diff_files(changes: Iterable[Any]) -> List[Dict[str, Any]]:
    """The diff as data (``--json``): per file its action and hunks."""
    from ..engine import change_action
    from ..udiff import file_hunks

    return [
        {
            "path": change.path,
            "action": change_action(change),
            "transforms": list(change.transforms),
            "hunks": file_hunks(_text(change.old), _text(change.new)),
        }
        for change in changes
    ]


def colorize(text: str) -> str:
    """git's colours: headers bold, hunk ranges cyan, removals red, additions green.

    Always styled; the renderer strips the codes where colour is off (not a
    terminal, ``NO_COLOR``, ``--no-color``).
    """
    out: List[str] = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        if line.startswith(("diff --git ", "--- ", "+++ ", "new file mode", "deleted file mode")):
            out.append(click.style(body, bold=True) + ending)
        elif line.startswith("@@"):
            out.append(click.style(body, fg="cyan") + ending)
        elif line.startswith("+"):
            out.append(click.style(body, fg="green") + ending)
        elif line.startswith("-"):
            out.append(click.style(body, fg="red") + ending)
        else:
            out.append(line)
    return "".join(out)


@click.command(
    epilog="""\b
Exit status: 0 nothing would change, 1 changes pending (or an interrupted run that
`apply` or `revert` will finish), 2 error or conflict.
Colour on a terminal unless NO_COLOR is set or --no-color is given.
Examples:
  vllm-codemod diff --site-packages vendor_fixtures/bi-v100/corex-0.8.3
  vllm-codemod diff --site-packages vendor_fixtures/bi-v100/corex-0.8.3 --v2-threshold 4096 | less
"""
)
@tree_options
@selection_options
@tuning_options
@reporting("diff")
def diff(
    site_packages: Any,
    vllm_root: Any,
    python: Any,
    only: Any,
    skip: Any,
    force: bool,
    tuning: Any,
    drop_tuning: bool,
    **transform_options: Any,
) -> Report:
    """Show what apply would change as a unified diff; write nothing."""
    from .. import engine

    tree = open_tree(site_packages, vllm_root, python)
    with locked(tree):
        op = engine.interrupted(tree)
        if op is not None:
            return interrupted_report("diff", tree, op, pending=True, files=[])
        options = plan_options(only, skip, force, transform_options, command="diff")
        plan = engine.plan(tree, with_tuning(options, tuning, drop_tuning))
        debris = engine.debris(tree)
    if plan.conflicts:
        raise engine.conflict_error(plan)
    report = Report("diff")
    note_debris(report, tree, debris)
    report.exit_code = 1 if plan.pending else 0
    report.data.update(tree_data(tree, plan.version))
    report.data["pending"] = plan.pending
    report.data["files"] = diff_files(plan.changes)
    text = unified_diff(plan.changes)
    report.body = colorize(text) if text else None
    for _, note in read_only_notes(plan):
        report.warn(note.replace("it is replaced", "apply replaces it"))
    for change in report.data["files"]:
        report.detail(
            f"{change['action']:<6} {change['path']}: {len(change['hunks'])} hunk(s) "
            f"({', '.join(change['transforms']) or 'bookkeeping'})",
            err=True,
        )
    return report

"""``vllm-codemod diff``: the exact bytes apply would write, as a unified diff."""

from __future__ import annotations

import difflib
import sys
from typing import Any, Iterable, List

import click

from ._common import (
    conflict_error,
    locked,
    open_session,
    plan_changes,
    select_transforms,
    selection_options,
    tree_options,
    user_errors,
)


def _lines(data: Any) -> List[str]:
    return [] if data is None else data.decode("utf-8").splitlines(keepends=True)


def unified_diff(changes: Iterable[Any]) -> str:
    """git-style diff; paths are relative to the directory that holds vllm/.

    ``git apply`` and ``patch -p1`` accept it, so a reviewed diff can be applied by hand.
    """
    chunks: List[str] = []
    for change in changes:
        old_name = "/dev/null" if change.old is None else f"a/{change.path}"
        new_name = "/dev/null" if change.new is None else f"b/{change.path}"
        chunks.append(f"diff --git a/{change.path} b/{change.path}\n")
        if change.old is None:
            chunks.append("new file mode 100644\n")
        elif change.new is None:
            chunks.append("deleted file mode 100644\n")
        for line in difflib.unified_diff(
            _lines(change.old), _lines(change.new), old_name, new_name
        ):
            chunks.append(
                line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
            )
    return "".join(chunks)


@click.command(
    epilog="""\b
Exit status: 0 nothing would change, 1 changes pending, 2 error or conflict.
Examples:
  vllm-codemod diff --site-packages vendor_fixtures/bi-v100/corex-0.8.3
  vllm-codemod diff --site-packages vendor_fixtures/bi-v100/corex-0.8.3 --v2-threshold 4096 | less
"""
)
@tree_options
@selection_options
@user_errors
def diff(
    site_packages: Any, vllm_root: Any, only: Any, skip: Any, force: bool, **transform_options: Any
) -> None:
    """Show what apply would change as a unified diff; write nothing."""
    session = open_session(site_packages, vllm_root, force)
    selection = select_transforms(only, skip, transform_options)
    with locked(session.tree):
        change_set = plan_changes(session, selection, finish_interrupted=False)
    if change_set.conflicts:
        raise conflict_error(change_set)
    text = unified_diff(change_set.changes)
    if text:
        click.echo(text, nl=False)
    sys.exit(1 if change_set.pending else 0)

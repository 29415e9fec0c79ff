"""``vllm-codemod diff``: the exact bytes apply would write, as a unified diff."""

from __future__ import annotations

import sys
from typing import Any, Iterable

import click

from ._common import (
    locked,
    open_tree,
    plan_options,
    selection_options,
    tree_options,
    user_errors,
)
from ._tuning_option import tuning_options, with_tuning


def unified_diff(changes: Iterable[Any]) -> str:
    """git-style diff; paths are relative to the directory that holds vllm/.

    ``git apply`` and ``patch -p1`` accept it, so a reviewed diff can be applied by hand.
    """
    from ..udiff import tree_diff

    return tree_diff((c.path, c.old, c.new) for c in changes)


@click.command(
    epilog="""\b
Exit status: 0 nothing would change, 1 changes pending, 2 error or conflict.
Examples:
  vllm-codemod diff --site-packages vendor_fixtures/bi-v100/corex-0.8.3
  vllm-codemod diff --only v2-dispatch --v2-threshold 4096 | less
"""
)
@tree_options
@selection_options
@tuning_options
@user_errors
def diff(
    site_packages: Any,
    vllm_root: Any,
    only: Any,
    skip: Any,
    force: bool,
    tuning: Any,
    drop_tuning: bool,
    **transform_options: Any,
) -> None:
    """Show what apply would change as a unified diff; write nothing."""
    from .. import engine

    tree = open_tree(site_packages, vllm_root)
    with locked(tree):
        options = plan_options(only, skip, force, transform_options)
        plan = engine.plan(tree, with_tuning(options, tuning, drop_tuning))
    if plan.conflicts:
        raise engine.conflict_error(plan)
    text = unified_diff(plan.changes)
    if text:
        click.echo(text, nl=False)
    sys.exit(1 if plan.pending else 0)

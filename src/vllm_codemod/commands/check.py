"""``vllm-codemod check``: where the tree stands, one row per transform."""

from __future__ import annotations

import sys
from typing import Any

import click

from ._common import (
    describe_tree,
    emit_json,
    json_option,
    locked,
    open_session,
    plan_changes,
    result_rows,
    select_transforms,
    selection_options,
    tree_options,
    user_errors,
)

_COLOURS = {"applied": "green", "pending": "yellow", "not-applicable": "cyan", "conflict": "red"}


@click.command(
    epilog="""\b
Exit status: 0 all applied or not applicable, 1 something pending, 2 error or conflict.
Examples:
  vllm-codemod check --site-packages /usr/local/lib/python3.10/site-packages
  vllm-codemod check --json | jq '.transforms[] | select(.status=="pending")'
"""
)
@tree_options
@selection_options
@json_option
@user_errors
def check(
    site_packages: Any,
    vllm_root: Any,
    only: Any,
    skip: Any,
    force: bool,
    as_json: bool,
    **transform_options: Any,
) -> None:
    """Report each transform as applied, pending, not-applicable (and why) or conflict."""
    session = open_session(site_packages, vllm_root, force)
    selection = select_transforms(only, skip, transform_options)
    with locked(session.tree):
        change_set = plan_changes(session, selection, finish_interrupted=False)
    rows = result_rows(change_set)
    statuses = {row["status"] for row in rows}
    code = 2 if "conflict" in statuses else 1 if change_set.pending else 0
    if as_json:
        emit_json(
            {
                "vllm_root": str(session.tree.root),
                "version": str(session.version) if session.version else None,
                "transforms": rows,
                "exit_code": code,
            }
        )
        sys.exit(code)
    click.echo(describe_tree(session))
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        status = click.style(f"{row['status']:<14}", fg=_COLOURS[row["status"]])
        click.echo(f"  {row['name']:<{width}}  {status}  {row['target']}: {row['reason']}")
        for key, value in row["details"].items():
            click.echo(f"  {'':<{width}}  {'':<14}  {key}: {value}")
    sys.exit(code)

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
    open_tree,
    plan_options,
    selection_options,
    tree_options,
    user_errors,
)

_COLOURS = {"applied": "green", "pending": "yellow", "not-applicable": "cyan", "conflict": "red"}


@click.command(
    epilog="""\b
Exit status: 0 all applied or not applicable, 1 something pending, 2 error or conflict.
Without options, compares against the options the last apply used.
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
    from .. import engine

    tree = open_tree(site_packages, vllm_root)
    with locked(tree):
        engine.recover(tree, finish=False, best_effort=True)
        status = engine.status(tree, plan_options(only, skip, force, transform_options))
    plan = status.plan
    rows = [t.to_dict() for t in plan.transforms]
    statuses = {row["status"] for row in rows}
    code = 2 if "conflict" in statuses else 1 if plan.pending else 0
    if as_json:
        payload = {
            "vllm_root": str(tree.root),
            "version": str(plan.version) if plan.version else None,
            "transforms": rows,
            "options": plan.options,
            "recorded_options": status.recorded_options,
            "record": status.record,
            "exit_code": code,
        }
        emit_json(payload)
        sys.exit(code)
    click.echo(describe_tree(tree, plan.version))
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        status_text = click.style(f"{row['status']:<14}", fg=_COLOURS[row["status"]])
        click.echo(f"  {row['name']:<{width}}  {status_text}  {row['target']}: {row['reason']}")
        for key, value in row["details"].items():
            click.echo(f"  {'':<{width}}  {'':<14}  {key}: {value}")
    if status.record is None and status.patched:
        click.echo(
            "  note: no vllm dist-info RECORD beside the tree: `pip uninstall vllm` will not "
            "remove the files vllm-codemod added (run `vllm-codemod revert` first)"
        )
    sys.exit(code)

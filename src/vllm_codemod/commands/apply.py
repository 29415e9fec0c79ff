"""``vllm-codemod apply``: plan everything, refuse on any conflict, then write atomically."""

from __future__ import annotations

from typing import Any

import click

from ._common import (
    describe_tree,
    emit_json,
    json_option,
    locked,
    open_tree,
    plan_options,
    report_recovery,
    selection_options,
    tree_options,
    user_errors,
)
from ._tuning_option import tuning_options, with_tuning


@click.command(
    epilog="""\b
Exit status: 0 patched or already patched, 2 error or conflict (nothing written).
Options used are recorded in the tree: a later plain `apply` or `check` uses them.
Examples:
  vllm-codemod apply --site-packages /usr/local/lib/python3.10/site-packages
  vllm-codemod apply --only prefix-prefill-warps --num-warps 4
  vllm-codemod apply --tuning vllm-codemod-tuning-NVIDIA-H200.json
  RUN vllm-codemod apply && vllm-codemod check     # as a Dockerfile step
"""
)
@tree_options
@selection_options
@tuning_options
@json_option
@user_errors
def apply(
    site_packages: Any,
    vllm_root: Any,
    only: Any,
    skip: Any,
    force: bool,
    as_json: bool,
    tuning: Any,
    drop_tuning: bool,
    **transform_options: Any,
) -> None:
    """Patch the vLLM tree: every pending transform, all or nothing.

    Originals are saved under vllm/.vllm-codemod so `revert` restores them byte for
    byte; running apply again on a patched tree changes nothing.
    """
    from .. import engine

    tree = open_tree(site_packages, vllm_root)
    options = with_tuning(plan_options(only, skip, force, transform_options), tuning, drop_tuning)
    with locked(tree):
        report_recovery(engine.recover(tree))
        plan = engine.plan(tree, options)
        result = engine.apply(plan)
    if as_json:
        emit_json(result.to_dict())
        return
    for change in result.option_changes:
        click.echo(f"option changed: {change}")
    if not result.changed:
        click.echo(f"nothing to do: {describe_tree(tree, plan.version)} is already patched")
        return
    click.echo(describe_tree(tree, plan.version))
    for row in result.transforms:
        click.echo(f"  {row.name:<22} {row.outcome}")
    counts = {"patch": 0, "add": 0, "remove": 0}
    for change in result.changed:
        counts[change["action"]] += 1
    click.echo(
        f"patched {counts['patch']} file(s), added {counts['add']}, removed {counts['remove']}; "
        "originals saved in vllm/.vllm-codemod (undo with `vllm-codemod revert`)"
    )

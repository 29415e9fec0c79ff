"""``vllm-codemod apply``: plan everything, refuse on any conflict, then write atomically."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict

import click

from ..report import Report
from ._common import (
    allow_owner_change_option,
    describe_tree,
    locked,
    note_recovery,
    open_tree,
    plan_options,
    read_only_notes,
    selection_options,
    tree_data,
    tree_options,
)
from ._output import reporting
from ._tuning_option import tuning_options, with_tuning

_OUTCOME_COLOURS = {"applied": "green", "already applied": "cyan", "skipped": "yellow"}


def _styled(outcome: str) -> str:
    head = outcome.split(":", 1)[0]
    return click.style(outcome, fg=_OUTCOME_COLOURS.get(head, "red"))


@click.command(
    epilog="""\b
Exit status: 0 patched or already patched, 2 error or conflict (nothing written),
130 interrupted (the next run finishes or undoes it).
Options used are recorded in the tree: a later plain `apply` or `check` uses them.
Examples:
  vllm-codemod apply --site-packages /usr/local/lib/python3.10/site-packages
  vllm-codemod apply --python /opt/venv/bin/python --num-warps 8
  vllm-codemod apply --only prefix-prefill-warps --num-warps 4
  vllm-codemod apply --tuning vllm-codemod-tuning-NVIDIA-H200.json
  RUN vllm-codemod apply && vllm-codemod check     # as a Dockerfile step
"""
)
@tree_options
@selection_options
@tuning_options
@click.option(
    "--discard-local-changes",
    is_flag=True,
    help="Overwrite hand edits of files the tool patched (the original saved first stays "
    "the one `revert` restores).",
)
@allow_owner_change_option
@reporting("apply")
def apply(
    site_packages: Any,
    vllm_root: Any,
    python: Any,
    only: Any,
    skip: Any,
    force: bool,
    tuning: Any,
    drop_tuning: bool,
    discard_local_changes: bool,
    allow_owner_change: bool,
    **transform_options: Any,
) -> Report:
    """Patch the vLLM tree: every pending transform, all or nothing.

    Originals are saved under vllm/.vllm-codemod so `revert` restores them byte for
    byte; running apply again on a patched tree changes nothing.
    """
    from .. import engine

    tree = open_tree(site_packages, vllm_root, python)
    options = with_tuning(plan_options(only, skip, force, transform_options), tuning, drop_tuning)
    options = replace(
        options,
        discard_local_changes=discard_local_changes,
        allow_owner_change=allow_owner_change,
    )
    report = Report("apply")
    with locked(tree):
        note_recovery(report, engine.recover(tree))
        plan = engine.plan(tree, options)
        read_only = read_only_notes(plan)
        result = engine.apply(plan)
    report.data.update(tree_data(tree, plan.version))
    report.data.update(result.to_dict())
    report.data["wrote"] = result.wrote

    counts: Dict[str, int] = {"patch": 0, "add": 0, "remove": 0}
    for change in result.changed:
        counts[change["action"]] += 1
    if not result.changed:
        report.say(f"nothing to do: {describe_tree(tree, plan.version)} is already patched")
    else:
        report.say(describe_tree(tree, plan.version))
    width = max([len(row.name) for row in result.transforms] + [0])
    for row in result.transforms:
        line = f"  {row.name:<{width}}  {_styled(row.outcome)}"
        if result.changed:
            report.say(line)
        else:
            report.detail(line)
    report.data["read_only"] = [rel for rel, _ in read_only]
    for _, note in read_only:
        report.say(note)
    for change in result.option_changes:
        report.say(f"option changed: {change}")
    if result.changed:
        for change in result.changed:
            report.detail(f"  {change['action']:<6} {change['path']}")
        report.say(
            f"patched {counts['patch']} file(s), added {counts['add']}, removed "
            f"{counts['remove']}; originals saved in vllm/.vllm-codemod (undo with "
            "`vllm-codemod revert`)"
        )
    if result.record is None and result.changed:
        report.detail(
            "no vllm dist-info RECORD beside the tree: `pip uninstall vllm` will not remove "
            "the files vllm-codemod added (run `vllm-codemod revert` first)"
        )
    return report

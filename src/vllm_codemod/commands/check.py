"""``vllm-codemod check``: where the tree stands, one row per transform."""

from __future__ import annotations

from typing import Any

import click

from ..report import Report
from ._common import (
    describe_tree,
    forced_version_note,
    interrupted_report,
    locked,
    note_check_recovery,
    note_debris,
    open_tree,
    plan_options,
    selection_options,
    tree_data,
    tree_options,
)
from ._output import reporting

STATUS_COLOURS = {
    "applied": "green",
    "pending": "yellow",
    "not-applicable": "cyan",
    "conflict": "red",
}


def transform_rows(report: Report, rows: Any, detail_only: bool = False) -> None:
    """One aligned, coloured row per transform, then its details (e.g. BLOCK sizes)."""
    add = report.detail if detail_only else report.say
    width = max([len(row["name"]) for row in rows] + [0])
    for row in rows:
        status = click.style(f"{row['status']:<14}", fg=STATUS_COLOURS.get(row["status"]))
        add(f"  {row['name']:<{width}}  {status}  {row['target']}: {row['reason']}")
        for key, value in row["details"].items():
            add(f"  {'':<{width}}  {'':<14}  {key}: {value}")


@click.command(
    epilog="""\b
Exit status: 0 all applied or not applicable, 1 something pending or a file differs
from what the manifest says vllm-codemod wrote, or an interrupted run that `apply` or
`revert` will finish, 2 error or conflict.
Without options, compares against the options the last apply used; -v adds them, when
and by which version the tree was patched, and whether pip's RECORD knows our files
(`vllm-codemod status` shows all that plus whether the patched code is reached).
Examples:
  vllm-codemod check --site-packages /usr/local/lib/python3.10/site-packages
  vllm-codemod check --json | jq '.transforms[] | select(.status=="pending")'
"""
)
@tree_options
@selection_options
@reporting("check")
def check(
    site_packages: Any,
    vllm_root: Any,
    python: Any,
    only: Any,
    skip: Any,
    force: bool,
    **transform_options: Any,
) -> Report:
    """Report each transform as applied, pending, not-applicable (and why) or conflict."""
    from .. import engine

    tree = open_tree(site_packages, vllm_root, python)
    with locked(tree):
        op = engine.interrupted(tree)
        if op is not None:
            return interrupted_report(
                "check",
                tree,
                op,
                transforms=[],
                pending=True,
                options={},
                recorded_options={},
                patched=True,
                record=None,
                drift=[],
            )
        # check cleans up as apply/revert do (docs/engine.md, guarantee 3), visibly;
        # debris it cannot remove (a read-only tree) is reported like diff does
        removed = engine.recover(tree, finish=False, best_effort=True).removed
        status = engine.status(
            tree, plan_options(only, skip, force, transform_options, command="check")
        )
        debris = engine.debris(tree)
    plan = status.plan
    rows = [t.to_dict() for t in plan.transforms]
    statuses = {row["status"] for row in rows}
    drift = status.drift
    report = Report("check")
    note_check_recovery(report, tree, removed)
    note_debris(report, tree, debris)
    report.exit_code = 2 if "conflict" in statuses else 1 if plan.pending or drift else 0
    report.data.update(tree_data(tree, plan.version))
    report.data.update(
        {
            "transforms": rows,
            "pending": plan.pending,
            "options": plan.options.to_json(),
            "option_changes": [c.to_dict() for c in plan.option_changes],
            "recorded_options": dict(status.recorded_options),
            "patched": status.patched,
            "patched_tool_version": status.tool_version,
            "patched_at": status.patched_at,
            "record": status.record,
            "drift": [d.to_dict() for d in drift],
        }
    )
    report.say(describe_tree(tree, plan.version))
    forced = forced_version_note(plan, force)
    if forced is not None:
        report.say(f"  {forced}")
    report.data["forced_version"] = plan.forced_version
    transform_rows(report, rows)
    conflicts = [row["name"] for row in rows if row["status"] == "conflict"]
    if conflicts:
        report.error(
            f"conflict in {', '.join(conflicts)}: a target has a shape the transform does not "
            "understand, so nothing can be applied; run check without -q for where"
        )
    for change in plan.option_changes:
        report.say(f"  option differs from the recorded one: {change}")
    for item in drift:
        report.say(f"  differs from the manifest: {item.describe()}")
    report.data["unrecorded"] = list(plan.unrecorded)
    if plan.unrecorded:
        from ..engine.planning import unrecorded_note

        report.say(f"  patched without a manifest: {unrecorded_note(plan)}")
    if status.patched:
        report.detail(
            f"  patched {status.patched_at or 'at an unknown time'} by vllm-codemod "
            f"{status.tool_version or '(unknown version)'}"
        )
        shown = ", ".join(f"{k}={v}" for k, v in sorted(status.recorded_options.items()))
        report.detail(f"  recorded options: {shown or 'none'}")
        if status.record is None:
            report.say(
                "  note: no vllm dist-info RECORD beside the tree: `pip uninstall vllm` will "
                "not remove the files vllm-codemod added (run `vllm-codemod revert` first)"
            )
        else:
            report.detail(f"  pip RECORD: {status.record}")
    return report

"""``vllm-codemod status``: everything worth knowing about one tree, on one screen.

Beyond ``check`` it answers the question a patched image raises: *does anything
actually run the patched code?*  vLLM 0.11.0 has no caller of
``PagedAttention.forward_decode`` left (its V1 backends use other kernels), so there
the patch is inert unless an out-of-tree backend calls it; saying so avoids a false
sense of a faster deployment.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import click

from ..report import Report
from ._common import (
    forced_version_note,
    interrupted_report,
    locked,
    note_debris,
    open_tree,
    plan_options,
    tree_options,
)
from ._output import reporting
from .check import transform_rows

PATCHED_ENTRY_POINTS = "PagedAttention.forward_decode or ops.paged_attention_v2"


def _scan(tree: Any) -> Tuple[List[Dict[str, Any]], Any]:
    """Static call sites of the patched code in the tree (calls, not imports), and the scan."""
    from ..liveness import scan_tree

    scan = scan_tree(tree.root)
    rows = [{"path": c.path, "line": c.line, "col": c.col, "what": c.what} for c in scan.callers]
    return rows, scan


def _key(name: str) -> str:
    """A left-column label, padded before styling so colour codes do not break alignment."""
    return click.style(f"{name:<10}", bold=True)


def _options_text(options: Dict[str, Any]) -> str:
    shown = []
    for key, value in sorted(options.items()):
        if value in (None, [], ()):
            continue
        shown.append(f"{key}={','.join(value) if isinstance(value, list) else value}")
    return ", ".join(shown) or "none"


@click.command(
    epilog="""\b
Exit status: 0 (status only reports; use `check` to gate a build), 1 an interrupted
run that `apply` or `revert` will finish, 2 error.
Examples:
  vllm-codemod status --site-packages /usr/local/lib/python3.10/site-packages
  vllm-codemod status --python /opt/venv/bin/python --json | jq .live
"""
)
@tree_options
@click.option(
    "--force",
    is_flag=True,
    help="Accepted for compatibility: status reports a tree whose vLLM version is unknown or "
    "outside the known range without it.",
)
@reporting("status")
def status(site_packages: Any, vllm_root: Any, python: Any, force: bool) -> Report:
    """Show the tree, its version, fork markers, each transform's state, the recorded
    options, when it was patched, and whether anything calls the patched code."""
    from vllm_codemod.transforms.fork_markers import find_fork_markers

    from .. import engine

    tree = open_tree(site_packages, vllm_root, python)
    with locked(tree):
        op = engine.interrupted(tree)
        if op is not None:
            return interrupted_report(
                "status",
                tree,
                op,
                site_packages=str(tree.base),
                fork_markers=[],
                transforms=[],
                patched=True,
                recorded_options={},
                record=None,
                callers=[],
                live=False,
                drift=[],
            )
        # read-only: a tree outside the known versions is reported, never refused
        state = engine.status(tree, plan_options((), (), True, {}, command="status"))
        debris = engine.debris(tree)
    plan = state.plan
    rows = [t.to_dict() for t in plan.transforms]
    markers = list(find_fork_markers(tree.root, plan.version))
    callers, scan = _scan(tree)
    drift = state.drift
    report = Report("status")
    note_debris(report, tree, debris)
    report.data.update(
        {
            "vllm_root": str(tree.root),
            "site_packages": str(tree.base),
            "version": str(plan.version) if plan.version else None,
            "version_source": plan.version_source or None,
            "version_problem": plan.version_problem,
            "forced_version": plan.forced_version,
            "fork_markers": markers,
            "transforms": rows,
            "pending": plan.pending,
            "patched": state.patched,
            "patched_tool_version": state.tool_version,
            "patched_at": state.patched_at,
            "recorded_options": dict(state.recorded_options),
            "record": state.record,
            "drift": [d.to_dict() for d in drift],
            "unrecorded": list(plan.unrecorded),
            "callers": callers,
            "live": bool(callers),
            "scan": {
                "files": scan.files,
                "parsed": scan.parsed,
                "unparseable": list(scan.unparseable),
            },
        }
    )
    report.say(f"{_key('tree')} {tree.root}")
    version = plan.version or "unknown"
    source = f" (from {plan.version_source})" if plan.version_source else ""
    report.say(f"{_key('version')} {version}{source}")
    forced = forced_version_note(plan, force)
    if forced is not None:
        report.say(f"{'':<10} {forced}")
    if markers:
        report.say(f"{_key('fork')} {markers[0]}")
        for marker in markers[1:]:
            report.say(f"{'':<10} {marker}")
    else:
        report.say(f"{_key('fork')} no fork markers (looks like upstream vLLM)")
    if state.patched:
        report.say(
            f"{_key('patched')} {state.patched_at or 'at an unknown time'} by "
            f"vllm-codemod {state.tool_version or '(unknown version)'}"
        )
        report.say(f"{_key('options')} {_options_text(state.recorded_options)}")
    elif plan.unrecorded:
        from ..engine.planning import unrecorded_note

        report.say(f"{_key('patched')} without a manifest: {unrecorded_note(plan)}")
    else:
        report.say(f"{_key('patched')} no (nothing recorded by vllm-codemod)")
    if state.record is not None:
        report.say(f"{_key('RECORD')} {state.record}")
    else:
        report.say(
            f"{_key('RECORD')} none: `pip uninstall vllm` cannot know the "
            "files vllm-codemod adds (run `vllm-codemod revert` before uninstalling)"
        )
    for item in drift:
        report.say(f"{_key('drift')} {item.describe()}")
    report.say(click.style("transforms", bold=True))
    transform_rows(report, rows)
    if callers:
        report.say(
            f"{_key('live')} yes: {len(callers)} call site(s) of {PATCHED_ENTRY_POINTS} in the tree"
        )
        for caller in callers:
            report.say(
                f"{'':<10} {caller['path']}:{caller['line']}:{caller['col']}  {caller['what']}"
            )
    else:
        report.say(
            f"{_key('live')} no: nothing in this tree calls "
            f"{PATCHED_ENTRY_POINTS}; the patch is inert in this tree unless an out-of-tree "
            "backend calls it"
        )
    report.detail(
        f"{'':<10} scanned {scan.files} .py file(s), parsed {scan.parsed} that mention a "
        "patched name"
    )
    for rel in scan.unparseable:
        report.detail(f"{'':<10} could not parse {rel}: its calls, if any, are not counted")
    return report

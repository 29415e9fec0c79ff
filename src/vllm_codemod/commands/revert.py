"""``vllm-codemod revert``: put back the exact original bytes."""

from __future__ import annotations

from typing import Any

import click

from ..report import Report
from ._common import (
    allow_owner_change_option,
    locked,
    note_recovery,
    open_tree,
    tree_options,
)
from ._output import reporting


@click.command(
    epilog="""\b
Exit status: 0 reverted or nothing to revert, 2 error or refusal (nothing written),
130 interrupted (the next run finishes it).
Example:
  vllm-codemod revert --site-packages /usr/local/lib/python3.10/site-packages
"""
)
@tree_options
@click.option(
    "--discard-local-changes",
    "--force",
    "force",
    is_flag=True,
    help="Discard local changes: restore (or remove) files changed since the tool wrote them.",
)
@allow_owner_change_option
@reporting("revert")
def revert(
    site_packages: Any, vllm_root: Any, python: Any, force: bool, allow_owner_change: bool
) -> Report:
    """Restore every file the tool changed and remove every file it added."""
    from .. import engine

    tree = open_tree(site_packages, vllm_root, python)
    report = Report("revert")
    with locked(tree):
        note_recovery(report, engine.recover(tree))
        result = engine.revert(
            tree, discard_local_changes=force, allow_owner_change=allow_owner_change
        )
    report.data.update(result.to_dict())
    report.data["wrote"] = result.wrote
    if result.restored:
        report.say(f"reverted {len(result.restored)} file(s) under {tree.root}")
        for rel in result.restored:
            report.detail(f"  {rel}")
    else:
        report.say(f"nothing to revert under {tree.root}")
    for rel in result.kept_dirs:
        report.detail(f"  kept {rel}/: vllm-codemod created it, but it holds files of others")
    return report

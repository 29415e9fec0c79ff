"""``vllm-codemod revert``: put back the exact original bytes."""

from __future__ import annotations

from typing import Any

import click

from ._common import (
    emit_json,
    json_option,
    locked,
    open_tree,
    report_recovery,
    tree_options,
    user_errors,
)


@click.command(
    epilog="""\b
Exit status: 0 reverted or nothing to revert, 2 error.
Example:
  vllm-codemod revert --site-packages /usr/local/lib/python3.10/site-packages
"""
)
@tree_options
@click.option(
    "--force",
    is_flag=True,
    help="Discard local changes: restore (or remove) files changed since the tool wrote them.",
)
@json_option
@user_errors
def revert(site_packages: Any, vllm_root: Any, force: bool, as_json: bool) -> None:
    """Restore every file the tool changed and remove every file it added."""
    from .. import engine

    tree = open_tree(site_packages, vllm_root)
    with locked(tree):
        report_recovery(engine.recover(tree))
        result = engine.revert(tree, discard_local_changes=force)
    if as_json:
        emit_json(result.to_dict())
    elif result.restored:
        click.echo(f"reverted {len(result.restored)} file(s) under {tree.root}")
        for rel in result.restored:
            click.echo(f"  {rel}")
    else:
        click.echo(f"nothing to revert under {tree.root}")

"""``vllm-codemod revert``: put back the exact original bytes."""

from __future__ import annotations

from typing import Any

import click

from ._common import emit_json, json_option, locked, open_session, tree_options, user_errors


@click.command(
    epilog="""\b
Exit status: 0 reverted or nothing to revert, 2 error.
Example:
  vllm-codemod revert --site-packages /usr/local/lib/python3.10/site-packages
"""
)
@tree_options
@click.option("--force", is_flag=True, help="Restore even files changed since they were patched.")
@json_option
@user_errors
def revert(site_packages: Any, vllm_root: Any, force: bool, as_json: bool) -> None:
    """Restore every file the tool changed and remove every file it added."""
    from ..transaction import recover, revert_tree

    session = open_session(site_packages, vllm_root, force=True, gate=False)
    with locked(session.tree):
        recover(session.tree)
        touched = revert_tree(session.tree, force)
    if as_json:
        emit_json({"vllm_root": str(session.tree.root), "restored": touched})
    elif touched:
        click.echo(f"reverted {len(touched)} file(s) under {session.tree.root}")
        for rel in touched:
            click.echo(f"  {rel}")
    else:
        click.echo(f"nothing to revert under {session.tree.root}")

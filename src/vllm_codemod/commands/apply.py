"""``vllm-codemod apply``: plan everything, refuse on any conflict, then write atomically."""

from __future__ import annotations

from typing import Any

import click

from ._common import (
    conflict_error,
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


@click.command(
    epilog="""\b
Exit status: 0 patched or already patched, 2 error or conflict (nothing written).
Examples:
  vllm-codemod apply --site-packages /usr/local/lib/python3.10/site-packages
  vllm-codemod apply --only prefix-prefill-warps --num-warps 4
  RUN vllm-codemod apply && vllm-codemod check     # as a Dockerfile step
"""
)
@tree_options
@selection_options
@json_option
@user_errors
def apply(
    site_packages: Any,
    vllm_root: Any,
    only: Any,
    skip: Any,
    force: bool,
    as_json: bool,
    **transform_options: Any,
) -> None:
    """Patch the vLLM tree: every pending transform, all or nothing.

    Originals are saved under vllm/.vllm-codemod so `revert` restores them byte for
    byte; running apply again on a patched tree changes nothing.
    """
    from ..transaction import apply_change_set

    session = open_session(site_packages, vllm_root, force)
    selection = select_transforms(only, skip, transform_options)
    with locked(session.tree):
        change_set = plan_changes(session, selection, finish_interrupted=True)
        if change_set.conflicts:
            raise conflict_error(change_set)
        if change_set.pending:
            apply_change_set(change_set)
    changed = [
        {
            "path": c.path,
            "action": "add" if c.old is None else "remove" if c.new is None else "patch",
        }
        for c in change_set.changes
    ]
    if as_json:
        emit_json(
            {
                "vllm_root": str(session.tree.root),
                "version": str(session.version) if session.version else None,
                "changed": changed,
                "transforms": result_rows(change_set),
            }
        )
        return
    if not changed:
        click.echo(f"nothing to do: {describe_tree(session)} is already patched")
        return
    click.echo(describe_tree(session))
    for row in result_rows(change_set):
        click.echo(f"  {row['name']:<22} {row['status']:<14} {row['reason']}")
    patched = sum(1 for c in changed if c["action"] == "patch")
    added = sum(1 for c in changed if c["action"] == "add")
    removed = sum(1 for c in changed if c["action"] == "remove")
    click.echo(
        f"patched {patched} file(s), added {added}, removed {removed}; "
        "originals saved in vllm/.vllm-codemod (undo with `vllm-codemod revert`)"
    )

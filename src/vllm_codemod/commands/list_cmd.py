"""``vllm-codemod list``: what each transform does and which releases it knows."""

from __future__ import annotations

import click
from packaging.specifiers import SpecifierSet

from ._common import _all_transforms, emit_json, json_option


def _describe(specifiers: SpecifierSet) -> str:
    """Lower bounds first (``>=0.4.3, <=0.11.0``): how people read a range."""
    ordered = sorted(specifiers, key=lambda s: (s.operator not in (">=", ">"), str(s)))
    return ", ".join(str(s) for s in ordered)


@click.command(
    name="list",
    epilog="""\b
Examples:
  vllm-codemod list
  vllm-codemod list --json
""",
)
@json_option
def list_cmd(as_json: bool) -> None:
    """List the transforms, what each does, and which vLLM versions it knows."""
    rows = [
        {
            "name": t.name,
            "target": f"vllm/{t.target}",
            "description": t.description,
            "known_versions": _describe(t.known_versions),
            "options": [{"flag": o.flag, "default": o.default, "help": o.help} for o in t.options],
        }
        for t in _all_transforms()
    ]
    if as_json:
        emit_json({"transforms": rows})
        return
    for row in rows:
        click.echo(f"{row['name']}  ({row['target']}; vLLM {row['known_versions']})")
        click.echo(f"    {row['description']}")
        for opt in row["options"]:
            click.echo(f"    {opt['flag']} (default {opt['default']}): {opt['help']}")

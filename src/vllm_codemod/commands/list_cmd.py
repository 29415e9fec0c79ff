"""``vllm-codemod list``: what each transform does and which releases it knows."""

from __future__ import annotations

import click
from packaging.specifiers import SpecifierSet

from ..report import Report
from ._common import _all_transforms
from ._output import reporting


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
@reporting("list")
def list_cmd() -> Report:
    """List the transforms, what each does, and which vLLM versions it knows."""
    rows = [
        {
            "name": t.name,
            "target": f"vllm/{t.target}",
            "description": t.description,
            "known_versions": _describe(t.known_versions),
            "requires": list(t.requires),
            "options": [{"flag": o.flag, "default": o.default, "help": o.help} for o in t.options],
        }
        for t in _all_transforms()
    ]
    report = Report("list", data={"transforms": rows})
    for row in rows:
        report.say(f"{row['name']}  ({row['target']}; vLLM {row['known_versions']})")
        report.say(f"    {row['description']}")
        for opt in row["options"]:
            report.say(f"    {opt['flag']} (default {opt['default']}): {opt['help']}")
        if row["requires"]:
            report.detail(f"    needs: {', '.join(row['requires'])}")
    return report

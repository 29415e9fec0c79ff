"""``vllm-codemod tune-config FILE``: retune a deployment's run config in place.

The patched kernels make long-context decode cheap, which moves the bottleneck to the
scheduler budget; the run config that launches vLLM is where that budget lives, so the
same build step that patches the tree can retune it.  Editing happens on the original
text (see :mod:`vllm_codemod.tune_config`), so a reviewer's diff shows only the values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import click

from ..report import Report
from ..tune_config import (
    TUNABLE,
    ConfigEdit,
    canonical_key,
    parse_overrides,
    plan_edit,
    read_config,
    remove_debris,
    write_config,
)
from ._output import reporting


def _payload(path: Path, result: ConfigEdit, dry_run: bool) -> Dict[str, Any]:
    return {
        "file": str(path),
        "dry_run": dry_run,
        "changed": result.changed,
        "edits": [
            {
                "key": e.key,
                "spelling": e.spelling,
                "kind": e.kind,
                "line": e.line,
                "column": e.column,
                "old": e.old,
                "new": e.new,
            }
            for e in result.edits
        ],
        "unchanged": [
            {"key": o.key, "spelling": o.spelling, "kind": o.kind, "line": o.line, "value": o.raw}
            for o in result.unchanged
        ],
        "skipped": [
            {"key": o.key, "line": o.line, "value": o.raw, "reason": why}
            for o, why in result.skipped
        ],
        "missing": result.missing,
    }


def _describe(
    report: Report, path: Path, result: ConfigEdit, targets: Dict[str, Any], dry_run: bool
) -> None:
    verb = "would set" if dry_run else "set"
    for edit in result.edits:
        if edit.old is None:
            report.say(
                f"{path}:{edit.line}: {verb} {edit.key} {edit.new} (added as top-level key "
                f"{edit.spelling})",
                err=dry_run,
            )
        else:
            report.say(
                f"{path}:{edit.line}: {verb} {edit.key} {edit.old} -> {edit.new} "
                f"({edit.kind} {edit.spelling})",
                err=dry_run,
            )
    for occ, why in result.skipped:
        report.warn(f"{path}:{occ.line}: {occ.describe()}: {why}")
    for name in result.missing:
        report.warn(
            f"{path}: no {name} anywhere; nothing added (pass --add to add it as a top-level key)"
        )
    if dry_run:
        return
    if result.changed:
        report.say(f"updated {len(result.edits)} value(s) in {path}")
    else:
        # Only keys found with the wanted value "match"; a missing or templated key is not
        # a match, and the lines above (stderr) already said why it was left alone.
        found = {o.key for o in result.unchanged}
        matched = [f"{k}={TUNABLE[k].render(v)}" for k, v in targets.items() if k in found]
        left = [k for k in targets if k not in found]
        parts = [f"already matches ({', '.join(matched)})"] if matched else []
        if left:
            parts.append(f"{', '.join(left)} left as found (see above)")
        report.say(f"nothing to do: {path} " + "; ".join(parts))


@click.command(
    "tune-config",
    epilog="""\b
Keys (either spelling; found at any depth as mapping keys, list flags, or flags inside
command strings):
  max-num-batched-tokens   positive integer       (default 16384)
  gpu-memory-utilization   number in (0, 1]       (default 0.95)
Exit status: 0 done or nothing to do, 1 --diff found changes pending, 2 error
(nothing written).
Examples:
  vllm-codemod tune-config computility-run.yaml
  vllm-codemod tune-config run.yaml --set gpu-memory-utilization=0.9 --diff
  vllm-codemod tune-config run.yaml --set max_num_batched_tokens=32768 --add --json
""",
)
@click.argument("file", type=click.Path(path_type=Path, dir_okay=True))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Target value for a key (repeatable); KEY with dashes or underscores.",
)
@click.option(
    "--add",
    is_flag=True,
    help="Add a key that appears nowhere as a top-level key of the first YAML document.",
)
@click.option(
    "--diff",
    "dry_run",
    is_flag=True,
    help="Dry run: print a unified diff and write nothing (exit 1 if changes are pending).",
)
@reporting("tune-config")
def tune_config(file: Path, overrides: Tuple[str, ...], add: bool, dry_run: bool) -> Report:
    """Retune max-num-batched-tokens and gpu-memory-utilization in a vLLM run config.

    Every occurrence is updated in place; comments, order, quoting and indentation
    stay byte-identical.  Refuses (exit 2, nothing written) a config that disables
    chunked prefill with a max-model-len above the new max-num-batched-tokens.
    """
    targets = parse_overrides(overrides)
    named = {canonical_key(pair.split("=", 1)[0]) for pair in overrides}
    original = read_config(file)
    # Defaults only raise a value; a value named with --set is written as given.
    floors = [name for name in targets if name not in named]
    result = plan_edit(original.text, str(file), targets, add=add, floors=floors)
    report = Report("tune-config")
    report.exit_code = 1 if dry_run and result.changed else 0
    report.data.update(_payload(file, result, dry_run))
    if dry_run:
        patch = result.unified_diff(str(file))
        report.data["diff"] = patch
        report.body = patch or None
        _describe(report, file, result, targets, dry_run=True)
        return report
    remove_debris(file)
    if result.changed:
        write_config(file, original, result.new_text)
    _describe(report, file, result, targets, dry_run=False)
    return report


__all__: List[str] = ["tune_config"]

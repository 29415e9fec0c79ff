"""The tuning file on the tool's side: assemble it, validate it, write it, summarize it.

Validation is the kernel side's own parser (``vllm_codemod.kernels.tuning_table``, the
module copied into trees), so the tool never writes or installs a file the entry point
would reject.
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

from .. import __version__
from ..errors import UserError
from ..kernels import tuning_table

SCHEMA_VERSION = tuning_table.SCHEMA_VERSION


def default_output_name(device_name: str) -> str:
    """``vllm-codemod-tuning-<device>.json`` with the name made safe for a file name."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", device_name.strip()).strip("-.") or "device"
    return f"vllm-codemod-tuning-{slug}.json"


def build_document(device_entry: Dict[str, Any]) -> Dict[str, Any]:
    """A whole file holding one device's measurements."""
    return {
        "schema_version": SCHEMA_VERSION,
        "generator": f"vllm-codemod {__version__} tune",
        "devices": [device_entry],
    }


def device_header(
    name: str,
    capability: Optional[List[int]],
    versions: Dict[str, Optional[str]],
    tree: Dict[str, Any],
    deployment: Dict[str, Any],
) -> Dict[str, Any]:
    """The descriptive part of a device entry (measurements are added by the caller)."""
    return {
        "device": {"name": name, "capability": capability},
        "versions": {**versions, "tool": __version__},
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tree": tree,
        "deployment": deployment,
        "decode": [],
        "prefill": [],
        "prefill_num_warps": None,
        "prefill_configs": [],
        "skipped": [],
    }


def validate(document: Dict[str, Any], source: str) -> tuning_table.Table:
    try:
        return tuning_table.parse(document, source)
    except tuning_table.TuningFileError as exc:
        raise UserError(str(exc)) from None


def load(path: Path) -> tuning_table.Table:
    """Read a tuning file for ``apply --tuning``: a bad one is a user error (exit 2)."""
    try:
        return tuning_table.load(path)
    except tuning_table.TuningFileError as exc:
        raise UserError(str(exc)) from None


def render(document: Dict[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=False, allow_nan=False) + "\n").encode()


def write(path: Path, document: Dict[str, Any]) -> None:
    """Validate, then replace ``path`` atomically (a reader sees the old file or the new)."""
    from ..fsutil import atomic_write

    validate(document, str(path))
    data = render(document)
    if path.is_dir():
        raise UserError(f"--output {path}: is a directory; name a file")
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise UserError(
            f"--output {path}: cannot write ({exc.strerror}); pick another path"
        ) from None


def summary_rows(device_entry: Dict[str, Any]) -> List[Dict[str, str]]:
    """One row per measured point: shape, point, default -> tuned, speedup."""
    rows: List[Dict[str, str]] = []
    for entry in device_entry.get("decode", []):
        shape = f"{entry['num_heads']}/{entry['num_kv_heads']}/{entry['head_size']} " + (
            f"{entry['dtype']}" + (" alibi" if entry.get("alibi") else "")
        )
        for point in entry["points"]:
            winner, default = point["winner"], point["default"]
            rows.append(
                {
                    "shape": shape,
                    "point": f"{entry['num_seqs']} x {point['max_seq_len']} ({point['mode']})",
                    "default": _us(default.get("us")),
                    "tuned": f"{_us(winner.get('us'))} {_describe(winner)}",
                    "speedup": _speedup(default.get("us"), winner.get("us")),
                }
            )
    for entry in device_entry.get("prefill", []):
        if entry.get("winner_warps") is None:
            continue
        rows.append(
            {
                "shape": f"{entry['num_heads']}/{entry['num_kv_heads']}/{entry['head_size']} "
                f"{entry['dtype']} prefill-{entry['kernel']}",
                "point": f"{entry['num_seqs']} x ({entry['context_len']}+{entry['query_len']})",
                "default": f"{_us(entry.get('default_us'))} w{entry['default_warps']}",
                "tuned": f"{_us(entry.get('winner_us'))} w{entry['winner_warps']}",
                "speedup": _speedup(entry.get("default_us"), entry.get("winner_us")),
            }
        )
    for entry in device_entry.get("prefill_configs", []):
        if entry.get("us") is None:
            continue
        chosen = entry.get("config")
        rows.append(
            {
                "shape": f"d{entry['head_size_padded']} {entry['dtype']} prefill-configs",
                "point": f"{len(entry.get('points', []))} cases (total)",
                "default": f"{_us(entry.get('default_us'))} "
                + ",".join(str(v) for v in entry["default"]),
                "tuned": f"{_us(entry.get('us'))} " + _configs(chosen, entry.get("small")),
                "speedup": _speedup(entry.get("default_us"), entry.get("us")),
            }
        )
    return rows


def rejected(device_entry: Dict[str, Any]) -> Dict[str, int]:
    """How many candidates were wrong or failed to compile/launch (they never win)."""
    counts = {"wrong": 0, "failed": 0}
    candidates = [
        c for e in device_entry.get("decode", []) for p in e["points"] for c in p["candidates"]
    ]
    candidates += [c for e in device_entry.get("prefill", []) for c in e["candidates"]]
    candidates += [c for e in device_entry.get("prefill_configs", []) for c in e["candidates"]]
    for candidate in candidates:
        if candidate.get("status") in counts:
            counts[candidate["status"]] += 1
    return counts


def _us(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}us"


def _describe(decision: Dict[str, Any]) -> str:
    if decision["backend"] == "v1":
        return "v1"
    config = decision.get("config")
    return "v2 default" if config is None else "v2 " + ",".join(str(v) for v in config)


def _speedup(default: Any, tuned: Any) -> str:
    if not default or not tuned:
        return "-"
    return f"{default / tuned:.2f}x"


def _configs(chosen: Any, small: Any) -> str:
    """A prefill_configs entry's choice: its config, and its size tier where it has one."""

    def name(config: Any) -> str:
        return "default" if config is None else ",".join(str(v) for v in config)

    if not small:
        return name(chosen)
    return f"{name(small.get('config'))} below work {small.get('below')}, else {name(chosen)}"

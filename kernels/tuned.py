"""Tuning tables for the entry point: the tree's own (``vllm-codemod tune`` measures it
on the target device, ``apply --tuning`` ships it as ``tuning.json``), then the tables
bundled with the kernels for devices we measured ourselves (``tuning-<device>.json``,
produced by the same command; the H200's).

Read at the first call, never at import: vLLM forks its workers after importing these
modules, and the device name needs CUDA.  The first table with an entry for this device
(by name) decides; with none, the built-in launch tables stay in charge (one log line).
A table decides only the shapes, batch sizes and lengths it measured.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

import torch

from . import tuning_table
from .call import DecodeCall
from .log import log

_HERE = os.path.dirname(os.path.abspath(__file__))
TABLE_FILE = os.path.join(_HERE, "tuning.json")
#: Tables measured by the project (``tune`` on devices it could reach), after the tree's.
BUNDLED_FILES = tuple(
    os.path.join(_HERE, name)
    for name in sorted(os.listdir(_HERE))
    if name.startswith("tuning-") and name.endswith(".json")
)

_state: Dict[str, Any] = {"present": None, "tables": None, "devices": {}}
_points: Dict[tuple, Any] = {}


def _files() -> List[str]:
    return [p for p in (TABLE_FILE,) + BUNDLED_FILES if os.path.isfile(p)]


def _tables() -> List[Any]:
    if _state["tables"] is None:
        tables = []
        for path in _files():
            try:
                tables.append(tuning_table.load(path))
            except Exception as exc:  # a damaged table must not take decode down
                log.warning("vllm-codemod: ignoring %s (%s)", path, exc)
        _state["tables"] = tables
    return _state["tables"]


def _device_table(device: torch.device) -> Any:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    devices = _state["devices"]
    if idx not in devices:
        name = torch.cuda.get_device_name(idx)
        found = None
        for table in _tables():
            found = table.for_device(name)
            if found is not None:
                break
        devices[idx] = found
        if found is None:
            log.info("vllm-codemod: no tuning table names %r; built-in launch defaults", name)
    return devices[idx]


def _capturing() -> bool:
    """Whether this call is being captured into a CUDA graph (the graph winner applies)."""
    return bool(torch.cuda.is_current_stream_capturing())


def decision(c: DecodeCall) -> Optional[Any]:
    """The measured choice for this call (``tuning_table.Decision``), or None."""
    if _state["present"] is None:
        _state["present"] = bool(_files())
    if not _state["present"] or c.query.device.type != "cuda":
        return None
    try:
        table = _device_table(c.query.device)
    except Exception as exc:  # no device name to match: decode goes on without tables
        _state["present"] = False
        log.warning("vllm-codemod: tuning tables unused (%s: %s)", type(exc).__name__, exc)
        return None
    if table is None:
        return None
    num_seqs, num_heads, head_size = c.query.shape
    alibi = c.alibi_slopes is not None
    key = (table, num_seqs, num_heads, c.num_kv_heads, head_size, c.key_cache.dtype, alibi)
    points = _points.get(key)
    if points is None:  # once per shape: the search over the table's entries
        dtype = tuning_table.normalize_dtype(c.key_cache.dtype)
        points = _points[key] = table.points(*key[1:5], dtype, alibi)
    if not points:
        return None
    return tuning_table.pick(points, c.max_seq_len, eager=not _capturing())


def prefill_configs(device: torch.device) -> Dict[tuple, tuple]:
    """The prefix-prefill launch configs the first table naming this device measured:
    (padded head size, element bytes) -> (block_m, block_n, num_warps, num_stages).
    Empty without tables, off CUDA, or where no table names the device (built-in
    defaults then; ``prefill_launch`` asks once per process)."""
    table = _prefill_table(device)
    return dict(table.prefill_configs) if table is not None else {}


def prefill_small(device: torch.device) -> Dict[tuple, tuple]:
    """The size tiers of those configs, from the same table: (padded head size, element
    bytes) -> (below, config or None): launches whose ``prefill_launch.work_estimate``
    is under ``below`` run that config (None: the built-in default)."""
    table = _prefill_table(device)
    return dict(table.prefill_small) if table is not None else {}


def _prefill_table(device: torch.device) -> Any:
    """The table naming this CUDA device, or None (no tables, or off CUDA)."""
    if not _files() or device.type != "cuda":
        return None
    return _device_table(device)

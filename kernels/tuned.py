"""The tuning table a tree may carry next to the kernels (``vllm-codemod tune`` measures
it on the target device, ``apply --tuning`` ships it as ``tuning.json``).

Read at the first call, never at import: vLLM forks its workers after importing these
modules, and the device name needs CUDA.  A table with no entry for this device (by
name) leaves the built-in defaults in charge, with one log line.  Without a table,
behaviour is exactly the untuned one.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

import torch

from .call import DecodeCall
from .log import log

TABLE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tuning.json")

_state: Dict[str, Any] = {"present": None, "table": None, "devices": {}}


def _device_table(device: torch.device) -> Any:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    devices = _state["devices"]
    if idx not in devices:
        from . import tuning_table

        if _state["table"] is None:
            try:
                _state["table"] = tuning_table.load(TABLE_FILE)
            except Exception as exc:  # a damaged table must not take decode down
                log.warning("vllm-codemod: ignoring %s (%s); built-in defaults", TABLE_FILE, exc)
                _state["present"] = False
                return None
        name = torch.cuda.get_device_name(idx)
        devices[idx] = _state["table"].for_device(name)
        if devices[idx] is None:
            log.info(
                "vllm-codemod: %s has no entry for %r; built-in launch defaults", TABLE_FILE, name
            )
    return devices[idx]


def _capturing() -> bool:
    """Whether this call is being captured into a CUDA graph (the graph winner applies)."""
    return bool(torch.cuda.is_current_stream_capturing())


def decision(c: DecodeCall) -> Optional[Any]:
    """The measured choice for this call (``tuning_table.Decision``), or None."""
    if _state["present"] is None:
        _state["present"] = os.path.isfile(TABLE_FILE)
    if not _state["present"] or c.query.device.type != "cuda":
        return None
    table = _device_table(c.query.device)
    if table is None:
        return None
    num_seqs, num_heads, head_size = c.query.shape
    return table.decide(
        num_seqs,
        num_heads,
        c.num_kv_heads,
        head_size,
        c.max_seq_len,
        c.key_cache.dtype,
        alibi=c.alibi_slopes is not None,
        eager=not _capturing(),
    )

"""Read the deployment facts tuning needs from the run config ``tune-config`` edits.

The same YAML shapes ``tune-config`` understands (mapping keys in either spelling, flags
in lists, flags inside a ``vllm serve ...`` command string) and the same parser, so a file
that ``tune-config`` accepts is read the same way here.  Only reading: nothing is written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from ..errors import UserError
from ..tune_config import canonical_key, parse_documents, read_config
from ..tune_config.locate import _line_col, _model_len, _walk

_KEYS = {
    "model": "model",
    "tensor-parallel-size": "tensor_parallel",
    "tp": "tensor_parallel",
    "max-model-len": "max_model_len",
    "max-num-seqs": "max_num_seqs",
}
_FLAG_RE = re.compile(
    r"(?<![\w\-])(?:--(?P<long>model|tensor[-_]parallel[-_]size|max[-_]model[-_]len|"
    r"max[-_]num[-_]seqs)|-(?P<short>tp))(?:=|[ \t]+|[ \t]*\\\r?\n[ \t]*)"
    r"(?P<q>[\"']?)(?P<value>[^\s\"'\\;&|]+)(?P=q)"
)
_SERVE_RE = re.compile(
    r"(?<![\w\-])vllm[ \t]+serve[ \t]+(?P<q>[\"']?)(?P<value>[^\s\"'-][^\s\"']*)"
)


def _convert(field: str, raw: str, where: str) -> Any:
    text = raw.strip().strip("\"'")
    if field == "model":
        return text
    if field == "max_model_len":
        value = _model_len(text)
    else:
        value = int(text) if re.fullmatch(r"[0-9]+", text) else None
    if value is None or value <= 0:
        raise UserError(f"{where}: {raw!r} is not a positive integer; fix the run config")
    return value


def read_run_config(path: Path) -> Dict[str, Any]:
    """{"model", "tensor_parallel", "max_model_len", "max_num_seqs"}: those the file sets.

    A relative model path is taken relative to the run config's directory when it exists
    there (else as written, relative to the current directory).
    """
    return read_run_config_places(path)[0]


def read_run_config_places(path: Path) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """:func:`read_run_config`, and where each value is set (``path:line:col``), so that
    a later check of a value points at the run config, not at an option never passed."""
    text = read_config(path).text  # a regular UTF-8 file (no FIFO, no device), BOM removed
    documents = parse_documents(text, str(path))
    found: Dict[str, Tuple[Any, str]] = {}

    def record(field: str, raw: str, index: int) -> None:
        line, col = _line_col(text, index)
        where = f"{path}:{line}:{col}"
        if field not in found:
            found[field] = (_convert(field, raw, where), where)

    seen: set = set()
    strings = []
    for doc in documents:
        if doc is None:
            continue
        for kind, node, extra in _walk(doc, seen):
            if kind == "pair" and node.id == "scalar" and isinstance(node.value, str):
                field = _KEYS.get(canonical_key(node.value))
                if field and extra.id == "scalar" and extra.value not in (None, ""):
                    record(field, str(extra.value), node.start_mark.index)
            elif kind == "scalar" and isinstance(node.value, str) and "-" in node.value:
                strings.append(node)
            elif kind == "sequence":
                items = node.value
                for item, nxt in zip(items, items[1:]):
                    if item.id != "scalar" or nxt.id != "scalar":
                        continue
                    value = str(item.value).strip()
                    if value.startswith("-") and not any(c.isspace() for c in value):
                        field = _KEYS.get(canonical_key(value.split("=", 1)[0]))
                        if field and "=" not in value:
                            record(field, str(nxt.value), item.start_mark.index)
                for item in items:
                    if item.id == "scalar" and isinstance(item.value, str) and "=" in item.value:
                        name, _, raw = item.value.strip().partition("=")
                        field = _KEYS.get(canonical_key(name)) if name.startswith("-") else None
                        if field:
                            record(field, raw, item.start_mark.index)
    for node in strings:  # flags inside a command string (comments are not scalars)
        for match in _FLAG_RE.finditer(node.value):
            name = match.group("long") or match.group("short")
            record(_KEYS[canonical_key(name)], match.group("value"), node.start_mark.index)
        serve = _SERVE_RE.search(node.value)
        if serve:
            record("model", serve.group("value"), node.start_mark.index)
    result = {field: value for field, (value, _) in found.items()}
    model: Optional[str] = result.get("model")
    if model is not None:
        local = path.parent / model
        candidate = local if local.exists() else Path(model)
        if not candidate.exists():
            raise UserError(
                f"{found['model'][1]}: model {model!r} is not a local directory or file; "
                "pass its config.json with --model-config"
            )
        result["model"] = candidate
    return result, {field: where for field, (_, where) in found.items()}

"""The settings ``tune-config`` writes: names, defaults, how values parse and print."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Sequence

from ..errors import UserError

TOKENS_KEY = "max-num-batched-tokens"
UTIL_KEY = "gpu-memory-utilization"
CHUNKED_KEY = "enable-chunked-prefill"
MODEL_LEN_KEY = "max-model-len"


def _parse_tokens(raw: str) -> int:
    text = raw.strip().replace("_", "")
    if not re.fullmatch(r"\+?[0-9]+", text) or int(text) <= 0:
        raise ValueError("must be a positive integer")
    return int(text)


def _parse_utilization(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError("must be a number in (0, 1]") from None
    if not math.isfinite(value) or not 0.0 < value <= 1.0:
        raise ValueError("must be in (0, 1]: a fraction of device memory, e.g. 0.9")
    return value


def _render_tokens(value: Any) -> str:
    return str(int(value))


def _render_utilization(value: Any) -> str:
    # repr gives the shortest text that round-trips: 0.95, 1.0, 0.875.
    return repr(float(value))


@dataclass(frozen=True)
class TunableKey:
    """A setting ``tune-config`` writes: its default, parser and canonical rendering."""

    name: str
    default: Any
    parse: Callable[[str], Any]
    render: Callable[[Any], str]
    help: str


TUNABLE: Dict[str, TunableKey] = {
    TOKENS_KEY: TunableKey(
        TOKENS_KEY,
        16384,
        _parse_tokens,
        _render_tokens,
        "tokens per scheduler step; a positive integer",
    ),
    UTIL_KEY: TunableKey(
        UTIL_KEY,
        0.95,
        _parse_utilization,
        _render_utilization,
        "fraction of device memory vLLM may use; in (0, 1]",
    ),
}


def canonical_key(name: str) -> str:
    """``--max_num_batched_tokens`` and ``max-num-batched-tokens`` are the same setting."""
    return name.strip().lstrip("-").replace("_", "-").lower()


def parse_overrides(pairs: Sequence[str]) -> Dict[str, Any]:
    """Turn ``--set KEY=VALUE`` strings into validated target values (defaults filled in).

    Raises :class:`UserError` naming the offending pair and what is accepted.
    """
    targets: Dict[str, Any] = {name: key.default for name, key in TUNABLE.items()}
    for pair in pairs:
        if "=" not in pair:
            raise UserError(f"--set {pair!r}: expected KEY=VALUE, e.g. --set {UTIL_KEY}=0.9")
        raw_key, raw_value = pair.split("=", 1)
        name = canonical_key(raw_key)
        if name not in TUNABLE:
            known = ", ".join(
                f"{k} (or {k.replace('-', '_')})"
                for k in TUNABLE  # both spellings are accepted
            )
            raise UserError(f"--set {pair!r}: unknown key {raw_key.strip()!r}; known: {known}")
        try:
            targets[name] = TUNABLE[name].parse(raw_value)
        except ValueError as exc:
            raise UserError(f"--set {pair!r}: {name} {exc}") from None
    return targets

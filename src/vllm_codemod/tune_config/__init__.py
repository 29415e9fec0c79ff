"""``tune-config``: retune vLLM engine settings inside a deployment's run config (YAML).

Three jobs, one module each: :mod:`.keys` (the settings, their defaults and parsing),
:mod:`.locate` (every place a setting appears, as exact spans), :mod:`.edit` (the new
text, a :class:`ConfigEdit`) and :mod:`.files` (reading only regular files, writing
atomically with owner, mode and links kept).
"""

from __future__ import annotations

from .edit import ConfigEdit, Edit, plan_edit
from .files import ConfigText, read_config, remove_debris, write_config
from .keys import TUNABLE, TunableKey, canonical_key, parse_overrides
from .locate import Occurrence, find_occurrences, parse_documents

__all__ = [
    "TUNABLE",
    "ConfigEdit",
    "ConfigText",
    "Edit",
    "Occurrence",
    "TunableKey",
    "canonical_key",
    "find_occurrences",
    "parse_documents",
    "parse_overrides",
    "plan_edit",
    "read_config",
    "remove_debris",
    "write_config",
]

"""One report per run: the facts as data, plus the lines a person reads.

Every command builds a :class:`Report` and hands it to the renderer, which prints
either the text lines (filtered by ``-q``/``-v``) or the data as ONE JSON document.
Building both from the same object is what keeps ``--json`` and the text from
telling different stories.  The JSON is described in ``docs/json.md`` and by
``schema/report.schema.json`` (shipped with the package).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from packaging.version import Version

from . import __version__

#: Bumped only when a key changes meaning or disappears; new keys do not bump it.
SCHEMA_VERSION = 1

#: Verbosity levels a line can need: shown always, by default, or with -v.
ERROR = 0
NORMAL = 1
DETAIL = 2

SCHEMA_FILE = Path(__file__).resolve().parent / "schema" / "report.schema.json"


@dataclass
class Line:
    """One line of text output; ``err`` sends it to stderr (warnings, notes)."""

    text: str
    level: int = NORMAL
    err: bool = False


@dataclass
class Report:
    """What one command run found or did; ``data`` holds the command's own keys."""

    command: str
    data: Dict[str, Any] = field(default_factory=dict)
    exit_code: int = 0
    lines: List[Line] = field(default_factory=list)
    #: raw text that is itself the output (a diff); printed as is unless -q
    body: Optional[str] = None

    def say(self, text: str, err: bool = False) -> None:
        self.lines.append(Line(text, NORMAL, err))

    def detail(self, text: str, err: bool = False) -> None:
        self.lines.append(Line(text, DETAIL, err))

    def warn(self, text: str) -> None:
        self.lines.append(Line(text, NORMAL, err=True))

    def error(self, text: str) -> None:
        """A line that shows even under -q (stderr): why the exit status is not 0."""
        self.lines.append(Line(text, ERROR, err=True))

    def to_json(self) -> Dict[str, Any]:
        document: Dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "command": self.command,
            "tool_version": __version__,
            "exit_code": self.exit_code,
        }
        clash = set(document) & set(self.data)
        if clash:
            raise ValueError(f"{self.command} report data redefines {sorted(clash)}")
        document.update(self.data)
        return document


def error_document(command: str, exit_code: int, message: str) -> Dict[str, Any]:
    """The JSON a ``--json`` run prints when it fails: still one document, same envelope."""
    return {
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "tool_version": __version__,
        "exit_code": exit_code,
        "error": {"message": message},
    }


def dumps(document: Dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=False, default=_jsonable)


def _jsonable(value: Any) -> Any:
    """Paths, versions and enums print as their text; anything else is a bug we surface."""
    if isinstance(value, (Path, Version)):
        return str(value)
    if isinstance(value, enum.Enum) and isinstance(value.value, str):
        return value.value
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def load_schema() -> Dict[str, Any]:
    """The JSON Schema every ``--json`` document validates against."""
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))

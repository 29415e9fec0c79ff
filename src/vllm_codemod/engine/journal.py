"""The journal (``journal.json``): a committed run's steps, read as untrusted input.

Every path a journal names is checked before a step runs (see :mod:`.transaction` for
how the steps are carried out).  ``dump`` writes the bytes earlier releases wrote.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..errors import ManifestError
from .records import Manifest, check_tree_path, dump_json
from .statedir import StateDir

STEP_KINDS = ("write", "remove", "rmdir")


@dataclass
class Step:
    """One idempotent step of a committed run (see :mod:`.transaction`).

    ``write``: make ``path`` (relative to the tree's base) hold ``source`` (relative to
    the state dir), whose hash is ``sha256``; ``remove``: delete ``path``; ``rmdir``:
    remove the directory ``path`` if it is empty (a directory we created).
    """

    kind: str
    path: str
    source: Optional[str] = None
    sha256: Optional[str] = None
    mode: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        if self.kind != "write":
            return {"kind": self.kind, "path": self.path}
        return {
            "kind": self.kind,
            "path": self.path,
            "source": self.source,
            "sha256": self.sha256,
            "mode": self.mode,
        }


@dataclass
class Journal:
    """A committed run (``journal.json``): its steps and the manifest to end with
    (None for revert, which deletes the manifest)."""

    op: str
    steps: List[Step]
    manifest: Optional[Manifest]

    def dump(self) -> bytes:
        return dump_json(
            {
                "op": self.op,
                "steps": [s.to_json() for s in self.steps],
                "manifest": None if self.manifest is None else self.manifest.to_json(),
            }
        )

    @classmethod
    def load(cls, state: StateDir) -> Journal:
        where = str(state.journal_path)
        try:
            data = json.loads(state.journal_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ManifestError(
                f"{where}: unreadable journal ({exc}); an interrupted run cannot be finished "
                "automatically; reinstall vllm and delete the .vllm-codemod directory"
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
            raise ManifestError(f"{where}: not a journal; reinstall vllm")
        steps: List[Step] = []
        for raw in data["steps"]:
            if not isinstance(raw, dict) or raw.get("kind") not in STEP_KINDS:
                raise ManifestError(f"{where}: bad step {raw!r}; reinstall vllm")
            step_target(state, raw.get("path"), where)
            if raw["kind"] == "rmdir" and "/" not in raw["path"]:
                raise ManifestError(f"{where}: refusing to remove {raw['path']!r}; reinstall vllm")
            if raw["kind"] != "write":
                steps.append(Step(raw["kind"], raw["path"]))
                continue
            step_source(state, raw.get("source"), where)
            mode = raw.get("mode")
            if mode is not None and not (isinstance(mode, int) and 0 <= mode <= 0o7777):
                raise ManifestError(f"{where}: bad mode {mode!r}; reinstall vllm")
            steps.append(Step("write", raw["path"], raw["source"], raw.get("sha256"), mode))
        manifest = data.get("manifest")
        return cls(
            op=str(data.get("op")),
            steps=steps,
            manifest=None if manifest is None else Manifest.from_json(manifest, state.tree, where),
        )


def step_target(state: StateDir, rel: Any, where: str) -> Path:
    """A journal step's target: a tree path, or a saved original inside the state dir."""
    prefix = state.tree.rel(state.path / "originals") + "/"
    if isinstance(rel, str) and rel.startswith(prefix):
        inner = rel[len(prefix) :]
        check_tree_path(state.tree, inner, where, allow_record=True)
        target = state.tree.path(rel)
        real_state = os.path.realpath(state.path)
        if not os.path.realpath(target).startswith(real_state + os.sep):
            raise ManifestError(f"{where}: {rel!r} leaves the state directory; reinstall vllm")
        return target
    check_tree_path(state.tree, rel, where, allow_record=True)
    return state.tree.path(rel)


def step_source(state: StateDir, source: Any, where: str) -> Path:
    """A write step's source: staged or saved bytes inside the state dir."""
    parts = source.split("/") if isinstance(source, str) else []
    if (
        not parts
        or parts[0] not in ("staged", "originals")
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise ManifestError(f"{where}: bad source {source!r}; reinstall vllm")
    path = state.path.joinpath(*parts)
    if not os.path.realpath(path).startswith(os.path.realpath(state.path) + os.sep):
        raise ManifestError(f"{where}: source {source!r} leaves the state directory")
    return path

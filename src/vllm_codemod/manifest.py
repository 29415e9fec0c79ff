"""The manifest: what the tool changed in a tree, read as untrusted input.

A manifest sits inside someone's production image and may have been edited, damaged or
written by an attacker; ``revert`` deletes and overwrites the paths it names.  So every
manifest is validated as a whole before anything acts on it: its shape, every hash, and
every path, which must stay inside the vllm package directory after resolving symlinks
(the one exception is the vllm dist-info ``RECORD`` beside it, which apply updates so
that ``pip uninstall`` removes what the tool added).
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any, Dict, List

from . import __version__
from .discovery import VllmTree
from .errors import ManifestError

STATE_DIR_NAME = ".vllm-codemod"
MANIFEST_FORMAT = 2
READABLE_FORMATS = (1, 2)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DIST_INFO_RECORD = re.compile(r"^vllm-[^/]+\.dist-info/RECORD$", re.IGNORECASE)


def empty_manifest() -> Dict[str, Any]:
    return {
        "format": MANIFEST_FORMAT,
        "files": {},
        "added": {},
        "bytecode": {},
        "options": {},
        "record": None,
        "created_dirs": [],
    }


def dump(data: Dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def deep_copy(data: Dict[str, Any]) -> Dict[str, Any]:
    return copy.deepcopy(data)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_tree_path(tree: VllmTree, rel: Any, where: str, allow_record: bool = False) -> str:
    """Raise unless ``rel`` names a place inside the vllm package (symlinks resolved).

    ``rel`` is relative to the directory holding ``vllm/``, POSIX form, as every
    manifest and journal writes it.  Returns it unchanged when it is acceptable.
    """
    if not isinstance(rel, str) or not rel:
        raise ManifestError(f"{where}: entry {rel!r} is not a path; {_REPAIR}")
    parts = rel.split("/")
    if rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts):
        raise ManifestError(
            f"{where}: path {rel!r} is not a plain relative path inside the vllm tree; {_REPAIR}"
        )
    real = os.path.realpath(tree.base.joinpath(*parts))
    if allow_record and _DIST_INFO_RECORD.match(rel):
        dist_info = os.path.realpath(tree.base / parts[0])
        if os.path.dirname(dist_info) == os.path.realpath(tree.base) and _inside(real, dist_info):
            return rel
    if parts[0] != tree.root.name or not _inside(real, os.path.realpath(tree.root)):
        raise ManifestError(
            f"{where}: path {rel!r} resolves to {real}, outside {tree.root}; "
            f"refusing to touch it; {_REPAIR}"
        )
    state = os.path.realpath(tree.root / STATE_DIR_NAME)
    if _inside(real, state):
        raise ManifestError(
            f"{where}: path {rel!r} points into the tool's own state directory; {_REPAIR}"
        )
    return rel


_REPAIR = (
    "the manifest is damaged or was edited; restore it from a backup, or reinstall vllm "
    "and delete the .vllm-codemod directory"
)


def _require(condition: bool, where: str, what: str) -> None:
    if not condition:
        raise ManifestError(f"{where}: {what}; {_REPAIR}")


def _hash(value: Any, where: str, key: str) -> None:
    _require(isinstance(value, str) and bool(_SHA256.match(value)), where, f"bad {key} {value!r}")


def validate(data: Any, tree: VllmTree, where: str) -> Dict[str, Any]:
    """Check a loaded manifest completely; return it in the current format."""
    _require(isinstance(data, dict), where, "not a JSON object")
    fmt = data.get("format")
    if fmt not in READABLE_FORMATS:
        raise ManifestError(
            f"{where}: manifest format {fmt!r} is not one this vllm-codemod {__version__} "
            "reads; use the version that wrote it"
        )
    data = deep_copy(data)
    data["format"] = MANIFEST_FORMAT
    for key in ("files", "added", "bytecode"):
        data.setdefault(key, {})
        _require(isinstance(data[key], dict), where, f"{key!r} is not an object")
    data.setdefault("options", {})
    _require(isinstance(data["options"], dict), where, "'options' is not an object")
    data.setdefault("record", None)
    record = data["record"]
    if record is not None:
        check_tree_path(tree, record, where, allow_record=True)
        _require(record in data["files"], where, f"record {record!r} has no entry in 'files'")
    for rel, entry in data["files"].items():
        check_tree_path(tree, rel, where, allow_record=rel == record)
        _require(isinstance(entry, dict), where, f"entry for {rel!r} is not an object")
        _hash(entry.get("original_sha256"), where, f"original_sha256 of {rel!r}")
        if entry.get("patched_sha256") is not None:
            _hash(entry["patched_sha256"], where, f"patched_sha256 of {rel!r}")
        mode = entry.get("mode")
        _require(
            mode is None or (isinstance(mode, int) and 0 <= mode <= 0o7777),
            where,
            f"bad mode {mode!r} for {rel!r}",
        )
        transforms = entry.setdefault("transforms", [])
        _require(
            isinstance(transforms, list) and all(isinstance(t, str) for t in transforms),
            where,
            f"bad transforms for {rel!r}",
        )
    for rel, entry in data["added"].items():
        check_tree_path(tree, rel, where)
        _require(isinstance(entry, dict), where, f"entry for {rel!r} is not an object")
        _hash(entry.get("sha256"), where, f"sha256 of {rel!r}")
        _require(isinstance(entry.get("transform"), str), where, f"no transform for {rel!r}")
        _require(rel not in data["files"], where, f"{rel!r} is both patched and added")
    # Directories apply created (so revert may remove them once empty).  A manifest
    # written before they were recorded has none: revert then removes no directory.
    created = data.setdefault("created_dirs", [])
    _require(isinstance(created, list), where, "'created_dirs' is not a list")
    for rel in created:
        check_tree_path(tree, rel, where)
        _require(rel.count("/") >= 1, where, f"created directory {rel!r} is the vllm package")
        _require(
            rel not in data["files"] and rel not in data["added"],
            where,
            f"{rel!r} is both a directory and a file",
        )
    for rel, digest in data["bytecode"].items():
        check_tree_path(tree, rel, where)
        _require(rel.endswith(".pyc") and "/__pycache__/" in rel, where, f"{rel!r} is not bytecode")
        _hash(digest, where, f"hash of {rel!r}")
    return data


class StateDir:
    """``vllm/.vllm-codemod/``: manifest, journal, saved originals and staged writes."""

    def __init__(self, tree: VllmTree) -> None:
        self.tree = tree

    @property
    def path(self) -> Path:
        return self.tree.root / STATE_DIR_NAME

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    @property
    def journal_path(self) -> Path:
        return self.path / "journal.json"

    def originals(self, rel: str) -> Path:
        return self.path / "originals" / rel

    def rel(self, path: Path) -> str:
        """``path`` (inside the state dir) relative to the state dir, POSIX form."""
        return path.relative_to(self.path).as_posix()

    def has_journal(self) -> bool:
        return self.journal_path.exists()

    def has_manifest(self) -> bool:
        return self.manifest_path.exists()

    def load_manifest(self) -> Dict[str, Any]:
        """The validated manifest, or an empty one for an unpatched tree."""
        try:
            data = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return empty_manifest()
        except (OSError, ValueError) as exc:
            raise ManifestError(
                f"{self.manifest_path}: unreadable manifest ({exc}); restore it from a backup "
                "or reinstall vllm and delete the .vllm-codemod directory"
            ) from None
        return validate(data, self.tree, str(self.manifest_path))

    def state_files(self, manifest: Dict[str, Any]) -> List[str]:
        """Paths (relative to the tree's base) the state dir holds once a run finished."""
        files = [self.tree.rel(self.manifest_path)]
        for rel in sorted(list(manifest["files"]) + list(manifest["bytecode"])):
            files.append(self.tree.rel(self.originals(rel)))
        return files

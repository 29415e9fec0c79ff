"""The manifest (``manifest.json``): what the tool changed in a tree, typed and validated.

It and the journal (:mod:`.journal`) sit inside someone's production image and may
have been edited, damaged or written by an attacker; ``revert`` deletes and overwrites
the paths they name.  So each is read there, and only there, as untrusted input:
:meth:`Manifest.load` / :meth:`Journal.load` check the whole document (its shape, every
hash, and every path, which must stay inside the vllm package directory after resolving
symlinks; the one exception is the vllm dist-info ``RECORD`` beside it, which apply
updates so that ``pip uninstall`` removes what the tool added) before anything acts on
it.  ``dump`` writes the very bytes earlier releases wrote (sorted keys, two-space
indent), so trees patched before keep reading.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .. import __version__
from ..discovery import VllmTree
from ..errors import ManifestError

STATE_DIR_NAME = ".vllm-codemod"
MANIFEST_FORMAT = 2
READABLE_FORMATS = (1, 2)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DIST_INFO_RECORD = re.compile(r"^vllm-[^/]+\.dist-info/RECORD$", re.IGNORECASE)
#: the recorded options that are not a transform's option value
_SELECTION_KEYS = ("only", "skip", "tuning")


def dump_json(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


# --------------------------------------------------------------------------- validation


_REPAIR = (
    "the manifest is damaged or was edited; restore it from a backup, or reinstall vllm "
    "and delete the .vllm-codemod directory"
)


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


def _require(condition: bool, where: str, what: str) -> None:
    if not condition:
        raise ManifestError(f"{where}: {what}; {_REPAIR}")


def _hash(value: Any, where: str, key: str) -> str:
    _require(isinstance(value, str) and bool(_SHA256.match(value)), where, f"bad {key} {value!r}")
    return value


def _object(data: Dict[str, Any], key: str, where: str) -> Dict[str, Any]:
    value = data.get(key, {})
    _require(isinstance(value, dict), where, f"{key!r} is not an object")
    return value


# --------------------------------------------------------------------------- manifest


@dataclass
class FileEntry:
    """A file of the tree the tool rewrote: the hashes of its original and our bytes."""

    original_sha256: str
    mode: Optional[int]
    transforms: List[str] = field(default_factory=list)
    patched_sha256: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {
            "original_sha256": self.original_sha256,
            "mode": self.mode,
            "transforms": list(self.transforms),
        }
        if self.patched_sha256 is not None:
            data["patched_sha256"] = self.patched_sha256
        return data


@dataclass
class AddedEntry:
    """A file the tool copied into the tree (revert removes it)."""

    sha256: str
    transform: str

    def to_json(self) -> Dict[str, Any]:
        return {"sha256": self.sha256, "transform": self.transform}


@dataclass
class RecordedOptions:
    """The options the last apply ran with, so later runs keep them.

    ``values`` holds the transforms' option values by option name; ``tuning`` is the
    tuning table's record (its shape belongs to :mod:`vllm_codemod.tuning.bake`).  A key
    an older release did not write stays absent (None / ``has_tuning`` False), because
    "absent" and "none" mean different things to the next plan.
    """

    values: Dict[str, Any] = field(default_factory=dict)
    only: Optional[List[str]] = None
    skip: Optional[List[str]] = None
    tuning: Optional[Dict[str, Any]] = None
    has_tuning: bool = False
    #: the keys in the order the manifest had them, so reports show them as read
    key_order: Tuple[str, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any], where: str) -> RecordedOptions:
        for key in ("only", "skip"):
            names = data.get(key)
            _require(
                names is None
                or (isinstance(names, list) and all(isinstance(n, str) for n in names)),
                where,
                f"bad options.{key} {names!r}",
            )
        return cls(
            values={k: v for k, v in data.items() if k not in _SELECTION_KEYS},
            only=data.get("only"),
            skip=data.get("skip"),
            tuning=data.get("tuning"),
            has_tuning="tuning" in data,
            key_order=tuple(data),
        )

    @property
    def tuning_sha256(self) -> Optional[str]:
        """The hash of the recorded tuning table (None: none recorded)."""
        return self.tuning.get("sha256") if isinstance(self.tuning, dict) else None

    @property
    def tuning_source(self) -> Optional[str]:
        """Where the recorded tuning table came from (the path given to ``--tuning``)."""
        return self.tuning.get("source") if isinstance(self.tuning, dict) else None

    def to_json(self) -> Dict[str, Any]:
        data = dict(self.values)
        if self.only is not None:
            data["only"] = list(self.only)
        if self.skip is not None:
            data["skip"] = list(self.skip)
        if self.has_tuning:
            data["tuning"] = self.tuning
        if self.key_order:
            data = {k: data[k] for k in (*self.key_order, *data) if k in data}
        return data


@dataclass
class Manifest:
    """What the tool changed in a tree, and with which options (``manifest.json``)."""

    files: Dict[str, FileEntry] = field(default_factory=dict)
    added: Dict[str, AddedEntry] = field(default_factory=dict)
    #: cached bytecode of patched files that apply removed (path -> hash of the saved copy)
    bytecode: Dict[str, str] = field(default_factory=dict)
    options: RecordedOptions = field(default_factory=RecordedOptions)
    #: the vllm dist-info RECORD, when apply rewrote it (it also has an entry in ``files``)
    record: Optional[str] = None
    #: directories apply created (revert removes them once empty); none before format 2
    created_dirs: List[str] = field(default_factory=list)
    tool_version: Optional[str] = None
    vllm_version: Optional[str] = None
    patched_at: Optional[str] = None
    #: ``apply --force`` on a vLLM version outside the known range: the version it
    #: accepted (``"unknown"`` when none could be read); later runs on that very version
    #: honour it.  Absent (None) otherwise, and in manifests written before.
    forced_version: Optional[str] = None
    #: top-level keys this release does not know, kept as they were
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def patched(self) -> bool:
        """Whether anything of ours is in the tree."""
        return bool(self.files or self.added)

    def copy(self) -> Manifest:
        return copy.deepcopy(self)

    def saved_paths(self) -> List[str]:
        """Files whose originals the state directory keeps."""
        return list(self.files) + list(self.bytecode)

    def touched_paths(self) -> List[str]:
        """Every file of the tree the manifest names."""
        return list(self.files) + list(self.added) + list(self.bytecode)

    @classmethod
    def load(cls, tree: VllmTree, path: Path) -> Manifest:
        """The validated manifest at ``path``, or an empty one for an unpatched tree."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            raise ManifestError(
                f"{path}: unreadable manifest ({exc}); restore it from a backup "
                "or reinstall vllm and delete the .vllm-codemod directory"
            ) from None
        return cls.from_json(data, tree, str(path))

    def dump(self) -> bytes:
        return dump_json(self.to_json())

    def to_json(self) -> Dict[str, Any]:
        data = dict(self.extra)
        data.update(
            {
                "format": MANIFEST_FORMAT,
                "files": {rel: e.to_json() for rel, e in self.files.items()},
                "added": {rel: e.to_json() for rel, e in self.added.items()},
                "bytecode": dict(self.bytecode),
                "options": self.options.to_json(),
                "record": self.record,
                "created_dirs": list(self.created_dirs),
            }
        )
        if self.tool_version is not None:
            data["tool_version"] = self.tool_version
            data["vllm_version"] = self.vllm_version
        if self.patched_at is not None:
            data["patched_at"] = self.patched_at
        if self.forced_version is not None:
            data["forced_version"] = self.forced_version
        return data

    @classmethod
    def from_json(cls, data: Any, tree: VllmTree, where: str) -> Manifest:
        """Check a loaded manifest completely; return it in the current format."""
        _require(isinstance(data, dict), where, "not a JSON object")
        fmt = data.get("format")
        if fmt not in READABLE_FORMATS:
            raise ManifestError(
                f"{where}: manifest format {fmt!r} is not one this vllm-codemod {__version__} "
                "reads; use the version that wrote it"
            )
        data = copy.deepcopy(data)
        files, added, bytecode = (_object(data, k, where) for k in ("files", "added", "bytecode"))
        options = _object(data, "options", where)
        record = data.get("record")
        forced = data.get("forced_version")
        _require(forced is None or isinstance(forced, str), where, f"bad forced_version {forced!r}")
        if record is not None:
            check_tree_path(tree, record, where, allow_record=True)
            _require(record in files, where, f"record {record!r} has no entry in 'files'")
        manifest = cls(
            options=RecordedOptions.from_json(options, where),
            record=record,
            tool_version=data.get("tool_version"),
            vllm_version=data.get("vllm_version"),
            patched_at=data.get("patched_at"),
            forced_version=forced,
            extra={
                k: v
                for k, v in data.items()
                if k not in ("format", "files", "added", "bytecode", "options", "record")
                and k not in ("created_dirs", "tool_version", "vllm_version", "patched_at")
                and k != "forced_version"
            },
        )
        for rel, entry in files.items():
            check_tree_path(tree, rel, where, allow_record=rel == record)
            _require(isinstance(entry, dict), where, f"entry for {rel!r} is not an object")
            patched = entry.get("patched_sha256")
            mode = entry.get("mode")
            _require(
                mode is None or (isinstance(mode, int) and 0 <= mode <= 0o7777),
                where,
                f"bad mode {mode!r} for {rel!r}",
            )
            transforms = entry.get("transforms", [])
            _require(
                isinstance(transforms, list) and all(isinstance(t, str) for t in transforms),
                where,
                f"bad transforms for {rel!r}",
            )
            manifest.files[rel] = FileEntry(
                original_sha256=_hash(
                    entry.get("original_sha256"), where, f"original_sha256 of {rel!r}"
                ),
                mode=mode,
                transforms=list(transforms),
                patched_sha256=(
                    None if patched is None else _hash(patched, where, f"patched_sha256 of {rel!r}")
                ),
            )
        for rel, entry in added.items():
            check_tree_path(tree, rel, where)
            _require(isinstance(entry, dict), where, f"entry for {rel!r} is not an object")
            digest = _hash(entry.get("sha256"), where, f"sha256 of {rel!r}")
            _require(isinstance(entry.get("transform"), str), where, f"no transform for {rel!r}")
            _require(rel not in files, where, f"{rel!r} is both patched and added")
            manifest.added[rel] = AddedEntry(digest, entry["transform"])
        # Directories apply created (so revert may remove them once empty).  A manifest
        # written before they were recorded has none: revert then removes no directory.
        created = data.get("created_dirs", [])
        _require(isinstance(created, list), where, "'created_dirs' is not a list")
        for rel in created:
            check_tree_path(tree, rel, where)
            _require(rel.count("/") >= 1, where, f"created directory {rel!r} is the vllm package")
            _require(
                rel not in files and rel not in added,
                where,
                f"{rel!r} is both a directory and a file",
            )
        manifest.created_dirs = list(created)
        for rel, digest in bytecode.items():
            check_tree_path(tree, rel, where)
            _require(
                rel.endswith(".pyc") and "/__pycache__/" in rel, where, f"{rel!r} is not bytecode"
            )
            manifest.bytecode[rel] = _hash(digest, where, f"hash of {rel!r}")
        return manifest

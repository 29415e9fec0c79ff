"""Crash-safe writes to the vllm tree: originals, a redo journal, and the manifest.

Protocol for every run that writes (apply and revert alike):

1. Save what must survive (pristine originals, displaced bytecode) and stage new
   contents under the state directory.  A crash here leaves the tree untouched.
2. Write ``journal.json`` atomically: the ordered steps and the manifest to end with.
   From this instant the run is committed.
3. Replay the steps; each is idempotent (a write is skipped once the target already has
   the wanted hash), so a run killed at any point is finished by the next apply or
   revert calling :func:`recover`.  The journal is deleted last.

The state directory lives inside the vllm package (``vllm/.vllm-codemod/``) so it
travels with the tree through ``docker commit`` and layer squashing; revert deletes it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from . import __version__
from .discovery import VllmTree
from .errors import CodemodError
from .fsutil import atomic_write, remove_empty_dirs, remove_file, sha256_bytes, sha256_file
from .planner import ChangeSet

STATE_DIR_NAME = ".vllm-codemod"
MANIFEST_FORMAT = 1


@dataclass(frozen=True)
class StateDir:
    tree: VllmTree

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

    def staged(self, rel: str) -> Path:
        return self.path / "staged" / rel

    def has_journal(self) -> bool:
        return self.journal_path.exists()

    def load_manifest(self) -> Dict[str, Any]:
        try:
            data = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return empty_manifest()
        except (OSError, ValueError) as exc:
            raise CodemodError(
                f"{self.manifest_path}: unreadable manifest ({exc}); restore it from a backup "
                "or reinstall vllm and delete the .vllm-codemod directory"
            ) from None
        if data.get("format") != MANIFEST_FORMAT:
            raise CodemodError(
                f"{self.manifest_path}: manifest format {data.get('format')!r} is not one this "
                f"vllm-codemod {__version__} reads; use the version that wrote it"
            )
        return data


def empty_manifest() -> Dict[str, Any]:
    return {"format": MANIFEST_FORMAT, "files": {}, "added": {}, "bytecode": {}}


def _dump(data: Dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def bytecode_for(source: Path) -> List[Path]:
    """Cached bytecode of ``source`` for any interpreter and optimisation level."""
    cache = source.parent / "__pycache__"
    if not cache.is_dir():
        return []
    return sorted(cache.glob(f"{source.stem}.*.pyc"))


def _writable_probe(directory: Path) -> None:
    """Fail before writing anything if ``directory`` (or what would hold it) is read-only.

    An unnamed temp file (O_TMPFILE on Linux) proves we can create files there without
    leaving anything behind, even if we are killed mid-probe.
    """
    probe_dir = directory
    while not probe_dir.exists():
        probe_dir = probe_dir.parent
    try:
        with tempfile.TemporaryFile(dir=probe_dir):
            pass
    except OSError as exc:
        raise CodemodError(
            f"{probe_dir}: not writable ({exc.strerror}); run as the owner of the vLLM install "
            "(e.g. as root in the Dockerfile), or use `vllm-codemod diff` to preview"
        ) from None


def _is_new_baseline(entry: Optional[Dict[str, Any]], change: Any) -> bool:
    """Whether ``change.old`` is an original to keep: never patched, or replaced since.

    A file that is neither our patched bytes nor the original we saved was replaced
    behind our back (a reinstall over a patched tree, say): its current bytes are the
    original that revert must bring back, not the stale copy from an older release.
    """
    if entry is None:
        return True
    current = sha256_bytes(change.old) if change.old is not None else None
    return current not in (entry.get("patched_sha256"), entry["original_sha256"])


def _write_step(rel: str, source: Path, data: bytes, mode: Optional[int]) -> Dict[str, Any]:
    return {
        "kind": "write",
        "path": rel,
        "source": source.as_posix(),
        "sha256": sha256_bytes(data),
        "mode": mode,
    }


def _remove_step(rel: str) -> Dict[str, Any]:
    return {"kind": "remove", "path": rel}


def apply_change_set(change_set: ChangeSet) -> Dict[str, Any]:
    """Write ``change_set`` to its tree; returns the new manifest.  Caller holds the lock."""
    tree = change_set.tree
    state = StateDir(tree)
    old = state.load_manifest()
    manifest = json.loads(json.dumps(old))  # deep copy
    manifest["tool_version"] = __version__
    manifest["vllm_version"] = str(change_set.version) if change_set.version else None

    directories = {state.path}
    for change in change_set.changes:
        target = tree.path(change.path)
        directories.add(target.parent)
        directories.update(pyc.parent for pyc in bytecode_for(target))
    for directory in sorted(directories):
        _writable_probe(directory)

    steps: List[Dict[str, Any]] = []
    for change in change_set.changes:
        target = tree.path(change.path)
        first_touch = not change.added and _is_new_baseline(old["files"].get(change.path), change)
        for pyc in bytecode_for(target):
            pyc_rel = tree.rel(pyc)
            if first_touch:
                data = pyc.read_bytes()
                atomic_write(state.originals(pyc_rel), data)
                manifest["bytecode"][pyc_rel] = sha256_bytes(data)
            steps.append(_remove_step(pyc_rel))
        if change.new is None:
            steps.append(_remove_step(change.path))
            manifest["added"].pop(change.path, None)
            continue
        atomic_write(state.staged(change.path), change.new)
        source = state.staged(change.path).relative_to(state.path)
        if change.added:
            steps.append(_write_step(change.path, source, change.new, 0o644))
            manifest["added"][change.path] = {
                "sha256": sha256_bytes(change.new),
                "transform": change.transforms[0],
            }
            continue
        entry = manifest["files"].get(change.path)
        if first_touch:
            assert change.old is not None
            atomic_write(state.originals(change.path), change.old)
            entry = {
                "original_sha256": sha256_bytes(change.old),
                "mode": target.stat().st_mode & 0o7777,
                "transforms": [],
            }
            manifest["files"][change.path] = entry
        entry["patched_sha256"] = sha256_bytes(change.new)
        entry["transforms"] = sorted(set(entry["transforms"]) | set(change.transforms))
        steps.append(_write_step(change.path, source, change.new, None))

    journal = {"op": "apply", "steps": steps, "manifest": manifest}
    atomic_write(state.journal_path, _dump(journal))
    _replay(state, journal)
    return manifest


def revert_tree(tree: VllmTree, force: bool) -> List[str]:
    """Restore every file the tool changed and remove what it added; returns paths touched."""
    state = StateDir(tree)
    if not state.path.exists():
        return []
    manifest = state.load_manifest()
    _writable_probe(state.path)
    steps: List[Dict[str, Any]] = []
    touched: List[str] = []
    for rel, entry in sorted(manifest["files"].items()):
        target = tree.path(rel)
        current = sha256_file(target)
        for pyc in bytecode_for(target):
            steps.append(_remove_step(tree.rel(pyc)))
        if current == entry["original_sha256"]:
            continue
        if current != entry.get("patched_sha256") and not force:
            raise CodemodError(
                f"{target}: changed since vllm-codemod patched it (was it reinstalled?); "
                "reverting would discard that change; pass --force to restore the original anyway"
            )
        original = state.originals(rel)
        if sha256_file(original) != entry["original_sha256"]:
            raise CodemodError(
                f"{original}: the saved original is missing or damaged; cannot revert {rel}; "
                "reinstall vllm to get a clean tree"
            )
        steps.append(
            {
                "kind": "write",
                "path": rel,
                "source": original.relative_to(state.path).as_posix(),
                "sha256": entry["original_sha256"],
                "mode": entry.get("mode"),
            }
        )
        touched.append(rel)
    for rel, entry in sorted(manifest["added"].items()):
        target = tree.path(rel)
        current = sha256_file(target)
        if current is not None and current != entry["sha256"] and not force:
            raise CodemodError(
                f"{target}: changed since vllm-codemod added it; pass --force to remove it anyway"
            )
        for pyc in bytecode_for(target):
            steps.append(_remove_step(tree.rel(pyc)))
        steps.append(_remove_step(rel))
        touched.append(rel)
    for rel, digest in sorted(manifest["bytecode"].items()):
        source = state.originals(rel)
        if sha256_file(source) == digest:
            steps.append(
                {
                    "kind": "write",
                    "path": rel,
                    "source": source.relative_to(state.path).as_posix(),
                    "sha256": digest,
                    "mode": None,
                }
            )
    journal = {"op": "revert", "steps": steps, "manifest": None}
    atomic_write(state.journal_path, _dump(journal))
    _replay(state, journal)
    return touched


def recover(tree: VllmTree) -> Optional[str]:
    """Finish a run that was killed after committing; returns its op, or None if clean."""
    state = StateDir(tree)
    if not state.has_journal():
        staged = state.path / "staged"
        if staged.exists():  # a run died before committing: its staging is garbage
            shutil.rmtree(staged)
        return None
    try:
        journal = json.loads(state.journal_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CodemodError(
            f"{state.journal_path}: unreadable journal ({exc}); an interrupted run cannot be "
            "finished automatically; reinstall vllm"
        ) from None
    _replay(state, journal)
    return str(journal.get("op"))


def _replay(state: StateDir, journal: Dict[str, Any]) -> None:
    tree = state.tree
    for step in journal["steps"]:
        target = tree.path(step["path"])
        if step["kind"] == "write":
            if sha256_file(target) != step["sha256"]:
                data = (state.path / step["source"]).read_bytes()
                atomic_write(target, data, step.get("mode"))
        else:
            remove_file(target)
            remove_empty_dirs(target.parent, tree.root)
    if journal["manifest"] is None:
        shutil.rmtree(state.path)
        return
    atomic_write(state.manifest_path, _dump(journal["manifest"]))
    shutil.rmtree(state.path / "staged", ignore_errors=True)
    state.journal_path.unlink()

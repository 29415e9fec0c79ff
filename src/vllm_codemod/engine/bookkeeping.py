"""The manifest after a run, the originals to save, and the RECORD to match.

Planning computes all of it up front, so ``apply`` only writes what was decided here
and a crash at any point can be finished from the journal alone.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Dict, List, Optional

from .. import __version__
from ..discovery import VllmTree
from ..errors import ManifestError, UserError
from ..fsutil import sha256_bytes
from ..record import find_record, rewrite_record
from ..transforms.base import MARKER
from .changes import ChangeSet, FileChange
from .records import AddedEntry, FileEntry, Manifest, RecordedOptions
from .statedir import StateDir
from .transaction import bytecode_for


@dataclass
class Bookkeeping:
    """What apply must write beside the change set's own files."""

    manifest_after: Manifest
    changes: List[FileChange]
    originals_to_save: Dict[str, bytes] = field(default_factory=dict)
    bytecode_to_remove: List[str] = field(default_factory=list)
    #: the vllm dist-info RECORD (relative to base), None if absent
    record: Optional[str] = None
    #: patched files edited by hand since (our changes still in them): apply refuses
    #: to overwrite them unless told to, and their saved original stays the original
    hand_edited: List[str] = field(default_factory=list)


def is_new_baseline(entry: Optional[FileEntry], current: Optional[bytes]) -> bool:
    """Whether ``current`` is an original to keep: never patched, or replaced since.

    A file that is neither our patched bytes nor the original we saved was replaced
    behind our back (a reinstall over a patched tree, say): its current bytes are the
    original that revert must bring back, not the stale copy from an older release.
    """
    if entry is None:
        return True
    digest = sha256_bytes(current) if current is not None else None
    return digest not in (entry.patched_sha256, entry.original_sha256)


def hand_edited(tree: VllmTree, manifest: Manifest) -> Dict[str, bytes]:
    """Patched files edited by hand since (our changes still in them), with their saved
    originals: a hand edit, unlike a reinstall, never becomes the new original.

    Every edit carries :data:`MARKER`; a file that is neither our output nor its
    original, and holds more markers than the original, still has our changes in it.
    Anything else that changed is an unpatched file again (a reinstall).
    """
    state = StateDir(tree)
    marker = MARKER.encode("utf-8")
    found: Dict[str, bytes] = {}
    for rel, entry in manifest.files.items():
        if rel == manifest.record:
            continue
        try:
            current = tree.path(rel).read_bytes()
        except OSError:
            continue
        if not is_new_baseline(entry, current):
            continue
        try:
            original = state.originals(rel).read_bytes()
        except OSError:
            original = b""
        if sha256_bytes(original) != entry.original_sha256:
            original = b""
        if current.count(marker) > original.count(marker):
            found[rel] = original
    return found


def dirs_to_create(tree: VllmTree, target: Path) -> List[str]:
    """The directories writing ``target`` will create (they do not exist yet), as paths
    relative to the tree's base: these are ours, and revert may remove them once empty."""
    missing: List[str] = []
    directory = target.parent
    while directory != tree.root and tree.root in directory.parents:
        if os.path.lexists(directory):
            break
        missing.append(tree.rel(directory))
        directory = directory.parent
    return missing


def bookkeeping(
    change_set: ChangeSet,
    manifest: Manifest,
    options: RecordedOptions,
    edited_by_hand: Collection[str] = (),
) -> Bookkeeping:
    """The manifest after apply, the originals to save, and the RECORD to match.

    A file in ``edited_by_hand`` keeps the original saved first (see :func:`hand_edited`).
    """
    tree = change_set.tree
    after = manifest.copy()
    after.tool_version = __version__
    after.vllm_version = str(change_set.version) if change_set.version else None
    after.options = options
    out = Bookkeeping(after, list(change_set.changes))
    final_bytes: Dict[str, bytes] = {}
    for change in list(out.changes):
        target = tree.path(change.path)
        if change.added:
            if change.new is None:
                after.added.pop(change.path, None)
            else:
                after.added[change.path] = AddedEntry(
                    sha256_bytes(change.new), change.transforms[0]
                )
                created = set(after.created_dirs) | set(dirs_to_create(tree, target))
                after.created_dirs = sorted(created)
            for pyc in bytecode_for(target):
                out.bytecode_to_remove.append(tree.rel(pyc))
            continue
        assert change.new is not None and change.old is not None
        entry = after.files.get(change.path)
        first_touch = is_new_baseline(entry, change.old)
        if first_touch and change.path in edited_by_hand:
            out.hand_edited.append(change.path)
            first_touch = False
        if first_touch:
            out.originals_to_save[change.path] = change.old
            entry = FileEntry(sha256_bytes(change.old), os.stat(target).st_mode & 0o7777)
            after.files[change.path] = entry
        assert entry is not None
        entry.patched_sha256 = sha256_bytes(change.new)
        entry.transforms = sorted(set(entry.transforms) | set(change.transforms))
        final_bytes[change.path] = change.new
        for pyc in bytecode_for(target):
            pyc_rel = tree.rel(pyc)
            if first_touch:
                data = pyc.read_bytes()
                out.originals_to_save[pyc_rel] = data
                after.bytecode[pyc_rel] = sha256_bytes(data)
            out.bytecode_to_remove.append(pyc_rel)

    out.record = _plan_record(tree, out, final_bytes)
    after.record = out.record if out.record in after.files else None
    return out


def _plan_record(tree: VllmTree, out: Bookkeeping, final_bytes: Dict[str, bytes]) -> Optional[str]:
    """Append a RECORD change to ``out.changes`` when the tree will hold files pip must
    know.  Returns the RECORD's path (relative to base) when there is one, else None."""
    path = find_record(tree)
    if path is None:
        return None
    state = StateDir(tree)
    after = out.manifest_after
    rel = tree.rel(path)
    if not (set(after.files) - {rel}) and not after.added:
        return rel  # nothing of ours in the tree (after this run): RECORD stays as it is
    current = path.read_bytes()
    entry = after.files.get(rel)
    if not is_new_baseline(entry, current):
        assert entry is not None
        if sha256_bytes(current) == entry.original_sha256:
            original = current
        else:
            saved = state.originals(rel)
            original = saved.read_bytes() if saved.is_file() else b""
            if sha256_bytes(original) != entry.original_sha256:
                raise ManifestError(
                    f"{saved}: the saved original RECORD is missing or damaged; reinstall vllm"
                )
    else:
        original = current
        out.originals_to_save[rel] = current
        entry = FileEntry(sha256_bytes(current), None)
        after.files[rel] = entry
    hashed: Dict[str, bytes] = {}
    for file_rel in after.files:
        if file_rel == rel:
            continue
        data = final_bytes.get(file_rel)
        if data is None:
            data = tree.path(file_rel).read_bytes()
        hashed[file_rel] = data
    added_now = {c.path: c.new for c in out.changes if c.added and c.new is not None}
    for file_rel in after.added:
        data = added_now.get(file_rel)
        hashed[file_rel] = data if data is not None else tree.path(file_rel).read_bytes()
    entry.mode = path.stat().st_mode & 0o7777
    try:
        new = rewrite_record(
            original,
            hashed,
            unhashed=state.state_files(after),
            dropped=list(after.bytecode),
        )
    except (UnicodeDecodeError, csv.Error) as exc:  # a damaged install, not our bug
        raise UserError(
            f"{path}: unreadable RECORD ({exc}); reinstall vllm, or delete the RECORD file "
            "to patch the tree without it"
        ) from None
    entry.patched_sha256 = sha256_bytes(new)
    if new != current:
        out.changes.append(FileChange(rel, current, new, [], added=False))
    return rel

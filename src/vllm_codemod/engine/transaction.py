"""Crash-safe execution of a change to a tree: staging, a redo journal, recovery.

Protocol for every run that writes (apply and revert alike):

1. Stage everything the run will write (new contents, originals to keep) under the state
   directory.  A crash here leaves the tree untouched; the staging is debris that
   :func:`recover` removes.
2. Write ``journal.json`` atomically: the ordered steps and the manifest to end with.
   From this instant the run is committed.
3. Replay the steps; each is idempotent (a write is skipped once the target already has
   the wanted hash), so a run killed at any point is finished by the next run calling
   :func:`recover`.  The journal is deleted last (after the manifest is written, or,
   for revert, after the manifest is deleted and before the state directory goes).

The state directory lives inside the vllm package (``vllm/.vllm-codemod/``) so it
travels with the tree through ``docker commit`` and layer squashing; revert deletes it.
A journal is read as untrusted input, like the manifest: every path it names is checked.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Set

from ..discovery import VllmTree
from ..errors import EnvironmentProblem, ManifestError, RefusalError
from ..fsutil import (
    atomic_write,
    owner_kept,
    remove_dir_if_empty,
    remove_empty_dirs,
    remove_file,
    sha256_bytes,
    sha256_file,
    sweep_temp_files,
)
from .journal import Journal, Step, step_source, step_target
from .records import Manifest
from .statedir import StateDir

log = logging.getLogger(__name__)


def bytecode_for(source: Path) -> List[Path]:
    """Cached bytecode of ``source`` for any interpreter and optimisation level."""
    cache = source.parent / "__pycache__"
    if not cache.is_dir():
        return []
    return sorted(cache.glob(f"{source.stem}.*.pyc"))


def writable_probe(directory: Path) -> None:
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
        raise EnvironmentProblem(
            probe_dir,
            exc,
            "not writable; run as the owner of the vLLM install (e.g. as root in the "
            "Dockerfile), or use `vllm-codemod diff` to preview; nothing was changed",
        ) from None


def replaceable_probe(path: Path) -> None:
    """Fail early on a file that even root cannot replace (``chattr +i``, read-only mount).

    Only root is asked: for anyone else write permission on the file says nothing about
    replacing it (that is the directory's permission, which :func:`writable_probe` checks).
    """
    if os.geteuid() != 0 or not path.exists():
        return
    real = os.path.realpath(path)
    if not os.access(real, os.W_OK):
        raise EnvironmentProblem(
            path,
            errno=errno.EPERM,
            hint="cannot be replaced, even by root (immutable attribute or read-only mount?); "
            "nothing was changed",
        )


def owner_probe(tree: VllmTree, paths: Iterable[str], allow_owner_change: bool) -> None:
    """Refuse, before anything is written, to replace a file whose owner the OS will
    not let us keep (a non-root user patching another user's file would make it the
    patcher's), unless the user allowed that."""
    if allow_owner_change:
        return
    refused = []
    for rel in paths:
        owner = owner_kept(tree.path(rel))
        if owner is not None:
            refused.append(f"{tree.path(rel)} (uid {owner[0]}, gid {owner[1]})")
    if refused:
        raise RefusalError(
            f"{', '.join(refused)}: the OS does not let uid {os.geteuid()} give a replaced "
            "file its owner back, so it would become yours; nothing was changed; run as that "
            "owner or as root, or pass --allow-owner-change to replace it anyway"
        )


def write_step(rel: str, source: str, data_sha256: str, mode: Optional[int]) -> Step:
    """Make ``rel`` (relative to the tree's base) hold ``source`` (relative to the state dir)."""
    return Step("write", rel, source, data_sha256, mode)


def remove_step(rel: str) -> Step:
    return Step("remove", rel)


def rmdir_step(rel: str) -> Step:
    """Remove the directory ``rel`` if it is empty (a directory we created); else keep it."""
    return Step("rmdir", rel)


def stage(state: StateDir, area: str, rel: str, data: bytes) -> str:
    """Save ``data`` under ``staged/<area>/<rel>``; returns that path relative to the state dir."""
    path = state.path / "staged" / area / rel
    atomic_write(path, data)
    return state.rel(path)


def commit(state: StateDir, op: str, steps: List[Step], manifest: Optional[Manifest]) -> Journal:
    journal = Journal(op, steps, manifest)
    atomic_write(state.journal_path, journal.dump())
    return journal


def discard_uncommitted(state: StateDir) -> None:
    """Undo the staging of a run that failed before committing: the tree was never touched."""
    if state.has_journal():
        return
    if not state.has_manifest():
        shutil.rmtree(state.path, ignore_errors=True)
    else:
        shutil.rmtree(state.path / "staged", ignore_errors=True)
    sweep_temp_files(_state_dirs(state))


def check_state_dir(state: StateDir) -> None:
    """Refuse a state directory whose parts are symlinks: writes there would leave the tree."""
    for path in (state.path, state.path / "staged", state.path / "originals"):
        if path.is_symlink():
            raise ManifestError(
                f"{path}: is a symlink; the tool's state directory must be a plain directory; "
                "reinstall vllm and delete the .vllm-codemod directory"
            )


def replay(state: StateDir, journal: Journal) -> List[str]:
    """Carry out a committed journal; safe to repeat after a crash at any point.

    Returns the directories an ``rmdir`` step kept because something is in them
    (relative to the tree's base).
    """
    where = str(state.journal_path)
    kept: List[str] = []
    for step in journal.steps:
        target = step_target(state, step.path, where)
        if step.kind == "write":
            if sha256_file(target) != step.sha256:
                source = step_source(state, step.source, where)
                try:
                    data = source.read_bytes()
                except FileNotFoundError:
                    raise ManifestError(
                        f"{source}: missing, needed to finish an interrupted run on "
                        f"{target}; reinstall vllm"
                    ) from None
                if sha256_bytes(data) != step.sha256:
                    raise ManifestError(f"{source}: damaged (hash differs); reinstall vllm")
                atomic_write(target, data, step.mode)
                log.info("wrote %s", step.path)
            else:
                log.debug("%s: already has the wanted bytes; not written", step.path)
        elif step.kind == "rmdir":
            if not remove_dir_if_empty(target):
                log.info("kept directory %s: not empty", step.path)
                kept.append(step.path)
        else:
            remove_file(target)
            log.info("removed %s", step.path)
    if journal.manifest is None:
        remove_file(state.manifest_path)
        remove_file(state.journal_path)
        _remove_state_dir(state)
        return kept
    atomic_write(state.manifest_path, journal.manifest.dump())
    shutil.rmtree(state.path / "staged", ignore_errors=True)
    remove_file(state.journal_path)
    return kept


def _remove_state_dir(state: StateDir) -> None:
    try:
        shutil.rmtree(state.path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise EnvironmentProblem(exc.filename or state.path, exc) from None


@dataclass
class Recovery:
    """What :func:`recover` found: an interrupted run it finished, debris it removed."""

    finished: Optional[str] = None
    removed: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"finished": self.finished, "removed": list(self.removed)}


def recover(
    tree: VllmTree, extra_dirs: Iterable[Path] = (), finish: bool = True, dry_run: bool = False
) -> Recovery:
    """Leave the tree as the last committed run meant it, with no debris of ours.

    Finishes a committed run (its journal), removes staging of a run that died before
    committing, an abandoned state directory (one without a manifest), saved originals
    no manifest entry refers to, and our temp files in every directory we write.  With
    ``finish=False`` a committed run is left alone (read-only callers refuse instead).
    ``dry_run`` changes nothing: ``removed`` then lists the debris a recovery would
    remove (and a committed run is left alone, as with ``finish=False``).
    """
    state = StateDir(tree)
    check_state_dir(state)
    result = Recovery()
    dirs: Set[Path] = set(extra_dirs)
    if state.has_journal():
        if not finish or dry_run:
            return result
        journal = Journal.load(state)
        log.info("finishing an interrupted %s (%s)", journal.op, state.journal_path)
        for step in journal.steps:
            dirs.add(tree.path(step.path).parent)
        replay(state, journal)
        result.finished = journal.op
        manifest = journal.manifest
    elif state.path.exists() and not state.has_manifest():
        log.info(
            "%s: left by a run that never committed; %s",
            state.path,
            "would remove it" if dry_run else "removing it",
        )
        if not dry_run:
            sweep_temp_files(_state_dirs(state))
            _remove_state_dir(state)
        result.removed.append(tree.rel(state.path) + "/")
        manifest: Optional[Manifest] = None
    else:
        manifest = state.load_manifest() if state.path.exists() else None
        if manifest is not None:
            result.removed += _remove_unreferenced(state, manifest, dry_run)
    if manifest is not None:
        for rel in manifest.touched_paths():
            dirs.add(tree.path(rel).parent)
    for directory in list(dirs):
        if directory.exists():
            dirs.add(Path(os.path.realpath(directory)))
        dirs.add(directory / "__pycache__")
    dirs.update(_state_dirs(state))
    swept = [
        tree.rel(p) if tree.base in p.parents else str(p)
        for p in sweep_temp_files(dirs, dry_run=dry_run)
    ]
    # a dry run still sees the temp files inside a directory it would remove whole
    whole = tuple(rel for rel in result.removed if rel.endswith("/"))
    result.removed += [rel for rel in swept if not rel.startswith(whole)] if whole else swept
    for rel in result.removed:
        log.info("%s debris of an interrupted run: %s", "found" if dry_run else "removed", rel)
    return result


def _state_dirs(state: StateDir) -> List[Path]:
    if not state.path.is_dir():
        return []
    return [Path(d) for d, _, _ in os.walk(state.path)]


def _remove_unreferenced(state: StateDir, manifest: Manifest, dry_run: bool = False) -> List[str]:
    """Staging and saved originals a finished manifest does not refer to are debris."""
    removed: List[str] = []
    staged = state.path / "staged"
    if staged.exists():
        if not dry_run:
            shutil.rmtree(staged)
        removed.append(state.tree.rel(staged) + "/")
    originals = state.path / "originals"
    keep = {state.originals(rel) for rel in manifest.saved_paths()}
    if originals.is_dir():
        for directory, _, files in os.walk(originals, topdown=False):
            for name in files:
                path = Path(directory) / name
                if path not in keep:
                    if not dry_run:
                        remove_file(path)
                    removed.append(state.tree.rel(path))
            if not dry_run:
                remove_empty_dirs(Path(directory), state.path)
    return removed

"""``revert``: restore every file the tool changed and remove what it added.

Only what the manifest names is touched (plus the cached bytecode of those files, so
none of it can pass for fresh against the restored source), and a file changed since we
wrote it is refused unless the user says to discard that change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

from ..discovery import VllmTree
from ..errors import EnvironmentProblem, ManifestError, RefusalError
from ..fsutil import sha256_file
from .journal import Step
from .records import Manifest
from .statedir import StateDir
from .transaction import (
    bytecode_for,
    check_state_dir,
    commit,
    owner_probe,
    remove_step,
    replaceable_probe,
    replay,
    rmdir_step,
    writable_probe,
    write_step,
)


@dataclass
class RevertResult:
    vllm_root: str
    restored: List[str]  # files put back or removed (relative to base)
    wrote: bool
    #: directories apply created that revert kept: someone put something in them
    kept_dirs: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "vllm_root": self.vllm_root,
            "restored": list(self.restored),
            "kept_dirs": list(self.kept_dirs),
        }


def revert(
    tree: VllmTree, discard_local_changes: bool = False, allow_owner_change: bool = False
) -> RevertResult:
    """Restore every file the tool changed and remove what it added.  Caller holds the lock.

    A file changed since we wrote it is refused (nothing written) unless
    ``discard_local_changes``; a path the manifest does not name is never touched,
    except the cached bytecode of files we restore or remove.
    """
    state = StateDir(tree)
    result = RevertResult(str(tree.root), [], False)
    if not state.has_manifest():
        return result
    if state.has_journal():
        raise ManifestError(
            f"{state.journal_path}: an earlier run was interrupted; finish it first"
        )
    check_state_dir(state)
    manifest = state.load_manifest()
    writable_probe(state.path)
    steps: List[Step] = []
    for rel, entry in sorted(manifest.files.items()):
        target = tree.path(rel)
        current = sha256_file(target)
        for pyc in bytecode_for(target):
            steps.append(remove_step(tree.rel(pyc)))
        if current == entry.original_sha256:
            continue
        if current != entry.patched_sha256 and not discard_local_changes:
            raise RefusalError(
                f"{target}: changed since vllm-codemod patched it (was it reinstalled?); "
                "reverting would discard that change; pass --force to restore the original anyway"
            )
        original = state.originals(rel)
        if sha256_file(original) != entry.original_sha256:
            raise ManifestError(
                f"{original}: the saved original is missing or damaged; cannot revert {rel}; "
                "reinstall vllm to get a clean tree"
            )
        replaceable_probe(target)
        writable_probe(Path(os.path.realpath(target)).parent)
        steps.append(write_step(rel, state.rel(original), entry.original_sha256, entry.mode))
        result.restored.append(rel)
    for rel, added in sorted(manifest.added.items()):
        target = tree.path(rel)
        current = sha256_file(target)
        if current is not None and current != added.sha256 and not discard_local_changes:
            raise RefusalError(
                f"{target}: changed since vllm-codemod added it; pass --force to remove it anyway"
            )
        for pyc in bytecode_for(target):
            steps.append(remove_step(tree.rel(pyc)))
        if current is not None:
            writable_probe(target.parent)
        steps.append(remove_step(rel))
        result.restored.append(rel)
    for rel, digest in sorted(manifest.bytecode.items()):
        source = state.originals(rel)
        if sha256_file(source) == digest:
            steps.append(write_step(rel, state.rel(source), digest, None))
    steps += created_dir_steps(manifest)
    owner_probe(
        tree,
        [s.path for s in steps if s.kind == "write" and os.path.lexists(tree.path(s.path))],
        allow_owner_change,
    )
    try:
        journal = commit(state, "revert", steps, None)
    except EnvironmentProblem as exc:
        raise EnvironmentProblem(exc.path, errno=exc.errno, hint="nothing was changed") from None
    try:
        result.kept_dirs = replay(state, journal)
    except EnvironmentProblem as exc:
        raise EnvironmentProblem(
            exc.path,
            errno=exc.errno,
            hint="revert stopped part-way; fix that and run `vllm-codemod revert` to finish",
        ) from None
    result.wrote = True
    return result


def created_dir_steps(manifest: Manifest) -> List[Step]:
    """Remove the directories apply created, deepest first, each only if it is empty.

    Only directories the manifest records are candidates (a manifest from before they
    were recorded names none, so then no directory is removed), plus the ``__pycache__``
    directly inside one of them: Python made it for our own modules, whose bytecode the
    steps before have removed; anything else in it (or in the directory) keeps both.
    """
    steps: List[Step] = []
    for rel in sorted(manifest.created_dirs, key=lambda r: (-r.count("/"), r)):
        steps.append(rmdir_step(f"{rel}/__pycache__"))
        steps.append(rmdir_step(rel))
    return steps

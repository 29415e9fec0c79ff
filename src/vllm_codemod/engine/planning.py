"""``plan``: everything ``apply`` would do to a tree, computed without writing a byte.

The order is the data flow of the whole engine: resolve the options against the
manifest, choose the tuning table, ask the transforms for a change set
(:mod:`.changes`), then work out the manifest, originals and RECORD to go with it
(:mod:`.bookkeeping`).  ``diff``, ``check`` and ``status`` stop here; ``apply`` hands
the :class:`Plan` to :mod:`.applying`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from packaging.version import Version

from ..discovery import VllmTree
from ..errors import CodemodError, ManifestError
from ..transforms.base import Status, Transform
from ..versions import force_hint, read_version, version_gate
from .bookkeeping import bookkeeping, hand_edited
from .changes import FileChange, build_change_set
from .options import OptionChange, PlanOptions, resolve_selection, resolve_values
from .records import Manifest, RecordedOptions
from .statedir import StateDir
from .tuning_choice import choose_table, ships_table, table_change, with_table_warps


def all_transforms() -> Sequence[Transform]:
    from ..transforms import ALL_TRANSFORMS

    return ALL_TRANSFORMS


@dataclass
class TransformState:
    """One transform's verdict on the tree, as commands report it."""

    name: str
    target: str
    status: Status
    reason: str
    details: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "target": self.target,
            "status": self.status.value,
            "reason": self.reason,
            "details": self.details,
        }


@dataclass
class Plan:
    """Everything ``apply`` would do, computed without writing a byte."""

    tree: VllmTree
    version: Optional[Version]
    version_source: str
    transforms: List[TransformState]
    not_selected: List[str]
    changes: List[FileChange]
    options: RecordedOptions
    option_changes: List[OptionChange]
    record: Optional[str]  # the vllm dist-info RECORD (relative to base), None if absent
    manifest_before: Manifest
    manifest_after: Manifest
    originals_to_save: Dict[str, bytes]
    bytecode_to_remove: List[str]
    #: patched files edited by hand since (see :func:`.bookkeeping.still_ours`)
    hand_edited: List[str] = field(default_factory=list)
    #: ``apply --discard-local-changes``: planned from the originals of those files
    discard_local_changes: bool = False
    #: files we added (the bundled kernels) edited by hand since: apply refuses to
    #: overwrite them unless ``--discard-local-changes``
    edited_added: List[str] = field(default_factory=list)
    #: files we ship found with our bytes but in no manifest (see
    #: :attr:`.changes.ChangeSet.unrecorded`): apply refuses, check and status report it
    unrecorded: List[str] = field(default_factory=list)
    #: ``--allow-owner-change``: see :func:`.transaction.owner_probe`
    allow_owner_change: bool = False
    #: why the version needs ``--force`` (None: inside the known range)
    version_problem: Optional[str] = None
    #: the version accepted past that gate (``--force`` now, or recorded by an
    #: ``apply --force`` on this very version): the manifest keeps it
    forced_version: Optional[str] = None

    @property
    def conflicts(self) -> List[TransformState]:
        return [t for t in self.transforms if t.status is Status.CONFLICT]

    @property
    def pending(self) -> bool:
        return bool(self.changes)

    @property
    def read_only(self) -> List[str]:
        """Files this plan replaces that have no write permission bit (mode 0444, say):
        replaced all the same (the directory allows it), mode kept, and said so."""
        return [c.path for c in self.changes if c.old is not None and _read_only(self.tree, c.path)]

    @property
    def options_change(self) -> bool:
        """Whether applying would record different options even if no file changes."""
        return self.manifest_before.patched and (
            self.manifest_before.options != self.manifest_after.options
        )

    def to_dict(self) -> Dict[str, Any]:
        return {
            "vllm_root": str(self.tree.root),
            "version": str(self.version) if self.version else None,
            "transforms": [t.to_dict() for t in self.transforms],
            "not_selected": list(self.not_selected),
            "changes": [
                {"path": c.path, "action": change_action(c), "transforms": list(c.transforms)}
                for c in self.changes
            ],
            "options": self.options.to_json(),
            "option_changes": [c.to_dict() for c in self.option_changes],
            "record": self.record,
        }


def _read_only(tree: VllmTree, rel: str) -> bool:
    try:
        return not os.stat(tree.path(rel)).st_mode & 0o222
    except OSError:
        return False


def unrecorded_note(plan: Plan) -> str:
    """Why a tree that already holds our files without a manifest is not ours to change,
    and the way on (shared by apply's refusal and check's and status's report)."""
    paths = [str(plan.tree.path(rel)) for rel in plan.unrecorded]
    where = paths[0]
    if len(paths) > 1:
        where = f"{os.path.commonpath(paths)}{os.sep} ({len(paths)} files)"
    return (
        f"{where}: vllm-codemod's files are in the tree but no manifest records them "
        "(patched by hand, e.g. `patch -p1` from `vllm-codemod diff`, or the tree's "
        ".vllm-codemod directory was removed), so vllm-codemod has no originals to revert "
        "to; to bring the tree under vllm-codemod, undo that patch (`patch -R -p1` with the "
        "same diff, or reinstall vllm) and run `vllm-codemod apply`"
    )


def change_action(change: FileChange) -> str:
    if change.old is None:
        return "add"
    if change.new is None:
        return "remove"
    return "patch"


def plan(
    tree: VllmTree,
    options: Optional[PlanOptions] = None,
    registry: Optional[Sequence[Transform]] = None,
) -> Plan:
    """What ``apply`` would do to ``tree`` with ``options``; reads, never writes.

    Refuses a tree with an unfinished run (run :func:`recover` first, under the lock).
    ``registry`` replaces the installed transforms (tests drive the engine with their own).
    """
    options = options or PlanOptions()
    registry = list(all_transforms()) if registry is None else list(registry)
    unreadable: Optional[CodemodError] = None
    try:
        version, version_source = read_version(tree)
        problem = version_gate(tree, version)
    except CodemodError as exc:
        version, version_source, problem, unreadable = None, "", str(exc), exc
    state = StateDir(tree)
    if state.has_journal():
        raise ManifestError(
            f"{state.journal_path}: an earlier run was interrupted; run `vllm-codemod apply` "
            "or `vllm-codemod revert` to finish it"
        )
    manifest = state.load_manifest()
    forced: Optional[str] = None
    if problem is not None:
        seen = str(version) if version is not None else "unknown"
        if options.accept_unknown_version or manifest.forced_version == seen:
            forced = seen
        elif unreadable is not None:
            raise unreadable
        else:
            raise CodemodError(f"{problem}; {force_hint(options.command)}")
    recorded = manifest.options
    chosen, only, skip = resolve_selection(options, recorded, registry)
    baked = choose_table(tree.root, options, recorded, chosen, registry)
    options = with_table_warps(options, baked, registry)
    values, option_changes = resolve_values(options, recorded, registry)
    option_changes += table_change(recorded, baked)
    previously_added = {rel: (e.sha256, e.transform) for rel, e in manifest.added.items()}
    edited = hand_edited(tree, manifest)
    change_set = build_change_set(
        tree,
        version,
        chosen,
        values,
        previously_added,
        registry=registry,
        explicit=only,
        tuning_table=baked.data if baked is not None else None,
        plan_from=edited if options.discard_local_changes else {},
    )
    after_options = RecordedOptions(
        values=dict(values),
        only=list(only),
        skip=list(skip),
        tuning=(
            baked.record(baked.data is not None and ships_table(change_set)) if baked else None
        ),
        has_tuning=True,
    )
    books = bookkeeping(change_set, manifest, after_options, edited_by_hand=set(edited))
    books.manifest_after.forced_version = forced
    return Plan(
        tree=tree,
        version=change_set.version,
        version_source=version_source,
        transforms=[
            TransformState(r.transform.name, r.target, r.status, r.reason, dict(r.details))
            for r in change_set.results
        ],
        not_selected=[t.name for t in registry if t not in chosen],
        changes=books.changes,
        options=after_options,
        option_changes=option_changes,
        record=books.record,
        manifest_before=manifest,
        manifest_after=books.manifest_after,
        originals_to_save=books.originals_to_save,
        bytecode_to_remove=books.bytecode_to_remove,
        hand_edited=books.hand_edited,
        discard_local_changes=options.discard_local_changes,
        edited_added=list(change_set.edited_added),
        unrecorded=list(change_set.unrecorded),
        allow_owner_change=options.allow_owner_change,
        version_problem=problem,
        forced_version=forced,
    )

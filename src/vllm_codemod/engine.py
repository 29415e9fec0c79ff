"""The engine: plan, apply, revert and inspect a vllm tree; the one owner of the manifest.

Commands parse options, call these functions and render the plain-data results; every
guarantee (nothing outside the tree, nothing we did not write, atomic and recoverable,
owners and modes kept, options remembered) lives here and in the modules it drives:
:mod:`planner` (what the transforms would change, pure), :mod:`manifest` (what we
changed before, validated), :mod:`record` (pip's RECORD) and :mod:`transaction` (how it
gets to disk).

Typical use, under the tree's lock::

    with engine.lock(tree):
        engine.recover(tree)
        plan = engine.plan(tree, PlanOptions(values={"num_warps": 2}))
        result = engine.apply(plan)

Two kinds of "force" are kept apart: :attr:`PlanOptions.accept_unknown_version` lets a
tree whose vLLM version is unknown or out of range be planned at all, and ``revert``'s
``discard_local_changes`` lets it overwrite or delete files changed since we wrote them.
"""

from __future__ import annotations

import csv
import datetime
import os
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from packaging.version import Version

from . import __version__, transaction
from .discovery import VllmTree
from .errors import (
    CodemodError,
    ConflictError,
    EnvironmentProblem,
    ManifestError,
    RefusalError,
    UserError,
)
from .fsutil import sha256_bytes, sha256_file, tree_lock
from .manifest import StateDir, deep_copy
from .planner import ChangeSet, FileChange, build_change_set
from .record import find_record, rewrite_record
from .transaction import (
    Recovery,
    bytecode_for,
    check_state_dir,
    commit,
    discard_uncommitted,
    remove_step,
    replaceable_probe,
    replay,
    rmdir_step,
    stage,
    writable_probe,
    write_step,
)
from .tuning import bake
from .versions import gate_version, read_version

LOCK_TIMEOUT_ENV = "VLLM_CODEMOD_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 30.0


def all_transforms() -> Sequence[Any]:
    from vllm_codemod.transforms import ALL_TRANSFORMS

    return ALL_TRANSFORMS


# --------------------------------------------------------------------------- options


@dataclass
class PlanOptions:
    """What the user asked for.  ``None`` / empty means "not given": the recorded value
    (from the last apply) is used, else the default."""

    only: Tuple[str, ...] = ()
    skip: Tuple[str, ...] = ()
    #: per-transform option values by option name (``num_warps``, ``v2_threshold``)
    values: Dict[str, Any] = field(default_factory=dict)
    #: plan a tree whose vLLM version is unknown or outside the known range
    accept_unknown_version: bool = False
    #: ``apply --tuning FILE``: a tuning table to ship (None: keep the recorded one)
    tuning: Optional[Path] = None
    #: ``--no-tuning``: drop the recorded tuning table
    drop_tuning: bool = False


@dataclass
class OptionChange:
    """An option given with a value other than the one the tree was patched with."""

    name: str
    flag: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.flag} {self.old} -> {self.new}"

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "flag": self.flag, "old": self.old, "new": self.new}


def lock_timeout() -> float:
    raw = os.environ.get(LOCK_TIMEOUT_ENV)
    if raw is None or raw == "":
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (0 <= value < 1e6):
        raise UserError(
            f"{LOCK_TIMEOUT_ENV}={raw!r}: not a number of seconds; set it to e.g. 30 or unset it"
        )
    return value


@contextmanager
def lock(tree: VllmTree) -> Iterator[None]:
    """Hold the tree's lock (waits up to ``VLLM_CODEMOD_LOCK_TIMEOUT`` seconds)."""
    with tree_lock(tree.root, lock_timeout()):
        yield


def _resolve_selection(
    options: PlanOptions, recorded: Dict[str, Any], registry: Sequence[Any]
) -> Tuple[List[Any], Tuple[str, ...], Tuple[str, ...]]:
    transforms = list(registry)
    known = {t.name for t in transforms}
    for name in (*options.only, *options.skip):
        if name not in known:
            raise UserError(
                f"unknown transform {name!r}; known: {', '.join(sorted(known))} "
                "(see `vllm-codemod list`)"
            )
    if options.only or options.skip:
        only, skip = tuple(options.only), tuple(options.skip)
    else:
        only = tuple(n for n in recorded.get("only") or () if n in known)
        skip = tuple(n for n in recorded.get("skip") or () if n in known)
    chosen = [t for t in transforms if (not only or t.name in only) and t.name not in skip]
    if not chosen:
        raise UserError("--only/--skip left no transform to run; check the names")
    return chosen, only, skip


def _resolve_values(
    options: PlanOptions, recorded: Dict[str, Any], registry: Sequence[Any]
) -> Tuple[Dict[str, Any], List[OptionChange]]:
    values: Dict[str, Any] = {}
    changes: List[OptionChange] = []
    for transform in registry:
        for opt in transform.options:
            given = options.values.get(opt.name)
            if given is not None:
                if opt.choices:
                    given = opt.type(given)
                if opt.minimum is not None and given < opt.minimum:
                    raise UserError(f"{opt.flag} {given}: must be at least {opt.minimum}")
            previous = recorded.get(opt.name)
            if given is not None:
                values[opt.name] = given
                if previous is not None and previous != given:
                    changes.append(OptionChange(opt.name, opt.flag, previous, given))
            elif previous is not None:
                values[opt.name] = previous
            else:
                values[opt.name] = opt.default
    return values, changes


# --------------------------------------------------------------------------- plan


@dataclass
class TransformState:
    name: str
    target: str
    status: str  # applied / pending / not-applicable / conflict
    reason: str
    details: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "target": self.target,
            "status": self.status,
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
    options: Dict[str, Any]
    option_changes: List[OptionChange]
    record: Optional[str]  # the vllm dist-info RECORD (relative to base), None if absent
    manifest_before: Dict[str, Any]
    manifest_after: Dict[str, Any]
    originals_to_save: Dict[str, bytes]
    bytecode_to_remove: List[str]

    @property
    def conflicts(self) -> List[TransformState]:
        return [t for t in self.transforms if t.status == "conflict"]

    @property
    def pending(self) -> bool:
        return bool(self.changes)

    @property
    def options_change(self) -> bool:
        """Whether applying would record different options even if no file changes."""
        before = self.manifest_before.get("options") or {}
        return bool(self.manifest_before["files"] or self.manifest_before["added"]) and (
            before != self.manifest_after["options"]
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
            "options": dict(self.options),
            "option_changes": [c.to_dict() for c in self.option_changes],
            "record": self.record,
        }


def change_action(change: FileChange) -> str:
    if change.old is None:
        return "add"
    if change.new is None:
        return "remove"
    return "patch"


def plan(
    tree: VllmTree, options: Optional[PlanOptions] = None, registry: Optional[Sequence[Any]] = None
) -> Plan:
    """What ``apply`` would do to ``tree`` with ``options``; reads, never writes.

    Refuses a tree with an unfinished run (run :func:`recover` first, under the lock).
    ``registry`` replaces the installed transforms (tests drive the engine with their own).
    """
    options = options or PlanOptions()
    registry = list(all_transforms()) if registry is None else list(registry)
    try:
        version, version_source = read_version(tree)
    except CodemodError:
        if not options.accept_unknown_version:
            raise
        version, version_source = None, ""
    gate_version(tree, version, options.accept_unknown_version)
    state = StateDir(tree)
    if state.has_journal():
        raise ManifestError(
            f"{state.journal_path}: an earlier run was interrupted; run `vllm-codemod apply` "
            "or `vllm-codemod revert` to finish it"
        )
    manifest = state.load_manifest()
    recorded = dict(manifest.get("options") or {})
    chosen, only, skip = _resolve_selection(options, recorded, registry)
    baked = _tuning(tree, options, recorded, chosen)
    if baked is not None and options.tuning is not None and baked.num_warps is not None:
        if options.values.get("num_warps") is None:  # an explicit --num-warps wins
            options = replace(options, values={**options.values, "num_warps": baked.num_warps})
    values, option_changes = _resolve_values(options, recorded, registry)
    option_changes += _tuning_change(recorded, baked)
    previously_added = {
        rel: (entry["sha256"], entry["transform"]) for rel, entry in manifest["added"].items()
    }
    transform_values = dict(values)
    if baked is not None and baked.data is not None:
        transform_values[bake.TABLE_OPTION] = baked.data
    change_set = build_change_set(
        tree, version, chosen, transform_values, previously_added, registry=registry, explicit=only
    )
    after_options: Dict[str, Any] = dict(values)
    after_options.update(
        {
            "only": list(only),
            "skip": list(skip),
            "tuning": (
                baked.record(baked.data is not None and _ships_table(change_set)) if baked else None
            ),
        }
    )
    return _bookkeeping(
        change_set,
        version_source,
        manifest,
        after_options,
        option_changes,
        [t.name for t in registry if t not in chosen],
    )


def _tuning(
    tree: VllmTree, options: PlanOptions, recorded: Dict[str, Any], chosen: Sequence[Any]
) -> Optional[bake.BakedTuning]:
    """The tuning table this plan ships (``apply --tuning``), validated; see tuning/bake.py."""
    baked = bake.choose(tree.root, options.tuning, options.drop_tuning, recorded.get("tuning"))
    names = {t.name for t in chosen}
    usable = bake.SHIPPED_BY in names or (
        baked is not None and baked.num_warps is not None and bake.WARPS_BY in names
    )
    if options.tuning is not None and not usable:
        raise UserError(
            f"--tuning: nothing selected can use the table ({bake.SHIPPED_BY} ships it with "
            f"the kernels, {bake.WARPS_BY} takes its warps); drop them from --skip / add "
            "them to --only"
        )
    return baked


def _ships_table(change_set: ChangeSet) -> bool:
    """Whether the transform that carries the tuning table applies to this tree."""
    return any(
        r.transform.name == bake.SHIPPED_BY and r.status.value in ("pending", "applied")
        for r in change_set.results
    )


def _tuning_change(
    recorded: Dict[str, Any], baked: Optional[bake.BakedTuning]
) -> List[OptionChange]:
    """``--tuning`` as an option change, like "--num-warps 4 -> 2" (a first apply: none)."""
    if "tuning" not in recorded:
        return []
    before = recorded["tuning"]
    old = before.get("sha256") if isinstance(before, dict) else None
    new = baked.sha256 if baked is not None else None
    if old == new:
        return []
    describe_old = f"{before.get('source')} ({old[:12]})" if old else "none"
    describe_new = f"{baked.source} ({new[:12]})" if baked is not None and new else "none"
    return [OptionChange("tuning", "--tuning", describe_old, describe_new)]


def _is_new_baseline(entry: Optional[Dict[str, Any]], current: Optional[bytes]) -> bool:
    """Whether ``current`` is an original to keep: never patched, or replaced since.

    A file that is neither our patched bytes nor the original we saved was replaced
    behind our back (a reinstall over a patched tree, say): its current bytes are the
    original that revert must bring back, not the stale copy from an older release.
    """
    if entry is None:
        return True
    digest = sha256_bytes(current) if current is not None else None
    return digest not in (entry.get("patched_sha256"), entry["original_sha256"])


def _dirs_to_create(tree: VllmTree, target: Path) -> List[str]:
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


def _bookkeeping(
    change_set: ChangeSet,
    version_source: str,
    manifest: Dict[str, Any],
    options: Dict[str, Any],
    option_changes: List[OptionChange],
    not_selected: List[str],
) -> Plan:
    """The manifest after apply, the originals to save, and the RECORD to match."""
    tree = change_set.tree
    state = StateDir(tree)
    after = deep_copy(manifest)
    after["tool_version"] = __version__
    after["vllm_version"] = str(change_set.version) if change_set.version else None
    after["options"] = options
    originals: Dict[str, bytes] = {}
    bytecode_remove: List[str] = []
    final_bytes: Dict[str, bytes] = {}
    changes = list(change_set.changes)
    for change in changes:
        target = tree.path(change.path)
        if change.added:
            if change.new is None:
                after["added"].pop(change.path, None)
            else:
                after["added"][change.path] = {
                    "sha256": sha256_bytes(change.new),
                    "transform": change.transforms[0],
                }
                created = set(after["created_dirs"]) | set(_dirs_to_create(tree, target))
                after["created_dirs"] = sorted(created)
            for pyc in bytecode_for(target):
                bytecode_remove.append(tree.rel(pyc))
            continue
        assert change.new is not None and change.old is not None
        entry = after["files"].get(change.path)
        first_touch = _is_new_baseline(entry, change.old)
        if first_touch:
            originals[change.path] = change.old
            entry = {
                "original_sha256": sha256_bytes(change.old),
                "mode": os.stat(target).st_mode & 0o7777,
                "transforms": [],
            }
            after["files"][change.path] = entry
        assert entry is not None
        entry["patched_sha256"] = sha256_bytes(change.new)
        entry["transforms"] = sorted(set(entry["transforms"]) | set(change.transforms))
        final_bytes[change.path] = change.new
        for pyc in bytecode_for(target):
            pyc_rel = tree.rel(pyc)
            if first_touch:
                data = pyc.read_bytes()
                originals[pyc_rel] = data
                after["bytecode"][pyc_rel] = sha256_bytes(data)
            bytecode_remove.append(pyc_rel)

    record_rel = _plan_record(tree, state, manifest, after, changes, originals, final_bytes)
    after["record"] = record_rel if record_rel in after["files"] else None
    results = [
        TransformState(r.transform.name, r.target, r.status.value, r.reason, dict(r.details))
        for r in change_set.results
    ]
    return Plan(
        tree=tree,
        version=change_set.version,
        version_source=version_source,
        transforms=results,
        not_selected=not_selected,
        changes=changes,
        options=options,
        option_changes=option_changes,
        record=record_rel,
        manifest_before=manifest,
        manifest_after=after,
        originals_to_save=originals,
        bytecode_to_remove=bytecode_remove,
    )


def _plan_record(
    tree: VllmTree,
    state: StateDir,
    before: Dict[str, Any],
    after: Dict[str, Any],
    changes: List[FileChange],
    originals: Dict[str, bytes],
    final_bytes: Dict[str, bytes],
) -> Optional[str]:
    """Append a RECORD change to ``changes`` when the tree will hold files pip must know.

    Returns the RECORD's path (relative to base) when there is one, else None.
    """
    path = find_record(tree)
    if path is None:
        return None
    rel = tree.rel(path)
    if not (set(after["files"]) - {rel}) and not after["added"]:
        return rel  # nothing of ours in the tree (after this run): RECORD stays as it is
    current = path.read_bytes()
    entry = after["files"].get(rel)
    if not _is_new_baseline(entry, current):
        assert entry is not None
        if sha256_bytes(current) == entry["original_sha256"]:
            original = current
        else:
            saved = state.originals(rel)
            original = saved.read_bytes() if saved.is_file() else b""
            if sha256_bytes(original) != entry["original_sha256"]:
                raise ManifestError(
                    f"{saved}: the saved original RECORD is missing or damaged; reinstall vllm"
                )
    else:
        original = current
        originals[rel] = current
        entry = {"original_sha256": sha256_bytes(current), "mode": None, "transforms": []}
        after["files"][rel] = entry
    hashed: Dict[str, bytes] = {}
    for file_rel in after["files"]:
        if file_rel == rel:
            continue
        data = final_bytes.get(file_rel)
        if data is None:
            data = tree.path(file_rel).read_bytes()
        hashed[file_rel] = data
    added_now = {c.path: c.new for c in changes if c.added and c.new is not None}
    for file_rel in after["added"]:
        data = added_now.get(file_rel)
        hashed[file_rel] = data if data is not None else tree.path(file_rel).read_bytes()
    entry["mode"] = path.stat().st_mode & 0o7777
    try:
        new = rewrite_record(
            original,
            hashed,
            unhashed=state.state_files(after),
            dropped=list(after["bytecode"]),
        )
    except (UnicodeDecodeError, csv.Error) as exc:  # a damaged install, not our bug
        raise UserError(
            f"{path}: unreadable RECORD ({exc}); reinstall vllm, or delete the RECORD file "
            "to patch the tree without it"
        ) from None
    entry["patched_sha256"] = sha256_bytes(new)
    if new != current:
        changes.append(FileChange(rel, current, new, [], added=False))
    return rel


# --------------------------------------------------------------------------- apply


@dataclass
class TransformOutcome:
    name: str
    target: str
    outcome: str  # "applied", "already applied", "skipped: <reason>", "conflict: <reason>"
    reason: str = ""
    details: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "target": self.target,
            "outcome": self.outcome,
            "reason": self.reason,
            "details": dict(self.details),
        }


@dataclass
class ApplyResult:
    vllm_root: str
    version: Optional[str]
    changed: List[Dict[str, str]]  # {"path", "action": add/patch/remove}
    transforms: List[TransformOutcome]
    options: Dict[str, Any]
    option_changes: List[OptionChange]
    record: Optional[str]
    wrote: bool

    def to_dict(self) -> Dict[str, Any]:
        return {
            "vllm_root": self.vllm_root,
            "version": self.version,
            "changed": list(self.changed),
            "transforms": [t.to_dict() for t in self.transforms],
            "options": dict(self.options),
            "option_changes": [c.to_dict() for c in self.option_changes],
            "record": self.record,
        }


def conflict_error(plan: Plan) -> ConflictError:
    lines = [f"{t.target}: {t.name}: {t.reason}" for t in plan.conflicts]
    return ConflictError("; ".join(lines) + "; nothing was changed")


def _outcomes(plan: Plan) -> List[TransformOutcome]:
    out: List[TransformOutcome] = []
    for t in plan.transforms:
        if t.status == "pending":
            outcome = "applied"
        elif t.status == "applied":
            outcome = "already applied"
        elif t.status == "not-applicable":
            outcome = f"skipped: {t.reason}"
        else:
            outcome = f"conflict: {t.reason}"
        out.append(TransformOutcome(t.name, t.target, outcome, t.reason, dict(t.details)))
    for name in plan.not_selected:
        out.append(TransformOutcome(name, "", "skipped: not selected (--only/--skip)"))
    return out


def apply(plan: Plan) -> ApplyResult:
    """Write ``plan`` to its tree, all or nothing.  The caller holds the lock."""
    if plan.conflicts:
        raise conflict_error(plan)
    tree = plan.tree
    state = StateDir(tree)
    result = ApplyResult(
        vllm_root=str(tree.root),
        version=str(plan.version) if plan.version else None,
        changed=[{"path": c.path, "action": change_action(c)} for c in plan.changes],
        transforms=_outcomes(plan),
        options=dict(plan.options),
        option_changes=list(plan.option_changes),
        record=plan.record,
        wrote=False,
    )
    if not plan.changes and not plan.options_change:
        return result
    for change in plan.changes:
        current = tree.path(change.path)
        if sha256_file(current) != (sha256_bytes(change.old) if change.old is not None else None):
            raise RefusalError(
                f"{current}: changed after it was planned (another program wrote it); run "
                "again; nothing was changed"
            )
    check_state_dir(state)
    _probe(plan, state)
    manifest = deep_copy(plan.manifest_after)
    manifest["patched_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"
    )
    try:
        steps: List[Dict[str, Any]] = []
        for rel, data in sorted(plan.originals_to_save.items()):
            source = stage(state, "originals", rel, data)
            steps.append(
                write_step(tree.rel(state.originals(rel)), source, sha256_bytes(data), None)
            )
        for rel in plan.bytecode_to_remove:
            steps.append(remove_step(rel))
        record_step: List[Dict[str, Any]] = []
        for change in plan.changes:
            if change.new is None:
                steps.append(remove_step(change.path))
                continue
            source = stage(state, "new", change.path, change.new)
            step = write_step(
                change.path, source, sha256_bytes(change.new), 0o644 if change.added else None
            )
            (record_step if change.path == plan.record else steps).append(step)
        journal = commit(state, "apply", steps + record_step, manifest)
    except EnvironmentProblem as exc:
        discard_uncommitted(state)
        raise EnvironmentProblem(
            exc.path,
            errno=exc.errno,
            hint="nothing in the tree was changed; free space or fix permissions and run again",
        ) from None
    try:
        replay(state, journal)
    except EnvironmentProblem as exc:
        raise EnvironmentProblem(
            exc.path,
            errno=exc.errno,
            hint="apply stopped part-way; fix that and run `vllm-codemod apply` to finish "
            "(or `vllm-codemod revert` to undo)",
        ) from None
    result.wrote = True
    return result


def _probe(plan: Plan, state: StateDir) -> None:
    tree = plan.tree
    directories = {state.path}
    for change in plan.changes:
        target = tree.path(change.path)
        directories.add(Path(os.path.realpath(target)).parent)
        directories.update(pyc.parent for pyc in bytecode_for(target))
        replaceable_probe(target)
    for directory in sorted(directories):
        writable_probe(directory)


# --------------------------------------------------------------------------- revert


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


def revert(tree: VllmTree, discard_local_changes: bool = False) -> RevertResult:
    """Restore every file the tool changed and remove what it added.  Caller holds the lock.

    A file changed since we wrote it is refused (nothing written) unless
    ``discard_local_changes``; a path the manifest does not name is never touched,
    except the cached bytecode of files we restore or remove (so none of it can pass
    for fresh against the restored source).
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
    steps: List[Dict[str, Any]] = []
    for rel, entry in sorted(manifest["files"].items()):
        target = tree.path(rel)
        current = sha256_file(target)
        for pyc in bytecode_for(target):
            steps.append(remove_step(tree.rel(pyc)))
        if current == entry["original_sha256"]:
            continue
        if current != entry.get("patched_sha256") and not discard_local_changes:
            raise RefusalError(
                f"{target}: changed since vllm-codemod patched it (was it reinstalled?); "
                "reverting would discard that change; pass --force to restore the original anyway"
            )
        original = state.originals(rel)
        if sha256_file(original) != entry["original_sha256"]:
            raise ManifestError(
                f"{original}: the saved original is missing or damaged; cannot revert {rel}; "
                "reinstall vllm to get a clean tree"
            )
        replaceable_probe(target)
        writable_probe(Path(os.path.realpath(target)).parent)
        steps.append(
            write_step(rel, state.rel(original), entry["original_sha256"], entry.get("mode"))
        )
        result.restored.append(rel)
    for rel, entry in sorted(manifest["added"].items()):
        target = tree.path(rel)
        current = sha256_file(target)
        if current is not None and current != entry["sha256"] and not discard_local_changes:
            raise RefusalError(
                f"{target}: changed since vllm-codemod added it; pass --force to remove it anyway"
            )
        for pyc in bytecode_for(target):
            steps.append(remove_step(tree.rel(pyc)))
        if current is not None:
            writable_probe(target.parent)
        steps.append(remove_step(rel))
        result.restored.append(rel)
    for rel, digest in sorted(manifest["bytecode"].items()):
        source = state.originals(rel)
        if sha256_file(source) == digest:
            steps.append(write_step(rel, state.rel(source), digest, None))
    steps += _created_dir_steps(manifest)
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


def _created_dir_steps(manifest: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Remove the directories apply created, deepest first, each only if it is empty.

    Only directories the manifest records are candidates (a manifest from before they
    were recorded names none, so then no directory is removed), plus the ``__pycache__``
    directly inside one of them: Python made it for our own modules, whose bytecode the
    steps before have removed; anything else in it (or in the directory) keeps both.
    """
    steps: List[Dict[str, Any]] = []
    for rel in sorted(manifest["created_dirs"], key=lambda r: (-r.count("/"), r)):
        steps.append(rmdir_step(f"{rel}/__pycache__"))
        steps.append(rmdir_step(rel))
    return steps


# --------------------------------------------------------------------------- recover / status


def recover(
    tree: VllmTree,
    finish: bool = True,
    best_effort: bool = False,
    registry: Optional[Sequence[Any]] = None,
    dry_run: bool = False,
) -> Recovery:
    """Finish an interrupted run and remove our debris (see :func:`transaction.recover`).

    ``best_effort`` is for ``check``: debris that cannot be removed (a read-only tree)
    is left in place rather than failing the command.  ``dry_run`` (``diff``,
    ``status``) writes nothing and lists the debris a recovery would remove.
    """
    from vllm_codemod.transforms.paged_attention_v2 import KERNEL_DIR

    registry = all_transforms() if registry is None else registry
    dirs = {tree.path(f"{tree.root.name}/{t.target}").parent for t in registry}
    dirs.add(tree.root / KERNEL_DIR)
    record = find_record(tree)
    if record is not None:
        dirs.add(record.parent)
    try:
        return transaction.recover(tree, dirs, finish=finish, dry_run=dry_run)
    except EnvironmentProblem:
        if not best_effort:
            raise
        return Recovery()


def debris(tree: VllmTree, registry: Optional[Sequence[Any]] = None) -> List[str]:
    """Leftovers of an interrupted run that the next ``apply``/``revert`` would remove
    (paths relative to the tree's base, a directory with a trailing ``/``); reads only."""
    return recover(tree, finish=False, best_effort=True, registry=registry, dry_run=True).removed


@dataclass
class Status:
    """Where a tree stands: the plan with the recorded options, plus what we know of it."""

    plan: Plan
    patched: bool
    tool_version: Optional[str]
    patched_at: Optional[str]
    recorded_options: Dict[str, Any]
    record: Optional[str]

    def to_dict(self) -> Dict[str, Any]:
        data = self.plan.to_dict()
        data.update(
            {
                "patched": self.patched,
                "tool_version": self.tool_version,
                "patched_at": self.patched_at,
                "recorded_options": dict(self.recorded_options),
                "record": self.record,
                "pending": self.plan.pending,
            }
        )
        return data


def status(
    tree: VllmTree, options: Optional[PlanOptions] = None, registry: Optional[Sequence[Any]] = None
) -> Status:
    the_plan = plan(tree, options, registry)
    manifest = the_plan.manifest_before
    patched = bool(manifest["files"] or manifest["added"])
    return Status(
        plan=the_plan,
        patched=patched,
        tool_version=manifest.get("tool_version") if patched else None,
        patched_at=manifest.get("patched_at") if patched else None,
        recorded_options=dict(manifest.get("options") or {}),
        record=the_plan.record,
    )

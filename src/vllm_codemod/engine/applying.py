"""``apply``: write a :class:`Plan` to its tree, all or nothing.

Everything the run will write is staged first, then one journal commits it (see
:mod:`.transaction`); a crash before the journal leaves the tree untouched, one after
it is finished by the next run.
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..errors import ConflictError, EnvironmentProblem, RefusalError
from ..fsutil import sha256_bytes, sha256_file
from ..transforms.base import Status
from .journal import Step
from .options import OptionChange
from .planning import Plan, change_action, unrecorded_note
from .records import RecordedOptions
from .statedir import StateDir
from .transaction import (
    bytecode_for,
    check_state_dir,
    commit,
    discard_uncommitted,
    owner_probe,
    remove_step,
    replaceable_probe,
    replay,
    stage,
    writable_probe,
    write_step,
)

log = logging.getLogger(__name__)


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
    options: RecordedOptions
    option_changes: List[OptionChange]
    record: Optional[str]
    wrote: bool

    def to_dict(self) -> Dict[str, Any]:
        return {
            "vllm_root": self.vllm_root,
            "version": self.version,
            "changed": list(self.changed),
            "transforms": [t.to_dict() for t in self.transforms],
            "options": self.options.to_json(),
            "option_changes": [c.to_dict() for c in self.option_changes],
            "record": self.record,
        }


def conflict_error(plan: Plan) -> ConflictError:
    lines = [f"{t.target}: {t.name}: {t.reason}" for t in plan.conflicts]
    return ConflictError("; ".join(lines) + "; nothing was changed")


_OUTCOME = {Status.PENDING: "applied", Status.APPLIED: "already applied"}
_WITH_REASON = {Status.NOT_APPLICABLE: "skipped", Status.CONFLICT: "conflict"}


def _outcomes(plan: Plan) -> List[TransformOutcome]:
    out: List[TransformOutcome] = []
    for t in plan.transforms:
        outcome = _OUTCOME.get(t.status) or f"{_WITH_REASON[t.status]}: {t.reason}"
        out.append(TransformOutcome(t.name, t.target, outcome, t.reason, dict(t.details)))
    for name in plan.not_selected:
        out.append(TransformOutcome(name, "", "skipped: not selected (--only/--skip)"))
    return out


def hand_edit_error(plan: Plan) -> RefusalError:
    paths = ", ".join(str(plan.tree.path(rel)) for rel in plan.hand_edited)
    return RefusalError(
        f"{paths}: edited by hand since vllm-codemod patched it (its changes are still in "
        "it); apply would overwrite that edit; nothing was changed; run `vllm-codemod "
        "revert --discard-local-changes` to restore the original, or `vllm-codemod apply "
        "--discard-local-changes` to overwrite the edit (the original stays saved)"
    )


def apply(plan: Plan) -> ApplyResult:
    """Write ``plan`` to its tree, all or nothing.  The caller holds the lock.

    A patched file edited by hand since is refused unless the plan was made to discard
    local changes: then our output replaces the edit, and the original saved first
    stays the one ``revert`` restores.
    """
    if plan.conflicts:
        raise conflict_error(plan)
    if plan.hand_edited and not plan.discard_local_changes:
        raise hand_edit_error(plan)
    if plan.unrecorded:
        raise RefusalError(f"{unrecorded_note(plan)}; nothing was changed")
    if plan.edited_added and not plan.discard_local_changes:
        paths = ", ".join(str(plan.tree.path(rel)) for rel in plan.edited_added)
        raise RefusalError(
            f"{paths}: changed since vllm-codemod added it; apply would overwrite that "
            "change; nothing was changed; run `vllm-codemod apply --discard-local-changes` "
            "to put vllm-codemod's copy back, or `vllm-codemod revert "
            "--discard-local-changes` to remove it with the rest of the patch"
        )
    tree = plan.tree
    state = StateDir(tree)
    result = ApplyResult(
        vllm_root=str(tree.root),
        version=str(plan.version) if plan.version else None,
        changed=[{"path": c.path, "action": change_action(c)} for c in plan.changes],
        transforms=_outcomes(plan),
        options=plan.options,
        option_changes=list(plan.option_changes),
        record=plan.record,
        wrote=False,
    )
    if not plan.changes and not plan.options_change:
        log.info("nothing to write: every selected transform is applied or not applicable")
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
    owner_probe(tree, [c.path for c in plan.changes if c.old is not None], plan.allow_owner_change)
    manifest = plan.manifest_after.copy()
    manifest.patched_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    try:
        steps: List[Step] = []
        for rel, data in sorted(plan.originals_to_save.items()):
            source = stage(state, "originals", rel, data)
            steps.append(
                write_step(tree.rel(state.originals(rel)), source, sha256_bytes(data), None)
            )
        for rel in plan.bytecode_to_remove:
            steps.append(remove_step(rel))
        record_step: List[Step] = []
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
        log.info("committed %d step(s) to %s", len(journal.steps), state.journal_path)
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

"""Turn a tree plus a set of transforms into an in-memory change set.

Nothing here writes: ``diff`` and ``check`` stop after planning, ``apply`` hands the
result to :mod:`.transaction`.  Each target is read and parsed once, and
transforms that share a target see each other's output in registry order.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Dict, List, Mapping, Optional, Sequence, Tuple

from packaging.version import Version

from ..discovery import VllmTree
from ..errors import CodemodError, RefusalError, UserError
from ..excerpt import make_excerpt
from ..fsutil import sha256_bytes
from ..parse_errors import parse_error_position
from ..textcodec import TextForm, decode
from ..transforms.base import Status, Transform, TransformContext, Verdict
from ..transforms.fork_markers import find_fork_markers
from . import verdict_cache

if TYPE_CHECKING:
    import libcst as cst

log = logging.getLogger(__name__)


@dataclass
class TransformResult:
    """A transform's verdict on this tree, as the change set carries it."""

    transform: Transform
    target: str  # relative to the tree's base, e.g. "vllm/_custom_ops.py"
    status: Status
    reason: str
    details: Dict[str, Any] = field(default_factory=dict)


@dataclass
class FileChange:
    """One file's bytes before and after; ``None`` means absent."""

    path: str  # relative to the tree's base
    old: Optional[bytes]
    new: Optional[bytes]
    transforms: List[str] = field(default_factory=list)
    added: bool = False  # a file the tool ships into the tree (removed on revert)


@dataclass
class ChangeSet:
    tree: VllmTree
    version: Optional[Version]
    results: List[TransformResult]
    changes: List[FileChange]
    #: files we added that were changed since (by hand): planned like any other
    #: difference, so check reports it; apply refuses to overwrite them unless told to
    edited_added: List[str] = field(default_factory=list)
    #: files we ship that are already in the tree with exactly our bytes, which no
    #: manifest records (a tree patched by hand from our diff, or one whose state
    #: directory was removed): reported by check and status, refused by apply
    unrecorded: List[str] = field(default_factory=list)

    @property
    def conflicts(self) -> List[TransformResult]:
        return [r for r in self.results if r.status is Status.CONFLICT]

    @property
    def pending(self) -> bool:
        return bool(self.changes)


def _inside_tree(tree: VllmTree, rel: str) -> Path:
    """``rel``'s path, refusing one whose symlinks lead out of the vllm package."""
    path = tree.path(rel)
    real = os.path.realpath(path)
    root = os.path.realpath(tree.root)
    if not real.startswith(root + os.sep):
        raise RefusalError(
            f"{path}: resolves to {real}, outside {tree.root}; vllm-codemod only writes inside "
            "the vllm package (replace the symlink with the file, or leave the tree alone)"
        )
    return path


def _refuse_missing_targets(tree: VllmTree, transforms: Sequence[Transform]) -> None:
    """Name every missing target at once, so one fix-up round is enough."""
    missing = [t for t in transforms if not tree.path(f"{tree.root.name}/{t.target}").exists()]
    if not missing:
        return
    paths = ", ".join(str(tree.path(f"{tree.root.name}/{t.target}")) for t in missing)
    skips = " ".join(f"--skip {t.name}" for t in missing)
    targeted = ", ".join(t.name for t in missing)
    raise UserError(
        f"{paths}: missing, but {targeted} target{'s' if len(missing) == 1 else ''} "
        f"{'it' if len(missing) == 1 else 'them'}; this tree is not a complete vLLM install "
        f"(pass {skips} to leave {'it' if len(missing) == 1 else 'them'} out)"
    )


def _read_target(tree: VllmTree, rel: str, transform: Transform) -> bytes:
    path = _inside_tree(tree, rel)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CodemodError(
            f"{path}: missing, but {transform.name} targets it; this tree is not a complete "
            f"vLLM install (pass --skip {transform.name} to leave it out)"
        ) from None
    except OSError as exc:
        raise CodemodError(f"{path}: cannot read it ({exc.strerror})") from None


def _decode(path: Path, data: bytes) -> Tuple[str, TextForm]:
    try:
        return decode(data)
    except UnicodeDecodeError as exc:
        raise CodemodError(
            f"{path}: not UTF-8 (byte {exc.start}); vLLM sources are UTF-8, so this file is "
            "damaged; reinstall it"
        ) from None


def _parse(path: Path, text: str, transform: Transform) -> cst.Module:
    import libcst as cst

    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        line, column, what = parse_error_position(text, exc)
        raise CodemodError(
            f"{path}:{line}:{column}: cannot parse this file ({what}); "
            f"repair it or pass --skip {transform.name}"
        ) from None


def _plan_text(
    path: Path, text: str, transform: Transform, context: TransformContext
) -> Tuple[Verdict, Optional[str]]:
    """Run one transform on ``text``; returns its verdict and the new text when pending.

    Transforms that name anchors see only the top-level statements defining them
    (see :mod:`vllm_codemod.excerpt`); any edit an excerpt cannot carry back falls
    back to planning on the whole file.
    """
    import libcst as cst  # here, not above: a cached verdict needs no parser

    anchors = getattr(transform, "anchors", ())
    excerpt = make_excerpt(text, anchors) if anchors else None
    if excerpt is not None:
        try:
            module = excerpt.parse()
        except cst.ParserSyntaxError:
            module = None
        if module is not None:
            log.debug("%s: parsed %d statement(s) of %s", transform.name, len(module.body), path)
            verdict = transform.plan(module, context)
            if verdict.status is not Status.PENDING or verdict.module is None:
                return verdict, None
            new_text = excerpt.splice(module, verdict.module)
            if new_text is not None:
                return verdict, new_text
    log.debug("%s: parsing all of %s", transform.name, path)
    verdict = transform.plan(_parse(path, text, transform), context)
    if verdict.status is Status.PENDING and verdict.module is not None:
        return verdict, verdict.module.code
    return verdict, None


def _plan_remembered(
    tree: VllmTree, path: Path, text: str, transform: Transform, context: TransformContext
) -> Tuple[Verdict, Optional[str]]:
    """:func:`_plan_text`, or the verdict an earlier run stored (see :mod:`.verdict_cache`)."""
    key, verdict = verdict_cache.lookup(tree, transform, text, context)
    if verdict is not None:
        return verdict, None
    log.debug("%s: planning on %s", transform.name, path)
    verdict, new_text = _plan_text(path, text, transform, context)
    verdict_cache.store(key, transform, verdict)
    return verdict, new_text


def _compiles(path: Path, code: str, transform: Transform) -> None:
    try:
        compile(code, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        # A transform produced invalid Python: a bug of ours, never the user's to fix.
        raise CodemodError(
            f"{path}: {transform.name} produced code that does not compile ({exc.msg}, line "
            f"{exc.lineno}); nothing was written; please report this with the file attached"
        ) from None


def build_change_set(
    tree: VllmTree,
    version: Optional[Version],
    transforms: Sequence[Transform],
    options: Mapping[str, Any],
    previously_added: Mapping[str, Tuple[str, str]],
    registry: Sequence[Transform] = (),
    explicit: Collection[str] = (),
    tuning_table: Optional[bytes] = None,
    plan_from: Mapping[str, bytes] = {},
) -> ChangeSet:
    """Ask every transform for its verdict.

    ``previously_added`` is the manifest's record of shipped files (path -> (sha256,
    transform)); a file a transform shipped before but no longer ships is removed,
    unless someone changed it since.  ``registry`` holds every known transform, so a
    transform's ``requires`` can be checked even when the user left that one out.
    ``explicit`` names the transforms the user asked for with ``--only``;
    ``tuning_table`` is the table ``apply --tuning`` ships (see :class:`Bundle`).
    Transforms that ship the same file (a shared bundle) must agree on its bytes.
    ``plan_from`` gives other bytes to plan a target from than the ones in the tree
    (the saved original of a hand-edited file whose edit is to be discarded).
    """
    context = TransformContext(
        vllm_root=tree.root,
        version=version,
        options=dict(options),
        fork_markers=find_fork_markers(tree.root, version),
        explicitly_selected=frozenset(explicit),
        tuning_table=tuning_table,
    )
    results: List[TransformResult] = []
    sources: Dict[str, bytes] = {}
    texts: Dict[str, str] = {}
    forms: Dict[str, TextForm] = {}
    touched_by: Dict[str, List[str]] = {}
    wanted_files: Dict[str, bytes] = {}
    wanted_by: Dict[str, List[str]] = {}

    _refuse_missing_targets(tree, transforms)
    for transform in transforms:
        rel = f"{tree.rel(tree.root)}/{transform.target}"
        path = tree.path(rel)
        if rel not in texts:
            sources[rel] = _read_target(tree, rel, transform)
            texts[rel], forms[rel] = _decode(path, plan_from.get(rel, sources[rel]))
        verdict, new_text = _plan_remembered(tree, path, texts[rel], transform, context)
        result = TransformResult(
            transform, rel, verdict.status, verdict.reason, dict(verdict.details)
        )
        log.info("%s: %s: %s (%s)", transform.name, rel, verdict.status.value, verdict.reason)
        results.append(result)
        if verdict.status is Status.PENDING:
            if new_text is None:
                raise CodemodError(f"{path}: {transform.name} is pending but planned no edit")
            _compiles(path, new_text, transform)
            texts[rel] = new_text
            touched_by.setdefault(rel, []).append(transform.name)
        if verdict.status in (Status.PENDING, Status.APPLIED):
            for added_rel, data in verdict.added_files.items():
                full_rel = f"{tree.rel(tree.root)}/{added_rel}"
                if wanted_files.setdefault(full_rel, data) != data:
                    raise CodemodError(
                        f"{tree.path(full_rel)}: {wanted_by[full_rel][0]} and "
                        f"{transform.name} ship different bytes for it; nothing was written; "
                        "please report this"
                    )
                wanted_by.setdefault(full_rel, []).append(transform.name)

    _check_requirements(tree, results, registry, texts, context)

    changes: List[FileChange] = []
    for rel, names in touched_by.items():
        new = forms[rel].encode(texts[rel])
        if new != sources[rel]:
            changes.append(FileChange(rel, sources[rel], new, names))

    stale_names = set()
    edited_added: List[str] = []
    unrecorded: List[str] = []
    for rel, data in sorted(wanted_files.items()):
        current = _read_optional(_inside_tree(tree, rel))
        if _edited_since_added(rel, current, previously_added):
            edited_added.append(rel)
        elif current == data and rel not in previously_added:
            unrecorded.append(rel)
        else:
            _refuse_unowned(tree, rel, current, previously_added)
        if current != data:
            log.debug("%s: to %s", rel, "add" if current is None else "update")
            changes.append(FileChange(rel, current, data, list(wanted_by[rel]), added=True))
            if rel not in edited_added:
                stale_names.update(wanted_by[rel])
    shipping = {name for names in wanted_by.values() for name in names}
    for rel, (digest, owner) in sorted(previously_added.items()):
        if rel in wanted_files or owner not in shipping:
            continue
        current = _read_optional(tree.path(rel))
        if current is not None and sha256_bytes(current) == digest:
            changes.append(FileChange(rel, current, None, [], added=True))

    for result in results:
        if result.status is Status.APPLIED and result.transform.name in stale_names:
            result.status = Status.PENDING
            result.reason = (
                "the bundled kernels in the tree differ from this tool's; apply updates them"
            )
    return ChangeSet(tree, version, results, changes, edited_added, unrecorded)


def _edited_since_added(
    rel: str, current: Optional[bytes], previously_added: Mapping[str, Tuple[str, str]]
) -> bool:
    """Whether ``rel`` is a file we added (the manifest says so) whose bytes changed since."""
    recorded = previously_added.get(rel)
    return recorded is not None and current is not None and recorded[0] != sha256_bytes(current)


def _check_requirements(
    tree: VllmTree,
    results: List[TransformResult],
    registry: Sequence[Transform],
    texts: Dict[str, str],
    context: TransformContext,
) -> None:
    """Turn a pending edit into a conflict when a transform it relies on stays pending."""
    by_name = {r.transform.name: r for r in results}
    known = {t.name: t for t in registry}
    for result in results:
        if result.status is not Status.PENDING:
            continue
        for name in result.transform.requires:
            if name in by_name:
                continue  # planned in this same run: applied together or the run refuses
            required = known.get(name)
            if required is None:
                continue
            rel = f"{tree.rel(tree.root)}/{required.target}"
            path = tree.path(rel)
            if rel not in texts:
                try:
                    texts[rel] = _decode(path, path.read_bytes())[0]
                except FileNotFoundError:
                    continue
            probe, _ = _plan_text(path, texts[rel], required, context)
            if probe.status in (Status.PENDING, Status.CONFLICT):
                log.info(
                    "%s: conflict: needs %s, which is %s",
                    result.transform.name,
                    name,
                    probe.status.value,
                )
                result.status = Status.CONFLICT
                result.reason = (
                    f"needs {name} ({probe.status.value}: {probe.reason}); "
                    f"run it in the same apply (drop --skip {name} / add --only {name})"
                )


def _refuse_unowned(
    tree: VllmTree,
    rel: str,
    current: Optional[bytes],
    previously_added: Mapping[str, Tuple[str, str]],
) -> None:
    """Refuse to take over a file the manifest does not prove we wrote.

    Overwriting it now would lose someone's file, and revert would later delete it.
    """
    if current is None:
        return
    recorded = previously_added.get(rel)
    if recorded is not None and recorded[0] == sha256_bytes(current):
        return
    why = "changed since vllm-codemod added it" if recorded else "not written by vllm-codemod"
    raise RefusalError(
        f"{tree.path(rel)}: already exists and is {why}; move it away (or reinstall vllm) "
        "and run again; nothing was changed"
    )


def _read_optional(path: Path) -> Optional[bytes]:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None

"""Run one transform on a source string and check what it does, the way the engine would.

``assert_codemod(transform, before, after, **options)`` is the one assertion the
transform tests share: the edit is exactly ``after``, compiles, and a second run on
``after`` changes nothing (idempotence); the engine's faster path (parse only the
anchored statements, splice them back) must give the same text.  ``assert_refused``
pins a conflict and its reason, ``assert_unchanged`` a run that writes nothing.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Collection, Optional, Tuple, Union

import libcst as cst
from packaging.version import Version

from vllm_codemod.excerpt import make_excerpt
from vllm_codemod.transforms import get_transform
from vllm_codemod.transforms.base import Status, Transform, TransformContext, Verdict

TransformLike = Union[str, Transform]


def make_context(
    transform: Transform,
    version: Optional[str] = None,
    fork_markers: Optional[Tuple[str, ...]] = None,
    explicitly_selected: Collection[str] = (),
    **options: Any,
) -> TransformContext:
    """A context as the planner builds it; unknown option names are a test bug."""
    known = {opt.name for opt in transform.options}
    unknown = set(options) - known
    if unknown:
        raise TypeError(f"{transform.name} has no option(s) {sorted(unknown)}; known: {known}")
    return TransformContext(
        vllm_root=Path("/nonexistent/vllm"),
        version=None if version is None else Version(version),
        options=options,
        fork_markers=fork_markers,
        explicitly_selected=frozenset(explicitly_selected),
    )


def run_codemod(transform: TransformLike, code: str, **context: Any) -> Verdict:
    """One plan of ``transform`` on ``code`` (dedented); context as for ``make_context``."""
    resolved = _resolve(transform)
    return resolved.plan(cst.parse_module(textwrap.dedent(code)), make_context(resolved, **context))


def assert_codemod(transform: TransformLike, before: str, after: str, **context: Any) -> Verdict:
    """``transform`` rewrites ``before`` into exactly ``after``, idempotently.

    ``before`` and ``after`` are dedented first, so tests may indent them.  Returns the
    plan of the first run (its reason and details are the caller's to check).
    """
    resolved = _resolve(transform)
    before, after = textwrap.dedent(before), textwrap.dedent(after)
    plan = run_codemod(resolved, before, **context)
    assert plan.status is Status.PENDING, f"{plan.status.value}: {plan.reason}"
    assert plan.module is not None
    new = plan.module.code
    assert new == after, _diff(after, new)
    compile(new, "<after>", "exec", dont_inherit=True)
    _assert_excerpt_agrees(resolved, before, plan, context)
    again = run_codemod(resolved, new, **context)
    assert again.status is Status.APPLIED, f"not idempotent: {again.status.value}: {again.reason}"
    assert again.module is None
    return plan


def assert_unchanged(
    transform: TransformLike, code: str, status: Status = Status.APPLIED, **context: Any
) -> Verdict:
    """``transform`` answers ``status`` on ``code`` and plans no edit."""
    plan = run_codemod(transform, code, **context)
    assert plan.status is status, f"{plan.status.value}: {plan.reason}"
    assert plan.module is None
    return plan


def assert_refused(transform: TransformLike, code: str, *needles: str, **context: Any) -> Verdict:
    """``transform`` answers ``conflict`` on ``code``, and its reason says every needle."""
    plan = assert_unchanged(transform, code, Status.CONFLICT, **context)
    for needle in needles:
        assert needle in plan.reason, f"{needle!r} not in {plan.reason!r}"
    return plan


def _resolve(transform: TransformLike) -> Transform:
    return get_transform(transform) if isinstance(transform, str) else transform


def _assert_excerpt_agrees(transform: Transform, before: str, full: Verdict, context: Any) -> None:
    """The planner's anchored path (see vllm_codemod.excerpt) yields the same file."""
    excerpt = make_excerpt(before, transform.anchors) if transform.anchors else None
    if excerpt is None:
        return
    small = excerpt.parse()
    part = transform.plan(small, make_context(transform, **context))
    assert (part.status, part.reason) == (full.status, full.reason)
    spliced = excerpt.splice(small, part.module) if part.module is not None else None
    if spliced is not None:  # None: the planner falls back to the whole file
        assert full.module is not None
        assert spliced == full.module.code, _diff(full.module.code, spliced)


def _diff(expected: str, actual: str) -> str:
    import difflib

    return "expected -> actual:\n" + "".join(
        difflib.unified_diff(
            expected.splitlines(True), actual.splitlines(True), "expected", "actual"
        )
    )

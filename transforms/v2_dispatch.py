"""``v2-dispatch``: restore upstream's V1/V2 choice in ``PagedAttention.forward_decode``.

BI-V100 forks force ``use_v1 = True`` so that decode never reaches the (stubbed) V2
kernel.  V1 launches one program per (sequence, head) that walks the whole context, so a
batch of a few 100K-token sequences leaves most of the chip idle; V2 splits the context
into 512-token partitions and reduces them.  With ``paged-attention-v2`` providing a V2
kernel again, this transform puts back upstream's heuristic::

    use_v1 = max_seq_len <= T and (max_num_partitions == 1 or num_seqs * num_heads > 512)

with ``T`` = ``--v2-threshold`` (upstream: 8192).

Which assignment decides: only ``use_v1 = ...`` statements directly in the method body
count; the last of them is what ``if use_v1:`` sees.

* last is the heuristic with threshold ``T``: APPLIED;
* last is the heuristic with another threshold: PENDING, the threshold is retuned;
* last is ``use_v1 = True`` and an earlier heuristic exists (the fork's "override right
  after" shape): PENDING, every ``use_v1 = True`` after that heuristic is removed (its
  comments move to the next statement, under a marker), and the threshold is retuned
  if needed;
* last is ``use_v1 = True`` and no heuristic precedes it: PENDING, it becomes the
  heuristic;
* anything else (a call, ``False``, an assignment inside an ``if``, no assignment at
  all, a name the heuristic needs that is not bound before it): CONFLICT.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence, Set

from packaging.specifiers import SpecifierSet

from ._cst_helpers import (
    assigns_name,
    bound_by_statement,
    class_method,
    code_of,
    find_first,
    is_marker_of,
    is_name,
    marker_line,
    parameter_names,
    small_statements,
    walk_statements,
    with_marker,
)
from .base import Option, Status, Transform, TransformContext, Verdict

if TYPE_CHECKING:
    import libcst as cst
else:
    from ._lazy_cst import cst

CLASS = "PagedAttention"
METHOD = "forward_decode"
FLAG = "use_v1"
#: Spellings of the longest-sequence length across releases (0.4.0-0.4.2 said "context").
MAX_LEN_NAMES = ("max_seq_len", "max_context_len")
#: The other names upstream's heuristic reads; all are locals of forward_decode.
OTHER_NAMES = ("max_num_partitions", "num_seqs", "num_heads")
#: Upstream's cut-off for "enough (seq, head) programs to fill the chip with V1".
V1_PARALLELISM = 512
#: How our markers begin where the fork's ``use_v1 = True`` was replaced or removed
#: (fork_markers.py looks for them).
_WAS_HARDCODED = f"was `{FLAG} = True`"
_REMOVED_HARDCODE = f"removed `{FLAG} = True`"


def _flag_value(stmt: cst.BaseStatement) -> Optional[cst.BaseExpression]:
    """The value assigned by ``use_v1 = <value>`` (or ``use_v1: bool = <value>``), else None."""
    smalls = small_statements(stmt)
    if smalls is None or len(smalls) != 1:
        return None
    small = smalls[0]
    if assigns_name(small, FLAG):
        assert isinstance(small, (cst.Assign, cst.AnnAssign))
        return small.value
    return None


def _binds_flag_here(node: cst.CSTNode) -> bool:
    """``use_v1`` as a whole target of ``=`` (chained too), ``: T``, ``+=``-style or ``:=``."""
    if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.NamedExpr)):
        return is_name(node.target, FLAG)
    return False


def _assigns_flag(stmt: cst.BaseStatement) -> bool:
    """Whether ``stmt`` binds ``use_v1`` in any way (tuple targets, walrus, augmented)."""
    return find_first(stmt, _binds_flag_here) is not None or FLAG in bound_by_statement(stmt)


def heuristic_threshold(value: cst.BaseExpression) -> Optional[int]:
    """T when ``value`` is ``<len> <= T and (...)``, upstream's heuristic; else None.

    Only the head is pinned down (a name compared with ``<=`` to an integer literal,
    and-ed with a parenthesised or-expression): that is what makes it the length-based
    V1/V2 choice, and forks that reformatted or re-parenthesised it still match.
    """
    if not (
        isinstance(value, cst.BooleanOperation)
        and isinstance(value.operator, cst.And)
        and isinstance(value.right, cst.BooleanOperation)
        and isinstance(value.right.operator, cst.Or)
    ):
        return None
    head = value.left
    if not (isinstance(head, cst.Comparison) and is_name(head.left) and len(head.comparisons) == 1):
        return None
    (comparison,) = head.comparisons
    if not (
        isinstance(comparison.operator, cst.LessThanEqual)
        and isinstance(comparison.comparator, cst.Integer)
    ):
        return None
    return int(comparison.comparator.evaluated_value)


def _retuned(value: cst.BaseExpression, threshold: int) -> cst.BaseExpression:
    assert isinstance(value, cst.BooleanOperation) and isinstance(value.left, cst.Comparison)
    comparison = value.left
    target = comparison.comparisons[0].with_changes(comparator=cst.Integer(str(threshold)))
    return value.with_changes(left=comparison.with_changes(comparisons=[target]))


def _heuristic(max_len: str, threshold: int) -> cst.BaseExpression:
    partitions, seqs, heads = OTHER_NAMES
    return cst.parse_expression(
        f"{max_len} <= {threshold} and ({partitions} == 1 or {seqs} * {heads} > {V1_PARALLELISM})"
    )


def _with_value(
    stmt: cst.SimpleStatementLine, value: cst.BaseExpression
) -> cst.SimpleStatementLine:
    small = stmt.body[0]
    assert isinstance(small, (cst.Assign, cst.AnnAssign))
    return stmt.with_changes(body=[small.with_changes(value=value)])


class V2Dispatch(Transform):
    """Put upstream's V1/V2 heuristic back where a fork hardcoded ``use_v1 = True``."""

    name = "v2-dispatch"
    description = (
        "Replace a hardcoded `use_v1 = True` in PagedAttention.forward_decode with "
        "upstream's V1/V2 heuristic, so long contexts take the split-KV V2 path."
    )
    target = "attention/ops/paged_attn.py"
    known_versions = SpecifierSet(">=0.4.3,<=0.11.0")
    #: the engine parses only the top-level statements defining these (see base.py)
    anchors = (CLASS,)
    # Re-enabling V2 while paged_attention_v2 is still a NotImplementedError stub would
    # turn slow long-context decode into a crash.
    requires = ("paged-attention-v2",)
    options = (
        Option(
            name="v2_threshold",
            flag="--v2-threshold",
            type=int,
            default=8192,
            help="Longest sequence (tokens) that may still use the V1 kernel; longer "
            "batches use V2 (upstream's value is 8192)",
            minimum=1,
        ),
    )

    def plan(self, module: cst.Module, context: TransformContext) -> Verdict:
        threshold = int(context.option(self, "v2_threshold"))
        method = class_method(module, CLASS, METHOD)
        if method is None:
            return Verdict(
                Status.CONFLICT,
                f"no {CLASS}.{METHOD} found; cannot tell how this fork picks V1 or V2",
            )
        if not isinstance(method.body, cst.IndentedBlock):
            return Verdict(Status.CONFLICT, f"{CLASS}.{METHOD} has a one-line body")
        body = list(method.body.body)

        top_ids = {id(s) for s in body}
        nested = [
            s
            for s in walk_statements(body)
            if id(s) not in top_ids and isinstance(s, cst.SimpleStatementLine) and _assigns_flag(s)
        ]
        if nested:
            return Verdict(
                Status.CONFLICT,
                f"{CLASS}.{METHOD} assigns {FLAG} inside a nested block "
                f"(`{code_of(nested[0])}`); refusing to guess which assignment wins",
            )
        top = [
            i
            for i, s in enumerate(body)
            if isinstance(s, cst.SimpleStatementLine) and _assigns_flag(s)
        ]
        if not top:
            return Verdict(
                Status.CONFLICT, f"{CLASS}.{METHOD} never assigns {FLAG}; unknown dispatch shape"
            )
        for i in top:
            value = _flag_value(body[i])
            if value is None:
                return Verdict(
                    Status.CONFLICT,
                    f"{CLASS}.{METHOD}: `{code_of(body[i])}` is not a plain assignment to {FLAG}",
                )
            if not is_name(value, "True") and heuristic_threshold(value) is None:
                return Verdict(
                    Status.CONFLICT,
                    f"{CLASS}.{METHOD}: unknown shape `{code_of(body[i])}`; only "
                    f"`{FLAG} = True` and upstream's heuristic are understood",
                )

        last = top[-1]
        last_value = _flag_value(body[last])
        assert last_value is not None
        current = heuristic_threshold(last_value)
        if current == threshold:
            return Verdict(
                Status.APPLIED,
                f"{METHOD} already uses the V1/V2 heuristic (V2 above {threshold} tokens)",
            )
        heuristic_at = next(
            (i for i in reversed(top) if heuristic_threshold(_flag_value(body[i])) is not None),
            None,
        )
        overrides = [i for i in top if heuristic_at is not None and i > heuristic_at]
        edit_at = heuristic_at if heuristic_at is not None else last

        names = self._bound_before(method, body, edit_at)
        max_len = next((n for n in MAX_LEN_NAMES if n in names), None)
        missing = [n for n in OTHER_NAMES if n not in names]
        if max_len is None:
            missing.insert(0, " or ".join(MAX_LEN_NAMES))
        if heuristic_at is None and missing:
            return Verdict(
                Status.CONFLICT,
                f"{CLASS}.{METHOD}: the heuristic needs {', '.join(missing)}, not bound "
                f"before `{code_of(body[edit_at])}`; writing it would raise NameError",
            )

        new_body = self._rewrite(body, heuristic_at, overrides, last, max_len, threshold)
        new_method = method.with_changes(body=method.body.with_changes(body=new_body))
        new_module = module.with_changes(
            body=[self._replace_method(s, method, new_method) for s in module.body]
        )
        if heuristic_at is None:
            reason = f"{FLAG} is hardcoded to True; V2 is never used"
        elif overrides:
            reason = f"the V1/V2 heuristic is overridden by `{FLAG} = True`; V2 is never used"
        else:
            reason = f"the V1/V2 heuristic uses threshold {current}; retuning to {threshold}"
        return Verdict(Status.PENDING, reason, module=new_module)

    @staticmethod
    def _bound_before(
        method: cst.FunctionDef, body: Sequence[cst.BaseStatement], index: int
    ) -> Set[str]:
        """Parameters plus names bound unconditionally by the statements before ``index``."""
        names = set(parameter_names(method.params))
        for stmt in body[:index]:
            names |= bound_by_statement(stmt)
        return names

    def _rewrite(
        self,
        body: List[cst.BaseStatement],
        heuristic_at: Optional[int],
        overrides: List[int],
        last: int,
        max_len: Optional[str],
        threshold: int,
    ) -> List[cst.BaseStatement]:
        new_body = list(body)
        if heuristic_at is None:
            stmt = body[last]
            assert isinstance(stmt, cst.SimpleStatementLine) and max_len is not None
            replaced = _with_value(stmt, _heuristic(max_len, threshold))
            new_body[last] = replaced.with_changes(
                leading_lines=with_marker(
                    stmt.leading_lines,
                    self.name,
                    f"{_WAS_HARDCODED}; upstream heuristic, V2 above {threshold} tokens",
                ),
                # a trailing comment explained the hardcode; it is wrong now
                trailing_whitespace=cst.TrailingWhitespace(),
            )
            return new_body

        stmt = body[heuristic_at]
        assert isinstance(stmt, cst.SimpleStatementLine)
        value = _flag_value(stmt)
        assert value is not None
        old_threshold = heuristic_threshold(value)
        if old_threshold != threshold:
            # Our markers saying the fork hardcoded V1 are kept through a retune: they are
            # the record (and a fork marker, fork_markers.py) that the tree was a fork.
            ours = [line for line in stmt.leading_lines if is_marker_of(line, self.name)]
            hardcoded = [line for line in ours if _WAS_HARDCODED in line.comment.value]
            removed = [line for line in ours if _REMOVED_HARDCODE in line.comment.value]
            why = (
                f"{_WAS_HARDCODED}; upstream heuristic, V2 above {threshold} tokens"
                if hardcoded
                else f"V1/V2 threshold {old_threshold} -> {threshold} tokens"
            )
            *kept, marker = with_marker(stmt.leading_lines, self.name, why)
            new_body[heuristic_at] = _with_value(stmt, _retuned(value, threshold)).with_changes(
                leading_lines=[*kept, *removed, marker]
            )
        if not overrides:
            return new_body
        # The overrides go; their own comments and one marker take their place, i.e.
        # they become leading lines of the statement that follows them.
        removal = marker_line(
            self.name,
            f"{_REMOVED_HARDCODE} that overrode the heuristic (forced V1)",
        )
        carried: List[cst.EmptyLine] = []
        for i in overrides:
            carried.extend(
                line for line in body[i].leading_lines if not is_marker_of(line, self.name)
            )
        carried.append(removal)
        following = next((i for i in range(max(overrides) + 1, len(body))), None)
        if following is not None:
            nxt = new_body[following]
            new_body[following] = nxt.with_changes(leading_lines=[*carried, *nxt.leading_lines])
        else:  # nothing follows: the comments and the marker go above the heuristic instead
            kept = new_body[heuristic_at]
            new_body[heuristic_at] = kept.with_changes(
                leading_lines=[*kept.leading_lines, *carried]
            )
        removed = set(overrides)
        return [s for i, s in enumerate(new_body) if i not in removed]

    @staticmethod
    def _replace_method(
        stmt: cst.BaseStatement, old: cst.FunctionDef, new: cst.FunctionDef
    ) -> cst.BaseStatement:
        if not isinstance(stmt, cst.ClassDef) or not isinstance(stmt.body, cst.IndentedBlock):
            return stmt
        if not any(inner is old for inner in stmt.body.body):
            return stmt
        return stmt.with_changes(
            body=stmt.body.with_changes(
                body=[new if inner is old else inner for inner in stmt.body.body]
            )
        )

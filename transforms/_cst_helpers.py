"""Small libcst helpers shared by the transforms.

Everything here looks at structure, never at the exact text of a file: vendor forks
reformat, re-comment and re-wrap code, and a codemod keyed on text breaks on the first
fork that ran a formatter.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, Optional, Sequence, Set, Union

from .base import MARKER

if TYPE_CHECKING:
    import libcst as cst
else:
    from ._lazy_cst import cst

#: The prefix every marker comment starts with, e.g. ``# vllm-codemod: v2-dispatch: ...``.
MARKER_PREFIX = f"# {MARKER}:"


Body = Union["cst.IndentedBlock", "cst.SimpleStatementSuite"]


def is_name(node: object, value: Optional[str] = None) -> bool:
    """Whether ``node`` is a bare name (spelled ``value``, when one is given)."""
    return isinstance(node, cst.Name) and (value is None or node.value == value)


def assigns_name(small: cst.CSTNode, name: str) -> bool:
    """``name = ...`` with that single plain target, or ``name: T`` / ``name: T = ...``.

    Chained (``a = name = ...``) and unpacking (``name, b = ...``) assignments do not
    count: they are not the one-value binding the transforms know how to edit.
    """
    if isinstance(small, cst.Assign):
        return len(small.targets) == 1 and is_name(small.targets[0].target, name)
    return isinstance(small, cst.AnnAssign) and is_name(small.target, name)


@functools.lru_cache(maxsize=None)
def _empty_module() -> cst.Module:
    return cst.Module(body=[])


@functools.lru_cache(maxsize=None)
def _first_finder() -> Any:
    """The class, made on first use: its base class is libcst's (see ``_lazy_cst``)."""

    class _FirstFinder(cst.CSTVisitor):
        def __init__(self, predicate: Callable[[cst.CSTNode], bool]) -> None:
            super().__init__()
            self.predicate = predicate
            self.found: Optional[cst.CSTNode] = None

        def on_visit(self, node: cst.CSTNode) -> bool:
            if self.found is None and self.predicate(node):
                self.found = node
            return self.found is None  # once found, descend no further

    return _FirstFinder


def find_first(
    node: cst.CSTNode, predicate: Callable[[cst.CSTNode], bool]
) -> Optional[cst.CSTNode]:
    """The first node under ``node`` (itself included, depth first, in source order)
    for which ``predicate`` holds, or None."""
    finder = _first_finder()(predicate)
    node.visit(finder)
    return finder.found


def code_of(node: cst.CSTNode) -> str:
    """Source text of ``node`` (for reasons and details, never for matching).

    A statement line is shown without its comments and blank lines, which are not
    what a reason talks about.
    """
    if isinstance(node, cst.SimpleStatementLine):
        node = node.with_changes(leading_lines=(), trailing_whitespace=cst.TrailingWhitespace())
    return _empty_module().code_for_node(node).strip()


def marker_line(transform_name: str, why: str) -> cst.EmptyLine:
    """One ``# vllm-codemod: <transform>: <why>`` comment line.

    The marker is the only thing a reader of a patched file has to tell our edits from
    the vendor's, so each edit gets exactly one, right above the changed statement.
    """
    return cst.EmptyLine(comment=cst.Comment(f"{MARKER_PREFIX} {transform_name}: {why}"))


def is_marker_of(line: cst.EmptyLine, transform_name: str) -> bool:
    """Whether ``line`` is a marker comment written by ``transform_name``."""
    return line.comment is not None and line.comment.value.startswith(
        f"{MARKER_PREFIX} {transform_name}:"
    )


def with_marker(
    leading_lines: Sequence[cst.EmptyLine], transform_name: str, why: str
) -> List[cst.EmptyLine]:
    """``leading_lines`` with this transform's marker last, replacing an older marker."""
    kept = [line for line in leading_lines if not is_marker_of(line, transform_name)]
    return [*kept, marker_line(transform_name, why)]


def module_function(module: cst.Module, name: str) -> Optional[cst.FunctionDef]:
    """The module-level ``def name`` (the last one wins, as at import time)."""
    found: Optional[cst.FunctionDef] = None
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            found = stmt
    return found


def class_method(
    module: cst.Module, class_name: str, method_name: str
) -> Optional[cst.FunctionDef]:
    """``class_name.method_name`` defined at module level (last definitions win)."""
    method: Optional[cst.FunctionDef] = None
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef) and stmt.name.value == class_name:
            method = None
            if isinstance(stmt.body, cst.IndentedBlock):
                for inner in stmt.body.body:
                    if isinstance(inner, cst.FunctionDef) and inner.name.value == method_name:
                        method = inner
    return method


def body_statements(body: Body) -> List[cst.BaseStatement]:
    """The statements of a block, whether indented or ``def f(): stmt`` on one line."""
    if isinstance(body, cst.IndentedBlock):
        return list(body.body)
    return [cst.SimpleStatementLine(body=list(body.body))]


def small_statements(stmt: cst.BaseStatement) -> Optional[List[cst.BaseSmallStatement]]:
    """The small statements of a simple line, None for compound statements."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return list(stmt.body)
    return None


def is_docstring(stmt: cst.BaseStatement) -> bool:
    smalls = small_statements(stmt)
    return (
        smalls is not None
        and len(smalls) == 1
        and isinstance(smalls[0], cst.Expr)
        and isinstance(smalls[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def target_names(target: cst.BaseExpression) -> Set[str]:
    """Names bound by an assignment target (``a``, ``a, b``, ``(a, [b, *c])``)."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        names: Set[str] = set()
        for element in target.elements:
            names |= target_names(element.value)
        return names
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    return set()  # attributes and subscripts bind no local name


def bound_by_statement(stmt: cst.BaseStatement) -> Set[str]:
    """Local names that ``stmt`` binds for sure when it runs to completion.

    Only unconditional bindings count: a name bound inside an ``if`` or a loop body
    may be unbound when the code after it runs, and the point of asking is to avoid
    emitting code that raises NameError.
    """
    names: Set[str] = set()
    smalls = small_statements(stmt)
    if smalls is not None:
        for small in smalls:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    names |= target_names(target.target)
            elif isinstance(small, cst.AnnAssign) and small.value is not None:
                names |= target_names(small.target)
            elif isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(
                small.names, cst.ImportStar
            ):
                for alias in small.names:
                    if alias.asname is not None:
                        names |= target_names(alias.asname.name)
                    elif isinstance(alias.name, cst.Name):
                        names.add(alias.name.value)
                    else:  # import a.b binds a
                        root: cst.BaseExpression = alias.name
                        while isinstance(root, cst.Attribute):
                            root = root.value
                        if isinstance(root, cst.Name):
                            names.add(root.value)
    elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        names.add(stmt.name.value)
    elif isinstance(stmt, cst.With):
        for item in stmt.items:
            if item.asname is not None:
                names |= target_names(item.asname.name)
        for inner in body_statements(stmt.body):
            names |= bound_by_statement(inner)
    return names


def parameter_names(params: cst.Parameters) -> List[str]:
    """Every name a function's signature binds, in order."""
    names = [p.name.value for p in params.posonly_params]
    names += [p.name.value for p in params.params]
    if isinstance(params.star_arg, cst.Param):
        names.append(params.star_arg.name.value)
    names += [p.name.value for p in params.kwonly_params]
    if params.star_kwarg is not None:
        names.append(params.star_kwarg.name.value)
    return names


def walk_statements(stmts: Sequence[cst.BaseStatement]) -> Iterator[cst.BaseStatement]:
    """Every statement under ``stmts``, depth first, not descending into nested scopes."""
    for stmt in stmts:
        yield stmt
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        for attr in ("body", "orelse", "finalbody"):
            child = getattr(stmt, attr, None)
            if isinstance(child, (cst.IndentedBlock, cst.SimpleStatementSuite)):
                yield from walk_statements(body_statements(child))
            elif isinstance(child, (cst.Else, cst.If, cst.Finally)):
                yield from walk_statements([child])  # type: ignore[list-item]
        for handler in getattr(stmt, "handlers", ()) or ():
            yield from walk_statements(body_statements(handler.body))

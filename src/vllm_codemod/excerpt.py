"""Parse only the top-level statements a transform can touch, then splice them back.

libcst builds a Python object per token, so parsing all of ``_custom_ops.py`` (80+ KB)
costs a few hundred milliseconds while the function we patch is forty lines.  The
stdlib's C parser finds the top-level statements that define a transform's anchor
names in a few milliseconds; libcst then sees just those statements, and everything
between them is carried over as untouched text, which also makes "never touch what
you did not match" hold by construction.

A chosen statement travels with the comment and blank lines right above it, the lines
libcst makes its ``leading_lines`` in the whole file: that is where the transforms'
markers live, so a transform sees (and replaces) its old marker on this path exactly as
on a whole-file parse.

A module-level ``if`` (vLLM 0.4-0.8 wrap all of ``prefix_prefill.py`` in ``if
triton.__version__ >= ...``) is pruned one level down: its header and only the children
that define an anchor, each with the lines since the sibling before it.  Without that
the excerpt of that file is the whole file, parsed and printed again per transform.
"""

from __future__ import annotations

import ast
import io
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Set, Tuple

if TYPE_CHECKING:
    import libcst as cst


Span = Tuple[int, int]  # [start, end) line indices


@dataclass(frozen=True)
class Excerpt:
    lines: List[str]  # the whole file, split with line endings kept
    spans: List[Span]  # the chosen top-level statements
    #: span index -> (end of the ``if`` header, the chosen children's spans): a pruned
    #: ``if`` whose other children stay untouched text (see the module docstring)
    pruned: Dict[int, Tuple[int, List[Span]]] = field(default_factory=dict)

    def _join(self, start: int, end: int) -> str:
        return "".join(self.lines[start:end])

    def _span_text(self, index: int) -> str:
        start, end = self.spans[index]
        if index not in self.pruned:
            return self._join(start, end)
        header_end, children = self.pruned[index]
        return self._join(start, header_end) + "".join(self._join(a, b) for a, b in children)

    @property
    def text(self) -> str:
        parts = [self._span_text(index) for index in range(len(self.spans))]
        if parts and not parts[-1].endswith(("\n", "\r")):
            parts[-1] += "\n"
        return "".join(parts)

    def parse(self) -> cst.Module:
        """``text`` parsed by libcst, each statement owning its leading lines.

        libcst gives the comment lines at the top of a module to ``Module.header``; here
        they are the leading lines of the first chosen statement (the file's own header
        is never part of an excerpt), so they move back onto it.
        """
        import libcst as cst

        module = cst.parse_module(self.text)
        if not module.header or not module.body:
            return module
        first = module.body[0]
        first = first.with_changes(leading_lines=(*module.header, *first.leading_lines))
        return module.with_changes(header=(), body=(first, *module.body[1:]))

    def splice(self, original: cst.Module, changed: cst.Module) -> Optional[str]:
        """The whole file with each chosen statement replaced by its new code.

        None when the edit changed the number of top-level statements, which a
        line-span splice cannot express; the caller then plans on the whole file.
        """
        if len(changed.body) != len(self.spans) or len(original.body) != len(self.spans):
            return None
        if changed.header != original.header or changed.footer != original.footer:
            return None
        out: List[str] = []
        position = 0
        for index, ((start, end), old, new) in enumerate(
            zip(self.spans, original.body, changed.body)
        ):
            out.extend(self.lines[position:start])
            segment = "".join(self.lines[start:end])
            if new is old:
                out.append(segment)
            elif index in self.pruned:
                merged = self._splice_pruned(index, original, old, new)
                if merged is None:
                    return None
                out.append(merged)
            else:
                # libcst prints a parsed statement back byte for byte, so a statement the
                # transform rebuilt without changing prints as its segment: printing it
                # costs less than comparing the two trees node by node (``deep_equals``).
                code = changed.code_for_node(new)
                if not segment.endswith(("\n", "\r")):
                    code = code.rstrip("\r\n")
                out.append(code)
            position = end
        out.extend(self.lines[position:])
        return "".join(out)

    def _splice_pruned(
        self, index: int, module: cst.Module, old: cst.CSTNode, new: cst.CSTNode
    ) -> Optional[str]:
        """The pruned ``if`` of span ``index`` with each changed child's new code.

        A child alone cannot be printed at its indentation, so each one is printed
        inside the ``if`` as its only child and the header is cut off again; None
        (plan on the whole file) unless the ``if`` itself, its header and the number of
        its children are as they were.
        """
        import libcst as cst

        if not (isinstance(old, cst.If) and isinstance(new, cst.If)) or new.orelse is not None:
            return None
        if not isinstance(new.body, cst.IndentedBlock) or new.body.footer != old.body.footer:
            return None
        old_kids, new_kids = list(old.body.body), list(new.body.body)
        header_end, children = self.pruned[index]
        if len(old_kids) != len(children) or len(new_kids) != len(children):
            return None
        start, end = self.spans[index]
        header = self._join(start, header_end)

        def alone(kid: cst.BaseStatement) -> str:
            return module.code_for_node(new.with_changes(body=new.body.with_changes(body=[kid])))

        if not any(n is not o for n, o in zip(new_kids, old_kids)):
            if not alone(new_kids[0]).startswith(header):  # only the ``if`` line changed
                return None
        out = [header]
        position = header_end
        for (a, b), old_kid, new_kid in zip(children, old_kids, new_kids):
            out.append(self._join(position, a))
            region = self._join(a, b)
            if new_kid is not old_kid:
                printed = alone(new_kid)
                if not printed.startswith(header):
                    return None
                region = printed[len(header) :]
                if not self.lines[b - 1].endswith(("\n", "\r")):
                    region = region.rstrip("\r\n")
            out.append(region)
            position = b
        out.append(self._join(position, end))
        return "".join(out)


#: What may follow an ``if`` test on its line: closing parentheses, the colon, a comment.
_COLON_TO_END = re.compile(r"^[ \t)]*:[ \t]*(#.*)?(\r\n|\n|\r)?$")


def _defined_names(node: ast.stmt) -> Set[str]:
    names: Set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(inner.name)
        elif isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
            names.add(inner.id)
    return names


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def _leading_start(lines: List[str], start: int, floor: int) -> int:
    """Where the comment and blank lines right above line ``start`` begin (not above ``floor``).

    Only lines libcst surely gives to the statement are taken: blank lines and comments
    in column 0.  A line with leading whitespace stops the walk, since it may belong to
    the footer of the indented block above (libcst gives a block the lines up to its last
    indented one); what is left out stays untouched text, as before.
    """
    while start > floor:
        line = lines[start - 1]
        if line.strip() and not line.startswith("#"):
            break
        if line.strip() == "" and line not in ("\n", "\r\n", "\r"):
            break  # whitespace-only: libcst counts it as indented
        start -= 1
    return start


def make_excerpt(source: str, anchors: Iterable[str]) -> Optional[Excerpt]:
    """The top-level statements that define any of ``anchors`` (at any depth inside),
    each with the comment and blank lines above it (see :func:`_leading_start`).

    The file's first statement comes without them: libcst gives those lines to the
    module's header, which a splice cannot carry.  None when the file is not plain
    enough to cut safely (a syntax error, which the full libcst parse will then report
    precisely) or when nothing matches.
    """
    wanted = set(anchors)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    # Universal newlines only (\n, \r\n, \r): the line numbers ast reports count those.
    lines = io.StringIO(source, newline="").readlines()
    # Statements that share a line (``a = 1; b = 2``) are one libcst statement: group them.
    groups: List[Tuple[int, int, bool]] = []
    shapes: Dict[int, Tuple[int, List[Span]]] = {}  # first line -> a prunable ``if``
    for node in tree.body:
        start, end = _first_line(node) - 1, node.end_lineno or node.lineno
        text = "".join(lines[start:end])
        # Walking the ast is the slow part; a statement whose text never spells an
        # anchor cannot define it.
        spelled = any(name in text for name in wanted)
        shape = _if_children(node, lines, wanted) if spelled else None
        if shape is not None:  # its children were walked already: not the whole ``if``
            header_end, children, dropped = shape
            chosen = bool(children) or bool(_defined_names(node.test) & wanted)
            if children and dropped:
                shapes[start] = (header_end, children)
        else:
            chosen = spelled and bool(_defined_names(node) & wanted)
        if groups and start < groups[-1][1]:
            prev_start, prev_end, prev_chosen = groups.pop()
            groups.append((prev_start, max(prev_end, end), prev_chosen or chosen))
            shapes.pop(start, None)
            shapes.pop(prev_start, None)
        else:
            groups.append((start, end, chosen))
    spans: List[Span] = []
    pruned: Dict[int, Tuple[int, List[Span]]] = {}
    for index, (start, end, chosen) in enumerate(groups):
        if chosen:
            if start in shapes:
                pruned[len(spans)] = shapes[start]
            spans.append(
                (_leading_start(lines, start, groups[index - 1][1]) if index else start, end)
            )
    if not spans:
        return None
    return Excerpt(lines, spans, pruned)


def _if_children(
    node: ast.stmt, lines: List[str], wanted: Set[str]
) -> Optional[Tuple[int, List[Span], bool]]:
    """For a module-level ``if`` that can be pruned (no ``elif``/``else``, its body on
    lines of its own, one child per line): the end of its header, the spans of the
    children that define an anchor, and whether any child was left out.  Each child's
    span starts where the sibling before it ended, so the comments between them travel
    with the child below.  None for any other statement."""
    if not isinstance(node, ast.If) or node.orelse or not node.body:
        return None
    header_end = node.lineno  # the line after ``if ...:``, which must hold all of it
    if node.test.end_lineno != node.lineno or _first_line(node.body[0]) <= node.lineno:
        return None
    rest = lines[node.lineno - 1].encode("utf-8")[node.test.end_col_offset or 0 :]
    if not _COLON_TO_END.match(rest.decode("utf-8", "replace")):
        return None
    children: List[Span] = []
    dropped = False
    position = header_end
    for kid in node.body:
        start, end = _first_line(kid) - 1, kid.end_lineno or kid.lineno
        if start < position:  # shares a line with the sibling before it
            return None
        text = "".join(lines[start:end])
        if any(name in text for name in wanted) and _defined_names(kid) & wanted:
            children.append((position, end))
        else:
            dropped = True
        position = end
    return header_end, children, dropped

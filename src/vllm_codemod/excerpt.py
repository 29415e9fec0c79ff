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
"""

from __future__ import annotations

import ast
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, List, Optional, Set, Tuple

if TYPE_CHECKING:
    import libcst as cst


@dataclass(frozen=True)
class Excerpt:
    lines: List[str]  # the whole file, split with line endings kept
    spans: List[Tuple[int, int]]  # [start, end) line indices of the chosen statements

    @property
    def text(self) -> str:
        parts = ["".join(self.lines[start:end]) for start, end in self.spans]
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
        for (start, end), old, new in zip(self.spans, original.body, changed.body):
            out.extend(self.lines[position:start])
            segment = "".join(self.lines[start:end])
            if new is old or new.deep_equals(old):
                out.append(segment)
            else:
                code = changed.code_for_node(new)
                if not segment.endswith(("\n", "\r")):
                    code = code.rstrip("\r\n")
                out.append(code)
            position = end
        out.extend(self.lines[position:])
        return "".join(out)


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
    for node in tree.body:
        start, end = _first_line(node) - 1, node.end_lineno or node.lineno
        text = "".join(lines[start:end])
        # Walking the ast is the slow part; a statement whose text never spells an
        # anchor cannot define it.
        chosen = any(name in text for name in wanted) and bool(_defined_names(node) & wanted)
        if groups and start < groups[-1][1]:
            prev_start, prev_end, prev_chosen = groups.pop()
            groups.append((prev_start, max(prev_end, end), prev_chosen or chosen))
        else:
            groups.append((start, end, chosen))
    spans = [
        (_leading_start(lines, start, groups[index - 1][1]) if index else start, end)
        for index, (start, end, chosen) in enumerate(groups)
        if chosen
    ]
    if not spans:
        return None
    return Excerpt(lines, spans)

"""Whether anything in a vLLM tree reaches the patched decode path, found statically.

The codemods patch ``PagedAttention.forward_decode`` (its V1/V2 choice) and
``_custom_ops.paged_attention_v2`` (the stub).  Since vLLM's V1 engine those are only
reached from the old V0 attention backends: 0.10.1.1's ``xformers.py`` still calls
``PagedAttention.forward_decode``, while 0.11.0 imports ``PagedAttention`` only for its
cache helpers.  Where nothing calls them, the patch is inert unless an out-of-tree
backend does; ``status`` says so, using :func:`find_callers`.

What counts as a caller, by the stdlib ``ast`` (fast: only files whose bytes mention
one of the two names are parsed):

* ``<R>.forward_decode(...)`` where ``R`` is ``PagedAttention`` or a name imported as it
  from a ``...paged_attn`` module (``from vllm.attention.ops.paged_attn import
  PagedAttention as PA``), or a dotted ``...paged_attn.PagedAttention``;
* ``<R>.paged_attention_v2(...)`` where ``R`` is ``ops`` / ``_custom_ops`` or a name
  imported from a ``..._custom_ops`` module, ``vllm._custom_ops`` or ``torch.ops._C``.

A name the file imports from elsewhere (``from vllm._ipex_ops import ipex_ops as ops``)
is another implementation and does not count.  Calls inside a function that is itself
called ``forward_decode`` or ``paged_attention_v2`` are the patched path delegating
downwards (``paged_attn.py`` calling ``ops.paged_attention_v2``, an override calling
``PagedAttention.forward_decode``), not entries into it, and do not count either.
Dispatch through a variable (``paged_attn = self.paged_attn_module``) is not followed.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

#: The methods/functions the codemods patch: a call inside one of these delegates.
PATCHED_NAMES = ("forward_decode", "paged_attention_v2")
_NEEDLES = tuple(name.encode() for name in PATCHED_NAMES)
_SKIPPED_DIRS = {"__pycache__", ".vllm-codemod"}


@dataclass(frozen=True)
class Caller:
    """One call into the patched path: where it is and what it calls."""

    path: str  # relative to site-packages, POSIX separators ("vllm/attention/...")
    line: int  # 1-based
    col: int  # 1-based, in characters
    what: str  # the callee as written, e.g. "PagedAttention.forward_decode"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.what}"


@dataclass
class Scan:
    """The result of scanning a tree: callers, and what was looked at."""

    callers: List[Caller] = field(default_factory=list)
    files: int = 0  # .py files found
    parsed: int = 0  # of those, mentioning a patched name and so parsed
    unparseable: List[str] = field(default_factory=list)  # paths, as in Caller.path


def find_callers(vllm_root: Path) -> List[Caller]:
    """Every call into the patched path in the tree at ``vllm_root`` (the ``vllm`` dir)."""
    return scan_tree(vllm_root).callers


def scan_tree(vllm_root: Path) -> Scan:
    """Scan every ``.py`` file under ``vllm_root``; files that do not parse are counted."""
    result = Scan()
    base = vllm_root.parent
    for directory, subdirs, names in os.walk(vllm_root):
        subdirs[:] = sorted(d for d in subdirs if d not in _SKIPPED_DIRS)
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            path = Path(directory, name)
            rel = path.relative_to(base).as_posix()
            result.files += 1
            try:
                data = path.read_bytes()
            except OSError:
                result.unparseable.append(rel)
                continue
            if not any(needle in data for needle in _NEEDLES):
                continue
            result.parsed += 1
            try:
                tree = ast.parse(data, filename=rel)
            except (SyntaxError, ValueError):
                result.unparseable.append(rel)
                continue
            result.callers += _callers_in(tree, data, rel)
    return result


def _callers_in(tree: ast.Module, data: bytes, rel: str) -> List[Caller]:
    finder = _CallFinder(_import_bindings(tree))
    finder.visit(tree)
    lines = data.splitlines()
    found = []
    for node, what in finder.calls:
        line_bytes = lines[node.lineno - 1] if node.lineno <= len(lines) else b""
        col = len(line_bytes[: node.col_offset].decode("utf-8", "replace")) + 1
        found.append(Caller(rel, node.lineno, col, what))
    return found


def _import_bindings(tree: ast.Module) -> Dict[str, str]:
    """Name -> dotted origin for every import in the file (any scope)."""
    bindings: Dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                bindings[alias.asname or alias.name] = f"{module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bindings[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    bindings[top] = top
    return bindings


def _dotted(node: ast.expr) -> Optional[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _last(dotted: str) -> str:
    return dotted.rsplit(".", 1)[-1]


class _CallFinder(ast.NodeVisitor):
    def __init__(self, bindings: Dict[str, str]) -> None:
        self.bindings = bindings
        self.functions: List[str] = []
        self.calls: List[tuple] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in PATCHED_NAMES
            and not any(name in PATCHED_NAMES for name in self.functions)
        ):
            receiver = _dotted(func.value)
            if receiver is not None and self._reaches(receiver, func.attr):
                self.calls.append((node, f"{receiver}.{func.attr}"))
        self.generic_visit(node)

    def _reaches(self, receiver: str, attr: str) -> bool:
        """Whether ``receiver.attr`` is the patched ``PagedAttention`` / ``_custom_ops``."""
        if attr == "forward_decode":
            wanted, defaults = "PagedAttention", ("PagedAttention",)
        else:
            if receiver == "torch.ops._C":
                return True
            wanted, defaults = "_custom_ops", ("ops", "_custom_ops")
        if "." in receiver:
            head = receiver.split(".", 1)[0]
            origin = self.bindings.get(head, head) + receiver[len(head) :]
            if attr == "forward_decode":
                return origin.endswith("paged_attn.PagedAttention")
            return _last(origin) == wanted
        origin = self.bindings.get(receiver)
        if origin is None:  # not imported here: defined here, or the usual name
            return receiver in defaults
        if attr == "forward_decode":
            return origin.endswith("paged_attn.PagedAttention")
        return _last(origin) == wanted

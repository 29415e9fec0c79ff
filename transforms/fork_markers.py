"""Tell a vendor fork from an upstream vLLM tree, by what forks change.

Some edits are remedies for a fork's damage and only make sense there:
``prefix-prefill-warps`` trades upstream's 8 warps for 4 because of a BI-V100 occupancy
argument, and on an H200 that made the ALiBi prefix-prefill kernel 1.7x slower.  So
the engine asks this module what marks the tree as a fork and hands the answer to the
transforms (:attr:`TransformContext.fork_markers`).

A marker is something no upstream release has (checked on every upstream fixture,
0.4.3 - 0.11.0): a ``paged_attention_v2`` that raises ``NotImplementedError``, a
``use_v1 = True`` in ``PagedAttention.forward_decode``, a vendor label in the version
(``0.8.3+corex.4.2.0``), or the marker comments this tool leaves where it replaced the
first two (a patched fork stays a fork).  Found with the stdlib ``ast`` and plain text
search: a few milliseconds, and nothing is imported from the tree.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import List, Optional, Tuple

from packaging.version import Version

from .base import MARKER

#: Local version labels (the part after ``+``) that vendor builds carry.  Upstream's own
#: local labels (``+cu124``, ``+g1234abc``, ``+cpu``) name a build, not a fork.
VENDOR_LABELS = ("corex", "ixuca", "iluvatar")

CUSTOM_OPS = "_custom_ops.py"
PAGED_ATTN = "attention/ops/paged_attn.py"

#: What this tool's own markers say where it replaced fork code (see the transforms).
_REPLACED_STUB = f"# {MARKER}: paged-attention-v2: NotImplementedError stub"
_REPLACED_HARDCODE = (
    f"# {MARKER}: v2-dispatch: was `use_v1 = True`",
    f"# {MARKER}: v2-dispatch: removed `use_v1 = True`",
)


def find_fork_markers(vllm_root: Path, version: Optional[Version]) -> Tuple[str, ...]:
    """What marks the tree at ``vllm_root`` (the ``vllm`` package) as a vendor fork.

    Empty when nothing does: an upstream tree.  Files that are missing, unreadable or
    do not parse contribute nothing (the planner reports those on its own).
    """
    found: List[str] = []
    if version is not None and version.local:
        if any(label in version.local.lower() for label in VENDOR_LABELS):
            found.append(f"version {version} carries a vendor label (+{version.local})")
    found += _custom_ops_markers(vllm_root / CUSTOM_OPS)
    found += _paged_attn_markers(vllm_root / PAGED_ATTN)
    return tuple(found)


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _parse(text: str) -> Optional[ast.Module]:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _custom_ops_markers(path: Path) -> List[str]:
    text = _read(path)
    if text is None:
        return []
    if _REPLACED_STUB in text:
        return [f"{CUSTOM_OPS}: paged_attention_v2 was a NotImplementedError stub (replaced)"]
    tree = _parse(text)
    if tree is None:
        return []
    for node in reversed(tree.body):  # the last definition is the one imported
        if isinstance(node, ast.FunctionDef) and node.name == "paged_attention_v2":
            last = node.body[-1]
            if isinstance(last, ast.Raise) and _is_not_implemented(last.exc):
                return [
                    f"{CUSTOM_OPS}:{node.lineno}: paged_attention_v2 raises NotImplementedError"
                ]
            return []
    return []


def _is_not_implemented(exc: Optional[ast.expr]) -> bool:
    if isinstance(exc, ast.Call):
        exc = exc.func
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def _paged_attn_markers(path: Path) -> List[str]:
    text = _read(path)
    if text is None:
        return []
    if any(marker in text for marker in _REPLACED_HARDCODE):
        return [f"{PAGED_ATTN}: use_v1 = True was hardcoded (replaced)"]
    tree = _parse(text)
    if tree is None:
        return []
    found = []
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == "PagedAttention"):
            continue
        for method in node.body:
            if not (isinstance(method, ast.FunctionDef) and method.name == "forward_decode"):
                continue
            for stmt in ast.walk(method):
                if _assigns_true(stmt, "use_v1"):
                    found.append(f"{PAGED_ATTN}:{stmt.lineno}: use_v1 = True hardcoded")
    return found


def _assigns_true(stmt: ast.AST, name: str) -> bool:
    if isinstance(stmt, ast.Assign):
        targets, value = stmt.targets, stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets, value = [stmt.target], stmt.value
    else:
        return False
    return (
        isinstance(value, ast.Constant)
        and value.value is True
        and any(isinstance(t, ast.Name) and t.id == name for t in targets)
    )

"""One unified-diff writer for every command that shows a change before making it.

Output is git-style: ``a/`` and ``b/`` prefixes, ``/dev/null`` for a file that appears
or goes, and the ``\\ No newline at end of file`` marker, so ``git apply`` and
``patch -p1`` accept it.  Line endings are the file's own (a CRLF file diffs as CRLF).
"""

from __future__ import annotations

import difflib
from typing import Iterable, List, Optional, Tuple


def _lines(text: Optional[str]) -> List[str]:
    return [] if text is None else text.splitlines(keepends=True)


def file_diff(path: str, old: Optional[str], new: Optional[str], git_header: bool = True) -> str:
    """The diff of one file; ``None`` on either side means the file is absent there."""
    chunks: List[str] = []
    if git_header:
        chunks.append(f"diff --git a/{path} b/{path}\n")
        if old is None:
            chunks.append("new file mode 100644\n")
        elif new is None:
            chunks.append("deleted file mode 100644\n")
    old_name = "/dev/null" if old is None else f"a/{path}"
    new_name = "/dev/null" if new is None else f"b/{path}"
    for line in difflib.unified_diff(_lines(old), _lines(new), old_name, new_name):
        chunks.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(chunks)


def _text(data: Optional[bytes]) -> Optional[str]:
    return None if data is None else data.decode("utf-8")


def tree_diff(changes: Iterable[Tuple[str, Optional[bytes], Optional[bytes]]]) -> str:
    """git-style diff of several files given as (path, old bytes, new bytes)."""
    return "".join(file_diff(path, _text(old), _text(new)) for path, old, new in changes)


def _unified_range(start: int, stop: int) -> Tuple[int, int]:
    """A hunk side's (start, length) as the ``@@`` line writes it (see difflib)."""
    length = stop - start
    return (start + 1 if length else start), length


def _strip_eol(line: str) -> str:
    for ending in ("\r\n", "\n", "\r"):
        if line.endswith(ending):
            return line[: -len(ending)]
    return line


def file_hunks(old: Optional[str], new: Optional[str], context: int = 3) -> List[dict]:
    """The hunks of :func:`file_diff` as data: the same grouping and ``@@`` numbers.

    Each hunk: ``old_start``/``old_lines``/``new_start``/``new_lines`` and ``lines``,
    each line its one-character prefix (`` ``, ``-``, ``+``) plus the text without its
    line ending.
    """
    a, b = _lines(old), _lines(new)
    hunks: List[dict] = []
    for group in difflib.SequenceMatcher(None, a, b).get_grouped_opcodes(context):
        old_start, old_len = _unified_range(group[0][1], group[-1][2])
        new_start, new_len = _unified_range(group[0][3], group[-1][4])
        lines: List[str] = []
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend(" " + _strip_eol(line) for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                lines.extend("-" + _strip_eol(line) for line in a[i1:i2])
            if tag in ("replace", "insert"):
                lines.extend("+" + _strip_eol(line) for line in b[j1:j2])
        hunks.append(
            {
                "old_start": old_start,
                "old_lines": old_len,
                "new_start": new_start,
                "new_lines": new_len,
                "lines": lines,
            }
        )
    return hunks

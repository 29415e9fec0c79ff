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

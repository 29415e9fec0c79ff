"""Where a file that libcst cannot parse is actually broken.

libcst reports tokenizer errors at ``1:0`` whatever the line, and its parser errors
at the start of the line; a user needs the line and column to fix the file.  Python's
own compiler knows them: ask it first, fall back to the position inside libcst's
message (``error at 3:4``), and only then to libcst's raw position.
"""

from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING, Tuple

if TYPE_CHECKING:
    import libcst as cst

_LIBCST_AT = re.compile(r"error at (\d+):(\d+)")


def parse_error_position(text: str, exc: cst.ParserSyntaxError) -> Tuple[int, int, str]:
    """(line, column, what): 1-based line and column, and a one-line reason."""
    libcst_reason = (exc.message or "syntax error").splitlines()[0]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning for odd escapes is not our news
            compile(text, "<target>", "exec", dont_inherit=True)
    except SyntaxError as syntax:
        if syntax.lineno:
            return syntax.lineno, max(syntax.offset or 1, 1), syntax.msg
    except (ValueError, OverflowError, RecursionError, MemoryError):
        pass  # null bytes, absurd nesting: no position from the compiler
    found = _LIBCST_AT.search(libcst_reason)
    if found:
        return int(found.group(1)), int(found.group(2)) + 1, libcst_reason
    return exc.raw_line, exc.raw_column + 1, libcst_reason

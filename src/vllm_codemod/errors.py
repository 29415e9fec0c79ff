"""One exception type for every user-facing failure.

Commands turn it into a single line on stderr and exit status 2; anything else that
escapes is a bug and keeps its traceback.
"""


class CodemodError(Exception):
    """A failure the user can act on: the message says what, where, and what to do."""

    exit_code = 2

"""The exceptions the engine raises for failures a user can act on.

Every one carries a one-line message that says what went wrong, where, and what to do.
The command-line boundary maps them to exit codes (all of these are exit status 2: bad
input, refusal, conflict or an environment problem); anything else that escapes is a
bug.  The subclasses exist so that callers (the CLI's report, tests) can tell the kinds
apart without parsing messages.
"""

from __future__ import annotations

import errno as errno_module
import os
from pathlib import Path
from typing import Optional, Union


class CodemodError(Exception):
    """A failure the user can act on: the message says what, where, and what to do."""

    exit_code = 2


class UserError(CodemodError):
    """Bad command-line input: an unknown name, a value out of range, a missing path."""


class ConflictError(CodemodError):
    """A transform met a shape it does not understand; nothing was written."""


class RefusalError(CodemodError):
    """The tool could go on but will not: doing so could destroy a file it does not own."""


class NotARegularFile(RefusalError):
    """A path that should be a plain file is a FIFO, a device or a socket."""

    def __init__(self, path: Union[str, Path], kind: str) -> None:
        self.path = str(path)
        self.kind = kind
        super().__init__(f"{path}: is a {kind}, not a regular file; pass the file itself")


class ManifestError(CodemodError):
    """The state directory (manifest, journal, saved originals) is unreadable or untrustworthy."""


class EnvironmentProblem(CodemodError):
    """The filesystem said no (disk full, read-only, permission): names the file and errno."""

    def __init__(
        self,
        path: Union[str, Path],
        error: Optional[OSError] = None,
        hint: str = "",
        *,
        errno: Optional[int] = None,
    ) -> None:
        self.path = str(path)
        self.errno = errno if errno is not None else (error.errno if error is not None else None)
        if error is not None and error.strerror:
            reason = error.strerror
        elif self.errno is not None:
            reason = os.strerror(self.errno)
        else:
            reason = str(error) if error is not None else "failed"
        self.reason = reason
        self.errno_name = errno_module.errorcode.get(self.errno or -1, "")
        hint = hint or _PERMISSION_HINTS.get(self.errno or -1, "")
        super().__init__(f"{self.path}: {reason}" + (f"; {hint}" if hint else ""))


#: The way on for a refusal that names no cause beyond its errno: EPERM is usually an
#: immutable file (chattr +i) or one another user owns; EACCES missing write permission.
_PERMISSION_HINTS = {
    errno_module.EPERM: "the file or its directory is immutable (lsattr) or not yours "
    "(ls -l); clear the flag or run as its owner or root",
    errno_module.EACCES: "no write permission on the file or its directory; "
    "run as its owner or root, or fix the permissions",
}

"""The tool's version, written into the kernels as they are copied into a tree.

The kernels run inside vLLM as ``vllm._codemod_kernels``, where vllm-codemod itself
may not be installed, so they cannot ask ``vllm_codemod.__version__`` at run time.
A tree's kernels must still say which release wrote them (bug reports, and a check
that a tree's kernels match the tool's).  Writing the number by hand into
``kernels/__init__.py`` made a second version source that drifted; instead the copy
is stamped, at copy time, from the one source.
"""

from __future__ import annotations

import re
from typing import Dict, Mapping

from . import __version__

#: The ``__init__.py`` of the kernel package, as a key of the files copied into a tree.
KERNEL_INIT = "__init__.py"

# One ``__version__ = "<anything>"`` line (any indent, either quote, a trailing comment
# kept); its line ending, and every other byte of the file, stay as they are.
_VERSION_LINE = re.compile(
    rb"^(?P<indent>[ \t]*)__version__[ \t]*=[ \t]*(?P<q>[\"'])[^\"'\r\n]*(?P=q)"
    rb"(?P<rest>[^\r\n]*)(?=\r\n|\r|\n|\Z)",
    re.MULTILINE,
)
# What may appear in the literal we write: a PEP 440 version, nothing to escape.
_SAFE_VERSION = re.compile(r"[A-Za-z0-9.+!_-]+")


class StampError(ValueError):
    """The kernel source has no single ``__version__`` line to stamp, or the version
    is not a plain version string.  A packaging bug, not a user error."""


def stamp_version(source: bytes, version: str = __version__) -> bytes:
    """``source`` with its one ``__version__ = "..."`` line set to ``version``.

    Idempotent: stamping a stamped file with the same version returns the same bytes,
    so a tree's kernels compare equal to a fresh copy of the same release.
    """
    if not _SAFE_VERSION.fullmatch(version):
        raise StampError(f"refusing to stamp {version!r}: not a plain version string")
    matches = list(_VERSION_LINE.finditer(source))
    if len(matches) != 1:
        raise StampError(
            f'expected exactly one `__version__ = "..."` line in the kernels\' '
            f"{KERNEL_INIT}, found {len(matches)}"
        )
    match = matches[0]
    line = match.group("indent") + b'__version__ = "' + version.encode("ascii") + b'"'
    return source[: match.start()] + line + match.group("rest") + source[match.end() :]


def stamp_kernel_files(files: Mapping[str, bytes], version: str = __version__) -> Dict[str, bytes]:
    """The kernel files to copy into a tree, their package ``__init__.py`` stamped.

    ``files`` maps paths such as ``_codemod_kernels/__init__.py`` to bytes (the shape
    of ``bundled_kernel_files()``); exactly one of them must be the package's top-level
    ``__init__.py``.
    """
    inits = [path for path in files if path.split("/")[1:] == [KERNEL_INIT]]
    if len(inits) != 1:
        raise StampError(
            f"expected one <package>/{KERNEL_INIT} among the kernel files, found {len(inits)}"
        )
    stamped = dict(files)
    stamped[inits[0]] = stamp_version(files[inits[0]], version)
    return stamped

"""The vllm dist-info ``RECORD``: keep pip's view of the tree true while it is patched.

pip uninstalls exactly the files ``RECORD`` lists.  Files the tool adds (the bundled
kernels, its state directory) are therefore appended, and the rows of files it rewrites
get their new hash and size, so ``pip uninstall vllm`` leaves nothing behind and
``pip show -f`` / ``pip check`` stay consistent.  The new RECORD is always computed from
the *original* one, so planning twice gives the same bytes; the original is saved like
any other file and ``revert`` restores it byte for byte.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from .discovery import VllmTree


def find_record(tree: VllmTree) -> Optional[Path]:
    """The ``RECORD`` of the vllm distribution installed beside ``vllm/``, if any."""
    from .versions import vllm_dist_infos

    dist_infos = vllm_dist_infos(tree.base)
    if len(dist_infos) != 1:
        return None
    record = dist_infos[0] / "RECORD"
    return record if record.is_file() else None


def wheel_hash(data: bytes) -> str:
    """The wheel spec's ``sha256=<urlsafe base64, unpadded>`` form."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _row(path: str, data: Optional[bytes], newline: str) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=newline)
    if data is None:
        writer.writerow([path, "", ""])
    else:
        writer.writerow([path, wheel_hash(data), str(len(data))])
    return out.getvalue()


def rewrite_record(
    original: bytes,
    hashed: Dict[str, bytes],
    unhashed: Iterable[str],
    dropped: Iterable[str],
) -> bytes:
    """``original`` with rows for ``hashed`` set to their bytes' hash and size, rows for
    ``dropped`` removed, and rows for new paths appended (``unhashed`` without a hash).

    Lines we do not mean to change keep their bytes; new rows use the file's own line
    ending.
    """
    text = original.decode("utf-8")
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += newline
    wanted: Dict[str, Optional[bytes]] = dict(hashed)
    for path in unhashed:
        wanted.setdefault(path, None)
    drop = set(dropped)
    seen: List[str] = []
    out: List[str] = []
    for line in lines:
        path = _path_of(line)
        if path is None:
            out.append(line)
            continue
        if path in drop:
            continue
        if path in wanted:
            seen.append(path)
            ending = line[len(line.rstrip("\r\n")) :] or newline
            out.append(_row(path, wanted[path], ending))
            continue
        out.append(line)
    for path in sorted(set(wanted) - set(seen)):
        out.append(_row(path, wanted[path], newline))
    return "".join(out).encode("utf-8")


def _path_of(line: str) -> Optional[str]:
    if not line.strip():
        return None
    rows = list(csv.reader([line.rstrip("\r\n")]))
    return rows[0][0] if rows and rows[0] else None

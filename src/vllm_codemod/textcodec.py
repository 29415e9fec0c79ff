"""What transforms see of a file's bytes, and how their text becomes bytes again.

Transforms work on plain ``\\n`` text without a byte-order mark: libcst drops a UTF-8
BOM on parsing, and code a transform builds always uses ``\\n``.  The engine therefore
decodes every target into that normal form, remembers what it removed, and puts it back
when encoding the result, so a BOM and CRLF line endings survive a patch, and so does a
missing final newline (which libcst already keeps).  A file that mixes line endings is
passed through as it is: there is no single convention to restore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

BOM = "\ufeff"


@dataclass(frozen=True)
class TextForm:
    """How a file's text was written: with a BOM, with CRLF line endings."""

    bom: bool = False
    crlf: bool = False

    def encode(self, text: str) -> bytes:
        if self.crlf:
            text = text.replace("\r\n", "\n").replace("\n", "\r\n")
        return ((BOM if self.bom else "") + text).encode("utf-8")


def decode(data: bytes) -> Tuple[str, TextForm]:
    """UTF-8 ``data`` as normal-form text plus the form to re-encode it with.

    Raises :class:`UnicodeDecodeError` for bytes that are not UTF-8.
    """
    text = data.decode("utf-8")
    bom = text.startswith(BOM)
    if bom:
        text = text[1:]
    newlines = text.count("\n")
    crlf = newlines > 0 and text.count("\r\n") == newlines
    if crlf:
        text = text.replace("\r\n", "\n")
    return text, TextForm(bom=bom, crlf=crlf)

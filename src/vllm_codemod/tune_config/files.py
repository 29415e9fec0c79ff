"""Reading and writing the run config file itself.

The config is someone else's file: only a regular file is read (a FIFO would block the
build, a device must not be replaced by a regular file), and it is written through the
engine's atomic writer, so its owner, group, mode and symlink survive, and a kill at
any instant leaves the old or the new file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import List

from ..errors import EnvironmentProblem, NotARegularFile, RefusalError, UserError
from ..fsutil import atomic_write, read_regular_file, sweep_temp_files

BOM = "\ufeff"


@dataclass(frozen=True)
class ConfigText:
    """A config's bytes and its text (own line endings kept, BOM removed)."""

    data: bytes
    text: str
    bom: bool

    def encode(self, text: str) -> bytes:
        return ((BOM if self.bom else "") + text).encode("utf-8")


def read_config(path: Path) -> ConfigText:
    try:
        data = read_regular_file(path)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file; pass the run config YAML to retune") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory; pass the run config YAML file") from None
    except NotARegularFile as exc:
        raise RefusalError(
            f"{path}: is a {exc.kind}, not a regular file; pass the run config YAML file "
            "itself (nothing was read or written)"
        ) from None
    except EnvironmentProblem as exc:
        raise EnvironmentProblem(
            path, errno=exc.errno, hint="cannot read it; check permissions"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{path}: not UTF-8 (byte {exc.start}); save the run config as UTF-8"
        ) from None
    bom = text.startswith(BOM)
    return ConfigText(data, text[1:] if bom else text, bom)


def remove_debris(path: Path) -> List[Path]:
    """Temp files of ours beside the config, left by a run that was killed mid-write."""
    target = Path(os.path.realpath(path))
    return sweep_temp_files([target.parent], name=target.name, only_dead=True)


def write_config(path: Path, original: ConfigText, new_text: str) -> None:
    """Replace the file atomically; refuse if it changed since we read it.

    A symlinked config keeps its link: we write the file it points to.
    """
    target = Path(os.path.realpath(path))
    try:
        current = read_regular_file(target)
    except (OSError, NotARegularFile):
        current = None
    if current != original.data:
        raise RefusalError(f"{path}: changed while tune-config ran; run it again")
    try:
        atomic_write(target, original.encode(new_text))
    except EnvironmentProblem as exc:
        raise EnvironmentProblem(
            path, errno=exc.errno, hint=f"cannot write it; check permissions on {target.parent}"
        ) from None

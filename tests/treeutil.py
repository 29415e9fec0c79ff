"""Helpers for tests that compare whole trees on disk."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, Tuple

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "vendor_fixtures"


_PATCHED_AT = re.compile(rb'\n  "patched_at": "[^"]*",\n')


def _masked(rel: str, data: bytes) -> bytes:
    """A manifest's bytes without its timestamp (two applies differ only there)."""
    if rel.endswith(".vllm-codemod/manifest.json"):
        return _PATCHED_AT.sub(b"\n", data)
    return data


def snapshot(root: Path) -> Tuple[Dict[str, bytes], frozenset]:
    """Every file's bytes and every directory under ``root``: what byte-identical means.

    The one exception is the ``patched_at`` time stamp in the tool's manifest.
    """
    files = {
        p.relative_to(root).as_posix(): _masked(p.relative_to(root).as_posix(), p.read_bytes())
        for p in root.rglob("*")
        if p.is_file()
    }
    dirs = frozenset(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir())
    return files, dirs


def copy_fixture(name: str, dest: Path) -> Path:
    """Copy ``vendor_fixtures/<name>`` (e.g. "bi-v100/corex-0.8.3") to ``dest``/site."""
    site = dest / "site"
    shutil.copytree(FIXTURES / name, site)
    return site


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make ``path`` unwritable, also for root (immutable attribute)."""
    if os.geteuid() != 0:
        os.chmod(path, 0o555)
        try:
            yield
        finally:
            os.chmod(path, 0o755)
        return
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(path)]).returncode:
        pytest.skip("running as root without chattr +i support: cannot make a read-only dir")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def cli_runner():
    """A CliRunner whose ``result.stdout`` is stdout alone on every click version.

    click 8.1 (the newest on Python 3.8) mixes stderr into stdout unless told not to;
    click 8.2 keeps them apart and no longer takes the argument.
    """
    from click.testing import CliRunner

    try:
        return CliRunner(mix_stderr=False)
    except TypeError:
        return CliRunner()


def write_record(site: Path) -> Path:
    """Give ``site``'s vllm dist-info a RECORD listing every file, as pip writes it."""
    import base64
    import csv
    import hashlib
    import io

    dist_info = next(site.glob("vllm-*.dist-info"))
    record = dist_info / "RECORD"
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for path in sorted(p for p in site.rglob("*") if p.is_file() and p != record):
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([path.relative_to(site).as_posix(), f"sha256={digest}", len(data)])
    writer.writerow([record.relative_to(site).as_posix(), "", ""])
    record.write_text(out.getvalue())
    return record

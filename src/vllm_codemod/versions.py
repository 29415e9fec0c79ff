"""Read the installed vLLM version from files, and gate on the range we know.

Forks tag their builds with local labels (``0.8.3+corex.4.3.0``) and dev suffixes;
we compare the release part only, via :mod:`packaging`, so those pass the gate.
"""

from __future__ import annotations

import ast
import logging
from email.parser import HeaderParser
from pathlib import Path
from typing import List, Optional, Tuple

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .discovery import VllmTree
from .errors import CodemodError

log = logging.getLogger(__name__)

OLDEST_KNOWN = Version("0.4.3")
NEWEST_KNOWN = Version("0.11.0")
KNOWN_RANGE_TEXT = f"{OLDEST_KNOWN} to {NEWEST_KNOWN}"


def _metadata_versions(base: Path) -> List[Tuple[Path, str]]:
    found = []
    for dist_info in sorted(base.glob("*.dist-info")):
        metadata = dist_info / "METADATA"
        if not metadata.is_file():
            continue
        with metadata.open(encoding="utf-8", errors="replace") as handle:
            headers = HeaderParser().parse(handle, headersonly=True)
        if canonicalize_name(headers.get("Name", "")) == "vllm" and headers.get("Version"):
            found.append((metadata, headers["Version"].strip()))
    return found


def _version_from_source(path: Path) -> Optional[str]:
    """A string literal assigned to ``__version__`` or ``version``, found without importing."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    for node in tree.body:
        targets = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and name.id in ("__version__", "version"):
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        return value.value
    return None


def vllm_dist_infos(base: Path) -> List[Path]:
    """The dist-info directories in ``base`` whose METADATA names the vllm distribution."""
    return [metadata.parent for metadata, _ in _metadata_versions(base)]


def read_version(tree: VllmTree) -> Tuple[Optional[Version], str]:
    """The installed version and where it came from (for messages)."""
    candidates = _metadata_versions(tree.base)
    if len(candidates) > 1:
        listed = ", ".join(str(path.parent.name) for path, _ in candidates)
        raise CodemodError(
            f"{tree.base}: several vllm dist-info directories ({listed}); "
            "remove the stale ones or pass --force to skip the version check"
        )
    sources = [(path, text) for path, text in candidates]
    if not sources:
        for name in ("_version.py", "version.py", "__init__.py"):
            text = _version_from_source(tree.root / name)
            if text:
                sources.append((tree.root / name, text))
                break
    if not sources:
        log.info("no vLLM version found in %s or %s", tree.base, tree.root)
    for path, text in sources:
        try:
            version = Version(text)
            log.info("vLLM version %s (read from %s)", version, path)
            return version, str(path)
        except InvalidVersion:
            raise CodemodError(
                f"{path}: version {text!r} is not a valid version; pass --force to skip the check"
            ) from None
    return None, ""


def version_gate(tree: VllmTree, version: Optional[Version]) -> Optional[str]:
    """Why ``version`` needs ``--force`` (what, where), or None inside the known range."""
    if version is None:
        return (
            f"{tree.base}: cannot tell the vLLM version (no vllm-*.dist-info/METADATA, no "
            "__version__ in vllm/_version.py or version.py)"
        )
    release = Version(version.base_version)
    if not (OLDEST_KNOWN <= release <= NEWEST_KNOWN):
        return (
            f"{tree.root}: vLLM {version} is outside the versions this tool knows "
            f"({KNOWN_RANGE_TEXT})"
        )
    return None


def force_hint(command: str) -> str:
    """The way on past the version gate, for the command the user ran."""
    if command == "apply":
        return "check `vllm-codemod diff --force` and pass --force to apply"
    if command == "diff":
        return "pass --force to see what `vllm-codemod apply --force` would change"
    return f"pass --force to {command} it anyway (`vllm-codemod {command} --force`)"


def gate_version(
    tree: VllmTree, version: Optional[Version], force: bool, command: str = "apply"
) -> None:
    """Refuse trees outside the range the transforms were written against, unless forced.

    The message names the way on for ``command``, the command the user ran.
    """
    if force:
        return
    problem = version_gate(tree, version)
    if problem is not None:
        raise CodemodError(f"{problem}; {force_hint(command)}")

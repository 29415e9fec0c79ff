"""Files whose bytes no longer match what the manifest says vllm-codemod left there.

``check`` answers "would apply change anything?"; a file edited by hand after it was
patched can still look applied to every transform, yet the tree is no longer what the
tool wrote and what ``revert`` expects.  That difference is what exit status 1 also
means for ``check`` (see README, "Exit codes"), so it is computed here from the
manifest alone: hashes, no parsing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List

from ..discovery import VllmTree
from ..fsutil import sha256_file
from .records import Manifest


@dataclass(frozen=True)
class Drift:
    path: str  # relative to the tree's base, as in the manifest
    state: str  # "edited", "original", "missing"
    #: a file vllm-codemod added (a bundled kernel), not one it rewrote
    added: bool = False

    def describe(self) -> str:
        if self.state == "missing":
            return f"{self.path}: missing, though vllm-codemod wrote it"
        if self.added:
            return (
                f"{self.path}: changed since vllm-codemod added it; `vllm-codemod apply "
                "--discard-local-changes` puts vllm-codemod's copy back, `vllm-codemod revert "
                "--discard-local-changes` removes it"
            )
        if self.state == "original":
            return f"{self.path}: back to its original bytes (reinstalled?); apply patches it again"
        return (
            f"{self.path}: changed since vllm-codemod wrote it; `vllm-codemod revert --force` "
            "discards that change and restores the original"
        )

    def to_dict(self) -> Dict[str, Any]:
        return {"path": self.path, "state": self.state}


def manifest_drift(tree: VllmTree, manifest: Manifest) -> List[Drift]:
    """Every file the manifest records whose current bytes are not the ones we wrote."""
    found: List[Drift] = []
    for rel, entry in sorted(manifest.files.items()):
        current = sha256_file(tree.path(rel))
        if current == entry.patched_sha256:
            continue
        if current is None:
            found.append(Drift(rel, "missing"))
        elif current == entry.original_sha256:
            found.append(Drift(rel, "original"))
        else:
            found.append(Drift(rel, "edited"))
    for rel, entry in sorted(manifest.added.items()):
        current = sha256_file(tree.path(rel))
        if current == entry.sha256:
            continue
        found.append(Drift(rel, "missing" if current is None else "edited", added=True))
    return found

"""``vllm/.vllm-codemod/``: where the manifest, the journal, the saved originals and the
staged writes of a tree live (inside the vllm package, so they travel with the tree
through ``docker commit`` and layer squashing)."""

from __future__ import annotations

from pathlib import Path
from typing import List

from ..discovery import VllmTree
from .records import STATE_DIR_NAME, Manifest


class StateDir:
    """``vllm/.vllm-codemod/``: manifest, journal, saved originals and staged writes."""

    def __init__(self, tree: VllmTree) -> None:
        self.tree = tree

    @property
    def path(self) -> Path:
        return self.tree.root / STATE_DIR_NAME

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    @property
    def journal_path(self) -> Path:
        return self.path / "journal.json"

    def originals(self, rel: str) -> Path:
        return self.path / "originals" / rel

    def rel(self, path: Path) -> str:
        """``path`` (inside the state dir) relative to the state dir, POSIX form."""
        return path.relative_to(self.path).as_posix()

    def has_journal(self) -> bool:
        return self.journal_path.exists()

    def has_manifest(self) -> bool:
        return self.manifest_path.exists()

    def load_manifest(self) -> Manifest:
        """The validated manifest, or an empty one for an unpatched tree."""
        return Manifest.load(self.tree, self.manifest_path)

    def state_files(self, manifest: Manifest) -> List[str]:
        """Paths (relative to the tree's base) the state dir holds once a run finished."""
        files = [self.tree.rel(self.manifest_path)]
        for rel in sorted(manifest.saved_paths()):
            files.append(self.tree.rel(self.originals(rel)))
        return files

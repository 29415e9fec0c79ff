"""Find the vllm tree to patch without importing vllm.

Importing vllm on a build machine can need a GPU, a driver, or minutes of start-up;
we only need to know where its files are.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import CodemodError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VllmTree:
    """An installed vllm package: ``root`` is the package dir, ``base`` the dir holding it."""

    base: Path
    root: Path

    def rel(self, path: Path) -> str:
        """``path`` relative to ``base`` in POSIX form, as diffs and manifests show it."""
        return path.relative_to(self.base).as_posix()

    def path(self, rel: str) -> Path:
        return self.base.joinpath(*rel.split("/"))


def _checked_package_dir(root: Path, hint: str) -> Path:
    if not root.is_dir():
        raise CodemodError(f"{root}: no vllm package directory there; {hint}")
    return root.resolve()


def locate_tree(site_packages: Optional[Path], vllm_root: Optional[Path]) -> VllmTree:
    """Resolve the command-line choice of tree into a :class:`VllmTree`."""
    if site_packages is not None and vllm_root is not None:
        raise CodemodError("--site-packages and --vllm-root name the same thing; pass only one")
    if site_packages is not None:
        if not site_packages.is_dir():
            raise CodemodError(f"{site_packages}: not a directory; pass a site-packages directory")
        root = _checked_package_dir(
            site_packages / "vllm",
            "pass the site-packages directory that contains vllm/ (or --vllm-root DIR)",
        )
        log.info("vllm tree: %s (from --site-packages %s)", root, site_packages)
        return VllmTree(base=root.parent, root=root)
    if vllm_root is not None:
        root = _checked_package_dir(vllm_root, "pass the vllm package directory itself")
        log.info("vllm tree: %s (from --vllm-root)", root)
        return VllmTree(base=root.parent, root=root)
    return _locate_in_interpreter()


def _locate_in_interpreter() -> VllmTree:
    # find_spec on a top-level name looks the package up without executing it.
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise CodemodError(
            f"vllm is not installed for {sys.executable}; "
            "pass --site-packages DIR or --vllm-root DIR to name the tree to patch"
        )
    root = Path(next(iter(spec.submodule_search_locations))).resolve()
    log.info("vllm tree: %s (the vllm of %s, found without importing it)", root, sys.executable)
    return VllmTree(base=root.parent, root=root)

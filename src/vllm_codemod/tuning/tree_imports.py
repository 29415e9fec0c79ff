"""Import modules of the patched tree's own ``vllm`` package, as vLLM itself would.

``tune`` times the tree's kernels (its ``_custom_ops.paged_attention_v1``, its
prefix-prefill kernels), not copies: so ``vllm`` must be the tree's package, imported by
its normal ``__init__`` with its normal submodule lookup.  The import path is left alone: the
tree's ``vllm`` is found with ``PathFinder`` in the tree's site-packages directory and
registered as ``vllm`` for the duration of the measurement; whatever ``vllm`` modules were
loaded before are put back afterwards.  A tree that cannot be imported here (a vendor
fork without its compiled extension, a missing dependency) is a reason to skip, never a
crash.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, Optional

PACKAGE = "vllm"


class TreeImportError(Exception):
    """The tree's module cannot be imported here; the message says why."""


def _ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


class TreeModules:
    """Context manager: ``load("vllm._custom_ops")`` imports from the tree at ``vllm_root``."""

    def __init__(self, vllm_root: Path) -> None:
        self.vllm_root = Path(vllm_root)
        self._saved: Dict[str, ModuleType] = {}
        self._package_error: Optional[str] = None
        self._package_loaded = False

    def __enter__(self) -> TreeModules:
        self._saved = {n: m for n, m in sys.modules.items() if _ours(n)}
        for name in self._saved:
            del sys.modules[name]
        return self

    def __exit__(self, *exc: object) -> None:
        for name in [n for n in sys.modules if _ours(n)]:
            del sys.modules[name]
        sys.modules.update(self._saved)

    def _import_package(self) -> None:
        if self._package_loaded:
            return
        if self._package_error is not None:
            raise TreeImportError(self._package_error)
        spec = importlib.machinery.PathFinder.find_spec(PACKAGE, [str(self.vllm_root.parent)])
        if spec is None or spec.loader is None or spec.origin is None:
            self._package_error = f"no importable vllm package in {self.vllm_root.parent}"
            raise TreeImportError(self._package_error)
        module = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = module
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:
            for name in [n for n in sys.modules if _ours(n)]:
                del sys.modules[name]
            if not isinstance(exc, Exception):
                raise
            self._package_error = f"`import vllm` from the tree fails: {_short(exc)}"
            raise TreeImportError(self._package_error) from None
        self._package_loaded = True

    def load(self, name: str) -> ModuleType:
        """The tree's module ``name`` (e.g. ``vllm.attention.ops.prefix_prefill``)."""
        self._import_package()
        try:
            return importlib.import_module(name)
        except Exception as exc:
            raise TreeImportError(f"`import {name}` from the tree fails: {_short(exc)}") from None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__

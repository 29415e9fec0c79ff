"""Import a tree's own code: its ``vllm`` modules as vLLM itself would, or one file by path.

The one place the tool, its tests and benchmarks import code that is not theirs: a
patched tree's kernel package under a private name (``verify``, ``tune``), one module
file with stand-ins for the ``vllm`` modules it imports (a vendored
``prefix_prefill.py`` in a benchmark, a kernel file with a stand-in ``triton`` in a
test), or the tree's ``vllm`` package itself (:class:`TreeModules`).


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
from typing import Any, Dict, Mapping, Optional

PACKAGE = "vllm"


class TreeImportError(Exception):
    """The tree's module cannot be imported here; the message says why."""


def load_file(
    name: str,
    path: Path,
    *,
    package: bool = False,
    stand_ins: Optional[Mapping[str, Any]] = None,
    keep: bool = True,
) -> ModuleType:
    """Import the file at ``path`` as module ``name``; errors propagate.

    ``package``: ``path`` is a package's ``__init__.py`` whose submodules import
    relatively (``name.sub``); any earlier module of that name and its submodules are
    dropped first.  ``stand_ins``: modules (or any objects) that ``sys.modules`` holds
    under those names while the file runs, e.g. ``{"vllm.platforms": ...}`` for a
    vendored kernel file, put back as they were afterwards.  ``keep``: leave the module
    registered as ``name`` (a package's submodules need it); otherwise it is only
    returned.
    """
    path = Path(path)
    if package:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]
        spec = importlib.util.spec_from_file_location(
            name, path, submodule_search_locations=[str(path.parent)]
        )
    else:
        spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    saved = {n: sys.modules.get(n) for n in (stand_ins or {})}
    sys.modules.update(stand_ins or {})
    if keep:
        sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if keep:
            sys.modules.pop(name, None)
        raise
    finally:
        for key, held in saved.items():
            if held is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = held
    return module


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

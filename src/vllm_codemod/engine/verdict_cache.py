"""Transform verdicts remembered across runs, so a clean ``check`` parses nothing.

A verdict is a pure function of what the transform saw: the target's text, the run's
context (version, option values, fork markers, ``--only`` names, tuning table) and the
tool's own code.  The key hashes all of them; the tool's code enters as its version
and the size and mtime of every file of the ``vllm_codemod``, transforms and kernels
packages, so an upgrade or an edit of the tool never meets an old entry.  Only verdicts
without an edit are kept (applied, not-applicable, conflict): a pending one needs the
parsed module.  A hit is used only if every file the verdict ships is in the tree
with the bytes it had when the verdict was stored (else the transform runs).

The cache lives outside the tree (``$VLLM_CODEMOD_CACHE_DIR``, else
``$XDG_CACHE_HOME/vllm-codemod``, else ``~/.cache/vllm-codemod``), one small JSON file
per key, written atomically; an empty ``VLLM_CODEMOD_CACHE_DIR`` turns it off.  Any
problem reading or writing it only costs the parse it would have saved.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .. import __version__
from ..discovery import VllmTree
from ..transforms.base import Status, Transform, TransformContext, Verdict

CACHE_ENV = "VLLM_CODEMOD_CACHE_DIR"
#: bump when the entry's shape changes
_FORMAT = 1

log = logging.getLogger(__name__)

_fingerprint: Optional[str] = None


def cache_dir() -> Optional[Path]:
    """Where entries live, or None when the cache is off."""
    configured = os.environ.get(CACHE_ENV)
    if configured is not None:
        return Path(configured) / "verdicts" if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vllm-codemod" / "verdicts"


def _package_dirs() -> List[Path]:
    import vllm_codemod
    import vllm_codemod.transforms

    from ..transforms.paged_attention_v2 import kernel_package_dir

    dirs = [Path(vllm_codemod.__file__).parent, Path(vllm_codemod.transforms.__file__).parent]
    kernels = kernel_package_dir()
    if kernels is not None:
        dirs.append(kernels)
    return dirs


def tool_fingerprint() -> str:
    """The tool's version and the size and mtime of each of its files (stat only)."""
    global _fingerprint
    if _fingerprint is None:
        digest = hashlib.sha256(f"{_FORMAT}:{__version__}".encode())
        for root in _package_dirs():
            for directory, subdirs, files in os.walk(root):
                subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
                for name in sorted(files):
                    st = os.stat(os.path.join(directory, name))
                    rel = os.path.relpath(os.path.join(directory, name), root)
                    digest.update(f"{root.name}/{rel}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        _fingerprint = digest.hexdigest()
    return _fingerprint


def verdict_key(transform: Transform, text: str, context: TransformContext) -> str:
    tuning = context.tuning_table
    doc = {
        "tool": tool_fingerprint(),
        "class": f"{type(transform).__module__}.{type(transform).__qualname__}",
        "name": transform.name,
        "text": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
        "version": str(context.version) if context.version is not None else None,
        "options": sorted((k, repr(v)) for k, v in context.options.items()),
        "fork_markers": list(context.fork_markers) if context.fork_markers is not None else None,
        "explicit": sorted(context.explicitly_selected),
        "tuning": hashlib.sha256(tuning).hexdigest() if tuning is not None else None,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _cacheable(transform: Transform) -> bool:
    # Only the tool's own transforms: a test's stand-in has no file to fingerprint.
    return type(transform).__module__.startswith("vllm_codemod.transforms.")


def lookup(
    tree: VllmTree, transform: Transform, text: str, context: TransformContext
) -> Tuple[Optional[str], Optional[Verdict]]:
    """(key, verdict): the stored verdict, or None; the key is None when the cache is off."""
    directory = cache_dir()
    if directory is None or not _cacheable(transform):
        return None, None
    key = verdict_key(transform, text, context)
    try:
        entry = json.loads((directory / f"{key}.json").read_text(encoding="utf-8"))
        status = Status(entry["status"])
        added: Dict[str, bytes] = {}
        for rel, digest in entry["added"].items():
            data = (tree.root / rel).read_bytes()
            if hashlib.sha256(data).hexdigest() != digest:
                log.debug("%s: cached verdict unused: %s differs", transform.name, rel)
                return key, None
            added[rel] = data
        verdict = Verdict(status, entry["reason"], details=entry["details"], added_files=added)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return key, None
    log.debug("%s: verdict from the cache (%s)", transform.name, directory / f"{key}.json")
    return key, verdict


def store(key: Optional[str], transform: Transform, verdict: Verdict) -> None:
    """Keep ``verdict`` under ``key`` if it has no edit and survives a JSON round trip."""
    directory = cache_dir()
    if key is None or directory is None or verdict.status is Status.PENDING:
        return
    entry: Dict[str, Any] = {
        "status": verdict.status.value,
        "reason": verdict.reason,
        "details": verdict.details,
        "added": {
            rel: hashlib.sha256(data).hexdigest() for rel, data in verdict.added_files.items()
        },
    }
    try:
        text = json.dumps(entry, sort_keys=True)
        if json.loads(text) != entry:
            return  # a tuple or a non-string key would come back different
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, directory / f"{key}.json")
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, TypeError, ValueError) as exc:
        log.debug("%s: verdict not cached (%s)", transform.name, exc)
        return
    log.debug("%s: verdict cached in %s", transform.name, directory / f"{key}.json")

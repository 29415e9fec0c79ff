"""What marks a tree as a vendor fork rather than upstream vLLM (shown by ``status``).

Two kinds of evidence, both read without importing vllm: the version's local label
(``0.8.3+corex.4.2.0``: forks tag their builds) and the code shapes that only forks
have and that a transform exists to repair (a ``paged_attention_v2`` stub, a
hardcoded ``use_v1 = True``), either still present or recorded in the manifest as
patched by us.  A retuned prefix-prefill ``NUM_WARPS`` is not evidence: upstream
launches with 8 warps too.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional

from packaging.version import Version

#: Transforms whose target shape upstream never ships: finding one pending (or having
#: applied it) means the tree was changed by a vendor.
FORK_ONLY_TRANSFORMS = ("paged-attention-v2", "v2-dispatch")


def fork_markers(
    version: Optional[Version],
    transforms: Iterable[Mapping[str, Any]],
    manifest: Mapping[str, Any],
) -> List[Dict[str, str]]:
    """Each marker: ``kind`` (version-label / fork-code / patched-fork-code) and ``detail``."""
    markers: List[Dict[str, str]] = []
    if version is not None and version.local:
        markers.append({"kind": "version-label", "detail": f"+{version.local}"})
    patched_by: Dict[str, List[str]] = {}
    for rel, entry in (manifest.get("files") or {}).items():
        for name in entry.get("transforms") or ():
            patched_by.setdefault(name, []).append(rel)
    for row in transforms:
        name = row["name"]
        if name not in FORK_ONLY_TRANSFORMS:
            continue
        if row["status"] == "pending":
            markers.append(
                {"kind": "fork-code", "detail": f"{row['target']}: {row['reason']} ({name})"}
            )
        elif name in patched_by:
            markers.append(
                {
                    "kind": "patched-fork-code",
                    "detail": f"{', '.join(patched_by[name])}: fork code patched by {name}",
                }
            )
    return markers

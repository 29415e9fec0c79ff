"""The transform registry, in the order the engine runs them.

Importing this package must stay cheap and torch-free: the CLI imports it to build its
options, on machines where torch may not even be installed.
"""

from __future__ import annotations

from typing import Tuple

from .base import Transform
from .paged_attention_v2 import PagedAttentionV2
from .prefix_prefill_route import PrefixPrefillRoute
from .prefix_prefill_warps import PrefixPrefillWarps
from .v2_dispatch import V2Dispatch

ALL_TRANSFORMS: Tuple[Transform, ...] = (
    PagedAttentionV2(),
    V2Dispatch(),
    PrefixPrefillWarps(),
    PrefixPrefillRoute(),
)


def bundle_directories() -> Tuple[str, ...]:
    """The directories the transforms copy files into (inside ``vllm/``), each once."""
    found = [t.bundle.directory for t in ALL_TRANSFORMS if t.bundle is not None]
    return tuple(dict.fromkeys(found))


def get_transform(name: str) -> Transform:
    """The registered transform called ``name`` (KeyError lists the known ones)."""
    for transform in ALL_TRANSFORMS:
        if transform.name == name:
            return transform
    known = ", ".join(t.name for t in ALL_TRANSFORMS)
    raise KeyError(f"unknown transform {name!r}; known: {known}")


__all__ = ["ALL_TRANSFORMS", "bundle_directories", "get_transform"]

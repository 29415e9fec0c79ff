"""vLLM's paged KV-cache layout, shared by the decode and the prefix-prefill inputs.

Both kernels read the same cache: keys as ``[blocks, kv_heads, head_size // x,
block_size, x]`` with ``x`` elements to 16 bytes, values as ``[blocks, kv_heads,
head_size, block_size]``, and a block table per sequence.  A sequence's blocks are a
random permutation of the cache's, as after a server has run for a while, so that a
kernel that assumed contiguous blocks would fail the reference check.
"""

from __future__ import annotations

import math
from typing import Sequence, Tuple

import torch

BLOCK_SIZE = 16

Size = Tuple[int, ...]


def block_tables(tokens: Sequence[int], generator: torch.Generator) -> Tuple[torch.Tensor, int]:
    """An int32 block table (CPU) for sequences of ``tokens`` cached tokens, and the
    number of blocks in the cache (one spare; every sequence gets at least one block)."""
    per_seq = [max(1, math.ceil(n / BLOCK_SIZE)) for n in tokens]
    num_blocks = sum(per_seq) + 1
    perm = torch.randperm(num_blocks, generator=generator).to(torch.int32)
    table = torch.zeros(len(per_seq), max(per_seq), dtype=torch.int32)
    used = 0
    for s, nb in enumerate(per_seq):
        table[s, :nb] = perm[used : used + nb]
        used += nb
    return table, num_blocks


def kv_cache_sizes(
    num_blocks: int, num_kv_heads: int, head_size: int, dtype: torch.dtype
) -> Tuple[Size, Size]:
    """The key and value cache sizes in vLLM's layout for ``dtype``."""
    x = 16 // torch.tensor([], dtype=dtype).element_size()
    return (
        (num_blocks, num_kv_heads, head_size // x, BLOCK_SIZE, x),
        (num_blocks, num_kv_heads, head_size, BLOCK_SIZE),
    )

"""Random decode inputs in vLLM's paged layout: the one builder behind the self-check,
the kernel tests, ``tune`` and the benchmarks.

Keys are ``[blocks, kv_heads, head_size // x, block_size, x]`` with ``x`` elements to 16
bytes, values ``[blocks, kv_heads, head_size, block_size]``, and each sequence's blocks
are a random permutation of the cache's, as after a server has run for a while, so that
a kernel that assumed contiguous blocks fails the reference check.  The callers differ
only in the options: the tests poison every slot no sequence owns with NaN (a kernel that
reads one shows it), ``tune`` and the benchmarks generate multi-gigabyte caches on the
device, and the self-check keeps the draws in the order its reports were made with.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import torch

from .signature import PARTITION_SIZE
from .tuning_table import DTYPE_ALIASES

Size = Tuple[int, ...]


def torch_dtype(name: str) -> torch.dtype:
    """``"bf16"``, ``"bfloat16"`` ... -> ``torch.bfloat16`` (the tuning files' names)."""
    return getattr(torch, DTYPE_ALIASES[name])


def cache_sizes(
    num_blocks: int, num_kv_heads: int, head_size: int, block_size: int, elem_size: int
) -> Tuple[Size, Size]:
    """The key and value cache sizes in vLLM's layout for ``elem_size``-byte elements."""
    x = 16 // elem_size
    return (
        (num_blocks, num_kv_heads, head_size // x, block_size, x),
        (num_blocks, num_kv_heads, head_size, block_size),
    )


def block_tables(
    tokens: Sequence[int],
    block_size: int,
    generator: torch.Generator,
    spare_blocks: int = 1,
    junk: bool = False,
) -> Tuple[torch.Tensor, int]:
    """An int32 block table (CPU) for sequences of ``tokens`` cached tokens, and the number
    of blocks in the cache (``spare_blocks`` nobody owns; every sequence gets at least one
    block).  ``junk``: one column more than needed, and random block ids past each
    sequence's end (a kernel must never follow them)."""
    per_seq = [max(1, math.ceil(n / block_size)) for n in tokens]
    num_blocks = sum(per_seq) + spare_blocks
    perm = torch.randperm(num_blocks, generator=generator).to(torch.int32)
    if junk:
        size = (len(per_seq), max(per_seq) + 1)
        table = torch.randint(0, num_blocks, size, generator=generator, dtype=torch.int32)
    else:
        table = torch.zeros(len(per_seq), max(per_seq), dtype=torch.int32)
    used = 0
    for s, nb in enumerate(per_seq):
        table[s, :nb] = perm[used : used + nb]
        used += nb
    return table, num_blocks


def random_cache(
    size: Size, dtype: torch.dtype, device: Any, generator: torch.Generator, on_device: bool
) -> torch.Tensor:
    """Normal values in ``dtype``: drawn on the CPU from ``generator``, or (``on_device``;
    a 100K-token cache is gigabytes) on the device from a generator seeded by it."""
    if not on_device:
        return torch.randn(size, generator=generator).to(dtype).to(device)
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    out = torch.empty(size, dtype=dtype, device=device)
    return out.normal_(generator=torch.Generator(device=device).manual_seed(seed))


def decode_case(
    seq_lens: Sequence[int],
    num_heads: int,
    num_kv_heads: int,
    head_size: int,
    block_size: int,
    dtype: torch.dtype,
    device: Any,
    generator: torch.Generator,
    *,
    extra_partitions: int = 0,
    spare_blocks: int = 1,
    poison: bool = False,
    fp8_dtype: Optional[torch.dtype] = None,
    kv_on_device: bool = False,
    fill: Optional[float] = float("nan"),
) -> Dict[str, Any]:
    """``paged_attention_v2``'s arguments by their canonical names (alibi_slopes None).

    Draws, in order: the block tables, K, V, the query.  ``poison``: junk block ids past
    each sequence's end and NaN in every cache slot no sequence owns.  ``fp8_dtype``: the
    caches hold that fp8 format's bytes (uint8).  ``fill``: the value the outputs and
    partition buffers start with (None: uninitialized); they have ``extra_partitions``
    partitions more than the longest sequence needs.
    """
    tables, num_blocks = block_tables(seq_lens, block_size, generator, spare_blocks, poison)
    elem = 1 if fp8_dtype is not None else torch.tensor([], dtype=dtype).element_size()
    key_size, value_size = cache_sizes(num_blocks, num_kv_heads, head_size, block_size, elem)
    if fp8_dtype is not None:
        key, value = (
            (torch.randn(size, generator=generator) * 2).to(fp8_dtype).view(torch.uint8)
            for size in (key_size, value_size)
        )
    else:
        key = random_cache(key_size, dtype, device, generator, kv_on_device)
        value = random_cache(value_size, dtype, device, generator, kv_on_device)
        if poison:
            _poison(key, value, tables, seq_lens, block_size)
    query = torch.randn(len(seq_lens), num_heads, head_size, generator=generator).to(dtype)
    num_seqs, max_len = len(seq_lens), max(seq_lens)
    parts = math.ceil(max_len / PARTITION_SIZE) + extra_partitions

    def buffer(*size: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        out = torch.empty(size, dtype=dtype, device=device)
        return out if fill is None else out.fill_(fill)

    return dict(
        out=buffer(num_seqs, num_heads, head_size, dtype=dtype),
        exp_sums=buffer(num_seqs, num_heads, parts),
        max_logits=buffer(num_seqs, num_heads, parts),
        tmp_out=buffer(num_seqs, num_heads, parts, head_size, dtype=dtype),
        query=query.to(device),
        key_cache=key.to(device),
        value_cache=value.to(device),
        num_kv_heads=num_kv_heads,
        scale=1.0 / math.sqrt(head_size),
        block_tables=tables.to(device),
        seq_lens=torch.tensor(list(seq_lens), dtype=torch.int32, device=device),
        block_size=block_size,
        max_seq_len=max_len,
        alibi_slopes=None,
    )


def _poison(key, value, tables, seq_lens, block_size) -> None:
    owned = torch.zeros(key.shape[0], block_size, dtype=torch.bool)
    for s, n in enumerate(seq_lens):
        pos = torch.arange(n)
        owned[tables[s, pos // block_size].long(), pos % block_size] = True
    owned = owned.to(key.device)
    key.masked_fill_(~owned[:, None, None, :, None], float("nan"))
    value.masked_fill_(~owned[:, None, None, :], float("nan"))


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The standard ALiBi slopes (powers of two, as in vLLM's model code), float32."""
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest != num_heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** (2 * i + 1) for i in range(num_heads - closest)]
    return torch.tensor(slopes, dtype=torch.float32)

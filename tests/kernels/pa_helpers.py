"""Input builders shared by the kernel tests (CPU and GPU)."""

from __future__ import annotations

import math
from typing import List, Optional

import torch

from vllm_codemod.kernels.reference import reference_paged_attention
from vllm_codemod.kernels.signature import PARTITION_SIZE


def make_inputs(
    seq_lens: List[int],
    num_heads: int,
    num_kv_heads: int,
    head_size: int,
    block_size: int,
    dtype: torch.dtype,
    device: str = "cpu",
    alibi: bool = False,
    extra_partitions: int = 0,
    extra_blocks: int = 3,
    seed: int = 0,
    fp8_dtype: Optional[torch.dtype] = None,
):
    """Random caches with randomly permuted blocks, NaN-poisoned outputs and buffers."""
    g = torch.Generator().manual_seed(seed)
    num_seqs = len(seq_lens)
    blocks_per_seq = [math.ceil(n / block_size) for n in seq_lens]
    max_blocks = max(blocks_per_seq) + 1  # wider than needed: junk past each end
    num_blocks = sum(blocks_per_seq) + extra_blocks
    elem = 1 if fp8_dtype is not None else torch.tensor([], dtype=dtype).element_size()
    x = 16 // elem
    kshape = (num_blocks, num_kv_heads, head_size // x, block_size, x)
    vshape = (num_blocks, num_kv_heads, head_size, block_size)
    if fp8_dtype is not None:
        k = (torch.randn(kshape, generator=g) * 2).to(fp8_dtype).view(torch.uint8)
        v = (torch.randn(vshape, generator=g) * 2).to(fp8_dtype).view(torch.uint8)
    else:
        k = torch.randn(kshape, generator=g).to(dtype)
        v = torch.randn(vshape, generator=g).to(dtype)
    if fp8_dtype is None:  # junk blocks hold NaN: a kernel must never let them through
        k[:] = float("nan")
        v[:] = float("nan")
        k_real = torch.randn(kshape, generator=g).to(dtype)
        v_real = torch.randn(vshape, generator=g).to(dtype)
    perm = torch.randperm(num_blocks, generator=g)
    tables = torch.randint(0, num_blocks, (num_seqs, max_blocks), generator=g, dtype=torch.int32)
    used = 0
    for s, nb in enumerate(blocks_per_seq):
        ids = perm[used : used + nb]
        tables[s, :nb] = ids.to(torch.int32)
        used += nb
        if fp8_dtype is None:
            k[ids] = k_real[ids]
            v[ids] = v_real[ids]
            tail = seq_lens[s] - (nb - 1) * block_size  # valid slots in the last block
            k[ids[-1], :, :, tail:] = float("nan")
            v[ids[-1], :, :, tail:] = float("nan")
    query = torch.randn(num_seqs, num_heads, head_size, generator=g).to(dtype)
    max_len = max(seq_lens)
    parts = math.ceil(max_len / PARTITION_SIZE) + extra_partitions
    nan = float("nan")
    bufs = dict(
        out=torch.full_like(query, nan),
        exp_sums=torch.full((num_seqs, num_heads, parts), nan),
        max_logits=torch.full((num_seqs, num_heads, parts), nan),
        tmp_out=torch.full((num_seqs, num_heads, parts, head_size), nan, dtype=dtype),
    )
    alibi_slopes = torch.rand(num_heads, generator=g) * 0.1 if alibi else None
    args = dict(
        query=query,
        key_cache=k,
        value_cache=v,
        num_kv_heads=num_kv_heads,
        scale=1.0 / math.sqrt(head_size),
        block_tables=tables,
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        block_size=block_size,
        max_seq_len=max_len,
        alibi_slopes=alibi_slopes,
    )
    moved = {}
    for name, value in {**bufs, **args}.items():
        moved[name] = value.to(device) if isinstance(value, torch.Tensor) else value
    return moved


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.detach().to(torch.float64).cpu()
    ref = ref.to(torch.float64).cpu()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def tolerance(dtype: torch.dtype) -> float:
    return 1e-4 if dtype == torch.float32 else 2e-2


def reference_of(a, seqs: List[int], lens: List[int]) -> torch.Tensor:
    """The float64 reference for sequences ``seqs`` of inputs ``a``, with lengths ``lens``
    (all of the inputs' sequences; ``a["seq_lens"]`` may differ, e.g. an empty one)."""
    return reference_paged_attention(
        a["query"][seqs],
        a["key_cache"],
        a["value_cache"],
        a["block_tables"][seqs],
        [lens[i] for i in seqs],
        a["scale"],
        a["alibi_slopes"],
    )

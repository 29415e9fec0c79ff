"""Decode inputs in vLLM's layout: paged K/V caches, block tables, partition buffers.

Two kinds: a timing case (the point being measured, with ``copies`` independent KV
caches so repeated calls do not hit L2) and a small check case (a few hundred tokens
over several partitions plus a short sequence) on which every candidate is compared with
the float64 reference before it is timed.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence

import torch

from ..kernels.signature import PARTITION_SIZE
from .kv_layout import BLOCK_SIZE, block_tables, kv_cache_sizes
from .shapes import Shape

#: Check-case lengths: three partitions, the last partial, and a sequence shorter than a block.
CHECK_SEQ_LENS = (1300, 7)


def torch_dtype(name: str) -> torch.dtype:
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The standard ALiBi slopes (powers of two, as in vLLM's model code), float32."""
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest != num_heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** (2 * i + 1) for i in range(num_heads - closest)]
    return torch.tensor(slopes, dtype=torch.float32)


def make_decode_case(
    shape: Shape,
    seq_lens: Sequence[int],
    device: str,
    copies: int = 1,
    seed: int = 0,
) -> List[Dict[str, Any]]:
    """``copies`` argument dicts (canonical paged_attention_v2 names) sharing the query,
    block tables and outputs, each with its own K/V cache."""
    dtype = torch_dtype(shape.dtype)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    num_seqs = len(seq_lens)
    tables, num_blocks = block_tables(seq_lens, gen)
    hq, hkv, d = shape.num_heads, shape.num_kv_heads, shape.head_size
    key_size, value_size = kv_cache_sizes(num_blocks, hkv, d, dtype)
    query = torch.randn(num_seqs, hq, d, generator=gen).to(device=device, dtype=dtype)
    parts = math.ceil(max(seq_lens) / PARTITION_SIZE)
    common: Dict[str, Any] = dict(
        out=torch.empty(num_seqs, hq, d, dtype=dtype, device=device),
        exp_sums=torch.empty(num_seqs, hq, parts, dtype=torch.float32, device=device),
        max_logits=torch.empty(num_seqs, hq, parts, dtype=torch.float32, device=device),
        tmp_out=torch.empty(num_seqs, hq, parts, d, dtype=dtype, device=device),
        query=query,
        num_kv_heads=hkv,
        scale=1.0 / math.sqrt(d),
        block_tables=tables.to(device),
        seq_lens=torch.tensor(list(seq_lens), dtype=torch.int32, device=device),
        block_size=BLOCK_SIZE,
        max_seq_len=max(seq_lens),
        alibi_slopes=alibi_slopes(hq).to(device) if shape.alibi else None,
    )
    cases = []
    for _ in range(max(1, copies)):
        # Generated on the device in the final dtype: a 100K-token cache is gigabytes.
        key = torch.empty(key_size, dtype=dtype, device=device)
        value = torch.empty(value_size, dtype=dtype, device=device)
        key.normal_(generator=_device_generator(device, gen))
        value.normal_(generator=_device_generator(device, gen))
        cases.append({**common, "key_cache": key, "value_cache": value})
    return cases


def _device_generator(device: str, seed_from: torch.Generator) -> torch.Generator:
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=seed_from))
    return torch.Generator(device=device).manual_seed(seed)


def make_check_case(shape: Shape, device: str, seed: int = 1) -> Dict[str, Any]:
    return make_decode_case(shape, CHECK_SEQ_LENS, device, copies=1, seed=seed)[0]


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    diff = out.detach().to(torch.float64).cpu() - ref.to(torch.float64).cpu()
    err = float(diff.norm() / max(float(ref.to(torch.float64).norm()), 1e-30))
    return err if math.isfinite(err) else float("inf")


#: Largest relative error (norm) accepted against the float64 reference, per dtype.
TOLERANCE = {"bfloat16": 2e-2, "float16": 2e-2, "float32": 1e-4}

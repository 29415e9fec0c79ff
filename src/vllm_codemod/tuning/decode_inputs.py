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

from ..kernels.paged_inputs import alibi_slopes, decode_case, random_cache, torch_dtype
from .shapes import Shape

#: vLLM's default block size; both the decode and the prefix-prefill inputs use it.
BLOCK_SIZE = 16
#: Check-case lengths: three partitions, the last partial, and a sequence shorter than a block.
CHECK_SEQ_LENS = (1300, 7)


def make_decode_case(
    shape: Shape,
    seq_lens: Sequence[int],
    device: str,
    copies: int = 1,
    seed: int = 0,
) -> List[Dict[str, Any]]:
    """``copies`` argument dicts (canonical paged_attention_v2 names) sharing the query,
    block tables and outputs, each with its own K/V cache (generated on the device in the
    final dtype: a 100K-token cache is gigabytes)."""
    dtype = torch_dtype(shape.dtype)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    hq, hkv, d = shape.num_heads, shape.num_kv_heads, shape.head_size
    first = decode_case(
        seq_lens, hq, hkv, d, BLOCK_SIZE, dtype, device, gen, kv_on_device=True, fill=None
    )
    if shape.alibi:
        first["alibi_slopes"] = alibi_slopes(hq).to(device)
    cases = [first]
    for _ in range(1, max(1, copies)):
        key = random_cache(first["key_cache"].shape, dtype, device, gen, on_device=True)
        value = random_cache(first["value_cache"].shape, dtype, device, gen, on_device=True)
        cases.append({**first, "key_cache": key, "value_cache": value})
    return cases


def make_check_case(shape: Shape, device: str, seed: int = 1) -> Dict[str, Any]:
    return make_decode_case(shape, CHECK_SEQ_LENS, device, copies=1, seed=seed)[0]


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    diff = out.detach().to(torch.float64).cpu() - ref.to(torch.float64).cpu()
    err = float(diff.norm() / max(float(ref.to(torch.float64).norm()), 1e-30))
    return err if math.isfinite(err) else float("inf")


#: Largest relative error (norm) accepted against the float64 reference, per dtype.
TOLERANCE = {"bfloat16": 2e-2, "float16": 2e-2, "float32": 1e-4}

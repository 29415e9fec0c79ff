"""Prefix-prefill inputs and their float64 check: one builder for tests, verify and benchmarks.

``make_prefill_inputs`` draws random data (never zeros: they hide unwritten rows and
wrong indexing) with the context's pages in a shuffled order, in the launcher's
contract (``prefill_launch.prefix_prefill_triton``); ``prefill_error`` compares an
output with ``reference.reference_prefix_prefill`` on all rows or a sample, and checks
that exactly the rows the kernel must write were written (outputs are NaN-poisoned).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .call import fp8_dtype
from .reference import reference_prefix_prefill


def make_prefill_inputs(
    lens: Sequence[Tuple[int, int]],
    num_heads: int,
    num_kv_heads: int,
    head_size: int,
    page: int = 16,
    dtype: torch.dtype = torch.bfloat16,
    device: str = "cpu",
    kv_cache_dtype: str = "auto",
    alibi: bool = False,
    sliding_window: int = 0,
    skip_decode: bool = False,
    seed: int = 0,
) -> Dict[str, Any]:
    """Arguments for sequences of ``(cached, new)`` tokens; ``o`` is NaN-poisoned.

    ``k_cache``/``v_cache`` hold raw bytes (uint8) for an fp8 ``kv_cache_dtype``, as in
    vLLM; ``fp8_dtype`` names their float8 type.  Scales are 1-element float32 tensors.
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    fp8 = fp8_dtype(kv_cache_dtype)
    pages = [math.ceil(ctx / page) for ctx, _ in lens]
    num_blocks = sum(pages) + 2
    elem = 1 if fp8 is not None else torch.tensor([], dtype=dtype).element_size()
    x = 16 // elem

    def rnd(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=gen, device=device)

    k_cache = rnd(num_blocks, num_kv_heads, head_size // x, page, x)
    v_cache = rnd(num_blocks, num_kv_heads, head_size, page)
    if fp8 is not None:
        k_cache, v_cache = (t.mul(0.5).to(fp8).view(torch.uint8) for t in (k_cache, v_cache))
    else:
        k_cache, v_cache = k_cache.to(dtype), v_cache.to(dtype)
    order = (torch.randperm(num_blocks - 1, generator=gen, device=device) + 1).to(torch.int32)
    table = torch.zeros(len(lens), max(pages + [1]) + 1, dtype=torch.int32, device=device)
    used = 0
    for s, n in enumerate(pages):
        table[s, :n] = order[used : used + n]
        used += n
    starts = [0]
    for _, new in lens:
        starts.append(starts[-1] + new)
    total = starts[-1]
    return {
        "q": rnd(total, num_heads, head_size).to(dtype),
        "k": rnd(total, num_kv_heads, head_size).to(dtype),
        "v": rnd(total, num_kv_heads, head_size).to(dtype),
        "o": torch.full((total, num_heads, head_size), float("nan"), dtype=dtype, device=device),
        "k_cache": k_cache,
        "v_cache": v_cache,
        "block_table": table,
        "query_start": torch.tensor(starts, dtype=torch.int32, device=device),
        "seq_lens": torch.tensor([c + n for c, n in lens], dtype=torch.int32, device=device),
        "ctx_lens": torch.tensor([c for c, _ in lens], dtype=torch.int32, device=device),
        "max_query_len": max([n for _, n in lens] + [0]),
        "sm_scale": 1.0 / math.sqrt(head_size),
        "kv_cache_dtype": kv_cache_dtype,
        "fp8_dtype": fp8,
        "k_scale": torch.tensor([0.8], dtype=torch.float32, device=device),
        "v_scale": torch.tensor([1.25], dtype=torch.float32, device=device),
        "alibi_slopes": (
            torch.rand(num_heads, generator=gen, device=device) * 0.2 if alibi else None
        ),
        "sliding_window": sliding_window,
        "skip_decode": skip_decode,
    }


def launch_arguments(a: Dict[str, Any]) -> Dict[str, Any]:
    """``a`` as keyword arguments of ``prefix_prefill_triton`` / ``prefix_prefill_torch``."""
    fp8 = a["fp8_dtype"]
    return dict(
        q=a["q"], k=a["k"], v=a["v"], o=a["o"],
        k_cache=a["k_cache"].view(fp8) if fp8 is not None else a["k_cache"],
        v_cache=a["v_cache"].view(fp8) if fp8 is not None else a["v_cache"],
        block_table=a["block_table"], query_start=a["query_start"], seq_lens=a["seq_lens"],
        max_query_len=a["max_query_len"], sm_scale=a["sm_scale"],
        k_scale=a["k_scale"] if fp8 is not None else None,
        v_scale=a["v_scale"] if fp8 is not None else None,
        alibi_slopes=a["alibi_slopes"], sliding_window=a["sliding_window"],
        skip_decode=a["skip_decode"],
    )  # fmt: skip


def sample_rows(a: Dict[str, Any], per_seq: int = 12) -> List[int]:
    """Each sequence's first and last new tokens and an even spread between them."""
    rows = set()
    starts = [int(n) for n in a["query_start"]]
    for s0, s1 in zip(starts, starts[1:]):
        if s1 > s0:
            rows.update(range(s0, s1, max((s1 - s0) // per_seq, 1)))
            rows.update((s0, s1 - 1))
    return sorted(rows)


def prefill_error(
    a: Dict[str, Any],
    out: torch.Tensor,
    rows: Optional[Sequence[int]] = None,
    device: Optional[torch.device] = None,
) -> float:
    """Relative Frobenius error of ``out`` on ``rows`` (all when None) against float64.

    Infinite when a row the kernel must write holds NaN/inf, or a row it must leave
    alone (``skip_decode``) was written.
    """
    fp8 = a["fp8_dtype"]
    ref = reference_prefix_prefill(
        a["q"], a["k"], a["v"], a["k_cache"], a["v_cache"], a["block_table"],
        [int(n) for n in a["query_start"]], [int(n) for n in a["seq_lens"]], a["sm_scale"],
        a["alibi_slopes"], a["sliding_window"], fp8,
        float(a["k_scale"]) if fp8 is not None else 1.0,
        float(a["v_scale"]) if fp8 is not None else 1.0,
        a["skip_decode"], rows=rows, device=device,
    )  # fmt: skip
    got = out.to(device=ref.device, dtype=torch.float64)
    if rows is not None:
        index = torch.tensor(sorted({int(r) for r in rows}), device=ref.device)
        ref, got = ref[index], got[index]
    expected = torch.isfinite(ref)
    if rows is None and not torch.equal(expected, torch.isfinite(got)):
        return float("inf")
    if not torch.isfinite(got[expected]).all():
        return float("inf")
    want = ref[expected]
    if want.numel() == 0:
        return 0.0
    return float((got[expected] - want).norm() / want.norm())

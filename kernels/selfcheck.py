"""Run the entry point at a few shapes against the float64 reference.

Imported by ``vllm-codemod verify`` from the patched tree under a private package name,
so everything here is relative and nothing assumes what the package is called.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Dict, List, Optional

import torch

from .dispatch import paged_attention_v2_with_path
from .paged_inputs import decode_case
from .prefill_selfcheck import case_count, run_prefill_selfcheck
from .reference import reference_for_args

_TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 2e-2}


def _shapes(device: str, quick: bool):
    gpu = device.startswith("cuda")
    long_len = (100_000 if not quick else 32_768) if gpu else (4096 if quick else 16_384)
    shapes = [
        # (label, seq_lens, heads, kv_heads, head_size, block_size, dtype, alibi)
        ("mixed-lens fp32 MHA h64 bs16 alibi", [1, 513, 1024, 77], 4, 4, 64, 16, torch.float32, 1),
        ("GQA 8q/2kv bf16 h128 bs16", [700, 1536], 8, 2, 128, 16, torch.bfloat16, 0),
        ("MQA 8q/1kv fp16 h80 bs32", [1025, 3], 8, 1, 80, 32, torch.float16, 0),
        (
            f"long {long_len} GQA 8q/2kv bf16 h128 bs16",
            [long_len],
            8,
            2,
            128,
            16,
            torch.bfloat16,
            0,
        ),
    ]
    if not quick:
        shapes += [
            ("GQA 32q/8kv fp16 h256 bs8", [2048, 4097], 32, 8, 256, 8, torch.float16, 0),
            ("fp32 h96 bs32 alibi", [1, 2, 600], 6, 3, 96, 32, torch.float32, 1),
        ]
    return shapes


def run_selfcheck(
    device: Optional[str] = None,
    quick: bool = True,
    seed: int = 0,
    progress: Optional[Callable[[int, int], None]] = None,
) -> List[Dict[str, object]]:
    """Per shape: {"shape", "path", "max_abs_err", "rel_err", "ok", "seconds"}.

    ``progress(done, total)`` is called after each shape (the CLI draws a bar from it;
    a long shape takes seconds on a CPU).
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(seed)
    results: List[Dict[str, object]] = []
    shapes = _shapes(device, quick)
    total = len(shapes) + case_count(device, quick)  # decode shapes, then prefill cases
    for label, lens, nh, nkv, hs, bs, dtype, alibi in shapes:
        a = decode_case(lens, nh, nkv, hs, bs, dtype, device, gen, extra_partitions=1)
        if alibi:
            a["alibi_slopes"] = (torch.rand(nh, generator=gen) * 0.05).to(device)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        error = None
        try:
            path = paged_attention_v2_with_path(**a)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
        except Exception as exc:  # report, do not crash the verify command
            path, error = "error", f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - t0
        ref = reference_for_args(a)
        out = a["out"].detach().to(torch.float64).cpu()
        diff = out - ref
        max_abs = float(diff.abs().max()) if error is None else float("inf")
        rel = float(diff.norm() / ref.norm()) if error is None else float("inf")
        if math.isnan(max_abs) or math.isnan(rel):
            max_abs = rel = float("inf")  # an unwritten (NaN-poisoned) element
        entry: Dict[str, object] = {
            "shape": label,
            "path": path,
            "max_abs_err": max_abs,
            "rel_err": rel,
            "ok": error is None and rel < _TOL[dtype],
            "seconds": seconds,
        }
        if error is not None:
            entry["error"] = error
        results.append(entry)
        if progress is not None:
            progress(len(results), total)
    done = len(results)
    results += run_prefill_selfcheck(
        device, quick, seed, None if progress is None else lambda n: progress(done + n, total)
    )
    return results

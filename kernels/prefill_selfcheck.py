"""Prefix-prefill cases for ``vllm-codemod verify``, checked against the float64 reference.

The cases go through the tree's entry point (:func:`prefill.route`, with vLLM 0.8's
argument spelling; it also says why a call went to the tree's kernel), so verify sees the
backend the patched tree would take on this box: the torch path on a CPU, Triton on a
GPU.  :func:`make_case` builds the inputs (random block tables, ragged batches, fp8
caches stored as uint8 as vLLM stores them) and is shared with the tests.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import torch

from .reference import reference_prefix_prefill

FP8_DTYPES = {
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
_TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 2e-2, torch.float64: 1e-9}
#: fp32 through Triton: ``tl.dot`` rounds fp32 inputs to TF32 on GPUs that have it (as the
#: tree's own kernel does), about 1e-3 relative, so 1e-4 would fail every correct run.
TRITON_FP32_TOL = 5e-3


def tolerance(dtype: torch.dtype, path: str) -> float:
    """Relative error a correct result stays under on ``path`` ("triton", "torch")."""
    if dtype == torch.float32 and path == "triton":
        return TRITON_FP32_TOL
    return _TOL[dtype]


@dataclass
class PrefillCase:
    """One ``context_attention_fwd`` call: inputs, a NaN-poisoned ``o``, and its reference."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    k_cache: torch.Tensor  # uint8 storage for fp8 caches, as vLLM keeps them
    v_cache: torch.Tensor
    block_table: torch.Tensor
    query_start: torch.Tensor  # [B + 1]
    seq_lens: torch.Tensor  # cached + new
    ctx_lens: torch.Tensor
    max_query_len: int
    sm_scale: float
    kv_cache_dtype: str = "auto"
    k_scale: float = 1.0
    v_scale: float = 1.0
    alibi_slopes: Optional[torch.Tensor] = None
    sliding_window: int = 0
    skip_decode: bool = False
    extra: Dict[str, object] = field(default_factory=dict)

    @property
    def fp8_dtype(self) -> Optional[torch.dtype]:
        return FP8_DTYPES.get(self.kv_cache_dtype)

    def vllm_kwargs(self, spelling: str = "0.8", tensor_scales: bool = True) -> Dict[str, object]:
        """The arguments by name as vLLM ``spelling`` ("0.4.3", "0.6", "0.7", "0.8") passes them."""
        args: Dict[str, object] = dict(
            q=self.q,
            k=self.k,
            v=self.v,
            o=self.o,
            k_cache=self.k_cache,
            v_cache=self.v_cache,
            b_loc=self.block_table,
            b_start_loc=self.query_start,
            b_seq_len=self.seq_lens,
            max_input_len=self.max_query_len,
            alibi_slopes=self.alibi_slopes,
            sliding_window=self.sliding_window or None,
        )
        if spelling != "0.4.3":
            args["kv_cache_dtype"] = self.kv_cache_dtype
            if tensor_scales:
                device = self.q.device
                args["k_scale"] = torch.tensor([self.k_scale], dtype=torch.float32, device=device)
                args["v_scale"] = torch.tensor([self.v_scale], dtype=torch.float32, device=device)
            else:
                args["k_scale"], args["v_scale"] = self.k_scale, self.v_scale
        if spelling in ("0.4.3", "0.6", "0.7"):
            args["b_ctx_len"] = self.ctx_lens
        else:
            args["max_seq_len"] = int(self.seq_lens.max())
            args["skip_decode"] = self.skip_decode
        if spelling in ("0.7", "0.8"):
            args["sm_scale"] = self.sm_scale
        args.update(self.extra)
        return args

    def launcher_kwargs(self) -> Dict[str, object]:
        """The arguments of ``prefix_prefill_torch`` / ``prefix_prefill_triton``."""
        fp8 = self.fp8_dtype
        device = self.q.device
        scale = (
            (lambda s: torch.tensor([s], dtype=torch.float32, device=device))
            if fp8 is not None
            else (lambda s: None)
        )
        return dict(
            q=self.q,
            k=self.k,
            v=self.v,
            o=self.o,
            k_cache=self.k_cache.view(fp8) if fp8 is not None else self.k_cache,
            v_cache=self.v_cache.view(fp8) if fp8 is not None else self.v_cache,
            block_table=self.block_table,
            query_start=self.query_start,
            seq_lens=self.seq_lens,
            max_query_len=self.max_query_len,
            sm_scale=self.sm_scale,
            k_scale=scale(self.k_scale),
            v_scale=scale(self.v_scale),
            alibi_slopes=self.alibi_slopes,
            sliding_window=self.sliding_window,
            skip_decode=self.skip_decode,
        )

    def reference(self) -> torch.Tensor:
        """float64 on the case's device (the GPU does a 1x(48K+16K) case in a second where
        a CPU takes minutes), returned on the CPU."""
        return reference_prefix_prefill(
            self.q,
            self.k,
            self.v,
            self.k_cache,
            self.v_cache,
            self.block_table,
            self.query_start.tolist(),
            self.seq_lens.tolist(),
            self.sm_scale,
            alibi_slopes=self.alibi_slopes,
            sliding_window=self.sliding_window,
            fp8_dtype=self.fp8_dtype,
            k_scale=self.k_scale,
            v_scale=self.v_scale,
            skip_decode=self.skip_decode,
            device=self.q.device,
        ).cpu()


def make_case(
    ctx_lens: Sequence[int],
    new_lens: Sequence[int],
    num_heads: int,
    num_kv_heads: int,
    head_size: int,
    block_size: int = 16,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
    kv_cache_dtype: str = "auto",
    alibi: bool = False,
    sliding_window: int = 0,
    skip_decode: bool = False,
    sm_scale: Optional[float] = None,
) -> PrefillCase:
    """Random inputs for one call; the paged context sits in shuffled blocks."""
    gen = torch.Generator().manual_seed(seed)
    fp8 = FP8_DTYPES.get(kv_cache_dtype)
    cache_dtype = fp8 if fp8 is not None else dtype
    x = 16 // torch.tensor([], dtype=cache_dtype).element_size()
    batch = len(ctx_lens)
    seq_lens = [c + n for c, n in zip(ctx_lens, new_lens)]
    per_seq = [max(1, math.ceil(c / block_size)) for c in ctx_lens]
    num_blocks = sum(per_seq) + 2
    perm = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    table = torch.zeros(batch, max(per_seq) + 1, dtype=torch.int32)
    used = 0
    for s, nb in enumerate(per_seq):
        table[s, :nb] = perm[used : used + nb]
        used += nb
    total = sum(new_lens)
    starts = [0]
    for n in new_lens:
        starts.append(starts[-1] + n)
    key_cache = torch.randn(num_blocks, num_kv_heads, head_size // x, block_size, x, generator=gen)
    value_cache = torch.randn(num_blocks, num_kv_heads, head_size, block_size, generator=gen)
    k_scale = v_scale = 1.0
    if fp8 is not None:
        k_scale, v_scale = 0.5, 0.25  # stored values are the true ones divided by the scale
        key_cache = (key_cache / k_scale).to(fp8).view(torch.uint8)
        value_cache = (value_cache / v_scale).to(fp8).view(torch.uint8)
    else:
        key_cache, value_cache = key_cache.to(dtype), value_cache.to(dtype)
    q = torch.randn(total, num_heads, head_size, generator=gen).to(dtype)
    k = torch.randn(total, num_kv_heads, head_size, generator=gen).to(dtype)
    v = torch.randn(total, num_kv_heads, head_size, generator=gen).to(dtype)
    slopes = torch.rand(num_heads, generator=gen) * 0.1 if alibi else None
    case = PrefillCase(
        q=q,
        k=k,
        v=v,
        o=torch.full((total, num_heads, head_size), float("nan"), dtype=dtype),
        k_cache=key_cache,
        v_cache=value_cache,
        block_table=table,
        query_start=torch.tensor(starts, dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        ctx_lens=torch.tensor(list(ctx_lens), dtype=torch.int32),
        max_query_len=max(new_lens),
        sm_scale=sm_scale if sm_scale is not None else 1.0 / math.sqrt(head_size),
        kv_cache_dtype=kv_cache_dtype,
        k_scale=k_scale,
        v_scale=v_scale,
        alibi_slopes=slopes,
        sliding_window=sliding_window,
        skip_decode=skip_decode,
    )
    if device != "cpu":
        for name in ("q", "k", "v", "o", "k_cache", "v_cache", "block_table", "query_start"):
            setattr(case, name, getattr(case, name).to(device))
        case.seq_lens = case.seq_lens.to(device)
        case.ctx_lens = case.ctx_lens.to(device)
        if slopes is not None:
            case.alibi_slopes = slopes.to(device)
    return case


def _cases(device: str, quick: bool):
    gpu = device.startswith("cuda")
    long_ctx, long_new = ((16384, 4096) if quick else (49152, 16384)) if gpu else (1024, 256)
    cases = [
        # (label, ctx_lens, new_lens, heads, kv_heads, head, block, dtype, extra)
        (
            f"prefill {long_ctx}+{long_new} GQA 8q/2kv h128 bs16",
            [long_ctx],
            [long_new],
            8,
            2,
            128,
            16,
            torch.bfloat16 if gpu else torch.float32,
            {},
        ),
        (
            "prefill batch ragged GQA 8q/2kv h96 bs32",
            [0, 37, 300, 64],
            [17, 1, 90, 33],
            8,
            2,
            96,
            32,
            torch.float16,
            {},
        ),
        (
            "prefill alibi MHA 4q h64 bs16",
            [100, 33],
            [40, 7],
            4,
            4,
            64,
            16,
            torch.float32,
            {"alibi": True},
        ),
        (
            "prefill fp8 cache GQA 8q/4kv h128 bs16",
            [200, 77],
            [50, 3],
            8,
            4,
            128,
            16,
            torch.bfloat16,
            {"kv_cache_dtype": "fp8"},
        ),
    ]
    if not quick:
        cases.append(
            (
                "prefill sliding window 128 MQA h128 bs16",
                [500, 20],
                [100, 60],
                8,
                1,
                128,
                16,
                torch.float16,
                {"sliding_window": 128},
            )
        )
    return cases


def run_prefill_selfcheck(
    device: str, quick: bool = True, seed: int = 0, progress: Optional[Callable[[int], None]] = None
) -> List[Dict[str, object]]:
    """Per case: {"shape", "path", "max_abs_err", "rel_err", "ok", "seconds"}, as decode's.

    A case this box's setup sends to the tree's kernel (an fp8 cache under Triton 2.x,
    say: :attr:`prefill.Route.setup`) checks nothing of ours: it is reported with
    ``"skipped"`` (the reason) and ``ok`` true, its errors infinite.  Any other decline
    of these well-formed cases fails.  ``progress(done)`` is called after each case.
    """
    from .prefill import route

    results: List[Dict[str, object]] = []
    for index, (label, ctx, new, nh, nkv, hs, bs, dtype, extra) in enumerate(_cases(device, quick)):
        case = make_case(ctx, new, nh, nkv, hs, bs, dtype, device, seed=seed + index, **extra)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        error = skipped = None
        try:
            taken = route(**case.vllm_kwargs("0.8"))
            path = taken.path
            if device.startswith("cuda"):
                torch.cuda.synchronize()
        except Exception as exc:  # report, do not crash the verify command
            path, error = "error", f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - t0
        if error is None and path == "tree":
            if taken.setup:
                skipped = f"declined on this setup: {taken.reason}"
            else:
                error = f"the bundled kernel declined this call ({taken.reason})"
        measured = error is None and skipped is None
        ref = case.reference()
        out = case.o.detach().to(torch.float64).cpu()
        diff = out - ref
        max_abs = float(diff.abs().max()) if measured else float("inf")
        rel = float(diff.norm() / ref.norm()) if measured else float("inf")
        if math.isnan(max_abs) or math.isnan(rel):
            max_abs = rel = float("inf")  # an unwritten (NaN-poisoned) element
        entry: Dict[str, object] = {
            "shape": label,
            "path": path,
            "max_abs_err": max_abs,
            "rel_err": rel,
            "ok": skipped is not None or (measured and rel < tolerance(dtype, path)),
            "seconds": seconds,
        }
        if error is not None:
            entry["error"] = error
        if skipped is not None:
            entry["skipped"] = skipped
        results.append(entry)
        if progress is not None:
            progress(len(results))
    return results


def case_count(device: str, quick: bool) -> int:
    return len(_cases(device, quick))

"""Prefix prefill on a CUDA device: ours against the tree's kernel, SDPA and FlexAttention.

The work is vLLM's ``context_attention_fwd``: each sequence's new tokens attend to its
paged context and, causally, to themselves.  Per case, side by side in one process:

- ours (``vllm_codemod.kernels.prefill_launch``), at its default config and at any
  ``--config BM,BN,W,S`` given, each also at any ``--pack N`` given (query heads of one
  kv head per program; 1 is GQA unpacked);
- the tree's own kernel from the vendored vLLM 0.8.3 file (8 warps, as shipped, and 4, as
  the warps codemod bakes) and 0.8.5 file;
- torch SDPA and FlexAttention on K/V gathered into contiguous tensors beforehand (not
  timed), where the installed torch has them.

Every row is checked against the float64 reference (``kernels.reference``) on a sample of
query rows before it is timed; a row off by more than 2e-2 (relative Frobenius) is
reported as wrong and not timed.  Timing: ``bench_common.bench`` (Triton's
do_bench: warm-up, CUDA events, median).  FLOP: causal,
``4 * heads * head_size * new * (ctx + (new + 1) / 2)`` per sequence; the % column is of
an 8192^3 bf16 matmul timed in the same run.  The headline: a 100K prompt prefilled in
16K-token chunks (the chunk's context grows), total attention time of one layer, ours
against the tree's 0.8.3 kernel.

    python benchmarks/bench_prefix_prefill.py [--quick] [--json out.json]
        [--config 128,64,8,3 ...] [--pack 1 ...] [--only NAME ...]
        [--no-baselines | --flex-only]
        [--case SEQS,CTX,NEW,HQ,HKV,D ...] [--sorted-pages] [--no-time]

``--case`` adds a shape to the table (e.g. a long context with few new tokens, where the
paged loop does nearly all the work, or ``CTX`` 0, where it does none).
``--sorted-pages`` lays each sequence's pages out in order instead of shuffled (does the
gather's scatter cost anything?).  ``--no-time`` checks each row and runs it once, for a
profiler: ``ncu --kernel-name regex:_prefix_prefill_kernel python ... --no-time``.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from bench_common import bench, host_us  # this directory: run as `python benchmarks/...`

from vllm_codemod.kernels import prefill_launch
from vllm_codemod.kernels.prefill_cases import (
    launch_arguments,
    make_prefill_inputs,
    prefill_error,
    sample_rows,
)
from vllm_codemod.kernels.prefill_launch import PrefillConfig, launch_plan, prefix_prefill_triton
from vllm_codemod.tuning.tree_imports import load_file

ROOT = Path(__file__).resolve().parents[1]
TREE_FILES = {
    "vllm-0.8.3": ROOT / "vendor_fixtures/upstream/vllm-0.8.3/vllm/attention/ops/prefix_prefill.py",
    "vllm-0.8.5": ROOT
    / "vendor_fixtures/upstream/vllm-0.8.5.post1/vllm/attention/ops/prefix_prefill.py",
}
PAGE = 16
TOLERANCE = 2e-2
#: Back-to-back calls of one ``--host`` measurement (after 50 warm-up calls).
HOST_CALLS = 300

# name: (seqs, ctx, new, q heads, kv heads, head size)
CASES: Dict[str, Tuple[int, int, int, int, int, int]] = {
    "1x(16K+16K) 32/8/128": (1, 16384, 16384, 32, 8, 128),
    "1x(48K+16K) 32/8/128": (1, 49152, 16384, 32, 8, 128),
    "1x(84K+16K) 32/8/128": (1, 86016, 16384, 32, 8, 128),
    "1x(88K+8K) 32/8/128": (1, 90112, 8192, 32, 8, 128),
    "1x(84K+16K) 28/4/128": (1, 86016, 16384, 28, 4, 128),
    "1x(32K+8K) 16/2/256": (1, 32768, 8192, 16, 2, 256),
    "8x(1K+512) 32/8/128": (8, 1024, 512, 32, 8, 128),
}
QUICK = ("1x(16K+16K) 32/8/128", "1x(32K+8K) 16/2/256", "8x(1K+512) 32/8/128")


def visible_pairs(ctx: int, new: int, window: int = 0) -> float:
    """(query, key) pairs the attention computes for one sequence: causal, and with a
    sliding window (``window > 0``) at most ``window`` keys per query, so a window's rows
    count only the work it leaves (not the causal work it skips)."""
    if window <= 0:
        return new * (ctx + (new + 1) / 2)
    first, last = ctx + 1, ctx + new  # keys seen by the chunk's first and last query
    below = max(0, min(last, window) - first + 1)  # queries that see fewer than window
    below_sum = below * (first + first + below - 1) / 2
    return below_sum + window * (new - below)


def flops(seqs: int, ctx: int, new: int, heads: int, head: int, window: int = 0) -> float:
    return seqs * 4.0 * heads * head * visible_pairs(ctx, new, window)


def matmul_tflops(n: int = 8192) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = bench(lambda: a @ b, warmup=100, rep=2000)
    return 2 * n**3 / (ms * 1e-3) / 1e12


def make(seqs: int, ctx: int, new: int, hq: int, hkv: int, d: int, args) -> Dict[str, Any]:
    """One call's arguments on the GPU (``prefill_cases``), plus the case's ctx and new."""
    a = make_prefill_inputs(
        [(ctx, new)] * seqs, hq, hkv, d, PAGE, args.dtype, device="cuda",
        kv_cache_dtype=args.kv_cache_dtype, alibi=args.alibi,
        sliding_window=window_of(args, ctx, new),
    )  # fmt: skip
    a.update(ctx=ctx, new=new)
    if args.sorted_pages:
        table = a["block_table"]
        pages = -(-ctx // PAGE)
        table[:, :pages] = table[:, :pages].sort(dim=1).values
    return a


def check(a: Dict[str, Any], out: torch.Tensor) -> float:
    """Relative error of ``out`` against the float64 reference on sampled rows (on the GPU)."""
    return prefill_error(a, out, rows=sample_rows(a), device=torch.device("cuda"))


def ours(
    a: Dict[str, Any],
    config: Optional[PrefillConfig] = None,
    pack: Optional[int] = None,
    gather: Optional[bool] = None,
    m_last: bool = False,
) -> Callable[[], None]:
    kwargs = launch_arguments(a)

    def run() -> None:
        prefix_prefill_triton(**kwargs, config=config, pack=pack, gather=gather, m_last=m_last)

    return run


def load_tree_prefill(path: Path) -> types.ModuleType:
    """A vendored ``prefix_prefill.py``, imported by path (the project's one loader) with a
    CUDA ``current_platform`` standing in for the ``vllm.platforms`` it imports."""
    platform = types.SimpleNamespace(
        has_device_capability=lambda cap: (
            torch.cuda.get_device_capability()[0] * 10 + torch.cuda.get_device_capability()[1]
            >= cap
        ),
        is_rocm=lambda: False,
        get_device_capability=lambda: torch.cuda.get_device_capability(),
        fp8_dtype=lambda: torch.float8_e4m3fn,
    )
    stand_ins = {
        "vllm": types.ModuleType("vllm"),
        "vllm.platforms": types.SimpleNamespace(current_platform=platform),
    }
    return load_file(f"tree_prefill_{path.parent.name}", path, stand_ins=stand_ins, keep=False)


def tree(a: Dict[str, Any], module: types.ModuleType, warps: Optional[int] = None):
    def run() -> None:
        if warps is not None:
            module.NUM_WARPS = warps
        module.context_attention_fwd(
            a["q"], a["k"], a["v"], a["o"], a["kv_cache_dtype"], a["k_cache"], a["v_cache"],
            a["block_table"], a["query_start"], a["seq_lens"], a["ctx"] + a["new"],
            a["max_query_len"], a["k_scale"], a["v_scale"], a["alibi_slopes"],
            a["sliding_window"] or None, a["sm_scale"],
        )  # fmt: skip

    return run


def gathered(a: Dict[str, Any]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v as [seqs, heads, len, d] contiguous, K/V gathered from pages (every
    sequence of a case has the same context and new tokens, so they stack)."""
    seqs, ctx, new, d = a["seq_lens"].shape[0], a["ctx"], a["new"], a["q"].shape[2]
    kc, vc = a["k_cache"], a["v_cache"]
    pos = torch.arange(ctx, device=kc.device)
    blocks = a["block_table"].long()[:, pos // PAGE].reshape(-1)
    off = (pos % PAGE).repeat(seqs)
    k_ctx = kc[blocks, :, :, off, :].reshape(seqs, ctx, kc.shape[1], d)
    v_ctx = vc[blocks, :, :, off].reshape(seqs, ctx, vc.shape[1], d)
    k_new = a["k"].reshape(seqs, new, *a["k"].shape[1:])
    v_new = a["v"].reshape(seqs, new, *a["v"].shape[1:])
    k = torch.cat([k_ctx, k_new], dim=1).transpose(1, 2).contiguous()
    v = torch.cat([v_ctx, v_new], dim=1).transpose(1, 2).contiguous()
    q = a["q"].reshape(seqs, new, *a["q"].shape[1:]).transpose(1, 2).contiguous()
    return q, k, v


def sdpa(a: Dict[str, Any]) -> Optional[Callable[[], None]]:
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.bias import causal_lower_right
    except ImportError:
        return None
    q, k, v = gathered(a)
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    mask = causal_lower_right(q.shape[2], k.shape[2])
    scale = a["sm_scale"]

    def run() -> None:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            out = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=scale
            )
        run.out = out

    return run


def flex(a: Dict[str, Any]) -> Optional[Callable[[], None]]:
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    q, k, v = gathered(a)
    offset = a["ctx"]

    def causal(b, h, qi, ki):
        return qi + offset >= ki

    mask = create_block_mask(causal, None, None, q.shape[2], k.shape[2], device="cuda")
    compiled = torch.compile(flex_attention)
    scale = a["sm_scale"]

    def run() -> None:
        run.out = compiled(q, k, v, block_mask=mask, scale=scale, enable_gqa=True)

    return run


def row_of(
    name: str, a: Dict[str, Any], fn: Callable[[], None], work: float, peak: float,
    out_of: Optional[Callable[[], torch.Tensor]] = None, no_time: bool = False,
    host: bool = False,
) -> Dict[str, Any]:  # fmt: skip
    a["o"].fill_(float("nan"))
    fn()
    torch.cuda.synchronize()
    out = out_of() if out_of else a["o"]
    err = check(a, out)
    row: Dict[str, Any] = {"impl": name, "rel_err": err}
    if not err <= TOLERANCE:
        print(f"    {name:<22} WRONG rel err {err:.2e}", flush=True)
        return row
    if no_time:
        print(f"    {name:<22} checked, err {err:.1e} (not timed)", flush=True)
        return row
    ms = bench(fn, warmup=100, rep=1500)
    row.update(ms=ms, tflops=work / ms / 1e9, pct=100 * work / ms / 1e9 / peak)
    extra = ""
    if host:  # the launcher's own cost, apart from the GPU's: does the GPU wait on it?
        row["host_us"], row["wall_us"] = host_us(fn, HOST_CALLS)
        # and ours with every launch through Triton's binding (no relaunched compiled
        # kernels): what the plans save; the other rows are the same process's control
        saved = prefill_launch._fast["enabled"]
        prefill_launch._fast["enabled"] = False
        try:
            row["host_plain_us"], row["wall_plain_us"] = host_us(fn, HOST_CALLS)
        finally:
            prefill_launch._fast["enabled"] = saved
        extra = (
            f"  host {row['host_us']:.1f} us/call (wall {row['wall_us']:.1f}; plain launches"
            f" {row['host_plain_us']:.1f} / {row['wall_plain_us']:.1f})"
        )
    print(
        f"    {name:<22} {ms:9.3f} ms {row['tflops']:7.1f} TFLOP/s {row['pct']:5.1f}%"
        f"  err {err:.1e}{extra}",
        flush=True,
    )
    return row


def contiguous_out(fn) -> Callable[[], torch.Tensor]:
    """A baseline's [seqs, heads, new, d] output as the kernel's [tokens, heads, d]."""
    return lambda: fn.out.transpose(1, 2).reshape(-1, *fn.out.shape[1:2], fn.out.shape[3])


def case_name(seqs: int, ctx: int, new: int, hq: int, hkv: int, d: int) -> str:
    def k(n: int) -> str:
        return f"{n // 1024}K" if n % 1024 == 0 and n else str(n)

    return f"{seqs}x({k(ctx)}+{k(new)}) {hq}/{hkv}/{d}"


#: ``--window seq``: each case's own sequence length.
SEQ_WINDOW = -1


def parse_window(text: str) -> int:
    return SEQ_WINDOW if text == "seq" else int(text)


def window_of(args, ctx: int, new: int) -> int:
    """The case's sliding window.  ``seq`` is a window that masks nothing and
    still runs the kernel's window loops: the launcher launches a window at least as wide
    as the block table's tokens plus the new ones as no window, and the inputs' table
    holds one page more than the context."""
    return ctx + new if args.window == SEQ_WINDOW else args.window


def parse_case(text: str) -> Tuple[int, int, int, int, int, int]:
    seqs, ctx, new, hq, hkv, d = (int(x) for x in text.split(","))
    return seqs, ctx, new, hq, hkv, d


def bench_case(name: str, peak: float, args, trees) -> Dict[str, Any]:
    seqs, ctx, new, hq, hkv, d = CASES[name]
    a = make(seqs, ctx, new, hq, hkv, d, args)
    work = flops(seqs, ctx, new, hq, d, window_of(args, ctx, new))
    default, gathered = launch_plan(a["q"], a["k_cache"], a["block_table"])
    how = "gathered" if gathered else "paged"
    print(f"{name}: {work / 1e12:.2f} TFLOP, default config {tuple(default)} {how}", flush=True)
    rows = []
    gathers = [False, True] if args.gather else [None]  # None: the launcher's choice
    orders = [False, True] if args.m_last else [False]
    variants = [
        (c, p, g, m)
        for c in [None] + args.config
        for p in [None] + args.pack
        for g in gathers
        for m in orders
    ]
    for cfg, pack, gather, m_last in variants:
        label = f"ours {tuple(cfg or default)}" + (f" pack {pack}" if pack else "")
        label += {None: "", False: " paged", True: " gathered"}[gather]
        label += " m-last" if m_last else ""
        try:
            fn = ours(a, cfg, pack, gather, m_last)
            rows.append(row_of(label, a, fn, work, peak, no_time=args.no_time, host=args.host))
        except Exception as exc:  # a config this device cannot compile (shared memory)
            print(f"    {label}: failed ({type(exc).__name__}: {str(exc)[:80]})")
            rows.append({"impl": label, "error": str(exc)[:200]})
    if not args.no_baselines:
        for label, module, warps in trees:
            rows.append(row_of(label, a, tree(a, module, warps), work, peak, no_time=args.no_time))
        if args.kv_cache_dtype == "auto" and not args.alibi and not args.window:
            for label, make_fn in (("torch SDPA", sdpa), ("FlexAttention", flex)):
                try:
                    fn = make_fn(a)
                except Exception as exc:  # a torch without the backend: say so, go on
                    print(f"    {label}: unavailable ({type(exc).__name__}: {exc})")
                    continue
                if fn is not None:
                    rows.append(row_of(label, a, fn, work, peak, contiguous_out(fn), args.no_time))
    del a
    torch.cuda.empty_cache()
    return {"case": name, "shape": CASES[name], "tflop": work / 1e12, "rows": rows}


def headline(peak: float, trees, args, prompt: int = 100_000, chunk: int = 16_384):
    """Total attention time of one layer for a prompt prefilled in chunks (32/8/128)."""
    totals: Dict[str, float] = {}
    done = 0
    while done < prompt:
        new = min(chunk, prompt - done)
        a = make(1, done, new, 32, 8, 128, args)
        impls = [("ours", ours(a))] + [(label, tree(a, m, w)) for label, m, w in trees[:1]]
        for label, fn in impls:
            totals[label] = totals.get(label, 0.0) + bench(fn, warmup=50, rep=600)
        done += new
        del a
        torch.cuda.empty_cache()
    print("100K prompt in 16K chunks, one layer: " + ", ".join(
        f"{k} {v:.1f} ms" for k, v in totals.items()), flush=True)  # fmt: skip
    return totals


def environment() -> Dict[str, Any]:
    import triton

    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name,
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
    }


def parse_config(text: str) -> PrefillConfig:
    return PrefillConfig(*(int(x) for x in text.split(",")))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three cases only")
    parser.add_argument("--only", action="append", default=[], help="case name (repeatable)")
    parser.add_argument("--config", action="append", default=[], type=parse_config)
    parser.add_argument(
        "--pack", action="append", default=[], type=int,
        help="also time ours at this many query heads per program (1: GQA unpacked)",
    )  # fmt: skip
    parser.add_argument(
        "--gather", action="store_true",
        help="time each of ours paged and with the context first copied to contiguous buffers",
    )  # fmt: skip
    parser.add_argument(
        "--m-last", action="store_true",
        help="each of ours also with the grid ordered query tile slowest",
    )  # fmt: skip
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument(
        "--flex-only", action="store_true", help="of the baselines, FlexAttention and SDPA only"
    )
    parser.add_argument("--no-headline", action="store_true")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    parser.add_argument(
        "--kv-cache-dtype", default="auto", choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
    )
    parser.add_argument("--alibi", action="store_true")
    parser.add_argument(
        "--window", type=parse_window, default=0,
        help="sliding window in tokens; 'seq': each case's sequence length (no key masked, "
        "the window path's loops still run)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path)
    parser.add_argument("--case", action="append", default=[], type=parse_case)
    parser.add_argument("--sorted-pages", action="store_true")
    parser.add_argument("--no-time", action="store_true", help="check and run once (ncu)")
    parser.add_argument(
        "--host", action="store_true",
        help=f"also time ours on the host: {HOST_CALLS} back-to-back calls, us per enqueue, "
        "as launched and with every launch through Triton's binding (plain)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    for shape in args.case:
        CASES[case_name(*shape)] = shape
    args.dtype = getattr(torch, args.dtype)
    if not torch.cuda.is_available():
        print("bench_prefix_prefill: no CUDA device", file=sys.stderr)
        return 2
    env = environment()
    peak = 1.0 if args.no_time else matmul_tflops()
    env["matmul_tflops"] = peak
    print(f"{env}", flush=True)
    trees = []
    if not args.no_baselines and not args.flex_only:
        v083 = load_tree_prefill(TREE_FILES["vllm-0.8.3"])
        v085 = load_tree_prefill(TREE_FILES["vllm-0.8.5"])
        trees = [("vLLM 0.8.3 (8 warps)", v083, 8), ("vLLM 0.8.3 (4 warps)", v083, 4),
                 ("vLLM 0.8.5", v085, None)]  # fmt: skip
    names = args.only + [case_name(*shape) for shape in args.case]
    names = names or (list(QUICK) if args.quick else list(CASES))
    results = [bench_case(name, peak, args, trees) for name in names]
    report: Dict[str, Any] = {"environment": env, "cases": results}
    if not args.no_headline and not args.no_time and trees:
        report["headline_ms"] = headline(peak, trees, args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

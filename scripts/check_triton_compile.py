"""Compile the bundled Triton kernels ahead of time, without a GPU.

Prefix prefill (``--kernels prefill``): every launch ``prefill_launch.prefix_prefill_triton``
makes for head sizes 64/96/128/256 x bf16/fp16/fp32 x plain, ALiBi, sliding window,
skip_decode and fp8 (e4m3, e5m2) caches, each with the config ``pick_config`` gives it
(the built-in ``DEFAULT_CONFIGS``, halved for fp32), recorded the same way; page size and
GQA group rotate through the matrix.  fp8 e4m3 is compiled only for cc >= 89 (Triton has
no fp8e4nv below that; vLLM's own tests skip it there too).  A table gives the shared
memory per default config and cc.

For every launch the launcher (``decode_launch._launch``: the partition kernel, then the
reduce kernel) would make for a matrix of head sizes, dtypes, alibi, block sizes, GQA
groups and the configs ``launch_tables.pick_config`` hands out (DEFAULT_CONFIGS,
MID/MANY_PROGRAMS_CONFIG, WIDE_GROUP_*, K3D_CONFIGS, K3D_MANY_PROGRAMS_CONFIG,
K3D_WIDE_GROUP_*, and a 2-D config balanced through ``slots``), the launcher runs on CPU
tensors with its kernels replaced by recorders; each recorded launch (arguments,
constexprs, num_warps, num_stages) is then compiled for a CUDA compute capability with
the installed Triton, through TTIR, TTGIR, LLVM IR, PTX and cubin (the ptxas bundled
with Triton), exactly specialized as Triton's JIT would specialize it.

Each compile reports the shared memory one program needs; a table config whose kernels
need more than ``--smem-limit`` bytes (default 49152: 48 KB, the BI-V100's per-program
limit) fails the check, and a table gives the largest need per config and cc.

Supports Triton 2.1 and 2.2 (their stage functions: ``ast_to_ttir`` ... ``ptx_to_cubin``,
2.2's taking a ``CudaTargetDescriptor``), 2.3 (its ``CUDABackend`` stages) and 3.x
(``triton.compile(ASTSource(...), target=GPUTarget(...))``).

    python3 scripts/check_triton_compile.py [--cc 80,90] [--full] [--jobs N]

Prints one row per unique compile (kernel, cc, constexprs, shared bytes, ok / first error
line) and exits 1 when any compile fails or needs too much shared memory.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# Real compiles: the kernels must be defined as JIT functions, not interpreted ones.
os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
import triton  # noqa: E402

from vllm_codemod.kernels import call as call_mod  # noqa: E402
from vllm_codemod.kernels import (  # noqa: E402
    decode_kernels,
    decode_launch,
    launch_tables,
    prefill_gather,
    prefill_kernels,
    prefill_launch,
)
from vllm_codemod.kernels import prefill_cases as prefill_inputs  # noqa: E402

TRITON_MAJOR_MINOR = tuple(int(p) for p in triton.__version__.split(".")[:2])
KERNELS = {
    "partition": decode_kernels.partition_kernel,
    "reduce": decode_kernels.reduce_kernel,
    "prefill": prefill_kernels._prefix_prefill_kernel,
    "prefill_gather": prefill_gather._gather_context_kernel,
}
DECODE_KERNELS = ("partition", "reduce")
SHORT = {
    "QUERIES_PER_KV": "qpk",
    "G_PAD": "G",
    "HEAD_SIZE": "H",
    "D_PAD": "D",
    "BLOCK_SIZE": "BS",
    "USE_ALIBI": "alibi",
    "F32_SPLIT": "f32s",
    "CONTIG_HINTS": "hints",
    "EARLY_V": "eV",
    "PREFETCH": "pf",
    "SINGLE_PASS": "1pass",
    "SKIP_DECODE": "skip",
}
SMEM_LIMIT = 49152  # bytes per program on the BI-V100
HEAD_SIZES = (32, 64, 80, 96, 112, 128, 192, 256)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
BLOCK_SIZES = (8, 16, 32)
# (num_heads, num_kv_heads): GQA 4 (G_PAD 16), MHA, GQA 32 (G_PAD 32), GQA 128 (G_PAD 64,
# two group chunks).
GROUPS = ((8, 2), (4, 4), (32, 1), (128, 1))


def launcher_configs(d_pad: int):
    """The (name, config) pairs ``pick_config`` can return for a padded head size."""
    lt = launch_tables
    out = [("default", lt.DEFAULT_CONFIGS.get(d_pad, lt.FALLBACK_CONFIG))]
    if d_pad <= 128:
        out.append(("mid", lt.MID_PROGRAMS_CONFIG))
        out.append(("many", lt.MANY_PROGRAMS_CONFIG))
        out.append(("wide", lt.WIDE_GROUP_CONFIG))
        out.append(("wide-many", lt.WIDE_GROUP_MANY_CONFIG))
    # Triton >= 3.0 tables (k3d; on older Triton the launcher drops the flag).
    out.append(("k3d", lt.K3D_CONFIGS.get(d_pad, lt.FALLBACK_CONFIG._replace(k3d=True))))
    if d_pad <= 128:
        out.append(("k3d-many", lt.K3D_MANY_PROGRAMS_CONFIG))
        out.append(("k3d-wide", lt.K3D_WIDE_GROUP_CONFIG))
        out.append(("k3d-wide-many", lt.K3D_WIDE_GROUP_MANY_CONFIG))
    if d_pad == 256:  # one sequence, 16 rows, balanced items (launch_tables.balanced_config)
        out.append(("k3d-bal256", lt.K3D_BALANCED_HEAD256_CONFIG))
    # The 2-D tables balanced through a tuning file's slots (what `tune` may bake in on
    # Triton 2.x, where the H200 figures never balance them).
    two_d = lt.MID_PROGRAMS_CONFIG if d_pad <= 128 else lt.DEFAULT_CONFIGS[256]
    out.append(("2d-slots", two_d._replace(slots=8)))
    return out


def groups_for(cname: str, d_pad: int):
    """The GQA groups pick_config gives this config to: the wide-group configs take the
    64-row programs at head <= 128, the others the rest (and everything at head 256)."""
    wide = [g for g in GROUPS if g[0] // g[1] >= launch_tables.WIDE_GROUP_ROWS]
    if cname == "k3d-bal256":
        return [g for g in GROUPS if g[0] // g[1] <= 16]
    if "wide" in cname:
        return wide
    if cname == "k3d" and d_pad <= 128:  # 16-row programs take the one-warp k3d config
        return [g for g in GROUPS if 16 < g[0] // g[1] < launch_tables.WIDE_GROUP_ROWS]
    if d_pad <= 128:
        return [g for g in GROUPS if g not in wide]
    return list(GROUPS)


def cases(full: bool):
    """(head, dtype, block size, alibi, (heads, kv heads), seq lens, config name, config)."""
    i = 0
    for hs in HEAD_SIZES:
        d_pad = max(16, 1 << (hs - 1).bit_length())
        for dtype in DTYPES:
            for cname, cfg in launcher_configs(d_pad):
                groups = groups_for(cname, d_pad)
                if full:
                    for bs in BLOCK_SIZES:
                        for alibi in (False, True):
                            for grp in groups:
                                yield hs, dtype, bs, alibi, grp, LENS[0], cname, cfg
                    continue
                # One case per (head, dtype, config); the other axes rotate through the
                # matrix (shared memory and registers follow head, dtype, rows and config).
                bs = BLOCK_SIZES[i % len(BLOCK_SIZES)]
                grp = groups[(i // 3) % len(groups)]
                lens = LENS[(i // 2) % len(LENS)]
                alibi = i % 2 == 1
                i += 1
                yield hs, dtype, bs, alibi, grp, lens, cname, cfg
                if cname in ("k3d-many", "2d-slots"):  # balanced: one sequence, a batch
                    for more in LENS[1:]:
                        yield hs, dtype, bs, alibi, GROUPS[0], more, cname, cfg
                if cname == "k3d-bal256" and lens != LENS[1]:  # the one sequence it serves
                    yield hs, dtype, bs, alibi, GROUPS[0], LENS[1], cname, cfg


# Sequence lengths of the recorded batches: a short ragged batch (one launch: the fused
# merge, compact grid), one long sequence (partition kernel + the reduce's single pass),
# and a ragged batch past REDUCE_SINGLE_PASS_MAX partitions (the reduce's chunked loop).
LENS = ((700, 1300), (5000,), (700, (decode_launch.REDUCE_SINGLE_PASS_MAX + 1) * 512))
RECORD_SMS = 132


# ---- prefix prefill ---------------------------------------------------------------------

PREFILL_HEADS = (64, 96, 128, 256)
#: (name, make_prefill_inputs keywords): each path the kernel's constexprs select.
PREFILL_VARIANTS = (
    ("plain", {}),
    ("alibi", {"alibi": True}),
    ("window", {"sliding_window": 13}),
    ("skip_decode", {"skip_decode": True}),
    ("fp8_e4m3", {"kv_cache_dtype": "fp8"}),
    ("fp8_e5m2", {"kv_cache_dtype": "fp8_e5m2"}),
)
PREFILL_GROUPS = ((8, 2), (4, 4), (32, 1))  # GQA 4, MHA, MQA-like 32
PREFILL_PAGES = (16, 32)
#: (cached, new) tokens: a ragged batch with more query tiles than one and a context
#: that is no multiple of the page (the values only matter through the JIT's
#: specialization of num_m_tiles and the window, which are never 1 here).
PREFILL_LENS = ((37, 300), (0, 45), (70, 1))
#: cc below which Triton has no fp8e4nv (e4m3): vLLM's own tests skip those caches there.
FP8E4_MIN_CC = 89


def prefill_cases(full: bool):
    """(head, dtype, variant name, make_prefill_inputs keywords, (heads, kv heads), page)."""
    i = 0
    for hs in PREFILL_HEADS:
        for dtype in DTYPES:
            for vname, extra in PREFILL_VARIANTS:
                if full:
                    for grp in PREFILL_GROUPS:
                        for page in PREFILL_PAGES:
                            yield hs, dtype, vname, extra, grp, page
                    continue
                grp = PREFILL_GROUPS[i % len(PREFILL_GROUPS)]
                page = PREFILL_PAGES[(i // len(PREFILL_GROUPS)) % len(PREFILL_PAGES)]
                i += 1
                yield hs, dtype, vname, extra, grp, page


def cfg_d_pad(head_size: int) -> int:
    return max(16, 1 << (head_size - 1).bit_length())


def record_prefill_launches(case):
    """Run prefix_prefill_triton on CPU tensors with a recording kernel, with the config
    the launcher picks itself (the built-in table: no tuning file); returns its launches
    and that config."""
    hs, dtype, _vname, extra, (nh, nkv), page = case
    a = prefill_inputs.make_prefill_inputs(PREFILL_LENS, nh, nkv, hs, page, dtype, **extra)
    sink = []
    saved = prefill_launch._prefix_prefill_kernel, prefill_gather._gather_context_kernel
    try:
        prefill_launch.set_prefill_configs(None)  # the built-in DEFAULT_CONFIGS
        prefill_launch._prefix_prefill_kernel = _Recorder("prefill", sink)
        # where the launcher gathers the context, its copy kernel is recorded too
        prefill_gather._gather_context_kernel = _Recorder("prefill_gather", sink)
        prefill_launch.prefix_prefill_triton(**prefill_inputs.launch_arguments(a))
    finally:
        prefill_launch._prefix_prefill_kernel = saved[0]
        prefill_gather._gather_context_kernel = saved[1]
        prefill_launch.reset_prefill_configs()
    fp8 = a["k_cache"].element_size() == 1
    return sink, prefill_launch.pick_config(cfg_d_pad(hs), a["q"].element_size(), fp8)


class _Recorder:
    def __init__(self, name, sink):
        self.name, self.sink = name, sink

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.sink.append((self.name, args, kwargs))

        return launch


def record_launches(case):
    """Run the launcher on CPU tensors with recording kernels; returns its launches."""
    hs, dtype, bs, alibi, (nh, nkv), lens, _cname, cfg = case
    num_seqs, max_seq_len = len(lens), max(lens)
    x = 16 // torch.tensor([], dtype=dtype).element_size()
    nblk = (max_seq_len + bs - 1) // bs
    num_blocks = 4
    parts = (max_seq_len + 511) // 512
    a = dict(
        out=torch.empty(num_seqs, nh, hs, dtype=dtype),
        exp_sums=torch.empty(num_seqs, nh, parts, dtype=torch.float32),
        max_logits=torch.empty(num_seqs, nh, parts, dtype=torch.float32),
        tmp_out=torch.empty(num_seqs, nh, parts, hs, dtype=dtype),
        query=torch.empty(num_seqs, nh, hs, dtype=dtype),
        key_cache=torch.empty(num_blocks, nkv, hs // x, bs, x, dtype=dtype),
        value_cache=torch.empty(num_blocks, nkv, hs, bs, dtype=dtype),
        num_kv_heads=nkv,
        scale=hs**-0.5,
        block_tables=torch.zeros(num_seqs, nblk, dtype=torch.int32),
        seq_lens=torch.tensor(lens, dtype=torch.int32),
        block_size=bs,
        max_seq_len=max_seq_len,
        alibi_slopes=torch.empty(nh, dtype=torch.float32) if alibi else None,
    )
    sink = []
    saved = {n: getattr(decode_kernels, n + "_kernel") for n in DECODE_KERNELS}
    saved_plans = decode_launch._plans
    cpu = torch.device("cpu")
    try:
        decode_launch._plans = {}  # plans hold the kernel they were built with
        # An H200's SM count, so that the chunk rule and balanced items (which need one)
        # make the launches they make on a GPU.
        decode_launch._sm_counts[cpu] = RECORD_SMS
        for n in DECODE_KERNELS:
            setattr(decode_kernels, n + "_kernel", _Recorder(n, sink))
        # k3d where this Triton has tl.permute; the config's own flag decides per launch.
        decode_launch._launch(call_mod.build((), a), cfg, decode_launch.HAS_PERMUTE)
    finally:
        for n, fn in saved.items():
            setattr(decode_kernels, n + "_kernel", fn)
        decode_launch._plans = saved_plans
        decode_launch._sm_counts.pop(cpu, None)
    return sink


def _arg_key(a):
    if isinstance(a, torch.Tensor):
        return ("t", str(a.dtype), a.data_ptr() % 16 == 0)
    if isinstance(a, bool) or not isinstance(a, int):
        return (type(a).__name__, a if isinstance(a, bool) else None)
    return ("i", a == 1, a % 16 == 0, -(2**31) <= a < 2**31)


def full_args(fn, args, kwargs):
    opts = {k: kwargs[k] for k in ("num_warps", "num_stages") if k in kwargs}
    named = dict(zip(fn.arg_names, args))
    named.update({k: v for k, v in kwargs.items() if k not in opts})
    return [named[n] for n in fn.arg_names], opts


def describe(fn, args):
    names = [n for i, n in enumerate(fn.arg_names) if _is_constexpr(fn, i)]
    return ",".join(f"{SHORT.get(n, n)}={int(args[fn.arg_names.index(n)])}" for n in names)


def _is_constexpr(fn, i):
    if hasattr(fn, "constexprs"):
        return i in fn.constexprs
    return fn.params[i].is_constexpr


def _dtype_of(fn, args):
    for name in ("q_ptr", "Q", "out_ptr", "K_CACHE"):
        if name in fn.arg_names:
            return str(args[fn.arg_names.index(name)].dtype)
    raise KeyError(f"{fn.arg_names}: no query or output argument")


def compile_21(fn, args, opts, cc):
    from triton.compiler import compiler as tc

    configs, constants, signature = _specialize_2x(fn, args)
    stage = "ttir"
    mod = tc.optimize_ttir(
        tc.ast_to_ttir(fn, signature, configs, constants, debug=False, arch=cc), cc
    )
    stage = "ttgir"
    warps, stages = opts.get("num_warps", 4), opts.get("num_stages", 3)  # the JIT's defaults
    mod = tc.optimize_ttgir(tc.ttir_to_ttgir(mod, warps), stages, cc)
    stage = "llir"
    llir = tc.ttgir_to_llir(mod, {}, cc)
    shared = _shared_21(mod)  # the attribute is set while lowering to LLVM IR (not before)
    stage = "ptx"
    ptx = tc.llir_to_ptx(llir, cc)
    stage = "cubin"
    tc.ptx_to_cubin(ptx, cc)
    return stage, shared


def compile_22(fn, args, opts, cc):
    """Triton 2.2: 2.1's stages, each taking a ``CudaTargetDescriptor``."""
    from triton._C.libtriton.triton import ClusterInfo, TMAInfos
    from triton.compiler import compiler as tc

    configs, constants, signature = _specialize_2x(fn, args)
    warps, stages = opts.get("num_warps", 4), opts.get("num_stages", 3)  # the JIT's defaults
    target = tc.CudaTargetDescriptor(capability=cc, num_warps=warps, enable_fp_fusion=True)
    mod = tc.ast_to_ttir(fn, signature, configs, constants, debug=False, target=target)
    mod = tc.optimize_ttir(mod, target)
    mod = tc.ttir_to_ttgir(mod, warps, 1, target)
    mod = tc.optimize_ttgir(mod, stages, warps, 1, target, ClusterInfo(), False, False, False)
    llir = tc.ttgir_to_llir(mod, {}, target, TMAInfos())
    shared = _shared_21(mod)
    tc.ptx_to_cubin(tc.llir_to_ptx(llir, target), target)
    return "cubin", shared


def compile_23(fn, args, opts, cc):
    """Triton 2.3: the stages its ``compile(ASTSource(...))`` runs, without the launcher
    stub that needs a CUDA driver."""
    from triton.compiler import ASTSource
    from triton.compiler.backends.cuda import CUDABackend

    configs, constants, signature = _specialize_2x(fn, args)
    src = ASTSource(fn, signature, constants, configs)
    backend = CUDABackend(("cuda", cc))
    options = backend.parse_options(dict(opts, debug=False))
    metadata = {"target": ("cuda", cc), **options.__dict__, **src.metadata()}
    stages: dict = {}
    backend.add_stages(stages, options)
    module = src.make_ir(options)
    for compile_ir in stages.values():
        module = compile_ir(module, metadata)
    assert isinstance(module, bytes)  # the cubin
    return "cubin", int(metadata["shared"])


def _specialize_2x(fn, args):
    """The JIT's specialization of one launch (Triton 2.x): configs, constants, signature."""
    configs = fn._get_config(*args)
    constants = {i: a for i, a in enumerate(args) if i in fn.constexprs or a is None}
    constants.update({i: 1 for i in configs.equal_to_1})
    signature = {
        i: fn._type_of(fn._key_of(a)) for i, a in enumerate(args) if i not in fn.constexprs
    }
    return configs, constants, signature


def _shared_21(mod):
    """Shared memory bytes of a Triton 2.1 TTGIR module, read as Triton 2.1's own compile
    does (after the LLVM IR lowering set it: reading it earlier crashes the process)."""
    try:
        from triton._C.libtriton.triton import get_shared_memory_size

        return int(get_shared_memory_size(mod))
    except Exception:
        return None


def compiled_3x(fn, args, opts, cc):
    """The compiled kernel for one recorded launch (Triton 3.x), as the JIT would build it."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", cc, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = dict(opts, debug=False)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(
        backend, kwargs, bound, specialization, options
    )
    return triton.compile(
        ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__
    )


def compile_3x(fn, args, opts, cc):
    k = compiled_3x(fn, args, opts, cc)
    assert "cubin" in k.asm
    return "cubin", int(k.metadata.shared)


def _error_line(exc):
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    # Triton's CompilationError starts with a source excerpt; its reason is the last line.
    msg = lines[-1] if lines else ""
    ptxas = [ln for ln in lines if "error   :" in ln]  # ptxas: its first error, not "fatal"
    if ptxas:
        msg = "ptxas " + ptxas[0].split(";", 1)[-1].strip()
    loc = lines[0] if lines and lines[0].startswith("at ") else ""
    return f"{type(exc).__name__}: {msg}" + (f" [{loc}]" if loc else "")


_TIMEOUT = [600.0]  # seconds per compile (--timeout)
_JOBS: list = []  # forked children read their job from here (tensors do not pickle well)


def compile_one(index):
    name, cc, args, opts = _JOBS[index]
    fn = KERNELS[name]
    t0 = time.time()
    try:
        if TRITON_MAJOR_MINOR < (2, 2):
            stage, shared = compile_21(fn, args, opts, cc)
        elif TRITON_MAJOR_MINOR < (2, 3):
            stage, shared = compile_22(fn, args, opts, cc)
        elif TRITON_MAJOR_MINOR < (3, 0):
            stage, shared = compile_23(fn, args, opts, cc)
        else:
            stage, shared = compile_3x(fn, args, opts, cc)
        return "ok", stage, time.time() - t0, shared
    except Exception as exc:  # report every failure, keep going
        return "ERROR", _error_line(exc)[:300], time.time() - t0, None


def _child(index, conn, err_path):
    fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)  # C++ assertions of the compiler abort the process: keep their message
    conn.send(compile_one(index))
    conn.close()


def compile_isolated(index):
    """compile_one in a forked child, so that a compiler abort() is one failed row."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    t0 = time.time()
    with tempfile.NamedTemporaryFile(prefix="aot-err-", suffix=".txt") as err:
        p = ctx.Process(target=_child, args=(index, send, err.name))
        p.start()
        send.close()
        try:
            result = recv.recv() if recv.poll(_TIMEOUT[0]) else "timeout"
        except EOFError:
            result = None
        if result == "timeout":
            p.kill()
            p.join()
            return "ERROR", f"timeout: no result after {_TIMEOUT[0]:.0f}s", time.time() - t0, None
        p.join()
        if result is not None:
            return result
        lines = [ln.strip() for ln in Path(err.name).read_text(errors="replace").splitlines()]
        lines = [ln for ln in lines if ln]
        msg = next((ln for ln in lines if "Assertion" in ln), lines[-1] if lines else "")
        msg = msg.split(": Assertion ", 1)[-1] if "Assertion" in msg else msg
        return "ERROR", f"abort (exit {p.exitcode}): {msg}"[:300], time.time() - t0, None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cc", default="80,90", help="compute capabilities, comma separated")
    ap.add_argument("--full", action="store_true", help="the whole case product (slow)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per compile")
    ap.add_argument("--limit", type=int, default=0, help="compile only the first N (debug)")
    ap.add_argument(
        "--kernels",
        default="decode,prefill",
        help="which kernels' launches: decode (partition + reduce), prefill, or both",
    )
    ap.add_argument(
        "--smem-limit",
        type=int,
        default=SMEM_LIMIT,
        help="fail when a compile needs more shared memory per program (bytes)",
    )
    ns = ap.parse_args(argv)
    ccs = [int(c) for c in ns.cc.split(",") if c]
    if "TRITON_CACHE_DIR" not in os.environ:  # compile for real, leave ~/.triton alone
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-aot-check-")

    kinds = {k.strip() for k in ns.kernels.split(",") if k.strip()}
    if not kinds or not kinds <= {"decode", "prefill"}:
        ap.error(f"--kernels {ns.kernels!r}: decode, prefill or both")
    recorded = []  # (launches, config name, config, ccs to compile for)
    if "decode" in kinds:
        for case in cases(ns.full):
            recorded.append((record_launches(case), case[6], case[7], ccs))
    skipped_fp8, refused = 0, []
    if "prefill" in kinds:
        for case in prefill_cases(ns.full):
            try:
                launches, cfg = record_prefill_launches(case)
            except prefill_launch.Triton2Refusal as exc:
                # Triton 2.x: fp8 caches, fp32 at head 256 (the tree's kernel runs them)
                refused.append(f"{case[0]} {case[1]} {case[2]}: {exc}")
                continue
            wanted = ccs
            if case[2] == "fp8_e4m3":
                wanted = [cc for cc in ccs if cc >= FP8E4_MIN_CC]
                skipped_fp8 += len(ccs) - len(wanted)
            recorded.append((launches, f"default d{cfg_d_pad(case[0])}", cfg, wanted))
    seen, jobs, rows = set(), [], []
    for launches, cname, cfg, case_ccs in recorded:
        for name, args, kwargs in launches:
            fn = KERNELS[name]
            full, opts = full_args(fn, args, kwargs)
            key_args = tuple(a if _is_constexpr(fn, i) else _arg_key(a) for i, a in enumerate(full))
            for cc in case_ccs:
                key = (name, cc, key_args, tuple(sorted(opts.items())))
                if key in seen:
                    continue
                seen.add(key)
                jobs.append((name, cc, full, opts))
                rows.append((name, cc, _dtype_of(fn, full), describe(fn, full), opts, cname, cfg))
    if skipped_fp8:
        print(f"fp8 e4m3 prefill cases not compiled below cc {FP8E4_MIN_CC}: {skipped_fp8}")
    if refused:
        print(f"prefill cases the launcher refuses on Triton {triton.__version__} (the "
              f"tree's kernel runs them): {len(refused)}")  # fmt: skip
        for line in sorted(set(refused)):
            print(f"  {line}")
    if ns.limit:
        jobs, rows = jobs[: ns.limit], rows[: ns.limit]
    print(
        f"triton {triton.__version__}, torch {torch.__version__}, python "
        f"{sys.version.split()[0]}; {len(jobs)} unique compiles, cc {ccs}, jobs {ns.jobs}",
        flush=True,
    )
    t0 = time.time()
    _JOBS[:] = jobs
    _TIMEOUT[0] = ns.timeout
    with ThreadPoolExecutor(max(1, ns.jobs)) as ex:
        results = list(ex.map(compile_isolated, range(len(jobs))))

    print("| kernel | cc | dtype | cfg | warps/stages | constexprs | shared | result |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    summary, smem, too_big = {}, {}, []
    for (name, cc, dtype, cx, opts, cname, cfg), (status, info, dt, shared) in zip(rows, results):
        ws = f"{opts.get('num_warps', 4)}/{opts.get('num_stages', 3)}"
        res = f"ok ({info}, {dt:.1f}s)" if status == "ok" else f"ERROR {info}"
        dt_name = dtype.split(".")[-1]
        print(f"| {name} | {cc} | {dt_name} | {cname} | {ws} | {cx} | {shared} | {res} |")
        s = summary.setdefault((name, cc), [0, 0, {}])
        s[0 if status == "ok" else 1] += 1
        if status != "ok":
            s[2][info] = s[2].get(info, 0) + 1
        if shared is not None:
            # The reduce kernel is the same for every partition config: one row for it.
            if name == "partition":
                slot = (cname, tuple(cfg), name, cc)
            elif name in ("prefill", "prefill_gather"):  # fp32 configs differ: per dtype
                slot = (f"{cname} {dt_name}", tuple(cfg), name, cc)
            else:
                slot = ("-", (), name, cc)
            if slot not in smem or shared > smem[slot][0]:
                smem[slot] = (shared, f"{dt_name} {cx}")
            if shared > ns.smem_limit:
                too_big.append(f"{name} cc{cc} {cname} {dt_name} {cx}: {shared} bytes")
    print(f"\nsummary (triton {triton.__version__}, {time.time() - t0:.0f}s):")
    bad = 0
    for (name, cc), (ok, err, msgs) in sorted(summary.items()):
        bad += err
        print(f"  {name:12s} cc{cc}: {ok} ok, {err} failed")
        for msg, n in sorted(msgs.items(), key=lambda kv: -kv[1]):
            print(f"      {n} x {msg}")
    print(f"\nshared memory per program, largest per config (limit {ns.smem_limit} bytes):")
    print("| cfg | config | kernel | cc | largest shared | at |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (cname, cfg, name, cc), (shared, where) in sorted(smem.items()):
        mark = "" if shared <= ns.smem_limit else " OVER"
        print(f"| {cname} | {cfg} | {name} | {cc} | {shared}{mark} | {where} |")
    if too_big:
        print(f"\n{len(too_big)} compile(s) need more than {ns.smem_limit} bytes:")
        for line in too_big:
            print(f"  {line}")
    return 1 if bad or too_big else 0


if __name__ == "__main__":
    sys.exit(main())

"""Count the prefix-prefill kernel's SASS instructions per loop, without a GPU.

Why: a GPU lease is short and not always granted; the compiled code can be read on any
machine.  The launch is recorded as ``prefill_launch.prefix_prefill_triton`` makes it for
a small case (head 128, bf16, 32/8 heads, page 16), compiled for the given compute
capability through ``scripts/check_triton_compile.py``'s Triton 3.x path, and the cubin
disassembled with the ``cuobjdump`` Triton ships.  A loop is the range from a backward
branch's target to the branch; its opcodes are counted (a branch not taken at run time,
such as a rarely taken ``if``, is counted all the same: this is a static count).

    python3 scripts/prefill_sass.py 128,32,4,1 [128,64,8,3 ...] [--cc 90] [--head 128]
        [--keep DIR]   # also write each config's .sass, .ptx and .ttgir there
        [--pack N]     # query heads per program (1: GQA unpacked)
        [--gather]     # the context loop over gathered, contiguous K/V (prefill_gather)
        [--kv-cache-dtype fp8]  # an fp8 cache (fp8, fp8_e4m3, fp8_e5m2)

Prints, per config: shared memory, registers, local memory (spill) instructions, and per
loop the instruction count and the most frequent opcodes.  Triton 3.x only.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # real compiles

import torch  # noqa: E402
import triton  # noqa: E402

from vllm_codemod.kernels import prefill_cases, prefill_gather, prefill_launch  # noqa: E402
from vllm_codemod.tuning.tree_imports import load_file  # noqa: E402

HERE = Path(__file__).resolve().parent
_INSTR = re.compile(r"\s+/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)(.*?);")


def _compile_check():
    """check_triton_compile.py, loaded by path (scripts/ is not a package)."""
    return load_file("check_triton_compile", HERE / "check_triton_compile.py", keep=False)


def compile_config(ctc, config, cc: int, head: int, pack=None, gather=False, kv="auto"):
    """The compiled kernel for one (BLOCK_M, BLOCK_N, warps, stages) config (32/8 heads;
    ``pack`` query heads per program, the launcher's choice when None)."""
    a = prefill_cases.make_prefill_inputs(
        [(256, 256)], 32, 8, head, 16, torch.bfloat16, kv_cache_dtype=kv
    )
    sink = []
    saved = prefill_launch._prefix_prefill_kernel, prefill_gather._gather_context_kernel
    try:
        prefill_launch._prefix_prefill_kernel = ctc._Recorder("prefill", sink)
        # the launcher's own gather_buffers makes the buffers (on the CPU); its copy
        # kernel, which would need a GPU, is recorded and left out
        prefill_gather._gather_context_kernel = ctc._Recorder("prefill_gather", [])
        prefill_launch.prefix_prefill_triton(
            **prefill_cases.launch_arguments(a),
            config=prefill_launch.PrefillConfig(*config),
            pack=pack,
            gather=gather,
        )
    finally:
        prefill_launch._prefix_prefill_kernel, prefill_gather._gather_context_kernel = saved
    name, args, kwargs = sink[0]
    fn = ctc.KERNELS[name]
    args, opts = ctc.full_args(fn, args, kwargs)
    return ctc.compiled_3x(fn, args, opts, cc)


def cuobjdump(cubin: bytes, flag: str) -> str:
    """``cuobjdump FLAG`` on a cubin, with the cuobjdump Triton ships."""
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        done = subprocess.run(
            [str(tool), flag, str(path)], capture_output=True, text=True, check=True
        )
    return done.stdout


def loops(sass: str):
    """(start address, instruction count, opcode counter) per backward-branch loop."""
    instrs = [
        (int(m.group(1), 16), m.group(2).split(".")[0], m.group(3))
        for m in map(_INSTR.match, sass.splitlines())
        if m
    ]
    index = {addr: i for i, (addr, _, _) in enumerate(instrs)}
    for i, (addr, op, rest) in enumerate(instrs):
        target = re.search(r"0x([0-9a-f]+)", rest) if op == "BRA" else None
        if target and int(target.group(1), 16) < addr and int(target.group(1), 16) in index:
            body = instrs[index[int(target.group(1), 16)] : i + 1]
            yield body[0][0], len(body), collections.Counter(o for _, o, _ in body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", help="BLOCK_M,BLOCK_N,warps,stages")
    parser.add_argument("--cc", type=int, default=90)
    parser.add_argument("--head", type=int, default=128)
    parser.add_argument("--keep", type=Path)
    parser.add_argument("--pack", type=int, help="query heads per program (default: launcher's)")
    parser.add_argument("--gather", action="store_true", help="the gathered context loop")
    parser.add_argument("--kv-cache-dtype", default="auto", help="auto, fp8, fp8_e4m3, fp8_e5m2")
    ns = parser.parse_args()
    ctc = _compile_check()
    for text in ns.configs:
        config = tuple(int(x) for x in text.split(","))
        kernel = compile_config(ctc, config, ns.cc, ns.head, ns.pack, ns.gather, ns.kv_cache_dtype)
        sass = cuobjdump(kernel.asm["cubin"], "-sass")
        usage = cuobjdump(kernel.asm["cubin"], "-res-usage")
        regs = re.search(r"REG:(\d+)", usage)
        spills = sum(1 for line in sass.splitlines() if re.search(r"\b(STL|LDL)\b", line))
        print(
            f"{config} cc {ns.cc} head {ns.head} cache {ns.kv_cache_dtype}: "
            f"shared {kernel.metadata.shared} B, "
            f"registers {regs.group(1) if regs else '?'}, local memory instructions {spills}"
        )
        for start, count, ops in loops(sass):
            top = " ".join(f"{op}:{n}" for op, n in ops.most_common(12))
            print(f"  loop at {start:#x}: {count} instructions; {top}")
        if ns.keep:
            ns.keep.mkdir(parents=True, exist_ok=True)
            stem = ns.keep / ("_".join(map(str, config)) + f"_cc{ns.cc}_h{ns.head}")
            stem.with_suffix(".sass").write_text(sass)
            stem.with_suffix(".ptx").write_text(kernel.asm["ptx"])
            stem.with_suffix(".ttgir").write_text(kernel.asm["ttgir"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

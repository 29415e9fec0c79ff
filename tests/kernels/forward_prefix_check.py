"""A vendored 0.8.3 fork tree's own ``PagedAttention.forward_prefix``, before and after
``vllm-codemod apply``: the same inputs give the same outputs within bf16 rounding, and
both match the float64 reference.  Used by test_forward_prefix_fork.py.

``python tests/kernels/forward_prefix_check.py BEFORE AFTER``: each a site-packages
directory holding the fork's ``vllm`` (the fixture is a slice of a tree: the caller
stubs what it lacks).  Before: the tree's own Triton kernel; after: the patched
``context_attention_fwd``, which routes to the bundled kernel (Triton on CUDA tensors,
the torch path on CPU tensors).  On a CUDA device on the GPU; elsewhere the caller sets
TRITON_INTERPRET=1 and the tree's kernel runs under Triton's interpreter on CPU tensors.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
DEVICE = "cuda" if CUDA else "cpu"
if not CUDA:
    from interpret_check import _patch_interpreter  # noqa: E402  (this script's directory)

    _patch_interpreter()

from vllm_codemod.kernels.prefill_cases import make_prefill_inputs, prefill_error  # noqa: E402
from vllm_codemod.tuning.decode_inputs import relative_error  # noqa: E402
from vllm_codemod.tuning.tree_imports import TreeModules  # noqa: E402

#: The tree's fp32 path under the interpreter; bf16 on the GPU (the deployment's dtype).
DTYPE = torch.bfloat16 if CUDA else torch.float32
#: Before vs after: bf16 rounding of two fp32-accumulating kernels (~3e-3 measured on
#: the decode kernels); each against float64: the tune tolerance.
SAME = 1e-2
REFERENCE = 2e-2
# name: (lens [(cached, new)], heads, kv heads, head size, page, make_prefill_inputs extras)
CASES = {
    "gqa ragged": ([(40, 24), (0, 17), (33, 5)], 8, 2, 64, 16, {}),
    "alibi": ([(20, 30), (50, 9)], 4, 4, 64, 16, {"alibi": True}),
    "sliding window": ([(40, 30), (9, 50)], 4, 2, 64, 16, {"sliding_window": 13}),
}
if CUDA:
    CASES.update(
        {
            "long gqa": ([(4096, 1024), (700, 300)], 32, 8, 128, 16, {}),
            "head 96 page 32": ([(300, 200)], 16, 2, 96, 32, {}),
        }
    )
    if torch.cuda.get_device_capability() >= (8, 9):
        CASES["fp8 e4m3"] = ([(300, 200), (17, 9)], 8, 2, 128, 16, {"kv_cache_dtype": "fp8"})


def forward_prefix(site: Path, a, paths=None) -> torch.Tensor:
    """``PagedAttention.forward_prefix`` of the tree in ``site`` on the arguments ``a``;
    with ``paths`` (a patched tree), the path each routed call took is appended to it."""
    with TreeModules(site / "vllm") as modules:
        paged_attn = modules.load("vllm.attention.ops.paged_attn")
        if paths is not None:
            prefill = modules.load("vllm._codemod_kernels.prefill")
            run = prefill.run

            def recording(call, choice="auto"):
                taken = run(call, choice)
                paths.append(taken.path)
                return taken

            prefill.run = recording
        out = paged_attn.PagedAttention.forward_prefix(
            a["q"], a["k"], a["v"], a["kv_cache_dtype"], a["k_cache"], a["v_cache"],
            a["block_table"], a["query_start"], a["seq_lens"], a["max_query_len"],
            a["alibi_slopes"], a["sliding_window"] or None, a["k_scale"], a["v_scale"],
        )  # fmt: skip
        if CUDA:
            torch.cuda.synchronize()
    return out


def main(before: Path, after: Path) -> int:
    bad = 0
    for name, (lens, hq, hkv, d, page, extra) in CASES.items():
        a = make_prefill_inputs(lens, hq, hkv, d, page, DTYPE, DEVICE, seed=len(name), **extra)
        old = forward_prefix(before, a)
        paths: list = []
        new = forward_prefix(after, a, paths)
        same = relative_error(new, old)
        err_old, err_new = prefill_error(a, old), prefill_error(a, new)
        ok = same < SAME and err_old < REFERENCE and err_new < REFERENCE
        # the patched tree ran the bundled kernel (a decline would compare the tree with itself)
        ok = ok and paths == ["triton" if CUDA else "torch"]
        bad += not ok
        print(
            f"{'ok ' if ok else 'BAD'} {name}: after vs before {same:.2e}, vs float64: "
            f"before {err_old:.2e}, after {err_new:.2e}; path {paths}",
            flush=True,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))

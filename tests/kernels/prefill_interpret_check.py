"""Run the prefix-prefill Triton kernel under TRITON_INTERPRET=1 on small CPU cases.

Invoked by test_pa_interpret.py in a subprocess (the variable must be set before
Triton is imported).  Prints one line per case and exits 1 if any is off.
"""

from __future__ import annotations

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402
from interpret_check import _patch_interpreter  # noqa: E402  (this script's directory)

from vllm_codemod.kernels import prefill_launch  # noqa: E402
from vllm_codemod.kernels.prefill_cases import (  # noqa: E402
    launch_arguments,
    make_prefill_inputs,
    prefill_error,
)
from vllm_codemod.kernels.prefill_launch import (  # noqa: E402
    PrefillConfig,
    prefix_prefill_triton,
)

SMALL = PrefillConfig(32, 16, 4, 1)  # several tiles in every loop on small cases
ALIBI_WINDOW8 = {"alibi": True, "sliding_window": 11, "pack": 8}
BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
TOLERANCE = {BF16: 1e-2, F16: 2e-3, F32: 1e-4}

#: One 32-token context (two pages) and 8 new tokens, fp32 (one key's weight shows).
TRIMMED = ([(32, 8)], 2, 1, 32, 16, F32)

# name: (lens [(ctx, new)], heads, kv heads, head, page, dtype, extra, config)
CASES = {
    "gqa ragged": ([(5, 3), (37, 40), (16, 17)], 4, 2, 32, 16, F16, {}, SMALL),
    "mqa": ([(40, 21)], 4, 1, 32, 16, BF16, {}, SMALL),
    "mha": ([(33, 30)], 2, 2, 64, 16, F16, {}, SMALL),
    "head 96": ([(20, 19), (3, 33)], 2, 1, 96, 16, F16, {}, SMALL),
    "head 24 page 32": ([(50, 9), (0, 20)], 6, 2, 24, 32, F16, {}, SMALL),
    "ctx 0": ([(0, 45)], 2, 1, 32, 16, F16, {}, SMALL),
    "new 1": ([(70, 1), (0, 1)], 2, 1, 32, 16, F16, {}, SMALL),
    "ctx not a page multiple": ([(17, 33), (31, 5)], 2, 2, 32, 16, F16, {}, SMALL),
    "alibi": ([(20, 30), (50, 9)], 4, 2, 32, 16, F16, {"alibi": True}, SMALL),
    "sliding window": ([(40, 30), (9, 50)], 4, 2, 32, 16, F16, {"sliding_window": 13}, SMALL),
    # wider than the sequence (nothing masked) but not than the block table's 2 pages +
    # 20 new tokens, so the window's loops run (a wider one launches as no window)
    "window wider than the sequence": (
        [(10, 20)],
        2,
        1,
        32,
        16,
        F16,
        {"sliding_window": 40},
        SMALL,
    ),
    # a table of exactly the context's 2 pages + 8 new tokens: the last query is 39
    # tokens past the first key, so a window of 39 masks that key (the launch keeps the
    # window) and one of 40 masks nothing (the launch drops it); fp32 sees the one key
    "window one short of the table": (*TRIMMED, {"sliding_window": 39, "table_pages": 2}, SMALL),
    "window as wide as the table": (*TRIMMED, {"sliding_window": 40, "table_pages": 2}, SMALL),
    "fp8 e4m3": ([(40, 20), (17, 9)], 4, 2, 32, 16, BF16, {"kv_cache_dtype": "fp8"}, SMALL),
    "fp8 e5m2": ([(33, 12)], 4, 2, 32, 16, F16, {"kv_cache_dtype": "fp8_e5m2"}, SMALL),
    "skip decode": ([(20, 30), (50, 1), (7, 9)], 2, 1, 32, 16, F16, {"skip_decode": True}, SMALL),
    "fp32": ([(20, 30), (50, 9)], 2, 1, 32, 16, F32, {}, SMALL),
    "default config": ([(70, 140), (0, 33)], 2, 1, 64, 16, BF16, {}, None),
    # GQA packing (the query heads of one kv head as the rows of a tile; the launcher
    # packs at its head-128 and head-256 defaults only): forced here on the small config,
    # a group of 7 (not a power of two: rows left over), 8 heads over 4 queries a tile
    # (fewer than BLOCK_N: the diagonal starts inside a key tile) with ALiBi and a window,
    # an fp8 cache; and the head-128 default, which packs by itself
    "gqa ragged packed": ([(5, 3), (37, 40), (16, 17)], 4, 2, 32, 16, F16, {"pack": 2}, SMALL),
    "mqa packed": ([(40, 21)], 4, 1, 32, 16, BF16, {"pack": 4}, SMALL),
    "group 7 packed": ([(21, 30), (40, 7)], 14, 2, 32, 16, F16, {"pack": 7}, SMALL),
    "group 8 alibi window packed": ([(37, 26), (5, 19)], 8, 1, 32, 16, F16, ALIBI_WINDOW8, SMALL),
    "fp8 packed": ([(40, 20)], 4, 2, 32, 16, BF16, {"kv_cache_dtype": "fp8", "pack": 2}, SMALL),
    # the fp8 context loop has no prefetch: a window starts it past tile 0; ctx 0 skips it
    "fp8 window": (
        [(85, 20), (0, 9)],
        4,
        2,
        32,
        16,
        BF16,
        {"kv_cache_dtype": "fp8", "sliding_window": 30},
        SMALL,
    ),
    "default config head 128 packs": ([(150, 140), (0, 33)], 8, 2, 128, 16, BF16, {}, None),
    # the context copied into contiguous buffers first (prefill_gather.py): ragged
    # contexts (0, a partial last page and tile), head 96 and page 32, a window with
    # ALiBi packed, an fp8 cache
    "gqa ragged gathered": (
        [(5, 3), (37, 40), (0, 17)],
        4,
        2,
        32,
        16,
        F16,
        {"gather": True},
        SMALL,
    ),
    "head 96 page 32 gathered": ([(70, 19), (3, 33)], 2, 1, 96, 32, BF16, {"gather": True}, SMALL),
    "alibi window packed gathered": (
        [(37, 26), (50, 19)],
        8,
        2,
        32,
        16,
        F16,
        {**ALIBI_WINDOW8, "pack": 4, "gather": True},
        SMALL,
    ),
    "fp8 gathered": (
        [(40, 20), (17, 9)],
        4,
        2,
        32,
        16,
        BF16,
        {"kv_cache_dtype": "fp8", "gather": True},
        SMALL,
    ),
    "default config gathered": ([(150, 140), (0, 33)], 8, 2, 128, 16, BF16, {"gather": True}, None),
    # a window whose edge (masked tiles) is followed by tiles in every row's window
    # (unmasked): in the context (paged, gathered, fp8) and among the new tokens
    "window edge then open tiles": (
        [(150, 20), (10, 100)],
        4,
        2,
        32,
        16,
        F16,
        {"sliding_window": 60},
        SMALL,
    ),
    "window edge then open tiles gathered": (
        [(150, 20), (10, 100)],
        4,
        2,
        32,
        16,
        F16,
        {"sliding_window": 60, "gather": True},
        SMALL,
    ),
    "window edge then open tiles fp8": (
        [(150, 20), (10, 100)],
        4,
        2,
        32,
        16,
        BF16,
        {"sliding_window": 60, "kv_cache_dtype": "fp8"},
        SMALL,
    ),
    # a window far shorter than the context, gathered into buffers filled with NaN
    # first: the rows below the window are not copied and must never be read (a NaN
    # there reaches the output through the PV dot even where its score is masked)
    "short window gathered over nan": (
        [(600, 40), (130, 70), (0, 20)],
        4,
        2,
        32,
        16,
        F16,
        {"sliding_window": 60, "gather": True, "nan_buffers": True},
        SMALL,
    ),
    "short window gathered over nan, key tiles of 128": (
        [(700, 40), (300, 9)],
        4,
        2,
        32,
        16,
        BF16,
        {"sliding_window": 100, "gather": True, "nan_buffers": True},
        PrefillConfig(128, 128, 4, 2),
    ),
    # the grid ordered query tile slowest: ragged sequences (idle tiles), packed heads
    "m last packed": (
        [(37, 40), (0, 17), (9, 3)],
        4,
        2,
        32,
        16,
        BF16,
        {"pack": 2, "m_last": True},
        SMALL,
    ),
}


def run(name: str) -> float:
    lens, hq, hkv, d, page, dtype, extra, config = CASES[name]
    extra = dict(extra)
    pack = extra.pop("pack", None)
    gather = extra.pop("gather", None)
    m_last = extra.pop("m_last", False)
    nan_buffers = extra.pop("nan_buffers", False)
    table_pages = extra.pop("table_pages", None)
    a = make_prefill_inputs(lens, hq, hkv, d, page, dtype, seed=len(name), **extra)
    if table_pages is not None:  # the inputs' table has a spare page: take it away
        a["block_table"] = a["block_table"][:, :table_pages].contiguous()
    empty = torch.empty
    if nan_buffers:  # what the gather leaves unwritten holds NaN, not zeros
        torch.empty = lambda *s, **k: empty(*s, **k).fill_(float("nan"))
    try:
        prefix_prefill_triton(
            **launch_arguments(a), config=config, pack=pack, gather=gather, m_last=m_last
        )
    finally:
        torch.empty = empty
    return prefill_error(a, a["o"])


def _refused(name: str) -> bool:
    try:
        run(name)
    except prefill_launch.Triton2Refusal:
        return True
    return False


#: The context's K tile both ways the launcher can read it: as [N, D / X, X] (Triton 3.0+)
#: and as a plain [D, N] gather with the kernel's ``LEGACY`` forms (what Triton 2.x gets).
K_FORMS = {"K 3-D": True, "K 2-D": False}


def main() -> int:
    _patch_interpreter()  # bf16 tl.dot and loop bounds under the interpreter
    failed = 0
    for form, k_3d in K_FORMS.items():
        if k_3d and not prefill_launch.HAS_PERMUTE:
            print(f"--  {form}: this Triton has no tl.permute/tl.reshape; not run", flush=True)
            continue
        prefill_launch.HAS_PERMUTE = k_3d
        for name, case in CASES.items():
            if not k_3d and case[6].get("kv_cache_dtype"):
                # Triton 2.x (the 2-D forms' home) refuses fp8 caches: the tree's kernel
                refused = _refused(name)
                failed += not refused
                print(f"{'ok ' if refused else 'BAD'} {form}, {name}: refused", flush=True)
                continue
            err = run(name)
            ok = err <= TOLERANCE[case[5]]
            failed += not ok
            print(f"{'ok ' if ok else 'BAD'} {form}, {name}: rel err {err:.2e}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

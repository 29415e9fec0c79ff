"""Run the Triton kernels on CPU tensors under Triton's interpreter (TRITON_INTERPRET=1).

Used by test_pa_interpret.py in a subprocess (the interpreter must be chosen before the
kernels are defined) and handy by hand:  ``python tests/kernels/interpret_check.py``.
Prints one line per case and exits 1 when any case fails.
"""

from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
from pa_helpers import make_inputs, rel_err, tolerance  # noqa: E402  (this script's directory)

from vllm_codemod.kernels import triton_impl  # noqa: E402
from vllm_codemod.kernels.reference import (  # noqa: E402
    reference_paged_attention,
    reference_partitions,
)


def _patch_interpreter() -> None:
    """numpy >= 2.3 refuses int() on 1-element 1-D arrays, which the interpreter uses for
    loop bounds loaded from memory (Triton <= 3.6); index through .item() instead."""
    try:
        from triton.runtime import interpreter
    except Exception:
        return
    orig = getattr(interpreter, "_patch_lang_tensor", None)
    if orig is None or getattr(orig, "_codemod_patched", False):
        return

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._codemod_patched = True
    interpreter._patch_lang_tensor = patched

    # tl.dot on bfloat16 (stored as uint16 by the interpreter) multiplies the raw bits;
    # widen bf16 operands to float32 first (exact).
    import numpy as np
    import triton.language as tl

    builder = getattr(interpreter, "InterpreterBuilder", None)
    orig_dot = getattr(builder, "create_dot", None)
    if orig_dot is None:
        return

    def _widen(h):
        if h.dtype.scalar == tl.bfloat16:
            data = (h.data.astype(np.uint32) << 16).view(np.float32)
            return interpreter.TensorHandle(data, tl.float32)
        return h

    def create_dot(self, a, b, d, *args, **kwargs):
        return orig_dot(self, _widen(a), _widen(b), d, *args, **kwargs)

    builder.create_dot = create_dot


CALL_KEYS = (
    "out exp_sums max_logits tmp_out query key_cache value_cache num_kv_heads scale "
    "block_tables seq_lens block_size max_seq_len alibi_slopes"
).split()

# (seq_lens, heads, kv heads, head size, block size, dtype, alibi, config override)
CASES = [
    ([1, 700, 1300], 8, 2, 128, 16, torch.bfloat16, True, None),
    ([1, 700, 1300], 8, 2, 128, 16, torch.bfloat16, True, (32, 2, 1, True, 2)),
    ([1, 700, 1300], 8, 2, 128, 16, torch.bfloat16, False, (16, 1, 2, True, 4)),
    ([513, 1025, 40], 4, 4, 256, 32, torch.float16, True, (32, 2, 1, False, 4)),
    ([600, 1800], 8, 2, 64, 16, torch.float32, True, (16, 1, 1, True, 2)),
    ([1100], 2, 1, 80, 8, torch.bfloat16, False, (64, 2, 1, True, 4)),
    ([2, 1536], 32, 2, 64, 16, torch.float16, False, (16, 1, 2, True, 2)),
    # prefetch 1 (block ids one tile ahead) and 2 (K/V double buffer), incl. a padded head
    ([1, 700, 1300], 8, 2, 128, 16, torch.bfloat16, True, (16, 1, 1, False, 1, 1)),
    ([513, 1025, 40], 4, 4, 80, 8, torch.float16, False, (32, 2, 1, True, 1, 2)),
    ([600, 1800, 16], 8, 2, 64, 32, torch.float32, True, (16, 1, 1, True, 1, 2)),
    ([1100, 3], 2, 1, 256, 16, torch.bfloat16, False, (64, 2, 1, True, 2, 2)),
    # k3d: K tiles loaded in memory order, then permuted (Triton >= 3.0)
    ([1, 700, 1300], 8, 2, 128, 16, torch.bfloat16, True, (16, 1, 1, False, 1, 0, True)),
    ([513, 1025, 40], 4, 4, 80, 8, torch.float16, False, (32, 2, 1, True, 1, 2, True)),
    ([600, 1800, 16], 8, 2, 64, 32, torch.float32, True, (16, 1, 2, True, 1, 1, True)),
    ([1100, 3], 2, 1, 256, 16, torch.bfloat16, False, (64, 2, 1, True, 2, 0, True)),
]


def run_case(case) -> float:
    lens, nh, nkv, hs, bs, dtype, alibi, cfg = case
    a = make_inputs(lens, nh, nkv, hs, bs, dtype, "cpu", alibi=alibi, extra_partitions=1)
    triton_impl.set_config_override(cfg)
    try:
        triton_impl.paged_attention_v2_triton(**{k: a[k] for k in CALL_KEYS})
    finally:
        triton_impl.set_config_override(None)
    assert not torch.isnan(a["out"]).any(), "out has NaN"
    ref = reference_paged_attention(
        a["query"],
        a["key_cache"],
        a["value_cache"],
        a["block_tables"],
        a["seq_lens"].tolist(),
        a["scale"],
        a["alibi_slopes"],
    )
    err = rel_err(a["out"], ref)
    assert err < tolerance(dtype), err
    # vLLM's partition-buffer contract: tmp_out normalized by its own exp-sum.
    buf_tol = 1e-4 if dtype == torch.float32 else 2e-2
    for s, n_tok in enumerate(lens):
        tmp, sums, maxes = reference_partitions(
            a["query"],
            a["key_cache"],
            a["value_cache"],
            a["block_tables"],
            n_tok,
            s,
            a["scale"],
            a["alibi_slopes"],
        )
        n = tmp.shape[1]
        # 1e-4, not the GPU tests' 1e-5: the interpreter truncates fp32 -> bf16 casts
        # (the fp32 path's split product), the GPU rounds them.
        assert rel_err(a["max_logits"][s, :, :n], maxes) < 1e-4
        assert rel_err(a["exp_sums"][s, :, :n], sums) < buf_tol
        assert rel_err(a["tmp_out"][s, :, :n], tmp) < buf_tol
    return err


def main(argv) -> int:
    _patch_interpreter()
    cases = CASES if not argv else [CASES[int(i)] for i in argv]
    bad = 0
    for i, case in enumerate(cases):
        try:
            err = run_case(case)
            print(f"ok   case {i}: rel err {err:.2e}  {case[:5]} cfg={case[7]}", flush=True)
        except Exception as exc:
            bad += 1
            print(f"FAIL case {i}: {type(exc).__name__}: {exc}  cfg={case[7]}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

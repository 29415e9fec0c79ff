"""Run the Triton kernels on CPU tensors under Triton's interpreter (TRITON_INTERPRET=1).

Each case calls ``decode_launch.run(call.build((), inputs), LaunchConfig(...))`` twice (the
second call reuses the plan) and checks out and vLLM's partition buffers every time.

Used by test_pa_interpret.py in a subprocess (the interpreter must be chosen before the
kernels are defined) and handy by hand:  ``python tests/kernels/interpret_check.py``.
Prints one line per case and exits 1 when any case fails.
"""

from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
from pa_helpers import make_inputs, reference_of, rel_err, tolerance  # noqa: E402  (this script's directory)

from vllm_codemod.kernels import call as call_mod  # noqa: E402
from vllm_codemod.kernels import (
    decode_launch,  # noqa: E402
    launch_tables,  # noqa: E402
)
from vllm_codemod.kernels.launch_tables import LaunchConfig  # noqa: E402
from vllm_codemod.kernels.reference import (  # noqa: E402
    reference_for_args,
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


# Balanced items over a batch (session 6's rule, behind BALANCED_STREAM = False): a ragged
# batch over two waves with ALiBi, and fp32 on the 2-D load with the chunked reduce; the
# same batches also run as streams (below).
_ITEMS_RAGGED = (
    [1, 700, 1300, 5, 17],
    8,
    2,
    128,
    16,
    torch.bfloat16,
    True,
    (32, 1, 1, True, 1, True),
    False,
    {"sms": 3, "BALANCED_WAVES": 2, "FUSE_MAX_PARTITIONS": 0, "BALANCED_STREAM": False},
)
_ITEMS_FP32 = (
    [1300, 17, 2900],
    4,
    2,
    80,
    8,
    torch.float32,
    True,
    (16, 1, 1, True, 0, False),
    True,
    {"sms": 2, "BALANCED_FORCE_SLOTS": 3, "BALANCED_STREAM": False},
)


def _as_stream(case, drop=""):
    """The same case as a balanced stream (without the ``drop`` knob)."""
    knobs = {k: v for k, v in case[9].items() if k != drop}
    return case[:9] + (dict(knobs, BALANCED_STREAM=True),)


# (seq_lens, heads, kv heads, head size, block size, dtype, alibi, LaunchConfig fields or
# None for the tables' choice, reduce in chunks[, decode_launch module knobs for the case])
CASES = [
    ([1, 700, 1300], 8, 2, 128, 16, torch.bfloat16, True, None, False),
    ([513, 1025, 40], 4, 4, 256, 32, torch.float16, True, (32, 2, 1, False, 0, False), False),
    ([600, 1800], 8, 2, 64, 16, torch.float32, True, (16, 1, 1, True, 0, False), True),
    # prefetch 1 (block ids one tile ahead) and 2 (K/V double buffer), incl. a padded head
    ([1100, 3], 2, 1, 80, 8, torch.bfloat16, False, (64, 2, 1, True, 1, False), False),
    ([513, 1025, 40], 4, 4, 80, 8, torch.float16, False, (32, 2, 1, True, 2, False), False),
    # k3d: K tiles loaded in memory order, then permuted (Triton >= 3.0)
    ([2, 1536], 32, 2, 64, 16, torch.float16, False, (16, 1, 2, True, 0, True), False),
    ([600, 1800, 16], 8, 2, 64, 32, torch.float32, True, (16, 1, 1, True, 2, True), False),
    ([1100, 3], 2, 1, 80, 8, torch.bfloat16, False, (32, 2, 1, False, 1, True), True),
    # 71 query heads per kv head: 64-row programs, two group chunks (the wide-group table)
    ([300, 5], 71, 1, 64, 16, torch.bfloat16, False, None, False),
    # Chunks smaller than vLLM's partitions (partials in our scratch): fused merge (<= 8
    # chunks), reduce kernel, chunked reduce; ragged batches launch only existing chunks
    # (COMPACT), with and without the fused merge.
    ([1, 700, 1300], 8, 2, 128, 16, torch.bfloat16, True, (64, 2, 1, True, 0, True, 256), False),
    ([1300, 40], 4, 1, 64, 16, torch.float16, False, (32, 1, 1, True, 1, True, 64), False),
    ([1300, 17], 4, 2, 80, 8, torch.float32, True, (16, 1, 1, True, 0, False, 32), True),
    ([5000], 8, 2, 64, 16, torch.bfloat16, False, (64, 2, 1, True, 0, True, 128), False),
    (
        [1, 4100, 3, 513],
        8,
        2,
        64,
        16,
        torch.bfloat16,
        False,
        None,
        False,
        {"FUSE_MAX_CHUNKS": 0, "FUSE_MAX_PARTITIONS": 0},
    ),
    (
        [1, 4100, 3, 513],
        4,
        4,
        64,
        32,
        torch.float16,
        True,
        (32, 2, 1, True, 1, True, 128),
        False,
        {"FUSE_MAX_CHUNKS": 64},
    ),
    # Balanced items (the item length chosen on the device from the lengths' total): a
    # single sequence, a ragged batch over two waves, a forced config with the chunked
    # reduce, ALiBi; "sms" stands in for the CPU's missing SM count.
    ([5000], 8, 2, 64, 16, torch.bfloat16, False, (32, 1, 1, True, 1, True), False, {"sms": 2}),
    _ITEMS_RAGGED,
    _ITEMS_FP32,
    # Head 256, one sequence: the tables' two-warp config for balanced items.
    ([3000], 16, 2, 256, 16, torch.bfloat16, False, None, False, {"sms": 2}),
    # Balanced streams: equal token ranges over the sequences laid end to end, a range
    # crossing several sequence ends (tiny sequences, lengths off the tile grid), with
    # ALiBi, the 2-D load and fp32 with the chunked reduce, and one wave of two ranges.
    _as_stream(_ITEMS_RAGGED, drop="BALANCED_WAVES"),
    _as_stream(_ITEMS_FP32),
    (
        [3, 1, 2, 40, 33, 1, 600],
        4,
        4,
        64,
        32,
        torch.float16,
        False,
        (32, 1, 1, True, 1, True),
        False,
        {"sms": 1, "BALANCED_STREAM": True, "STREAM_WAVES": 2, "FUSE_MAX_PARTITIONS": 0},
    ),
    # A config's own slots (a tuning file's residency): Triton 2.x's 2-D one-warp config,
    # never balanced by the H200 tables, balanced for one sequence and as a stream.
    (
        [3000],
        8,
        2,
        64,
        16,
        torch.bfloat16,
        False,
        (16, 1, 1, False, 0, False, 0, 3),
        False,
        {"sms": 2},
    ),
    (
        [40, 700, 3, 1000],
        8,
        2,
        64,
        16,
        torch.float16,
        True,
        (16, 1, 1, False, 0, False, 0, 2),
        False,
        {"sms": 2, "FUSE_MAX_PARTITIONS": 0},
    ),
]


def _fill_nan(a) -> None:
    for name in ("out", "exp_sums", "max_logits", "tmp_out"):
        a[name].fill_(float("nan"))


def run_case(case) -> float:
    """Two calls through decode_launch.run (the second reuses the first's plan), each checked:
    out against the float64 reference, and vLLM's partition buffers."""
    lens, nh, nkv, hs, bs, dtype, alibi, cfg, chunked = case[:9]
    knobs = dict(case[9]) if len(case) > 9 else {}
    a = make_inputs(lens, nh, nkv, hs, bs, dtype, "cpu", alibi=alibi, extra_partitions=1)
    c = call_mod.build((), dict(a))
    config = None if cfg is None else LaunchConfig(*cfg)
    if chunked:
        knobs["REDUCE_SINGLE_PASS_MAX"] = 0
    sms = knobs.pop("sms", 0)
    saved = {name: getattr(_module_of(name), name) for name in knobs}
    for name, value in knobs.items():
        setattr(_module_of(name), name, value)
    decode_launch._plans.clear()
    decode_launch._sm_counts[torch.device("cpu")] = sms
    try:
        for call in range(2):
            _fill_nan(a)
            decode_launch.run(c, config)
            assert len(decode_launch._plans) == 1, f"call {call}: plan not reused"
            (plan,) = decode_launch._plans.values()
            assert plan.partition.constexprs["BALANCED"] is bool(sms), "balanced"
            stream = bool(sms) and launch_tables.BALANCED_STREAM and len(lens) > 1
            assert plan.partition.constexprs["STREAM"] is stream, "stream"
            err = _check(a, lens, dtype, plan.partition.constexprs["PART"] == 512 and not sms)
    finally:
        for name, value in saved.items():
            setattr(_module_of(name), name, value)
        decode_launch._sm_counts.pop(torch.device("cpu"), None)
    return err


def _module_of(knob: str):
    return decode_launch if hasattr(decode_launch, knob) else launch_tables


def _check(a, lens, dtype, vllm_buffers: bool) -> float:
    assert not torch.isnan(a["out"]).any(), "out has NaN"
    ref = reference_for_args(a)
    err = rel_err(a["out"], ref)
    assert err < tolerance(dtype), err
    if not vllm_buffers:  # chunks below 512 tokens keep their partials in our scratch
        return err
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


def run_empty_sequence_case() -> float:
    """A zero-length sequence between others (compact grid, fused merge, and the reduce
    kernel): its rows are zeros, the others match the reference."""
    lens = [700, 0, 1300, 5]
    worst = 0.0
    balanced_config = LaunchConfig(32, 1, 1, True, 1, True)
    for fuse, sms, stream in (
        (True, 0, False),
        (False, 0, False),
        (False, 2, False),
        (False, 2, True),
    ):
        a = make_inputs([700, 1, 1300, 5], 8, 2, 64, 16, torch.bfloat16, "cpu", seed=3)
        a["seq_lens"] = torch.tensor(lens, dtype=torch.int32)
        saved = decode_launch.FUSE_MAX_PARTITIONS
        decode_launch.FUSE_MAX_PARTITIONS = 4 if fuse else 0
        saved_stream = launch_tables.BALANCED_STREAM
        launch_tables.BALANCED_STREAM = stream
        decode_launch._plans.clear()
        decode_launch._sm_counts[torch.device("cpu")] = sms
        try:
            _fill_nan(a)
            decode_launch.run(call_mod.build((), dict(a)), balanced_config if sms else None)
            (plan,) = decode_launch._plans.values()
            assert plan.partition.constexprs["COMPACT"] is not sms
            assert plan.partition.constexprs["BALANCED"] is bool(sms)
            assert plan.partition.constexprs["FUSED"] is fuse
            assert plan.partition.constexprs["STREAM"] is stream
        finally:
            decode_launch.FUSE_MAX_PARTITIONS = saved
            launch_tables.BALANCED_STREAM = saved_stream
            decode_launch._sm_counts.pop(torch.device("cpu"), None)
        assert torch.equal(a["out"][1], torch.zeros_like(a["out"][1])), "empty sequence"
        keep = [0, 2, 3]
        ref = reference_of(a, keep, lens)
        err = rel_err(a["out"][keep], ref)
        assert err < tolerance(torch.bfloat16), err
        worst = max(worst, err)
    return worst


def main(argv) -> int:
    _patch_interpreter()
    cases = CASES if not argv else [CASES[int(i)] for i in argv]
    bad = 0
    if not argv:
        try:
            err = run_empty_sequence_case()
            print(f"ok   empty sequence in a batch: rel err {err:.2e}", flush=True)
        except Exception as exc:
            bad += 1
            print(f"FAIL empty sequence in a batch: {type(exc).__name__}: {exc}", flush=True)
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

"""Run tune's measuring code on the real Triton kernels; used by test_tune_triton.py.

``python tests/kernels/tune_triton_check.py prefill SITE`` times the tree's prefix-prefill kernels
(main and ALiBi) at two warp counts and fails unless each matched the float64 reference;
``python tests/kernels/tune_triton_check.py decode SITE`` runs the decode tuner over the tree's
bundled kernels and fails if any candidate disagreed with the reference;
``python tests/kernels/tune_triton_check.py prefill-configs SITE`` runs the prefill config
tuner over the tree's bundled prefill kernel with one candidate made wrong on purpose
(its output scaled after the real kernel ran), and fails unless the float64 check
rejected exactly that one and a correct config won.  On a CUDA device
it uses the GPU; elsewhere the caller sets TRITON_INTERPRET=1 and CPU tensors are used.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch  # noqa: E402

CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
DEVICE = "cuda" if CUDA else "cpu"
if not CUDA:
    from interpret_check import _patch_interpreter  # noqa: E402  (this script's directory)

    _patch_interpreter()

from vllm_codemod.tuning import candidates, prefill  # noqa: E402
from vllm_codemod.tuning.measure import DecodeTuner, measure_decode, plan_points  # noqa: E402
from vllm_codemod.tuning.progress import Budget, Progress  # noqa: E402
from vllm_codemod.tuning.shapes import Deployment, Shape  # noqa: E402
from vllm_codemod.tuning.timing import Timer  # noqa: E402
from vllm_codemod.tuning.tree_imports import TreeModules  # noqa: E402

DTYPE = "bfloat16" if CUDA else "float32"
TIMER = Timer(DEVICE) if CUDA else Timer(DEVICE, repeats=1, calls=1, warmup=0)


def check_prefill(site: Path) -> int:
    class Tuner(prefill.PrefillTuner):
        needs_cuda = CUDA

    prefill.WARPS = (4, 8)
    prefill._CHECK = ((2, 40, 24), (1, 0, 19))
    shapes = [Shape(4, 2, 64, DTYPE), Shape(4, 4, 64, DTYPE, alibi=True)]
    deployment = Deployment(shapes, 4096, 8, "check")
    cases = [(8, 1024, 512)] if CUDA else [(1, 16, 16)]
    with TreeModules(site / "vllm") as modules:
        tuner = Tuner(modules, DEVICE, TIMER, Budget(None), Progress(1, enabled=False))
        entries, warps = tuner.run_cases(deployment, cases)
    bad = 0
    for entry in entries:
        for c in entry["candidates"]:
            print(entry["kernel"], c)
            bad += c["status"] != "ok"
    print("skipped:", tuner.skipped, "NUM_WARPS:", warps)
    return 1 if bad or tuner.skipped or len(entries) != 2 else 0


def check_decode(site: Path) -> int:
    from vllm_codemod.commands.tune import _load_kernels

    candidates.MAX_CANDIDATES = 8 if CUDA else 2
    kernels = _load_kernels(site / "vllm", "cuda", [])
    assert kernels.triton_impl is not None, kernels.skipped
    tuner = DecodeTuner(
        kernels, DEVICE, TIMER, Budget(None), Progress(1, enabled=False), use_triton=True
    )
    length = 4096 if CUDA else 600
    deployment = Deployment([Shape(8, 2, 128, DTYPE)], length, 1, "check")
    entries = measure_decode(tuner, deployment, plan_points(deployment)[-1:])
    bad = 0
    for entry in entries:
        for point in entry["points"]:
            print(point["max_seq_len"], point["mode"], "winner:", point["winner"])
            for c in point["candidates"]:
                print("   ", c)
                bad += c["status"] == "wrong"
            bad += point["mode"] != ("graph" if CUDA else "eager")
    print("skipped:", kernels.skipped)
    return 1 if bad or not entries or kernels.skipped else 0


def check_prefill_configs(site: Path) -> int:
    import importlib

    from vllm_codemod.commands.verify import PRIVATE_NAME, load_tree_kernels
    from vllm_codemod.tuning import prefill_configs as pc

    load_tree_kernels(site / "vllm")
    launch = importlib.import_module(f"{PRIVATE_NAME}.prefill_launch")
    cases = importlib.import_module(f"{PRIVATE_NAME}.prefill_cases")
    wrong = launch.PrefillConfig(32, 16, 2, 1)

    class Launch:
        """The tree's launcher, with ``wrong`` made to compute garbage."""

        def __getattr__(self, name):
            return getattr(launch, name)

        def prefix_prefill_triton(self, config=None, **args):
            launch.prefix_prefill_triton(config=config, **args)
            if config == wrong:
                args["o"].mul_(1.5)

    real = pc.prefill_candidates
    if CUDA:
        shape, points, more = Shape(8, 2, 128, "bfloat16"), [(2, 1024, 512)], 4
    else:  # the interpreter: tiny shapes, two candidates besides the default
        shape, points, more = Shape(4, 2, 32, "float32"), [(1, 20, 24)], 1
        pc.CHECK_LENS = ((20, 40), (0, 9), (17, 1))
    pc.prefill_candidates = lambda *a: [tuple(wrong)] + real(*a)[:more]
    deployment = Deployment([shape], 4096, 8, "check")
    tuner = pc.PrefillConfigTuner(
        Launch(), cases, DEVICE, TIMER, Budget(None), Progress(1, enabled=False)
    )
    (entry,) = tuner.run_cases(deployment, points)
    for c in entry["candidates"]:
        print(c)
    print("chosen:", entry["config"], entry["us"], "default:", entry["default"])
    status = {tuple(c["config"]): c["status"] for c in entry["candidates"]}
    bad = status.pop(tuple(wrong)) != "wrong"
    bad += any(s != "ok" for s in status.values()) or len(status) < 2
    bad += entry["us"] is None or entry["config"] == list(wrong)
    print("skipped:", tuner.skipped)
    return 1 if bad or tuner.skipped else 0


if __name__ == "__main__":
    mode, site = sys.argv[1], Path(sys.argv[2])
    checks = {
        "prefill": check_prefill,
        "decode": check_decode,
        "prefill-configs": check_prefill_configs,
    }
    sys.exit(checks[mode](site))

"""``vllm-codemod tune``: measure the patched tree's kernels here and write a tuning file.

The built-in launch tables, the V1/V2 crossover and prefix-prefill's warps were chosen on
other hardware; this measures them on the accelerator the deployment runs on, through
the kernels installed in the tree (as ``verify`` loads them) and the tree's own vLLM
modules.  It is the one command that imports torch (and Triton, on a GPU); it writes
only the tuning file, atomically, and nothing at all when interrupted.
"""

from __future__ import annotations

import importlib
import platform
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import click

from ..errors import CodemodError, UserError
from ..report import Report
from ._common import describe_tree, open_tree, tree_options
from ._output import current_output, reporting

DEFAULT_BUDGET = 300.0
#: the part of the budget prefix prefill may use (it runs first; decode gets the rest)
PREFILL_SHARE = 0.4


def _versions() -> Dict[str, Optional[str]]:
    import torch

    try:
        import triton

        triton_version: Optional[str] = str(triton.__version__)
    except Exception:
        triton_version = None
    return {"torch": str(torch.__version__), "triton": triton_version,
            "python": platform.python_version()}  # fmt: skip


def _pick_device(requested: str) -> str:
    try:
        import torch
    except ImportError:
        raise UserError(
            f"tune needs torch in this interpreter ({sys.executable}); run it with the python "
            "that serves vLLM"
        ) from None
    has_cuda = torch.cuda.is_available()
    if requested == "cuda" and not has_cuda:
        raise UserError("--device cuda: torch sees no CUDA device here; use --device cpu")
    return "cuda" if requested == "cuda" or (requested == "auto" and has_cuda) else "cpu"


def _device_identity(device: str) -> Tuple[str, Optional[List[int]]]:
    import torch

    if device == "cuda":
        index = torch.cuda.current_device()
        return str(torch.cuda.get_device_name(index)), list(torch.cuda.get_device_capability(index))
    return "cpu", None


def _load_kernels(root: Path, device: str, skipped: List[str]) -> Any:
    from ..tuning.measure import DecodeKernels
    from .verify import PRIVATE_NAME, load_tree_kernels

    load_tree_kernels(root)
    dispatch = importlib.import_module(f"{PRIVATE_NAME}.dispatch")
    reference = importlib.import_module(f"{PRIVATE_NAME}.reference")
    triton_impl = None
    if device == "cuda":
        try:
            triton_impl = importlib.import_module(f"{PRIVATE_NAME}.decode_launch")
        except Exception as exc:
            skipped.append(
                f"v2 launch configs: the tree's Triton kernels do not import here "
                f"({type(exc).__name__}: {str(exc)[:160]}); timing the PyTorch path only"
            )
    return DecodeKernels(dispatch, reference, triton_impl, None, skipped)


def _attach_v1(kernels: Any, modules: Any, deployment: Any, device: str) -> None:
    from ..kernels.vendor_v1 import V1Unavailable, bind_v1, probe_v1
    from ..tuning.decode_inputs import make_check_case
    from ..tuning.tree_imports import TreeImportError

    try:
        ops = modules.load("vllm._custom_ops")
        call = bind_v1(ops)
        if device != "cuda":
            raise V1Unavailable("the vendor kernel runs on the accelerator only (--device cpu)")
        probe_v1(call, make_check_case(deployment.shapes[0], device))
    except (TreeImportError, V1Unavailable) as exc:
        kernels.skipped.append(f"v1 (the tree's paged_attention_v1): skipped: {exc}")
        return
    kernels.v1 = call


def _tree_version(tree: Any) -> Any:
    """The tree's vLLM version for the file's record (None when it cannot be read)."""
    from ..versions import read_version

    try:
        return read_version(tree)[0]
    except CodemodError:
        return None


def _run(
    tree: Any,
    version: Any,
    deployment: Any,
    device: str,
    budget_s: Optional[float],
    interactive: bool = False,
) -> Dict[str, Any]:
    from ..tuning import table
    from ..tuning.measure import DecodeTuner, measure_decode, plan_points
    from ..tuning.prefill import PrefillTuner, prefill_cases
    from ..tuning.prefill_configs import measure_tree
    from ..tuning.progress import Budget, Progress
    from ..tuning.timing import Timer
    from ..tuning.tree_imports import TreeModules
    from .verify import PRIVATE_NAME

    skipped: List[str] = []
    kernels = _load_kernels(tree.root, device, skipped)
    timer = Timer(device) if device == "cuda" else Timer(device, repeats=3, calls=1, warmup=1)
    budget = Budget(budget_s)
    points = plan_points(deployment)
    total = len(points) + len(deployment.shapes) * len(prefill_cases(deployment))
    progress = Progress(total, enabled=interactive)
    name, capability = _device_identity(device)
    with TreeModules(tree.root) as modules:
        try:
            _attach_v1(kernels, modules, deployment, device)
            warps_start = budget.elapsed()  # the V1 probe before it counts as decode's
            # Prefill first, within its share: a handful of cases whose answer (one
            # NUM_WARPS) matters as much as the whole decode grid.
            prefill_budget = Budget(None if budget_s is None else budget_s * PREFILL_SHARE)
            prefill_tuner = PrefillTuner(modules, device, timer, prefill_budget, progress)
            prefill, warps = prefill_tuner.run(deployment)
            configs_start = budget.elapsed()
            # The bundled prefill kernel's launch configs (prefill_launch.PrefillConfig).
            prefill_configs, config_skips, config_tuner = measure_tree(
                PRIVATE_NAME, deployment, device, timer, budget_s, progress
            )
            decode_start = budget.elapsed()
            tuner = DecodeTuner(kernels, device, timer, budget, progress)
            decode = measure_decode(tuner, deployment, points)
            decode_end = budget.elapsed()
            if config_tuner is not None and budget_s is not None:
                # what decode left goes back to the config groups the 30% share cut
                left = Budget(max(0.0, budget_s - decode_end), budget.clock)
                prefill_configs = config_tuner.resume(prefill_configs, left)
                config_skips = config_tuner.skipped
            resumed_end = budget.elapsed()
        finally:
            progress.close()
    entry = table.device_header(
        name,
        capability,
        _versions(),
        {"vllm_version": str(version) if version else None},
        {
            "shapes": [s.label() for s in deployment.shapes],
            "max_model_len": deployment.max_model_len,
            "max_num_seqs": deployment.max_num_seqs,
            "source": deployment.source,
            "budget_s": budget_s,
            "elapsed_s": round(budget.elapsed(), 1),
            # where the budget went: what the next run's --budget has to cover
            "phases_s": {
                "prefill_warps": round(configs_start - warps_start, 1),
                "prefill_configs": round(
                    decode_start - configs_start + resumed_end - decode_end, 1
                ),
                "decode": round(warps_start + decode_end - decode_start, 1),
            },
        },
    )
    entry["decode"] = decode
    entry["prefill"] = prefill
    entry["prefill_num_warps"] = warps
    entry["prefill_configs"] = prefill_configs
    entry["skipped"] = kernels.skipped + prefill_tuner.skipped + config_skips
    return entry


@click.command(
    epilog="""\b
Exit status: 0 tuning file written, 2 error (nothing written), 130 interrupted
(nothing written).
Examples:
  vllm-codemod tune --model-config /models/Llama-3-8B --tensor-parallel 2 --budget 300
  vllm-codemod tune --run-config computility-run.yaml --output h200.json
  vllm-codemod tune --shape 32/8/128 --shape 40/40/128:alibi --max-model-len 32768
  vllm-codemod tune --device cpu --shape 4/2/64 --max-model-len 1024   # a CPU dry run
"""
)
@tree_options
@click.option("--model-config", type=click.Path(path_type=Path), metavar="DIR_OR_FILE",
              help="The model's Hugging Face config.json (or its directory).")  # fmt: skip
@click.option("--run-config", type=click.Path(path_type=Path), metavar="FILE",
              help="The deployment's run config YAML (model, TP size, lengths).")  # fmt: skip
@click.option("--tensor-parallel", type=click.IntRange(1, 1024), default=None,
              help="TP size: heads per GPU = heads / N.  [default: 1]")  # fmt: skip
@click.option("--max-model-len", type=click.IntRange(16, 1 << 24), default=None,
              help="Longest context to measure.  [default: the model's, else 32768]")  # fmt: skip
@click.option("--max-num-seqs", type=click.IntRange(1, 1 << 16), default=None,
              help="Largest decode batch.  [default: 256]")  # fmt: skip
@click.option("--shape", "shapes", multiple=True, metavar="HQ/HKV/D[:alibi]",
              help="An attention shape per GPU (repeatable), e.g. 32/8/128.")  # fmt: skip
@click.option("--dtype", type=click.Choice(["bfloat16", "float16", "float32", "bf16", "fp16"]),
              default=None, help="Override the model's dtype.  [default: bfloat16]")  # fmt: skip
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto",
              show_default=True, help="cpu: the PyTorch path (a dry run).")  # fmt: skip
@click.option("--budget", type=click.FloatRange(1, 86400), default=DEFAULT_BUDGET,
              show_default=True, metavar="SECONDS",
              help="Stop measuring after this long and keep what was measured.")  # fmt: skip
@click.option("--output", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Where to write the tuning file. [default: "
              "./vllm-codemod-tuning-<device>.json]")  # fmt: skip
@reporting("tune")
def tune(
    site_packages: Any,
    vllm_root: Any,
    python: Any,
    model_config: Optional[Path],
    run_config: Optional[Path],
    tensor_parallel: Optional[int],
    max_model_len: Optional[int],
    max_num_seqs: Optional[int],
    shapes: Tuple[str, ...],
    dtype: Optional[str],
    device: str,
    budget: float,
    output: Optional[Path],
) -> Report:
    """Measure the patched tree's kernels on this accelerator; write a tuning file.

    Times the bundled V2 kernel's launch configs, the tree's own paged_attention_v1
    against V2 (eager and in CUDA graphs), and prefix-prefill warps, each candidate
    checked against a float64 reference first.  Bake the result in with
    `vllm-codemod apply --tuning FILE`.
    """
    from ..tuning import table
    from ..tuning.shapes import resolve

    deployment = resolve(
        model_config, run_config, shapes, tensor_parallel, max_model_len, max_num_seqs, dtype
    )
    tree = open_tree(site_packages, vllm_root, python)
    version = _tree_version(tree)
    chosen = _pick_device(device)
    previous = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # leave no bytecode behind in the user's tree
    try:
        entry = _run(tree, version, deployment, chosen, budget, current_output().interactive)
    except KeyboardInterrupt:
        click.echo("vllm-codemod: tune interrupted; no tuning file written", err=True)
        raise  # exit status 130 at the command-line boundary
    finally:
        sys.dont_write_bytecode = previous
    document = table.build_document(entry)
    path = output or Path(table.default_output_name(entry["device"]["name"]))
    table.write(path, document)
    rows = table.summary_rows(entry)
    report = Report("tune")
    report.data.update(
        {
            "vllm_root": str(tree.root),
            "output": str(path),
            "device": entry["device"],
            "summary": rows,
            "prefill_num_warps": entry["prefill_num_warps"],
            "rejected": table.rejected(entry),
            "skipped": entry["skipped"],
        }
    )
    report.say(f"{describe_tree(tree, version)}; device {entry['device']['name']}")
    if rows:
        widths = [max(len(r[k]) for r in rows + [_HEADER]) for k in _HEADER]
        for row in [_HEADER, *rows]:
            report.say("  " + "  ".join(row[k].ljust(w) for k, w in zip(_HEADER, widths)))
    else:
        report.say("  nothing measured (see the skipped list)")
    counts = report.data["rejected"]
    if counts["wrong"] or counts["failed"]:
        report.say(
            f"  rejected candidates: {counts['failed']} failed to compile or launch, "
            f"{counts['wrong']} gave wrong results (listed in the file; never chosen)"
        )
    for reason in entry["skipped"]:
        report.say(f"  skipped: {reason}")
    report.say(_time_line(entry["deployment"]))
    if entry["prefill_num_warps"] is not None:
        report.say(f"prefix-prefill NUM_WARPS: {entry['prefill_num_warps']}")
    report.say(f"wrote {path} (bake it in: vllm-codemod apply --tuning {path})")
    return report


_PHASE_NAMES = (
    ("prefill_warps", "the tree's prefill warps"),
    ("prefill_configs", "our prefill configs"),
    ("decode", "decode"),
)


def _time_line(deployment: Dict[str, Any]) -> str:
    """Where the budget went, so the next run's ``--budget`` can be sized to cover what
    this one skipped (each prefill phase stops at its own share, decode takes the rest,
    and what decode leaves goes back to the config groups their share cut)."""
    phases = deployment["phases_s"]
    parts = ", ".join(f"{label} {phases[key]:.1f} s" for key, label in _PHASE_NAMES)
    budget = deployment["budget_s"]
    of = f" of a {budget:g} s budget" if budget is not None else ""
    return f"  time: {deployment['elapsed_s']:.1f} s{of} ({parts})"


_HEADER = {"shape": "shape", "point": "point", "default": "default", "tuned": "-> tuned",
           "speedup": "speedup"}  # fmt: skip

"""Host cost of the entry point, this tree's kernels against an older copy, in one process.

Separate processes of the same code have measured 2x apart (docs/kernel-notes.md, v26),
so an old/new comparison runs both in one process, rounds interleaved, medians reported.
The older kernels are loaded by path from a directory (their modules import each other
relatively, so they load as a package under a name of their own): a checkout of another
commit, an installed tree (a site-packages directory holding ``vllm_codemod`` or a tree
patched by it, ``vllm/_codemod_kernels``) or the kernels directory itself, e.g.:

    git worktree add /some/old 7b95d5e
    python benchmarks/host_ab.py --old /some/old --json host_ab.json

Each round: 1000 back-to-back eager calls of ``dispatch.paged_attention_v2(*vLLM's 17
positional arguments)`` after 50 warm-up calls, wall time to the last enqueue / 1000.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
from pathlib import Path
from types import ModuleType
from typing import Optional, Sequence

from bench_common import host_us, make, positional

from vllm_codemod.kernels import dispatch as new_dispatch
from vllm_codemod.tuning.tree_imports import load_file

#: Where a directory keeps the kernel package, in the order tried: the package itself, a
#: checkout, a checkout with a src/ layout, an installed vllm-codemod, a patched vllm tree
#: (its site-packages directory, or the vllm directory).
KERNEL_PLACES = (
    ".",
    "kernels",
    "src/vllm_codemod/kernels",
    "vllm_codemod/kernels",
    "vllm/_codemod_kernels",
    "_codemod_kernels",
)


def kernels_dir(directory: Path) -> Path:
    """The kernel package inside ``directory`` (see KERNEL_PLACES)."""
    for place in KERNEL_PLACES:
        candidate = directory / place
        if (candidate / "__init__.py").is_file() and (candidate / "dispatch.py").is_file():
            return candidate.resolve()
    raise LookupError(
        f"{directory}: no kernel package in it (looked for {', '.join(KERNEL_PLACES)}); "
        "pass a checkout, an installed tree or a kernels directory"
    )


def _old_kernels(text: str) -> Path:
    """``--old``: the kernel package in that directory (a usage error, exit 2, if none)."""
    try:
        return kernels_dir(Path(text))
    except LookupError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def load_kernels(directory: Path, name: str = "_host_ab_old_kernels") -> ModuleType:
    """The kernel package found in ``directory``, imported by path under ``name``;
    returns its ``dispatch`` module."""
    load_file(name, kernels_dir(directory) / "__init__.py", package=True)
    return importlib.import_module(f"{name}.dispatch")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument(
        "--old",
        required=True,
        type=_old_kernels,
        metavar="DIR",
        help="the old kernels: a checkout, an installed tree or a kernels directory",
    )
    ap.add_argument("--lens", default="1024,2048,4096,100000")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--json", default=None)
    return ap.parse_args(argv)


def main() -> None:
    opts = parse_args()
    old_dispatch = load_kernels(opts.old)
    rows = []
    for n in (int(x) for x in opts.lens.split(",")):
        a = make([n], 32, 8, 128)
        args = positional(a)
        fns = {
            "old": lambda args=args: old_dispatch.paged_attention_v2(*args),
            "new": lambda args=args: new_dispatch.paged_attention_v2(*args),
        }
        runs = {k: [] for k in fns}
        for _ in range(opts.rounds):
            for k, fn in fns.items():
                runs[k].append(host_us(fn, opts.calls)[0])
        row = {"tokens": n, "runs": runs}
        row.update({k: statistics.median(v) for k, v in runs.items()})
        rows.append(row)
        lo = min(min(v) for v in runs.values())
        hi = max(max(v) for v in runs.values())
        print(
            f"1 x {n:>6} tokens, 32/8/128: old {row['old']:6.1f} us  new {row['new']:6.1f} us "
            f"(medians of {opts.rounds} x {opts.calls}; rounds {lo:.1f}-{hi:.1f})",
            flush=True,
        )
    if opts.json:
        Path(opts.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

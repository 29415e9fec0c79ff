"""Host cost of the entry point, this tree's kernels against an older copy, in one process.

Separate processes of the same code have measured 2x apart (docs/kernel-notes.md, v26),
so an old/new comparison runs both in one process, rounds interleaved, medians reported.
The older kernels are any copy of the ``kernels`` directory, loaded by path (its modules
import each other relatively, so it loads as a package under a name of its own), e.g.:

    git archive 7b95d5e kernels | tar -x -C /some/dir
    python benchmarks/host_ab.py --old /some/dir/kernels --json host_ab.json

Each round: 1000 back-to-back eager calls of ``dispatch.paged_attention_v2(*vLLM's 17
positional arguments)`` after 50 warm-up calls, wall time to the last enqueue / 1000.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import statistics
import sys
from pathlib import Path
from types import ModuleType

from bench_common import host_us, make, positional

from vllm_codemod.kernels import dispatch as new_dispatch


def load_kernels(directory: Path, name: str = "_host_ab_old_kernels") -> ModuleType:
    """The kernel package in ``directory``, imported by path under ``name``; returns
    its ``dispatch`` module."""
    init = directory / "__init__.py"
    if not init.is_file():
        raise SystemExit(f"host_ab: {directory}: no __init__.py; pass a kernels directory")
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[str(directory)]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    return importlib.import_module(f"{name}.dispatch")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--old", required=True, type=Path, help="directory of the old kernels (a kernels/ copy)"
    )
    ap.add_argument("--lens", default="1024,2048,4096,100000")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--json", default=None)
    opts = ap.parse_args()
    old_dispatch = load_kernels(opts.old.resolve())
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

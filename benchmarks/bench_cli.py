"""Wall time of `vllm-codemod check` / `apply` / no-op `apply` on fixture trees.

Method: each command runs as a fresh process (what a Dockerfile step pays), on a
scratch copy of the fixture; one warm-up run (page cache, bytecode), then N timed
runs; we report the median and the spread.  ``--cpu`` reports the child's CPU time
(user + sys, from ``os.wait4``) instead of wall time: on a shared machine it moves
far less with the load than wall time does.  Usage:

    python benchmarks/bench_cli.py [--runs 10] [--cpu] [fixture ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT = ["bi-v100/corex-0.4.3", "bi-v100/corex-0.8.3", "bi-v100/corex-0.11.0"]


CPU = False


def run_once(args, check: bool = False) -> float:
    """Seconds one run of ``args`` took: wall time, or with ``--cpu`` its user + sys."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    elapsed = time.perf_counter() - start
    if check and proc.returncode != 0:
        raise SystemExit(f"{args}: exit status {proc.returncode}")
    return usage.ru_utime + usage.ru_stime if CPU else elapsed


def timed(args, runs: int) -> list:
    run_once(args)  # warm-up
    return [run_once(args) for _ in range(runs)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--cpu", action="store_true", help="CPU time (user+sys), not wall")
    parser.add_argument("fixtures", nargs="*", default=DEFAULT)
    ns = parser.parse_args()
    global CPU
    CPU = ns.cpu
    # The verdict cache (engine/verdict_cache.py) lives outside the tree: a fresh one per
    # run of this script, so the first check after apply fills it as in a Dockerfile.
    cache = tempfile.mkdtemp(prefix="bench-cli-cache-")
    os.environ["VLLM_CODEMOD_CACHE_DIR"] = cache
    # An installed tool has its bytecode (pip compiles it at install); a shell that sets
    # PYTHONDONTWRITEBYTECODE would make every timed run compile our sources again
    # (~0.04 s here), a cost no user pays.  The warm-up run writes the bytecode.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    cli = [sys.executable, "-m", "vllm_codemod.cli"]
    unit = "cpu s" if CPU else "s"
    print(f"{'fixture':<24} {'command':<16} {'median ' + unit:>12} {'min':>7} {'max':>7}")
    for name in ns.fixtures:
        with tempfile.TemporaryDirectory() as tmp:
            site = Path(tmp) / "site"
            shutil.copytree(REPO / "vendor_fixtures" / name, site)
            sp = ["--site-packages", str(site)]
            rows = [("check pristine", timed([*cli, "check", *sp], ns.runs))]
            # apply changes the tree, so each timed run gets a fresh copy.
            samples = []
            for _ in range(ns.runs + 1):
                shutil.rmtree(site)
                shutil.copytree(REPO / "vendor_fixtures" / name, site)
                samples.append(run_once([*cli, "apply", *sp], check=True))
            rows.append(("apply", samples[1:]))
            rows.append(("check patched", timed([*cli, "check", *sp], ns.runs)))
            rows.append(("apply no-op", timed([*cli, "apply", *sp], ns.runs)))
            for label, s in rows:
                median = statistics.median(s)
                print(f"{name:<24} {label:<16} {median:12.3f} {min(s):7.3f} {max(s):7.3f}")
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Wall time of `vllm-codemod check` / `apply` / no-op `apply` on fixture trees.

Method: each command runs as a fresh process (what a Dockerfile step pays), on a
scratch copy of the fixture; one warm-up run (page cache, bytecode), then N timed
runs; we report the median and the spread.  Usage:

    python benchmarks/bench_cli.py [--runs 10] [fixture ...]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT = ["bi-v100/corex-0.4.3", "bi-v100/corex-0.8.3", "bi-v100/corex-0.11.0"]


def timed(args, runs: int) -> list:
    subprocess.run(args, capture_output=True)  # warm-up
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(args, capture_output=True)
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("fixtures", nargs="*", default=DEFAULT)
    ns = parser.parse_args()
    cli = [sys.executable, "-m", "vllm_codemod.cli"]
    print(f"{'fixture':<24} {'command':<16} {'median s':>9} {'min s':>7} {'max s':>7}")
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
                start = time.perf_counter()
                subprocess.run([*cli, "apply", *sp], capture_output=True, check=True)
                samples.append(time.perf_counter() - start)
            rows.append(("apply", samples[1:]))
            rows.append(("check patched", timed([*cli, "check", *sp], ns.runs)))
            rows.append(("apply no-op", timed([*cli, "apply", *sp], ns.runs)))
            for label, s in rows:
                median = statistics.median(s)
                print(f"{name:<24} {label:<16} {median:9.3f} {min(s):7.3f} {max(s):7.3f}")


if __name__ == "__main__":
    main()

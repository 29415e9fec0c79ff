"""Run vLLM's own ``tests/kernels/attention/test_prefix_prefill.py`` against a patched tree.

vLLM wheels ship no tests, and the file is not vendored here (it is vLLM's code, and
``vendor_fixtures`` holds only the files the codemod patches): pass it with
``--test-file`` (the 0.8.5 file is ``tests/kernels/attention/test_prefix_prefill.py`` at
the ``v0.8.5`` tag of github.com/vllm-project/vllm), or ``--fetch`` to download that file
where the machine can reach GitHub.  The 0.8.5 file needs a full vLLM install (it imports
``vllm.attention.backends.xformers``, ``vllm.utils``, ``vllm.platforms``) and xformers
(its reference).

Steps: ``vllm-codemod apply`` on ``--site-packages`` (the directory holding ``vllm/``;
use a scratch copy or a throwaway venv: the tree is patched in place), ``vllm-codemod
check``, then pytest on the test file in a scratch directory with ``--site-packages``
first on ``PYTHONPATH`` and ``VLLM_CODEMOD_PREFILL_BACKEND`` set (default ``triton``:
the bundled kernel or an error, never a silent fall back to the tree's kernel; calls
the kernel declines, e.g. ``sinks``, still go to the tree's).  ``--no-apply`` runs the
file against the tree as it is (the baseline).  Anything after ``--`` goes to pytest.

    python3 scripts/run_vllm_prefix_prefill_tests.py \\
        --site-packages /opt/venv/lib/python3.12/site-packages \\
        --test-file /tmp/test_prefix_prefill.py [-- -x -k alibi]

Exit status: pytest's (0: every test passed), or 2 when a step before it failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import List, Optional

TEST_PATH = "tests/kernels/attention/test_prefix_prefill.py"
FETCH_URL = f"https://raw.githubusercontent.com/vllm-project/vllm/v0.8.5/{TEST_PATH}"
BACKEND_ENV = "VLLM_CODEMOD_PREFILL_BACKEND"


def _step(argv: List[str], env: Optional[dict] = None) -> int:
    print("+", " ".join(argv), flush=True)
    return subprocess.call(argv, env=env)


def fetch(dest: Path) -> Path:
    """The 0.8.5 test file from GitHub (needs network)."""
    with urllib.request.urlopen(FETCH_URL, timeout=60) as response:  # noqa: S310 (fixed URL)
        dest.write_bytes(response.read())
    return dest


def probe(python: str, site: Path, env: dict) -> int:
    """Which vllm and xformers the test will import (a stale install shadowing the tree
    would test the wrong code)."""
    code = (
        "import sys, vllm; print('vllm', vllm.__version__, vllm.__file__)\n"
        f"assert vllm.__file__.startswith({str(site.resolve())!r}), 'vllm is not the tree given'\n"
        "import xformers; print('xformers', xformers.__version__)\n"
    )
    return _step([python, "-c", code], env)


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: List[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site-packages", required=True, type=Path, help="directory holding vllm/")
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--test-file", type=Path, help="vLLM's test_prefix_prefill.py")
    source.add_argument("--fetch", action="store_true", help=f"download {FETCH_URL}")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that has torch")
    ap.add_argument("--backend", default="triton", choices=["auto", "triton", "torch", "tree"])
    ap.add_argument("--no-apply", action="store_true", help="test the tree as it is")
    ns = ap.parse_args(argv)
    site = ns.site_packages
    if not (site / "vllm").is_dir():
        print(f"{site}: no vllm/ here; pass the site-packages directory", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="vllm-prefix-prefill-tests-"))
    target = work / TEST_PATH
    target.parent.mkdir(parents=True)
    try:
        if ns.fetch:
            fetch(target)
        else:
            shutil.copyfile(ns.test_file, target)
    except OSError as exc:
        print(f"cannot get the test file: {exc}", file=sys.stderr)
        return 2
    tool = [ns.python, "-m", "vllm_codemod"]
    if not ns.no_apply:
        if _step(tool + ["apply", "--site-packages", str(site)]) != 0:
            return 2
        if _step(tool + ["check", "--site-packages", str(site)]) != 0:
            return 2
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    env[BACKEND_ENV] = ns.backend
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    if probe(ns.python, site, env) != 0:
        return 2
    cmd = [ns.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(target)]
    print("+", " ".join(cmd), f"(cwd {work}, {BACKEND_ENV}={ns.backend})", flush=True)
    return subprocess.call(cmd + extra, cwd=str(work), env=env)


if __name__ == "__main__":
    sys.exit(main())

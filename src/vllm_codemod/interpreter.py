"""Find the vllm tree another Python interpreter would import (``--python PATH``).

The common case is a tool installed in one environment patching another (a pipx
install, or the build venv beside the serving venv).  We ask that interpreter where
it looks for packages, and look there ourselves: the probe imports nothing but the
standard library, so neither vllm nor anything it drags in (CUDA, drivers) runs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import List, Optional

from .discovery import VllmTree
from .errors import CodemodError

#: Runs under the target interpreter with -I (no PYTHONPATH, no user env leaking in
#: from ours); written for any Python 3 and imports only ``site``, ``sys``, ``json``.
PROBE = (
    "import json, site, sys\n"
    "dirs = list(sys.path)\n"
    "dirs += list(getattr(site, 'getsitepackages', lambda: [])())\n"
    "user = getattr(site, 'getusersitepackages', None)\n"
    "dirs += [user()] if user else []\n"
    "print(json.dumps({'executable': sys.executable, 'dirs': dirs}))\n"
)

PROBE_TIMEOUT_S = 60


def search_path_of(python: Path) -> List[Path]:
    """The directories ``python`` imports from, in its own order (duplicates dropped)."""
    try:
        proc = subprocess.run(
            [str(python), "-I", "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except FileNotFoundError:
        raise CodemodError(
            f"--python {python}: no such interpreter; pass the path of the python that "
            "serves vLLM (e.g. /opt/venv/bin/python)"
        ) from None
    except PermissionError:
        raise CodemodError(
            f"--python {python}: not executable; pass the path of a python interpreter"
        ) from None
    except OSError as exc:
        raise CodemodError(
            f"--python {python}: cannot run it ({exc.strerror}); pass a python interpreter"
        ) from None
    except subprocess.TimeoutExpired:
        raise CodemodError(
            f"--python {python}: did not answer within {PROBE_TIMEOUT_S} s; "
            "pass --site-packages DIR instead"
        ) from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise CodemodError(
            f"--python {python}: exited {proc.returncode} when asked for its import path "
            f"({last}); is it a Python 3 interpreter?"
        )
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        raw = [str(d) for d in answer["dirs"]]
    except (ValueError, IndexError, KeyError, TypeError):
        raise CodemodError(
            f"--python {python}: unexpected answer to the import-path probe; "
            "pass --site-packages DIR instead"
        ) from None
    seen = set()
    dirs: List[Path] = []
    for entry in raw:
        if not entry:
            continue  # '' (the current directory) does not apply to a build step
        path = Path(entry)
        if path in seen:
            continue
        seen.add(path)
        dirs.append(path)
    return dirs


def locate_for_interpreter(python: Path) -> VllmTree:
    """The vllm that ``python`` would import: the first ``vllm/`` package on its path.

    The working directory is left out (the probe runs with ``-I``): a build step's
    cwd says nothing about what the serving process imports.
    """
    dirs = search_path_of(python)
    chosen: Optional[Path] = next((d for d in dirs if (d / "vllm" / "__init__.py").is_file()), None)
    if chosen is None:
        searched = ", ".join(str(d) for d in dirs) or "nothing"
        raise CodemodError(
            f"--python {python}: vllm is not installed for that interpreter (searched "
            f"{searched}); pass --site-packages DIR to name the tree"
        )
    root = (chosen / "vllm").resolve()
    return VllmTree(base=root.parent, root=root)

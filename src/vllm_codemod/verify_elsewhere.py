"""Run the tree's kernel self-check under another interpreter (``verify --python``).

``--python`` names the interpreter that serves vLLM; its torch and Triton are the ones
the kernels will meet in production, so that is where they must be checked.  The
child imports only the tree's ``_codemod_kernels`` package (by path, under a private
name, exactly as :func:`vllm_codemod.commands.verify.load_tree_kernels` does here);
vllm_codemod need not be installed there.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from .errors import CodemodError

PROGRESS_PREFIX = "@@vllm-codemod-progress "

#: Runs in the target interpreter: argv = package dir, device, quick (0/1), seed.
CHILD = """\
import importlib, importlib.util, inspect, json, sys
sys.dont_write_bytecode = True
package, device, quick, seed = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
try:
    import torch
except ImportError as exc:
    print(json.dumps({"failure": "no-torch", "detail": str(exc)}))
    sys.exit(0)
if device == "cuda" and not torch.cuda.is_available():
    print(json.dumps({"failure": "no-cuda", "detail": torch.__version__}))
    sys.exit(0)
name = "_vllm_codemod_verify_kernels"
spec = importlib.util.spec_from_file_location(
    name, package + "/__init__.py", submodule_search_locations=[package]
)
module = importlib.util.module_from_spec(spec)
sys.modules[name] = module
spec.loader.exec_module(module)
selfcheck = importlib.import_module(name + ".selfcheck")
kwargs = dict(device=None if device == "auto" else device, quick=quick, seed=seed)
if "progress" in inspect.signature(selfcheck.run_selfcheck).parameters:
    def progress(done, total):
        sys.stderr.write("@@vllm-codemod-progress %d %d\\n" % (done, total))
        sys.stderr.flush()
    kwargs["progress"] = progress
print(json.dumps({"results": selfcheck.run_selfcheck(**kwargs)}))
"""


def run_selfcheck_in(
    python: Path,
    package: Path,
    device: str,
    quick: bool,
    seed: int,
    progress: Optional[Callable[[int, int], None]] = None,
) -> List[Dict[str, Any]]:
    """The self-check results as the child computed them; errors are the user's to fix."""
    try:
        proc = subprocess.Popen(
            [
                str(python),
                "-I",
                "-c",
                CHILD,
                str(package),
                device,
                "1" if quick else "0",
                str(seed),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError as exc:
        raise CodemodError(
            f"--python {python}: cannot run it ({exc.strerror}); pass a python interpreter"
        ) from None
    assert proc.stdout is not None and proc.stderr is not None
    other: List[str] = []
    try:
        for line in proc.stderr:
            if line.startswith(PROGRESS_PREFIX) and progress is not None:
                done, total = line[len(PROGRESS_PREFIX) :].split()
                progress(int(done), int(total))
            elif not line.startswith(PROGRESS_PREFIX):
                other.append(line.rstrip("\n"))
        out = proc.stdout.read()
        proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    answer = _last_json(out)
    if proc.returncode != 0 or answer is None:
        last = next((line for line in reversed(other) if line.strip()), "no message")
        raise CodemodError(
            f"--python {python}: the kernel self-check exited {proc.returncode} ({last}); "
            "run it there by hand to see the traceback"
        )
    failure = answer.get("failure")
    if failure == "no-torch":
        raise CodemodError(
            f"--python {python}: verify needs torch in that interpreter "
            f"({answer.get('detail')}); install torch there or pass the serving python"
        )
    if failure == "no-cuda":
        raise CodemodError(
            f"--device cuda: torch {answer.get('detail')} in {python} sees no CUDA device; "
            "run verify on the GPU machine, or pass --device cpu (or auto)"
        )
    return list(answer["results"])


def _last_json(text: str) -> Optional[Dict[str, Any]]:
    for line in reversed(text.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None

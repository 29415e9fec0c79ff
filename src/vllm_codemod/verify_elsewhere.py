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
import threading
from collections import deque
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Optional

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
    """The self-check results as the child computed them; errors are the user's to fix.

    Both pipes are drained at once (stdout by a thread, stderr line by line here, so the
    progress bar stays live): a child that fills one pipe while we wait on the other
    would otherwise block forever.
    """
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
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise CodemodError(
            f"--python {python}: cannot run it ({exc.strerror}); pass a python interpreter"
        ) from None
    assert proc.stdout is not None and proc.stderr is not None
    stdout = proc.stdout
    out_chunks: List[str] = []
    reader = threading.Thread(target=lambda: out_chunks.append(stdout.read()), daemon=True)
    other: Deque[str] = deque(maxlen=STDERR_TAIL_LINES)
    try:
        reader.start()
        for line in proc.stderr:
            if line.startswith(PROGRESS_PREFIX):
                if progress is not None:
                    _progress(progress, line[len(PROGRESS_PREFIX) :])
            elif line.strip():
                other.append(line.rstrip("\n"))
        reader.join()
        proc.wait()
        stdout.close()
    except BaseException:
        proc.kill()
        proc.wait()
        reader.join(timeout=5)
        raise
    finally:
        proc.stderr.close()
    out = "".join(out_chunks)
    answer = _last_json(out)
    if proc.returncode != 0:
        last = other[-1][:200] if other else "no message"
        raise CodemodError(
            f"--python {python}: the kernel self-check exited {proc.returncode} ({last}); "
            "run it there by hand to see the traceback"
        )
    if answer is None:
        raise _malformed(python, "no JSON object on its standard output", out)
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
    if failure is not None:
        raise _malformed(python, f"unknown failure {str(failure)[:80]!r}", None)
    return _results(python, answer)


#: stderr lines kept to quote the last one in an error (the rest is noise to us)
STDERR_TAIL_LINES = 50

#: what the CLI reads from each result, and the JSON types it must have
RESULT_KEYS = {
    "shape": (str,),
    "path": (str,),
    "max_abs_err": (int, float),
    "rel_err": (int, float),
    "ok": (bool,),
    "seconds": (int, float),
}

#: what a result may also carry: why it failed, or why it checked nothing (skipped)
OPTIONAL_TEXT_KEYS = ("error", "skipped")


def _progress(progress: Callable[[int, int], None], text: str) -> None:
    try:
        done, total = (int(part) for part in text.split())
    except ValueError:
        return  # a garbled progress line is not worth failing the check for
    progress(done, total)


def _malformed(python: Path, what: str, out: Optional[str]) -> CodemodError:
    """The child answered, but not with a self-check result: its environment is odd."""
    tail = ""
    if out is not None:
        last = next((line for line in reversed(out.splitlines()) if line.strip()), "")
        tail = f" (last line: {last[:80]!r})" if last else " (it printed nothing)"
    return CodemodError(
        f"--python {python}: malformed answer from the kernel self-check: {what}{tail}; "
        "is it the python that serves vLLM? run the self-check there by hand"
    )


def _results(python: Path, answer: Dict[str, Any]) -> List[Dict[str, Any]]:
    if "results" not in answer:
        raise _malformed(python, "the JSON answer has no 'results'", None)
    results = answer["results"]
    if not isinstance(results, list) or not results:
        raise _malformed(python, "'results' is not a non-empty list", None)
    for index, entry in enumerate(results):
        if not isinstance(entry, dict):
            raise _malformed(python, f"result {index} is not an object", None)
        for key, types in RESULT_KEYS.items():
            value = entry.get(key)
            if key not in entry:
                raise _malformed(python, f"result {index} has no {key!r}", None)
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise _malformed(python, f"result {index} has a bad {key!r}: {value!r:.40}", None)
        for key in OPTIONAL_TEXT_KEYS:
            if key in entry and not isinstance(entry[key], str):
                raise _malformed(
                    python, f"result {index} has a bad {key!r}: {entry[key]!r:.40}", None
                )
    return list(results)


def _last_json(text: str) -> Optional[Dict[str, Any]]:
    for line in reversed(text.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None

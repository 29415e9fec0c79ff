"""``vllm-codemod verify``: prove on this box that the patched tree computes attention right.

It runs the kernel package *as installed in the tree* (``vllm/_codemod_kernels``), not
the tool's own copy, so a broken copy or a Triton that miscompiles on the vendor's
GPU is caught at image build time rather than by users.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import click

from ..errors import CodemodError
from ..report import Report
from ..transforms import bundle_directories
from ._common import _from_environment, open_tree, tree_options
from ._output import current_output, reporting

PRIVATE_NAME = "_vllm_codemod_verify_kernels"
#: the kernel package the transforms ship into the tree (every bundle is that one today)
KERNEL_DIR = bundle_directories()[0]


def load_tree_kernels(root: Path) -> Any:
    """Import the tree's kernel package under a private name, without importing vllm."""
    package = root / KERNEL_DIR
    init = package / "__init__.py"
    if not init.is_file():
        raise CodemodError(
            f"{package}: no bundled kernels in this tree; run `vllm-codemod apply` first"
        )
    try:
        import torch  # noqa: F401
    except ImportError:
        raise CodemodError(
            f"verify needs torch in this interpreter ({sys.executable}); run it with the "
            "python that serves vLLM"
        ) from None
    from ..tuning.tree_imports import load_file

    load_file(PRIVATE_NAME, init, package=True)
    return importlib.import_module(f"{PRIVATE_NAME}.selfcheck")


def require_device(device: str) -> None:
    """``--device cuda`` on a machine where torch sees no GPU is the user's to fix (exit 2)."""
    if device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise CodemodError(
            f"--device cuda: torch {torch.__version__} in {sys.executable} sees no CUDA "
            "device; run verify on the GPU machine, or pass --device cpu (or auto)"
        )


class ProgressLine:
    """``verify: 2/4 shapes`` redrawn in place on stderr; only used on a terminal."""

    def __init__(self) -> None:
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        width = 20
        filled = width * done // max(total, 1)
        bar = "#" * filled + "-" * (width - filled)
        click.echo(f"\rverify: [{bar}] {done}/{total} shapes", nl=False, err=True)
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            click.echo("\r\033[K", nl=False, err=True)


def _run_selfcheck(
    selfcheck: Any, progress: Optional[Callable[[int, int], None]], **kw: Any
) -> Any:
    # A tree patched by an older vllm-codemod carries an older selfcheck without the hook.
    if progress is not None and "progress" in inspect.signature(selfcheck.run_selfcheck).parameters:
        kw["progress"] = progress
    return selfcheck.run_selfcheck(**kw)


def _selfcheck_here(
    root: Path, device: str, quick: bool, seed: int, progress: Optional[ProgressLine]
) -> Any:
    previous = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # leave no bytecode behind in the user's tree
    try:
        selfcheck = load_tree_kernels(root)
        require_device(device)
        return _run_selfcheck(
            selfcheck, progress, device=None if device == "auto" else device, quick=quick, seed=seed
        )
    finally:
        sys.dont_write_bytecode = previous


def _selfcheck_under(
    python: Path, root: Path, device: str, quick: bool, seed: int, progress: Optional[ProgressLine]
) -> Any:
    """--python: the serving interpreter's torch and Triton are the ones to check."""
    from ..verify_elsewhere import run_selfcheck_in

    package = root / KERNEL_DIR
    if not (package / "__init__.py").is_file():
        raise CodemodError(
            f"{package}: no bundled kernels in this tree; run `vllm-codemod apply` first"
        )
    return run_selfcheck_in(python, package, device, quick, seed, progress)


def _tree_to_verify(site_packages: Any, vllm_root: Any, python: Any) -> Any:
    """For verify, --python also names the interpreter that runs the check: beside
    --site-packages or --vllm-root it only does that (the other option names the tree)."""
    named = vllm_root is not None or (
        site_packages is not None and not _from_environment("site_packages")
    )
    if python is not None and named:
        return open_tree(site_packages, vllm_root)
    return open_tree(site_packages, vllm_root, python)


@click.command(
    epilog="""\b
Exit status: 0 every shape within tolerance (a case this box's setup sends to the
tree's own kernel, e.g. an fp8 cache under Triton 2.x, is listed as skipped), 2 a shape
out of tolerance or failing
(the kernels in the tree are wrong on this machine: do not ship it), no torch, no
GPU for --device cuda, or no kernels in the tree.
Examples:
  vllm-codemod verify                       # the current interpreter's vllm, best device
  vllm-codemod verify --device cpu --json
  vllm-codemod verify --python /opt/venv/bin/python   # with that interpreter's torch
  vllm-codemod verify --site-packages DIR --python /opt/venv/bin/python   # DIR's kernels there
"""
)
@tree_options
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="Where to run; auto picks a GPU when torch sees one.",
)
@click.option("--full", is_flag=True, help="Longer sequences and more shapes (slower).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@reporting("verify")
def verify(
    site_packages: Any, vllm_root: Any, python: Any, device: str, full: bool, seed: int
) -> Report:
    """Run the kernels installed in the patched tree against a float64 reference.

    With --python the check runs under that interpreter; the tree is the one
    --site-packages or --vllm-root names, else the vllm that interpreter imports.
    """
    tree = _tree_to_verify(site_packages, vllm_root, python)
    progress = ProgressLine() if current_output().interactive else None
    try:
        if python is not None:
            results = _selfcheck_under(python, tree.root, device, not full, seed, progress)
        else:
            results = _selfcheck_here(tree.root, device, not full, seed, progress)
    finally:
        if progress is not None:
            progress.close()
    skipped = [r for r in results if "skipped" in r]
    results = [r for r in results if "skipped" not in r]
    failed = [r for r in results if not r["ok"]]
    report = Report("verify")
    report.exit_code = 2 if failed else 0
    report.data.update(
        {
            "vllm_root": str(tree.root),
            "device": device,
            "results": results,
            "skipped": [
                {"shape": r["shape"], "path": r["path"], "reason": r["skipped"]} for r in skipped
            ],
            "ok": not failed,
        }
    )
    report.say(f"kernels in {tree.root / KERNEL_DIR}")
    for r in results:
        verdict = click.style("ok  ", fg="green") if r["ok"] else click.style("FAIL", fg="red")
        report.say(
            f"  {verdict} {r['shape']:<48} path={r['path']:<6} "
            f"max_abs={r['max_abs_err']:.2e} rel={r['rel_err']:.2e} "
            f"{r['seconds'] * 1e3:8.1f} ms"
        )
        if "error" in r:
            report.detail(f"       {r['error']}")
    for r in skipped:
        report.say(f"  {click.style('skip', fg='yellow')} {r['shape']:<48} {r['skipped']}")
    if skipped:
        report.say(
            f"{len(skipped)} case(s) skipped: this box sends them to the tree's own kernel, "
            "which verify does not check"
        )
    if failed:
        report.error(
            f"vllm-codemod: error: {len(failed)} shape(s) out of tolerance or failing "
            f"({', '.join(str(r['shape']) for r in failed)}); the kernels in the tree are "
            "wrong on this machine: do not ship it (run with -v for the errors)"
        )
    return report

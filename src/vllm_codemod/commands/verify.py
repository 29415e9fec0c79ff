"""``vllm-codemod verify``: prove on this box that the patched tree computes attention right.

It runs the kernel package *as installed in the tree* (``vllm/_codemod_kernels``), not
the tool's own copy, so a broken copy or a Triton that miscompiles on the vendor's
GPU is caught at image build time rather than by users.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import CodemodError
from ..transforms.paged_attention_v2 import KERNEL_DIR
from ._common import emit_json, json_option, open_tree, tree_options, user_errors

PRIVATE_NAME = "_vllm_codemod_verify_kernels"


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
    for name in [n for n in sys.modules if n == PRIVATE_NAME or n.startswith(PRIVATE_NAME + ".")]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        PRIVATE_NAME, init, submodule_search_locations=[str(package)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[PRIVATE_NAME] = module
    spec.loader.exec_module(module)
    return importlib.import_module(f"{PRIVATE_NAME}.selfcheck")


@click.command(
    epilog="""\b
Exit status: 0 every shape within tolerance, 1 a mismatch, 2 error.
Examples:
  vllm-codemod verify                       # the current interpreter's vllm, best device
  vllm-codemod verify --device cpu --json
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
@click.option("--seed", type=int, default=0, show_default=True)
@json_option
@user_errors
def verify(
    site_packages: Any, vllm_root: Any, device: str, full: bool, seed: int, as_json: bool
) -> None:
    """Run the kernels installed in the patched tree against a float64 reference."""
    tree = open_tree(site_packages, vllm_root)
    previous = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # leave no bytecode behind in the user's tree
    try:
        selfcheck = load_tree_kernels(tree.root)
        results = selfcheck.run_selfcheck(
            device=None if device == "auto" else device, quick=not full, seed=seed
        )
    finally:
        sys.dont_write_bytecode = previous
    failed = [r for r in results if not r["ok"]]
    if as_json:
        emit_json({"vllm_root": str(tree.root), "results": results, "ok": not failed})
    else:
        click.echo(f"kernels in {tree.root / KERNEL_DIR}")
        for r in results:
            verdict = click.style("ok  ", fg="green") if r["ok"] else click.style("FAIL", fg="red")
            click.echo(
                f"  {verdict} {r['shape']:<48} path={r['path']:<6} "
                f"max_abs={r['max_abs_err']:.2e} rel={r['rel_err']:.2e} "
                f"{r['seconds'] * 1e3:8.1f} ms"
            )
    if failed:
        if not as_json:
            click.echo(f"vllm-codemod: {len(failed)} shape(s) out of tolerance", err=True)
        sys.exit(1)

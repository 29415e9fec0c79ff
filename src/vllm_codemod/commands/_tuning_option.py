"""``--tuning FILE`` / ``--no-tuning`` for the commands that plan (apply, diff)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Optional

import click


def tuning_options(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option(
        "--no-tuning",
        "drop_tuning",
        is_flag=True,
        help="Remove the tuning table an earlier `apply --tuning` installed.",
    )(func)
    func = click.option(
        "--tuning",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        metavar="FILE",
        help="A tuning file from `vllm-codemod tune`: ship it beside the bundled kernels "
        "(vllm/_codemod_kernels/tuning.json) and take its prefix-prefill warps (unless "
        "--num-warps is given). Remembered by later runs.",
    )(func)
    return func


def with_tuning(options: Any, tuning: Optional[Path], drop_tuning: bool) -> Any:
    """The engine's PlanOptions with the tuning choice added."""
    return dataclasses.replace(options, tuning=tuning, drop_tuning=drop_tuning)

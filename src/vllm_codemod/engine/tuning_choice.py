"""``apply --tuning FILE`` / ``--no-tuning``: which tuning table a plan ships.

The table goes into the bundle of every selected transform that has a place for it
(:attr:`Bundle.tuning_file`), and its prefix-prefill warps set the option a transform
names in :attr:`Transform.tuning_warps_option` (unless that option is given).  Which
transforms those are is theirs to declare; this module only asks.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import List, Optional, Sequence

from ..errors import UserError
from ..transforms.base import Status, Transform
from ..tuning import bake
from ..tuning.bake import BakedTuning
from .changes import ChangeSet
from .options import OptionChange, PlanOptions
from .records import RecordedOptions


def choose_table(
    vllm_root: Path,
    options: PlanOptions,
    recorded: RecordedOptions,
    chosen: Sequence[Transform],
    registry: Sequence[Transform],
) -> Optional[BakedTuning]:
    """The tuning table this plan ships, validated (see tuning/bake.py)."""
    baked = bake.choose(vllm_root, options.tuning, options.drop_tuning, recorded.tuning)
    usable = any(t.carries_tuning_table for t in chosen) or (
        baked is not None
        and baked.num_warps is not None
        and any(t.tuning_warps_option for t in chosen)
    )
    if options.tuning is not None and not usable:
        carriers = ", ".join(t.name for t in registry if t.carries_tuning_table)
        takers = ", ".join(t.name for t in registry if t.tuning_warps_option)
        raise UserError(
            f"--tuning: nothing selected can use the table ({carriers} ships it with "
            f"the kernels, {takers} takes its warps); drop them from --skip / add "
            "them to --only"
        )
    return baked


def with_table_warps(
    options: PlanOptions, baked: Optional[BakedTuning], registry: Sequence[Transform]
) -> PlanOptions:
    """``options`` with the table's prefix-prefill warps, where not given explicitly."""
    if baked is None or options.tuning is None or baked.num_warps is None:
        return options
    values = dict(options.values)
    for transform in registry:
        name = transform.tuning_warps_option
        if name is not None and values.get(name) is None:  # an explicit value wins
            values[name] = baked.num_warps
    return replace(options, values=values)


def ships_table(change_set: ChangeSet) -> bool:
    """Whether a transform that carries the tuning table applies to this tree."""
    return any(
        r.transform.carries_tuning_table and r.status in (Status.PENDING, Status.APPLIED)
        for r in change_set.results
    )


def table_change(recorded: RecordedOptions, baked: Optional[BakedTuning]) -> List[OptionChange]:
    """``--tuning`` as an option change, like "--num-warps 4 -> 2" (a first apply: none)."""
    if not recorded.has_tuning:
        return []
    old = recorded.tuning_sha256
    new = baked.sha256 if baked is not None else None
    if old == new:
        return []
    describe_old = f"{recorded.tuning_source} ({old[:12]})" if old else "none"
    describe_new = f"{baked.source} ({new[:12]})" if baked is not None and new else "none"
    return [OptionChange("tuning", "--tuning", describe_old, describe_new)]

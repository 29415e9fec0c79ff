"""What the user asked for, resolved against what the tree was patched with.

An option not given keeps the value the last apply recorded (so a plain ``apply`` after
``apply --num-warps 2`` does not quietly go back to the default), else its default; a
value given that differs from the recorded one is an :class:`OptionChange`, which
``check`` and ``apply`` report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import UserError
from ..transforms.base import Transform
from .records import RecordedOptions


@dataclass
class PlanOptions:
    """What the user asked for.  ``None`` / empty means "not given": the recorded value
    (from the last apply) is used, else the default."""

    only: Tuple[str, ...] = ()
    skip: Tuple[str, ...] = ()
    #: per-transform option values by option name (``num_warps``, ``v2_threshold``)
    values: Dict[str, Any] = field(default_factory=dict)
    #: plan a tree whose vLLM version is unknown or outside the known range
    accept_unknown_version: bool = False
    #: the command the user ran (``apply``, ``check``...): messages name its way on
    command: str = "apply"
    #: ``apply --tuning FILE``: a tuning table to ship (None: keep the recorded one)
    tuning: Optional[Path] = None
    #: ``--no-tuning``: drop the recorded tuning table
    drop_tuning: bool = False
    #: ``apply --discard-local-changes``: plan hand-edited patched files from their
    #: saved originals, so our output replaces the edit
    discard_local_changes: bool = False
    #: ``--allow-owner-change``: replace files whose owner the OS will not let us keep
    allow_owner_change: bool = False


@dataclass
class OptionChange:
    """An option given with a value other than the one the tree was patched with."""

    name: str
    flag: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.flag} {self.old} -> {self.new}"

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "flag": self.flag, "old": self.old, "new": self.new}


def resolve_selection(
    options: PlanOptions, recorded: RecordedOptions, registry: Sequence[Transform]
) -> Tuple[List[Transform], Tuple[str, ...], Tuple[str, ...]]:
    """The transforms this run plans, and the ``--only`` / ``--skip`` it records."""
    transforms = list(registry)
    known = {t.name for t in transforms}
    for name in (*options.only, *options.skip):
        if name not in known:
            raise UserError(
                f"unknown transform {name!r}; known: {', '.join(sorted(known))} "
                "(see `vllm-codemod list`)"
            )
    if options.only or options.skip:
        only, skip = tuple(options.only), tuple(options.skip)
    else:
        only = tuple(n for n in recorded.only or () if n in known)
        skip = tuple(n for n in recorded.skip or () if n in known)
    chosen = [t for t in transforms if (not only or t.name in only) and t.name not in skip]
    if not chosen:
        raise UserError("--only/--skip left no transform to run; check the names")
    return chosen, only, skip


def resolve_values(
    options: PlanOptions, recorded: RecordedOptions, registry: Sequence[Transform]
) -> Tuple[Dict[str, Any], List[OptionChange]]:
    """Every transform option's value for this run, and those that change."""
    values: Dict[str, Any] = {}
    changes: List[OptionChange] = []
    for transform in registry:
        for opt in transform.options:
            given = options.values.get(opt.name)
            if given is not None:
                if opt.choices:
                    given = opt.type(given)
                if opt.minimum is not None and given < opt.minimum:
                    raise UserError(f"{opt.flag} {given}: must be at least {opt.minimum}")
            previous = recorded.values.get(opt.name)
            if given is not None:
                values[opt.name] = given
                if previous is not None and previous != given:
                    changes.append(OptionChange(opt.name, opt.flag, previous, given))
            elif previous is not None:
                values[opt.name] = previous
            else:
                values[opt.name] = opt.default
    return values, changes

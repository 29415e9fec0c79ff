"""``status`` / ``check``: where a tree stands, read from the plan and the manifest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from ..discovery import VllmTree
from ..transforms.base import Transform
from .drift import Drift, manifest_drift
from .options import PlanOptions
from .planning import Plan, plan


@dataclass
class TreeStatus:
    """Where a tree stands: the plan with the recorded options, plus what we know of it."""

    plan: Plan
    patched: bool
    tool_version: Optional[str]
    patched_at: Optional[str]
    recorded_options: Dict[str, Any]
    record: Optional[str]
    #: files whose bytes are no longer the ones the manifest says we left there
    drift: List[Drift]

    def to_dict(self) -> Dict[str, Any]:
        data = self.plan.to_dict()
        data.update(
            {
                "patched": self.patched,
                "tool_version": self.tool_version,
                "patched_at": self.patched_at,
                "recorded_options": dict(self.recorded_options),
                "record": self.record,
                "pending": self.plan.pending,
            }
        )
        return data


def status(
    tree: VllmTree,
    options: Optional[PlanOptions] = None,
    registry: Optional[Sequence[Transform]] = None,
) -> TreeStatus:
    the_plan = plan(tree, options, registry)
    manifest = the_plan.manifest_before
    patched = manifest.patched
    return TreeStatus(
        plan=the_plan,
        patched=patched,
        tool_version=manifest.tool_version if patched else None,
        patched_at=manifest.patched_at if patched else None,
        recorded_options=manifest.options.to_json(),
        record=the_plan.record,
        drift=manifest_drift(tree, manifest),
    )

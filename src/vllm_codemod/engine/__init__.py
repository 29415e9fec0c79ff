"""The engine: plan, apply, revert and inspect a vllm tree; the one owner of its state.

Commands parse options, call these functions and render the plain-data results; every
guarantee (nothing outside the tree, nothing we did not write, atomic and recoverable,
owners and modes kept, options remembered) lives in this package, one job per module
(docs/architecture.md draws how the data flows between them):

- :mod:`.options`: what the user asked for, resolved against the recorded options;
- :mod:`.tuning_choice`: which tuning table ``apply --tuning`` ships;
- :mod:`.changes`: what the transforms would change (a change set), pure;
- :mod:`.bookkeeping`: the manifest, originals and RECORD that go with it;
- :mod:`.planning`: the :class:`Plan` of a run, from all of the above;
- :mod:`.applying` / :mod:`.reverting`: a plan or a revert, staged and committed;
- :mod:`.transaction`: staging, the redo journal, replay and recovery mechanics;
- :mod:`.records`: the manifest and the journal, typed and validated (the only code
  that reads or writes their JSON);
- :mod:`.recovery`, :mod:`.inspection`, :mod:`.drift`: interrupted runs, ``status``.

Typical use, under the tree's lock::

    with engine.lock(tree):
        engine.recover(tree)
        plan = engine.plan(tree, PlanOptions(values={"num_warps": 2}))
        result = engine.apply(plan)

Two kinds of "force" are kept apart: :attr:`PlanOptions.accept_unknown_version` lets a
tree whose vLLM version is unknown or out of range be planned at all, and ``revert``'s
``discard_local_changes`` lets it overwrite or delete files changed since we wrote them.
"""

from __future__ import annotations

from .applying import ApplyResult, TransformOutcome, apply, conflict_error
from .drift import Drift, manifest_drift
from .inspection import TreeStatus, status
from .locking import DEFAULT_LOCK_TIMEOUT, LOCK_TIMEOUT_ENV, lock, lock_timeout
from .options import OptionChange, PlanOptions
from .planning import Plan, TransformState, all_transforms, change_action, plan
from .recovery import debris, interrupted, interrupted_text, recover
from .reverting import RevertResult, revert

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "LOCK_TIMEOUT_ENV",
    "ApplyResult",
    "Drift",
    "OptionChange",
    "Plan",
    "PlanOptions",
    "RevertResult",
    "TransformOutcome",
    "TransformState",
    "TreeStatus",
    "all_transforms",
    "apply",
    "change_action",
    "conflict_error",
    "debris",
    "interrupted",
    "interrupted_text",
    "lock",
    "lock_timeout",
    "manifest_drift",
    "plan",
    "recover",
    "revert",
    "status",
]

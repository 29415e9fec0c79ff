"""After an interrupted run: finish it, and find or remove the debris it left.

Where our debris can be is the transforms' to say (their targets and the directories
their bundles ship into); the crash-safe mechanics are :func:`.transaction.recover`'s.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from ..discovery import VllmTree
from ..errors import EnvironmentProblem
from ..record import find_record
from ..transforms.base import Transform
from . import transaction
from .journal import Journal
from .planning import all_transforms
from .statedir import StateDir
from .transaction import Recovery


def recover(
    tree: VllmTree,
    finish: bool = True,
    best_effort: bool = False,
    registry: Optional[Sequence[Transform]] = None,
    dry_run: bool = False,
) -> Recovery:
    """Finish an interrupted run and remove our debris (see :func:`transaction.recover`).

    ``best_effort`` is for ``check``: debris that cannot be removed (a read-only tree)
    is left in place rather than failing the command.  ``dry_run`` (``diff``,
    ``status``) writes nothing and lists the debris a recovery would remove.
    """
    registry = all_transforms() if registry is None else registry
    dirs = {tree.path(f"{tree.root.name}/{t.target}").parent for t in registry}
    # a test's own registry still sweeps the installed transforms' bundle directories
    for transform in (*all_transforms(), *registry):
        if transform.bundle is not None:
            dirs.add(tree.root / transform.bundle.directory)
    record = find_record(tree)
    if record is not None:
        dirs.add(record.parent)
    try:
        return transaction.recover(tree, dirs, finish=finish, dry_run=dry_run)
    except EnvironmentProblem:
        if not best_effort:
            raise
        return Recovery()


def debris(tree: VllmTree, registry: Optional[Sequence[Transform]] = None) -> List[str]:
    """Leftovers of an interrupted run that the next ``apply``/``revert`` would remove
    (paths relative to the tree's base, a directory with a trailing ``/``); reads only."""
    return recover(tree, finish=False, best_effort=True, registry=registry, dry_run=True).removed


def interrupted(tree: VllmTree) -> Optional[str]:
    """The operation (``"apply"`` or ``"revert"``) of a committed run that did not finish,
    or None; reads only.  Read-only commands report it; ``apply``/``revert`` finish it."""
    state = StateDir(tree)
    if not state.has_journal():
        return None
    return Journal.load(state).op


def interrupted_text(op: str) -> str:
    """What an interrupted run means for the user, and the way on (one line)."""
    if op == "revert":
        return (
            "an interrupted revert; `vllm-codemod revert` finishes it, `vllm-codemod apply` "
            "finishes it and patches the tree again"
        )
    return f"an interrupted {op}; `vllm-codemod apply` finishes it, `vllm-codemod revert` undoes it"

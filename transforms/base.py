"""The contract between the engine and each codemod.

A transform is one self-contained unit, modelled on ``libcst.codemod``'s commands: a
name, a short description, the file it targets, the structural matcher that decides
what to do with it, and what it copies into the tree beside its edit (its
:class:`Bundle`, if any).  The engine owns everything with side effects (reading, writing,
backups, locking); a transform only ever looks at a parsed module and answers with a
:class:`Verdict`.  That split is what lets ``diff``, ``check`` and ``apply`` share one
code path and keeps transforms trivially testable on in-memory sources.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Dict, FrozenSet, Mapping, Optional, Tuple

from packaging.specifiers import SpecifierSet
from packaging.version import Version

if TYPE_CHECKING:  # only in annotations: importing libcst is not free
    import libcst as cst

#: Every edit carries this marker so a reader of a patched file sees who changed it.
MARKER = "vllm-codemod"


class Status(str, enum.Enum):
    """Where a target stands relative to one transform."""

    APPLIED = "applied"  # already in the desired shape; nothing to write
    PENDING = "pending"  # the transform would change the file
    NOT_APPLICABLE = "not-applicable"  # nothing for this transform to do here (reason says why)
    CONFLICT = "conflict"  # the file has a shape we do not understand; refuse to guess


@dataclass(frozen=True)
class Option:
    """A per-transform knob surfaced on the command line (e.g. ``--num-warps``)."""

    name: str  # python identifier, also the key in TransformContext.options
    flag: str  # command-line spelling, e.g. "--num-warps"
    type: type
    default: Any
    help: str
    #: when set, the only values accepted (checked by the CLI before any planning)
    choices: Optional[Tuple[Any, ...]] = None
    #: when set, the smallest value accepted
    minimum: Optional[int] = None


@dataclass(frozen=True)
class TransformContext:
    """What a transform may know about the run besides the source it is given."""

    vllm_root: Path  # the ``vllm`` package directory
    version: Optional[Version]  # installed vLLM version, None when it could not be read
    options: Mapping[str, Any] = field(default_factory=dict)
    #: what marks the tree as a vendor fork (``fork_markers.find_fork_markers``); empty
    #: for an upstream tree; None when the engine did not look (fork remedies then run
    #: as on a fork, the behaviour before this field existed)
    fork_markers: Optional[Tuple[str, ...]] = None
    #: transforms the user asked for by name (``--only``): a fork remedy that holds
    #: back on an upstream tree runs when named here
    explicitly_selected: FrozenSet[str] = frozenset()
    #: ``apply --tuning FILE``: the tuning table's bytes, for a transform whose bundle
    #: has a place for it (never persisted: the manifest records its hash)
    tuning_table: Optional[bytes] = None

    @property
    def is_upstream(self) -> bool:
        """Known to carry no fork marker (False when the engine did not look)."""
        return self.fork_markers is not None and not self.fork_markers

    def option(self, transform: Transform, name: str) -> Any:
        for opt in transform.options:
            if opt.name == name:
                return self.options.get(name, opt.default)
        raise KeyError(f"{transform.name} has no option {name!r}")


@dataclass(frozen=True)
class Bundle:
    """A directory of files a transform copies into the vllm package beside its edit.

    Declared on the transform class so the engine can look after the directory (sweep
    our debris there, place the tuning table) without knowing which transform ships
    what.  Several transforms may declare the same bundle: each one that applies lists
    its files in :attr:`Verdict.added_files`, and the engine writes a path once when
    they agree on its bytes, so leaving one of them out still ships the bundle while
    another one is on.
    """

    #: directory inside the vllm package, POSIX separators, e.g. ``_codemod_kernels``
    directory: str
    #: the name ``apply --tuning`` gives the tuning table inside it; None: no table
    tuning_file: Optional[str] = None

    def with_tuning_table(
        self, files: Dict[str, bytes], context: TransformContext
    ) -> Dict[str, bytes]:
        """``files`` plus the run's tuning table, when this bundle carries one."""
        if not files or self.tuning_file is None or context.tuning_table is None:
            return files
        return {**files, f"{self.directory}/{self.tuning_file}": context.tuning_table}


@dataclass
class Verdict:
    """A transform's answer for one target file.

    ``module`` is the rewritten module when ``status`` is PENDING, else None.
    ``details`` carries facts worth showing in ``check`` (e.g. BLOCK sizes) without
    changing anything.  ``added_files`` maps paths relative to the vllm package to the
    bytes the transform needs beside its edit (its :class:`Bundle`); the engine writes,
    records and later removes them.
    """

    status: Status
    reason: str
    module: Optional[cst.Module] = None
    details: Dict[str, Any] = field(default_factory=dict)
    added_files: Dict[str, bytes] = field(default_factory=dict)


class Transform:
    """Base class: subclasses set the class attributes and implement :meth:`plan`."""

    name: ClassVar[str]
    description: ClassVar[str]
    #: target file, relative to the ``vllm`` package directory, POSIX separators
    target: ClassVar[str]
    #: vLLM releases whose shapes of ``target`` this transform was written against
    known_versions: ClassVar[SpecifierSet]
    options: ClassVar[Tuple[Option, ...]] = ()
    #: top-level names whose defining statements are all the transform needs to see;
    #: the engine then parses just those (fast, and untouched text stays untouched).
    #: Empty means the whole module.
    anchors: ClassVar[Tuple[str, ...]] = ()
    #: transforms whose edit must be in place (or not needed) before this one's is safe:
    #: the engine refuses to apply this one alone while one of them is still pending.
    requires: ClassVar[Tuple[str, ...]] = ()
    #: what the transform copies into the tree (None: nothing)
    bundle: ClassVar[Optional[Bundle]] = None
    #: the option that takes a tuning table's prefix-prefill warps (``apply --tuning``
    #: sets it unless it is given explicitly); None: the table means nothing to it
    tuning_warps_option: ClassVar[Optional[str]] = None

    @property
    def carries_tuning_table(self) -> bool:
        return self.bundle is not None and self.bundle.tuning_file is not None

    def plan(self, module: cst.Module, context: TransformContext) -> Verdict:  # pragma: no cover
        raise NotImplementedError


#: The earlier name of :class:`Verdict`, for transforms written before the rename; the
#: engine's :class:`vllm_codemod.engine.Plan` is the plan of a whole run.
Plan = Verdict

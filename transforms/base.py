"""The contract between the engine and each codemod.

A transform is one self-contained unit, modelled on ``libcst.codemod``'s commands: a
name, a short description, the file it targets and the structural matcher that decides
what to do with it.  The engine owns everything with side effects (reading, writing,
backups, locking); a transform only ever looks at a parsed module and answers with a
:class:`Plan`.  That split is what lets ``diff``, ``check`` and ``apply`` share one
code path and keeps transforms trivially testable on in-memory sources.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Dict, FrozenSet, Mapping, Optional, Tuple

import libcst as cst
from packaging.specifiers import SpecifierSet
from packaging.version import Version

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

    @property
    def is_upstream(self) -> bool:
        """Known to carry no fork marker (False when the engine did not look)."""
        return self.fork_markers is not None and not self.fork_markers

    def option(self, transform: Transform, name: str) -> Any:
        for opt in transform.options:
            if opt.name == name:
                return self.options.get(name, opt.default)
        raise KeyError(f"{transform.name} has no option {name!r}")


@dataclass
class Plan:
    """A transform's answer for one target file.

    ``module`` is the rewritten module when ``status`` is PENDING, else None.
    ``details`` carries facts worth showing in ``check`` (e.g. BLOCK sizes) without
    changing anything.  ``added_files`` maps paths relative to the vllm package to the
    bytes the transform needs beside its edit (the bundled kernels); the engine writes,
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

    def plan(self, module: cst.Module, context: TransformContext) -> Plan:  # pragma: no cover
        raise NotImplementedError

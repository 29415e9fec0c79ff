"""``prefix-prefill-warps``: set the warps per program of the prefix-prefill launches.

``attention/ops/prefix_prefill.py`` launches its Triton kernels with
``num_warps=<variable>``, and that variable is 8 on CUDA in every release from 0.4.3
to 0.11.0 (``num_warps = 8 if Lk <= 64 else 8``, a function-local ``NUM_WARPS = 8``, a
module constant ``NUM_WARPS = 8``, or ``NUM_WARPS = 4 if current_platform.is_rocm() else
8``).  On BI-V100-class parts, 8 warps with the ~32 KB of shared memory a BLOCK-64 tile
needs leave room for one program per SM; 4 warps fit two (docs/transforms.md has the
arithmetic and its assumptions).

How it matches, structurally: every ``kernel[grid](..., num_warps=NAME)`` launch is
found, ``NAME`` is resolved to its binding (an assignment in the launching function,
else at module level), and that binding's value is set to the literal ``N``.  A whole
conditional is replaced (``4 if is_rocm() else 8`` becomes ``N``): the tool patches the
tree of one platform, and one literal says plainly what runs.  Launches with a literal
``num_warps=4`` (the newer ``_fwd_kernel`` from 0.8.5) are other kernels, tuned
separately, and are left alone.  BLOCK / BASE_BLOCK are reported, not changed.

It is a fork remedy: on an upstream tree (no fork markers, see :mod:`.fork_markers`) it
leaves the value alone unless named with ``--only`` (upstream's 8 warps measured 1.7x
faster than 4 for the ALiBi kernel on an H200).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from packaging.specifiers import SpecifierSet

from ._cst_helpers import (
    assigns_name,
    code_of,
    is_name,
    parameter_names,
    walk_statements,
    with_marker,
)
from .base import Option, Status, Transform, TransformContext, Verdict

if TYPE_CHECKING:
    import libcst as cst
else:
    from ._lazy_cst import cst

KEYWORD = "num_warps"
#: Tile sizes worth showing an operator next to the warp count (never edited).
REPORTED = ("BASE_BLOCK", "BLOCK")
#: Valid Triton warp counts: powers of two up to 32 (1024 threads per program).
VALID_WARPS = (1, 2, 4, 8, 16, 32)


def _is_launch(call: cst.Call) -> bool:
    """``kernel[grid](..., num_warps=<anything>, ...)``."""
    return isinstance(call.func, cst.Subscript) and any(
        is_name(arg.keyword, KEYWORD) for arg in call.args
    )


class _Launch:
    """One ``kernel[grid](...)`` call and the function it sits in (None: module level)."""

    def __init__(self, call: cst.Call, function: Optional[cst.FunctionDef]) -> None:
        self.call = call
        self.function = function
        self.value = next(a.value for a in call.args if a.keyword and a.keyword.value == KEYWORD)

    @property
    def kernel(self) -> str:
        assert isinstance(self.call.func, cst.Subscript)
        return code_of(self.call.func.value)


def _is_device_code(node: cst.FunctionDef) -> bool:
    """``@triton.jit`` / ``@jit`` kernels: device code never launches kernels.

    Skipping them is not only a shortcut (they are most of the file and libcst walks
    are slow): a ``num_warps`` there would not be a launch parameter.
    """
    for decorator in node.decorators:
        target = decorator.decorator
        if isinstance(target, cst.Call):
            target = target.func
        if isinstance(target, cst.Attribute):
            target = target.attr
        if is_name(target, "jit"):
            return True
    return False


@functools.lru_cache(maxsize=None)
def _launch_finder() -> Any:
    """The class, made on first use: its base class is libcst's (see ``_lazy_cst``)."""

    class _LaunchFinder(cst.CSTVisitor):
        def __init__(self) -> None:
            self.stack: List[cst.FunctionDef] = []
            self.launches: List[_Launch] = []

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            if _is_device_code(node):
                return False  # children skipped; leave_FunctionDef still runs
            self.stack.append(node)
            return True

        def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
            if self.stack and self.stack[-1] is original_node:
                self.stack.pop()

        def visit_Call(self, node: cst.Call) -> None:
            if _is_launch(node):
                self.launches.append(_Launch(node, self.stack[-1] if self.stack else None))

    return _LaunchFinder


@functools.lru_cache(maxsize=None)
def _replace() -> Any:
    """The class, made on first use: its base class is libcst's (see ``_lazy_cst``)."""

    class _Replace(cst.CSTTransformer):
        """Swap whole statements, picked by the identity of the original node."""

        def __init__(self, edits: Dict[int, cst.SimpleStatementLine]) -> None:
            super().__init__()
            self.edits = edits

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return not _is_device_code(node)  # nothing to edit in kernels; saves the walk

        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
            return False  # edits swap whole statements: their expressions need no walk

        def leave_SimpleStatementLine(
            self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
        ) -> cst.SimpleStatementLine:
            return self.edits.get(id(original_node), updated_node)

    return _Replace


def _binds_value(small: cst.BaseSmallStatement, name: str) -> bool:
    """``name = ...`` or ``name: T = ...`` (a bare ``name: T`` binds nothing)."""
    return assigns_name(small, name) and getattr(small, "value", None) is not None


def _assignments(stmts: List[cst.BaseStatement], name: str) -> List[cst.SimpleStatementLine]:
    """Statements ``name = ...`` under ``stmts`` (any block depth, not nested scopes)."""
    found = []
    for stmt in walk_statements(stmts):
        if isinstance(stmt, cst.SimpleStatementLine) and any(
            _binds_value(small, name) for small in stmt.body
        ):
            found.append(stmt)
    return found


def _binding_small(stmt: cst.SimpleStatementLine, name: str) -> cst.BaseSmallStatement:
    """The small statement of ``stmt`` that binds ``name`` (``BLOCK = 64; NUM_WARPS = 8``)."""
    return next(small for small in stmt.body if _binds_value(small, name))


def _value(stmt: cst.SimpleStatementLine, name: str) -> cst.BaseExpression:
    small = _binding_small(stmt, name)
    assert isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None
    return small.value


def _literal_choice(value: cst.BaseExpression) -> bool:
    """An int literal, or a conditional expression whose every outcome is one."""
    if isinstance(value, cst.Integer):
        return True
    if isinstance(value, cst.IfExp):
        return _literal_choice(value.body) and _literal_choice(value.orelse)
    return False


def _statements(function: Optional[cst.FunctionDef], module: cst.Module) -> List[cst.BaseStatement]:
    if function is None:
        return list(module.body)
    if isinstance(function.body, cst.IndentedBlock):
        return list(function.body.body)
    return [cst.SimpleStatementLine(body=list(function.body.body))]


class PrefixPrefillWarps(Transform):
    """Set NUM_WARPS of the prefix-prefill kernel launches to ``--num-warps``."""

    name = "prefix-prefill-warps"
    description = (
        "Set the warps per program of the prefix-prefill Triton launches (NUM_WARPS, 8 "
        "upstream) to --num-warps; reports BLOCK sizes without changing them."
    )
    target = "attention/ops/prefix_prefill.py"
    known_versions = SpecifierSet(">=0.4.3,<=0.11.0")
    #: the engine parses only the top-level statements defining these (see base.py):
    #: the launching function (upstream's name in every release; vLLM imports it by that
    #: name) and every spelling of the warp and tile bindings.
    anchors = ("context_attention_fwd", "NUM_WARPS", "num_warps", *REPORTED)
    options = (
        Option(
            name="num_warps",
            flag="--num-warps",
            type=int,
            default=4,
            help="Warps per prefix-prefill program: a power of two from 1 to 32 "
            "(upstream uses 8; 4 doubles occupancy where shared memory allows it)",
            choices=VALID_WARPS,
        ),
    )
    #: ``apply --tuning FILE``: the table's measured prefix-prefill warps set this option
    tuning_warps_option = "num_warps"

    def plan(self, module: cst.Module, context: TransformContext) -> Verdict:
        warps = int(context.option(self, "num_warps"))
        if warps not in VALID_WARPS:
            return Verdict(
                Status.CONFLICT,
                f"--num-warps {warps}: Triton needs a power of two from 1 to 32",
            )
        plan = self._plan_edit(module, warps)
        if context.is_upstream and self.name not in context.explicitly_selected:
            found = plan.details.get("num_warps")
            return Verdict(
                Status.NOT_APPLICABLE,
                "upstream tree (no fork markers found): "
                + (f"`{found}` left as is" if found else "NUM_WARPS left as shipped")
                + f"; use --only {self.name} to force",
                details=plan.details,
            )
        return plan

    def _plan_edit(self, module: cst.Module, warps: int) -> Verdict:
        """The plan as on a fork: set every launch's warp binding to ``warps``."""
        finder = _launch_finder()()
        module.visit(finder)
        details: Dict[str, object] = self._block_details(module, finder.launches)

        literal = [launch for launch in finder.launches if not isinstance(launch.value, cst.Name)]
        if literal:
            details["left alone"] = ", ".join(
                f"{launch.kernel}({KEYWORD}={code_of(launch.value)})" for launch in literal
            )
        by_name = [launch for launch in finder.launches if isinstance(launch.value, cst.Name)]
        if not by_name:
            return Verdict(
                Status.CONFLICT,
                f"no kernel launch takes {KEYWORD} from a variable; unknown shape",
                details=details,
            )

        bindings: List[Tuple[cst.SimpleStatementLine, str]] = []
        for launch in by_name:
            assert isinstance(launch.value, cst.Name)
            variable = launch.value.value
            found, problem = self._binding(module, launch.function, variable)
            if found is None:
                return Verdict(
                    Status.CONFLICT,
                    f"{launch.kernel}: {KEYWORD}={variable}: {problem}",
                    details=details,
                )
            if all(found is not seen for seen, _ in bindings):
                bindings.append((found, variable))

        old_values = [
            f"{variable} = {code_of(_value(stmt, variable))}" for stmt, variable in bindings
        ]
        details["num_warps"] = "; ".join(old_values)
        edits: Dict[int, cst.SimpleStatementLine] = {}
        for stmt, variable in bindings:
            value = _value(stmt, variable)
            if isinstance(value, cst.Integer) and int(value.evaluated_value) == warps:
                continue
            if not _literal_choice(value):
                return Verdict(
                    Status.CONFLICT,
                    f"`{code_of(stmt)}`: not an integer literal or a choice between them; "
                    "refusing to override a value computed at run time",
                    details=details,
                )
            small = _binding_small(stmt, variable)
            new = stmt.with_changes(
                body=[
                    s.with_changes(value=cst.Integer(str(warps))) if s is small else s
                    for s in stmt.body
                ],
                leading_lines=with_marker(
                    stmt.leading_lines,
                    self.name,
                    f"was `{code_of(value)}`; {warps} warps (see docs/transforms.md)",
                ),
                trailing_whitespace=cst.TrailingWhitespace(),
            )
            edits[id(stmt)] = new

        if not edits:
            return Verdict(
                Status.APPLIED,
                f"prefix-prefill launches already use {warps} warps",
                details=details,
            )
        new_module = module.visit(_replace()(edits))
        return Verdict(
            Status.PENDING,
            f"prefix-prefill launches use {' / '.join(old_values)}; setting {warps}",
            module=new_module,
            details=details,
        )

    @staticmethod
    def _binding(
        module: cst.Module, function: Optional[cst.FunctionDef], variable: str
    ) -> Tuple[Optional[cst.SimpleStatementLine], str]:
        """The one statement that binds ``variable`` for a launch in ``function``."""
        if function is not None and variable in parameter_names(function.params):
            return None, f"comes from a parameter of {function.name.value}; unknown shape"
        scopes = [function, None] if function is not None else [None]
        for scope in scopes:
            found = _assignments(_statements(scope, module), variable)
            if found and scope is not None and not isinstance(scope.body, cst.IndentedBlock):
                # the statement is rebuilt from the one-line body, so it could not be edited
                return None, f"bound in the one-line body of {scope.name.value}; unknown shape"
            if len(found) == 1:
                return found[0], ""
            if len(found) > 1:
                where = f"in {scope.name.value}" if scope is not None else "at module level"
                return None, f"assigned {len(found)} times {where}; refusing to guess which wins"
        return None, "no assignment found; unknown shape"

    @staticmethod
    def _block_details(module: cst.Module, launches: List[_Launch]) -> Dict[str, object]:
        """Source text of every BLOCK / BASE_BLOCK assignment seen by the launches."""
        details: Dict[str, object] = {}
        scopes: List[Optional[cst.FunctionDef]] = [None]
        for launch in launches:
            if launch.function is not None and all(launch.function is not s for s in scopes):
                scopes.append(launch.function)
        for name in REPORTED:
            values = [
                code_of(_value(stmt, name))
                for scope in scopes
                for stmt in _assignments(_statements(scope, module), name)
            ]
            if values:
                details[name] = "; then ".join(values)
        return details

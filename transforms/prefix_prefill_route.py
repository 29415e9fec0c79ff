"""``prefix-prefill-route``: make the tree's ``context_attention_fwd`` try the bundled kernel.

Chunked prefill and prefix caching send every chunk after the first through
``attention/ops/prefix_prefill.py:context_attention_fwd``, whose Triton kernels run at a
small fraction of the GPU's matmul rate (issue #25).  This transform puts one guarded
call in front of the function's original body::

    # vllm-codemod: prefix-prefill-route: ...
    from vllm._codemod_kernels import context_attention_fwd as _codemod_context_attention_fwd
    if _codemod_context_attention_fwd(q=q, k=k, ...):   # every parameter, by name
        return

The bundled entry point returns False for what it does not support (``sinks``, an fp8
output, an unknown cache dtype), and the untouched original body then runs: the
decorators, the body and the ``NUM_WARPS`` binding that ``prefix-prefill-warps`` tunes
stay as they were.  The kernel package ships with the edit (:meth:`shipped_files`), so
the route works with ``paged-attention-v2`` skipped.

Matched by structure: the one ``def context_attention_fwd`` at module level or inside a
module-level ``if``/``try`` (releases up to 0.8.3 define it under ``if
triton.__version__ >= "2.1.0":``), with a body that launches a Triton kernel
(``kernel[grid](...)``) and returns no value.  Anything else is a conflict.  Like the
warps transform it is a fork remedy: an upstream tree is left alone unless the
transform is named with ``--only``.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from packaging.specifiers import SpecifierSet

from ._cst_helpers import (
    body_statements,
    find_first,
    is_docstring,
    is_name,
    marker_line,
    small_statements,
    walk_statements,
)
from .base import Plan, Status, Transform, TransformContext
from .paged_attention_v2 import (
    KERNEL_DIR,
    KERNEL_MODULE,
    KERNEL_PACKAGE,
    TUNING_FILE,
    TUNING_TABLE_OPTION,
    bundled_kernel_files,
    kernel_package_dir,
)

if TYPE_CHECKING:
    import libcst as cst
else:
    from ._lazy_cst import cst

FUNCTION = "context_attention_fwd"
KERNEL_ENTRY = "context_attention_fwd"
KERNEL_ALIAS = "_codemod_context_attention_fwd"
SIGNATURE_FILE = "prefill_signature.py"
WHY = (
    f"bundled prefix-prefill kernel first (vllm/{KERNEL_DIR}); the body below runs what it declines"
)


class _Refused(ValueError):
    """A shape this transform does not understand; the message says what."""


class _Signature:
    """The entry point's parameter names and positional orders (``prefill_signature.py``)."""

    def __init__(self, module: ModuleType) -> None:
        self.parameters = frozenset(module.PARAMETERS)
        self.required = frozenset(module.REQUIRED)
        self.orders: Tuple[Tuple[str, ...], ...] = tuple(module.ORDERS)
        self.context_spellings: Tuple[str, ...] = tuple(module.CONTEXT_SPELLINGS)


def kernel_signature() -> Optional[_Signature]:
    """The bundled entry point's signature, loaded by path (never imports torch)."""
    directory = kernel_package_dir()
    if directory is None or not (directory / SIGNATURE_FILE).is_file():
        return None
    spec = importlib.util.spec_from_file_location(
        "_vllm_codemod_prefill_signature", directory / SIGNATURE_FILE
    )
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return _Signature(module)


def _find_functions(module: cst.Module) -> List[cst.FunctionDef]:
    """Every ``def context_attention_fwd`` at module level or under a module-level
    ``if``/``try``/``with`` (not inside classes or other functions)."""
    return [
        stmt
        for stmt in walk_statements(list(module.body))
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == FUNCTION
    ]


def _launches_a_kernel(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Subscript)


def _returns_a_value(func: cst.FunctionDef) -> bool:
    for stmt in walk_statements(body_statements(func.body)):
        for small in small_statements(stmt) or ():
            if isinstance(small, cst.Return) and small.value is not None:
                return True
    return False


def _forwarded_arguments(params: cst.Parameters, signature: _Signature) -> List[str]:
    """The call's argument list: named parameters by name, positions kept as positions."""
    star = params.star_arg if isinstance(params.star_arg, cst.Param) else None
    positional = [p.name.value for p in params.posonly_params]
    named = [p.name.value for p in params.params]
    if star is not None:  # everything before *args is a position the caller fills
        positional += named
        named = []
    keyword = [p.name.value for p in params.kwonly_params]
    for name in positional + named + keyword:
        if name not in signature.parameters:
            raise _Refused(
                f"parameter {name!r} is none of vLLM's; the bundled kernel cannot take it"
            )
    if positional and not any(
        tuple(positional) == order[: len(positional)] for order in signature.orders
    ):
        raise _Refused(
            f"positional parameters ({', '.join(positional)}) are not in the order any vLLM "
            "release passes them"
        )
    if star is None and params.star_kwarg is None:
        given = set(positional + named + keyword)
        missing = sorted(signature.required - given)
        if missing:
            raise _Refused(f"no parameter {', '.join(missing)}; unknown signature")
        spellings = [s for s in signature.context_spellings if s in given]
        if len(spellings) != 1:
            raise _Refused(
                f"expected exactly one of {' / '.join(signature.context_spellings)}; "
                "unknown signature"
            )
    arguments = list(positional)
    if star is not None:
        arguments.append(f"*{star.name.value}")
    arguments += [f"{name}={name}" for name in named + keyword]
    if isinstance(params.star_kwarg, cst.Param):
        arguments.append(f"**{params.star_kwarg.name.value}")
    return arguments


def _route_block(arguments: List[str], indent: str) -> List[cst.BaseStatement]:
    """The marker, the lazy import and the guarded call, as statements of the body."""
    lines = "".join(f"{indent * 2}{argument},\n" for argument in arguments)
    snippet = (
        "def _():\n"
        f"{indent}from {KERNEL_MODULE} import {KERNEL_ENTRY} as {KERNEL_ALIAS}\n"
        f"{indent}if {KERNEL_ALIAS}(\n{lines}{indent}):\n"
        f"{indent * 2}return\n"
    )
    template = cst.parse_module(snippet).body[0]
    assert isinstance(template, cst.FunctionDef)
    statements = body_statements(template.body)
    statements[0] = statements[0].with_changes(
        leading_lines=[marker_line(PrefixPrefillRoute.name, WHY)]
    )
    return statements


def _is_our_import(stmt: cst.BaseStatement) -> bool:
    smalls = small_statements(stmt)
    if not smalls or len(smalls) != 1 or not isinstance(smalls[0], cst.ImportFrom):
        return False
    small = smalls[0]
    if isinstance(small.names, cst.ImportStar) or len(small.names) != 1:
        return False
    module = small.module
    alias = small.names[0]
    return (
        isinstance(module, cst.Attribute)
        and is_name(module.value, "vllm")
        and is_name(module.attr, KERNEL_DIR)
        and is_name(alias.name, KERNEL_ENTRY)
        and alias.asname is not None
        and is_name(alias.asname.name, KERNEL_ALIAS)
    )


def _is_our_guard(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.If)
        and isinstance(stmt.test, cst.Call)
        and is_name(stmt.test.func, KERNEL_ALIAS)
    )


def _same_code(ours: List[cst.BaseStatement], wanted: List[cst.BaseStatement]) -> bool:
    """Equal up to formatting and comments (a fork's formatter may rewrap our call)."""

    def dump(stmts: List[cst.BaseStatement]) -> str:
        code = "".join(cst.Module(body=[s]).code for s in stmts)
        return ast.dump(ast.parse(code))

    return dump(ours) == dump(wanted)


@functools.lru_cache(maxsize=None)
def _replace_function() -> Any:
    """The class, made on first use: its base class is libcst's (see ``_lazy_cst``)."""

    class _ReplaceFunction(cst.CSTTransformer):
        def __init__(self, old: cst.FunctionDef, new: cst.FunctionDef) -> None:
            super().__init__()
            self.old, self.new = old, new

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False  # the target is replaced whole on leave; nothing inside any function

        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
            return False  # nor inside a statement line

        def leave_FunctionDef(
            self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
        ) -> cst.FunctionDef:
            return self.new if original_node is self.old else updated_node

    return _ReplaceFunction


class PrefixPrefillRoute(Transform):
    """Route ``context_attention_fwd`` to the bundled prefix-prefill kernel, original kept."""

    name = "prefix-prefill-route"
    description = (
        "Make context_attention_fwd in prefix_prefill.py try the bundled prefix-prefill "
        "kernel first (shipped as vllm/_codemod_kernels); the original body runs the "
        "calls it declines."
    )
    target = "attention/ops/prefix_prefill.py"
    known_versions = SpecifierSet(">=0.4.3,<=0.11.0")
    options = ()
    #: the engine parses only the top-level statements defining these (see base.py)
    anchors = (FUNCTION,)

    def shipped_files(self, context: TransformContext) -> Dict[str, bytes]:
        """The files the edit needs beside it: the kernel package (and ``--tuning``'s
        table), the same set ``paged-attention-v2`` ships."""
        files = bundled_kernel_files()
        table = context.options.get(TUNING_TABLE_OPTION)
        if files and table is not None:
            files[f"{KERNEL_DIR}/{TUNING_FILE}"] = table
        return files

    def plan(self, module: cst.Module, context: TransformContext) -> Plan:
        plan = self._plan_edit(module, context)
        if context.is_upstream and self.name not in context.explicitly_selected:
            return Plan(
                Status.NOT_APPLICABLE,
                "upstream tree (no fork markers found): context_attention_fwd left as "
                f"shipped; use --only {self.name} to force",
            )
        return plan

    def _plan_edit(self, module: cst.Module, context: TransformContext) -> Plan:
        found = _find_functions(module)
        if not found:
            return Plan(Status.CONFLICT, f"no `def {FUNCTION}` at module level; unknown shape")
        if len(found) > 1:
            return Plan(
                Status.CONFLICT,
                f"{len(found)} definitions of {FUNCTION}; refusing to guess which one runs",
            )
        func = found[0]
        if func.asynchronous is not None or not isinstance(func.body, cst.IndentedBlock):
            return Plan(Status.CONFLICT, f"{FUNCTION}: async or one-line; unknown shape")
        stmts = list(func.body.body)
        head = 1 if stmts and is_docstring(stmts[0]) else 0
        ours = (
            len(stmts) >= head + 2
            and _is_our_import(stmts[head])
            and _is_our_guard(stmts[head + 1])
        )
        original = stmts[head + 2 :] if ours else stmts[head:]
        body = cst.IndentedBlock(body=original)
        if find_first(body, _launches_a_kernel) is None:
            return Plan(
                Status.CONFLICT,
                f"{FUNCTION} launches no Triton kernel (`kernel[grid](...)`); a vendor "
                "implementation? refusing to put the bundled kernel in front of it",
            )
        if _returns_a_value(func):
            return Plan(
                Status.CONFLICT,
                f"{FUNCTION} returns a value; the route's bare `return` would change that",
            )
        signature = kernel_signature()
        files = self.shipped_files(context)
        if signature is None or not files:
            return Plan(
                Status.CONFLICT,
                f"the bundled kernels ({KERNEL_PACKAGE}, with {SIGNATURE_FILE}) are not "
                "installed with this vllm-codemod; reinstall the tool",
            )
        try:
            arguments = _forwarded_arguments(func.params, signature)
        except _Refused as exc:
            return Plan(Status.CONFLICT, f"{FUNCTION}: {exc}")
        indent = func.body.indent if func.body.indent is not None else module.default_indent
        block = _route_block(arguments, indent)
        if ours and _same_code(stmts[head : head + 2], block):
            return Plan(
                Status.APPLIED,
                f"{FUNCTION} already tries the bundled kernel first",
                added_files=files,
            )
        new_func = func.with_changes(
            body=func.body.with_changes(body=[*stmts[:head], *block, *original])
        )
        new_module = module.visit(_replace_function()(func, new_func))
        reason = (
            f"{FUNCTION} calls the bundled kernel otherwise than its signature asks; "
            "the call will be regenerated"
            if ours
            else f"{FUNCTION} will try the bundled prefix-prefill kernel first "
            f"({len(arguments)} arguments forwarded)"
        )
        return Plan(Status.PENDING, reason, module=new_module, added_files=files)

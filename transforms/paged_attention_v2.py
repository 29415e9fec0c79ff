"""``paged-attention-v2``: give the stubbed ``paged_attention_v2`` a working body.

BI-V100 forks ship ``vllm/_custom_ops.py`` with ``paged_attention_v2`` reduced to a
``raise NotImplementedError`` stub because the vendor's extension has no V2 kernel.
Every decode then has to take the V1 path, which runs one program per (sequence, head)
over the whole context: fine at 2K tokens, crippling at 100K.  This transform replaces
the stub's body with a call into the bundled split-KV kernels (``vllm/_codemod_kernels``,
shipped by the same run through :attr:`Verdict.added_files`), passing every parameter of
the function's own signature by name, so the one edit works for every signature vLLM
has had (``kv_scale`` in 0.4.x, float ``k_scale``/``v_scale`` in 0.5-0.6, tensor scales
from 0.7).  A stub that names nothing (``*args, **kwargs``) is forwarded by position
instead, in the order the installed version's callers use (:mod:`._forwarding`).

The import sits inside the function so that importing ``vllm._custom_ops`` stays as
cheap as before: the kernels (and Triton) load on the first V2 decode only.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Tuple

from packaging.specifiers import SpecifierSet

from vllm_codemod.stamp import stamp_kernel_files

from ._cst_helpers import (
    body_statements,
    code_of,
    find_first,
    is_docstring,
    is_name,
    marker_line,
    module_function,
    small_statements,
)
from ._forwarding import Forwarding, KernelSignature, Unforwardable, plan_forwarding
from .base import Bundle, Status, Transform, TransformContext, Verdict

if TYPE_CHECKING:
    import libcst as cst
else:
    from ._lazy_cst import cst

#: Installed name of the tool's kernel package and its directory name inside ``vllm/``.
KERNEL_PACKAGE = "vllm_codemod.kernels"
KERNEL_DIR = "_codemod_kernels"
#: What the patched body imports and calls.
KERNEL_MODULE = f"vllm.{KERNEL_DIR}"
KERNEL_ENTRY = "paged_attention_v2"
KERNEL_ALIAS = "_codemod_paged_attention_v2"
#: ``apply --tuning``: the tuning table ships as ``TUNING_FILE`` in the kernel package
TUNING_FILE = "tuning.json"
#: What this transform copies into the tree: the kernel package, with its tuning table.
KERNEL_BUNDLE = Bundle(directory=KERNEL_DIR, tuning_file=TUNING_FILE)
#: The name the tuning code knew the table's option by (the table now travels in
#: :attr:`TransformContext.tuning_table`); unused by the engine.
TUNING_TABLE_OPTION = "tuning_table"

FUNCTION = "paged_attention_v2"

#: Calls a stub may make before raising: logging, printing, warning.
_LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warning_once", "warn", "error", "exception", "critical"}
)


def kernel_package_dir() -> Optional[Path]:
    """The directory of the installed ``vllm_codemod.kernels`` package, or None.

    Found with ``find_spec`` so that nothing of the package runs: its ``__init__``
    may import torch, and the tool must stay importable (and fast) without it.
    """
    try:
        spec = importlib.util.find_spec(KERNEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location)
        if (path / "__init__.py").is_file():
            return path
    return None


def bundled_kernel_files() -> Dict[str, bytes]:
    """The files to ship beside the edit: ``_codemod_kernels/<name>.py`` -> bytes.

    Paths are relative to the ``vllm`` package directory, as :attr:`Verdict.added_files`
    wants them.  Empty when the kernel package is not installed.  The engine may call
    this too (e.g. to report kernels in a tree that are out of date).
    """
    directory = kernel_package_dir()
    if directory is None:
        return {}
    # The modules, and the tuning tables measured by the project (tuning-<device>.json).
    paths = sorted(directory.glob("*.py")) + sorted(directory.glob("tuning-*.json"))
    files = {f"{KERNEL_DIR}/{path.name}": path.read_bytes() for path in paths}
    # The real package's __init__ carries the version line the copy is stamped on; a
    # stand-in package (tests) may not.
    init = files.get(f"{KERNEL_DIR}/__init__.py", b"")
    return stamp_kernel_files(files) if b"__version__" in init else files


def _signature_module() -> Optional[ModuleType]:
    """The kernel package's ``signature.py``, loaded from its file, or None.

    Loaded under a private module name rather than imported as
    ``vllm_codemod.kernels.signature``: the latter would run the package ``__init__``
    (torch) first, and the tool never imports torch.
    """
    directory = kernel_package_dir()
    if directory is None or not (directory / "signature.py").is_file():
        return None
    spec = importlib.util.spec_from_file_location(
        "_vllm_codemod_kernel_signature", directory / "signature.py"
    )
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def accepted_parameters() -> Optional[FrozenSet[str]]:
    """``ACCEPTED_PARAMETERS`` from the kernel package's ``signature.py``, or None."""
    module = _signature_module()
    return None if module is None else frozenset(module.ACCEPTED_PARAMETERS)


def kernel_signature() -> Optional[KernelSignature]:
    """The entry point's positional order and aliases, or None without the kernels."""
    module = _signature_module()
    canonical = getattr(module, "CANONICAL_PARAMETERS", None)
    aliases = getattr(module, "ALIASES", None)
    if canonical is None or aliases is None:
        return None
    return KernelSignature(tuple(canonical), dict(aliases))


def _is_log_call(small: cst.BaseSmallStatement) -> bool:
    """``logger.warning(...)``, ``logging.error(...)``, ``warnings.warn(...)``, ``print(...)``."""
    if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call):
        return False
    func = small.value.func
    if isinstance(func, cst.Name):
        return func.value == "print"
    return isinstance(func, cst.Attribute) and func.attr.value in _LOG_METHODS


def _is_stub_raise(small: cst.BaseSmallStatement) -> bool:
    """``raise NotImplementedError`` or ``raise NotImplementedError(...)``, with any ``from``."""
    if not isinstance(small, cst.Raise):
        return False
    exc = small.exc
    if isinstance(exc, cst.Call):
        exc = exc.func
    return is_name(exc, "NotImplementedError")


def _is_kernel_import(small: cst.BaseSmallStatement) -> bool:
    """``from vllm._codemod_kernels import paged_attention_v2 as _codemod_paged_attention_v2``.

    Leading dots of a relative import are not looked at.
    """
    if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
        return False
    module = small.module
    if not (
        isinstance(module, cst.Attribute)
        and is_name(module.value, "vllm")
        and is_name(module.attr, KERNEL_DIR)
    ):
        return False
    if len(small.names) != 1:
        return False
    alias = small.names[0]
    return (
        is_name(alias.name, KERNEL_ENTRY)
        and alias.asname is not None
        and is_name(alias.asname.name, KERNEL_ALIAS)
    )


def _is_kernel_callee(node: cst.CSTNode) -> bool:
    """A call whose callee's last name contains ``paged_attention`` (``ops.paged_attention_v2``)."""
    if not isinstance(node, cst.Call):
        return False
    func = node.func
    if isinstance(func, cst.Attribute):
        func = func.attr
    return isinstance(func, cst.Name) and "paged_attention" in func.value


def _split_docstring(
    stmts: List[cst.BaseStatement],
) -> Tuple[Optional[cst.BaseStatement], List[cst.BaseStatement]]:
    """The docstring line (or None) and the statements after it.

    A docstring may share its line with the rest of a stub (``def f(): "doc"; raise
    NotImplementedError``): it is split off into a line of its own, so that the new
    body keeps it exactly as it keeps the docstring of a multi-line stub.
    """
    if not stmts:
        return None, stmts
    first = stmts[0]
    if is_docstring(first):
        return first, stmts[1:]
    smalls = small_statements(first)
    if smalls and len(smalls) > 1 and is_docstring(cst.SimpleStatementLine(body=smalls[:1])):
        assert isinstance(first, cst.SimpleStatementLine)
        docstring = first.with_changes(
            body=[smalls[0].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)],
            trailing_whitespace=cst.TrailingWhitespace(),
        )
        rest = cst.SimpleStatementLine(
            body=smalls[1:], trailing_whitespace=first.trailing_whitespace
        )
        return docstring, [rest, *stmts[1:]]
    return None, stmts


def _is_stub(stmts: List[cst.BaseStatement]) -> bool:
    """Whether the body (without its docstring) only logs, passes and raises NotImplementedError.

    The raise must come last: anything after it would be dead code we do not
    understand, and a raise somewhere in the middle of real code is not a stub.
    """
    smalls: List[cst.BaseSmallStatement] = []
    for stmt in stmts:
        line = small_statements(stmt)
        if line is None:
            return False
        smalls.extend(line)
    if not smalls or not _is_stub_raise(smalls[-1]):
        return False
    for small in smalls[:-1]:
        if isinstance(small, cst.Pass):
            continue
        if isinstance(small, cst.Expr) and isinstance(
            small.value, (cst.Ellipsis, cst.SimpleString)
        ):
            continue
        if not _is_log_call(small):
            return False
    return True


def _is_our_body(stmts: List[cst.BaseStatement]) -> bool:
    """Whether ``stmts`` (docstring excluded) is a body this transform wrote: our import,
    then one call of the kernel alias (whatever its arguments)."""
    smalls: List[cst.BaseSmallStatement] = []
    for stmt in stmts:
        line = small_statements(stmt)
        if line is None:
            return False
        smalls.extend(line)
    if len(smalls) != 2:
        return False
    importer, call = smalls
    return (
        _is_kernel_import(importer)
        and isinstance(call, cst.Expr)
        and isinstance(call.value, cst.Call)
        and is_name(call.value.func, KERNEL_ALIAS)
    )


def _same_code(ours: List[cst.BaseStatement], wanted: List[cst.BaseStatement]) -> bool:
    """Equal up to formatting and comments (a fork's formatter may rewrap our call)."""

    def dump(stmts: List[cst.BaseStatement]) -> str:
        code = "".join(cst.Module(body=[s]).code for s in stmts)
        return ast.dump(ast.parse(code))

    return dump(ours) == dump(wanted)


def _calls_a_kernel(func: cst.FunctionDef) -> Optional[str]:
    """Source of the first call to some ``*.paged_attention_v2(...)`` in the body."""
    call = find_first(func.body, _is_kernel_callee)
    if call is None:
        return None
    assert isinstance(call, cst.Call)
    return code_of(call.func)


def _new_body(
    func: cst.FunctionDef,
    docstring: Optional[cst.BaseStatement],
    forwarding: Forwarding,
    indent: str,
) -> cst.IndentedBlock:
    """The replacement body: docstring (kept), marker, lazy import, the kernel call."""
    arguments = "".join(f"{indent * 2}{argument},\n" for argument in forwarding.arguments)
    snippet = (
        "def _():\n"
        f"{indent}from {KERNEL_MODULE} import {KERNEL_ENTRY} as {KERNEL_ALIAS}\n"
        f"{indent}{KERNEL_ALIAS}(\n{arguments}{indent})\n"
    )
    parsed = cst.parse_module(snippet)
    template = parsed.body[0]
    assert isinstance(template, cst.FunctionDef) and isinstance(template.body, cst.IndentedBlock)
    statements = list(template.body.body)
    why = f"NotImplementedError stub -> bundled split-KV V2 kernel (vllm/{KERNEL_DIR})"
    if not forwarding.by_name:
        why += f"; {forwarding.how}"
    statements[0] = statements[0].with_changes(
        leading_lines=[marker_line(PagedAttentionV2.name, why)]
    )
    if docstring is not None:
        statements.insert(0, docstring)
    old = func.body
    header = old.header if isinstance(old, cst.IndentedBlock) else old.trailing_whitespace
    footer = old.footer if isinstance(old, cst.IndentedBlock) else ()
    return cst.IndentedBlock(
        body=statements,
        header=header,
        indent=old.indent if isinstance(old, cst.IndentedBlock) else None,
        footer=footer,
    )


class PagedAttentionV2(Transform):
    """Replace a NotImplementedError ``paged_attention_v2`` stub by the bundled kernel."""

    name = "paged-attention-v2"
    description = (
        "Replace the NotImplementedError stub of paged_attention_v2 in _custom_ops.py with "
        "a call into the bundled split-KV PagedAttention V2 kernels (shipped as "
        "vllm/_codemod_kernels)."
    )
    target = "_custom_ops.py"
    known_versions = SpecifierSet(">=0.4.3,<=0.11.0")
    options = ()
    #: the engine parses only the top-level statements defining these (see base.py)
    anchors = (FUNCTION,)
    bundle = KERNEL_BUNDLE

    def plan(self, module: cst.Module, context: TransformContext) -> Verdict:
        func = module_function(module, FUNCTION)
        if func is None:
            # Not NOT_APPLICABLE: paged_attn.py calls ops.paged_attention_v2 on its V2
            # path, so a tree without the function would break as soon as v2-dispatch
            # re-enables that path.  Refuse rather than ship a dispatch that crashes.
            return Verdict(
                Status.CONFLICT,
                f"no module-level `def {FUNCTION}` found; the V2 decode path needs one",
            )
        docstring, stmts = _split_docstring(body_statements(func.body))

        ours = _is_our_body(stmts)
        is_stub = not ours and _is_stub(stmts)
        if not ours and not is_stub:
            callee = _calls_a_kernel(func)
            if callee is not None:
                return Verdict(
                    Status.NOT_APPLICABLE,
                    f"{FUNCTION} has a real body (calls {callee}); nothing to replace",
                )
            return Verdict(
                Status.CONFLICT,
                f"{FUNCTION} is neither a NotImplementedError stub nor a call into a "
                "paged-attention kernel; refusing to guess what its body does",
            )

        kernel = kernel_signature()
        # `apply --tuning`: the table ships with the kernels
        files = KERNEL_BUNDLE.with_tuning_table(bundled_kernel_files(), context)
        if kernel is None or not files:
            return Verdict(
                Status.CONFLICT,
                f"the bundled kernels ({KERNEL_PACKAGE}, with signature.py) are not "
                "installed with this vllm-codemod; reinstall the tool",
            )
        try:
            forwarding = plan_forwarding(func.params, kernel, context.version)
        except Unforwardable as exc:
            return Verdict(Status.CONFLICT, f"{FUNCTION}: {exc}")

        indent = (
            func.body.indent
            if isinstance(func.body, cst.IndentedBlock) and func.body.indent is not None
            else module.default_indent
        )
        new_body = _new_body(func, docstring, forwarding, indent)
        if ours and _same_code(stmts, list(new_body.body)[1 if docstring else 0 :]):
            return Verdict(
                Status.APPLIED,
                f"{FUNCTION} already calls the bundled kernel ({forwarding.how})",
                added_files=files,
            )
        new_func = func.with_changes(body=new_body)
        new_module = module.with_changes(
            body=[new_func if stmt is func else stmt for stmt in module.body]
        )
        reason = (
            f"{FUNCTION} is a NotImplementedError stub; it will call the bundled kernel "
            f"({forwarding.how})"
            if is_stub
            else f"{FUNCTION} calls the bundled kernel otherwise than its signature asks "
            f"({forwarding.how}); the call will be regenerated"
        )
        return Verdict(Status.PENDING, reason, module=new_module, added_files=files)

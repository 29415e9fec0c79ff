"""paged-attention-v2 on in-memory sources: every stub style, idempotency, refusals."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import libcst as cst
import pytest
from packaging.version import Version

from codemod_helpers import assert_codemod, assert_refused
from vllm_codemod.transforms import get_transform
from vllm_codemod.transforms import paged_attention_v2 as pav
from vllm_codemod.transforms.base import Status, TransformContext

T = get_transform("paged-attention-v2")
CTX = TransformContext(vllm_root=Path("/nonexistent/vllm"), version=None)

#: the kernel package's signature.py (stdlib only), copied into the stand-in package
SIGNATURE_PY = (Path(__file__).resolve().parent.parent / "kernels" / "signature.py").read_text()


@pytest.fixture(autouse=True)
def fake_kernels(tmp_path, monkeypatch):
    """A stand-in kernel package, so these tests pin the transform, not the kernels."""
    pkg = tmp_path / "kernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('the tool must not import me')\n")
    (pkg / "signature.py").write_text(SIGNATURE_PY)
    (pkg / "paged_attention.py").write_text("# kernel\n")
    (pkg / "notes.txt").write_text("not shipped\n")
    monkeypatch.setattr(pav, "kernel_package_dir", lambda: pkg)
    return pkg


SIG_07 = """\
    out: torch.Tensor,
    exp_sum: torch.Tensor,
    max_logits: torch.Tensor,
    tmp_out: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    num_kv_heads: int,
    scale: float,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    max_seq_len: int,
    alibi_slopes: Optional[torch.Tensor],
    kv_cache_dtype: str,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
    tp_rank: int = 0,
    blocksparse_local_blocks: int = 0,
    blocksparse_vert_stride: int = 0,
    blocksparse_block_size: int = 64,
    blocksparse_head_sliding_step: int = 0,
"""
SIG_04 = """\
    out: torch.Tensor,
    exp_sum: torch.Tensor,
    max_logits: torch.Tensor,
    tmp_out: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    num_kv_heads: int,
    scale: float,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    block_size: int,
    max_context_len: int,
    alibi_slopes: Optional[torch.Tensor],
    kv_cache_dtype: str,
    kv_scale: float,
"""

HEAD = """\
from typing import Optional

import torch

logger = init_logger(__name__)


def paged_attention_v1(out, query) -> None:
    torch.ops._C.paged_attention_v1(out, query)


"""
TAIL = """

# pos encoding ops
def rotary_embedding(positions, query) -> None:
    torch.ops._C.rotary_embedding(positions, query)
"""


def source(body: str, sig: str = SIG_07) -> str:
    return f"{HEAD}def paged_attention_v2(\n{sig}) -> None:\n{textwrap.indent(body, '    ')}{TAIL}"


def plan(code: str, version=None):
    context = CTX if version is None else replace(CTX, version=Version(version))
    return T.plan(cst.parse_module(code), context)


def params(sig: str):
    return [line.strip().split(":")[0] for line in sig.strip().splitlines()]


STUBS = {
    "bare": "raise NotImplementedError\n",
    "call": "raise NotImplementedError()\n",
    "message": 'raise NotImplementedError("paged_attention_v2 is not supported on ixuca")\n',
    "docstring": '"""V2 is not available on CoreX."""\nraise NotImplementedError\n',
    "comment": "# ixuca: no V2 kernel\nraise NotImplementedError()\n",
    "pass": "pass\nraise NotImplementedError('nope')\n",
    "logger": (
        'logger.warning("paged_attention_v2 is not supported on BI-V100, "\n'
        '               "use paged_attention_v1 instead")\n'
        "raise NotImplementedError()\n"
    ),
    "print": 'print("no v2")\nraise NotImplementedError\n',
    "warnings": 'warnings.warn("no v2")\nraise NotImplementedError\n',
    "ellipsis-semicolons": "...; raise NotImplementedError\n",
    "everything": (
        '"""Doc."""\n# a comment\npass\nlogger.error("x")\nprint("y")\n'
        "raise NotImplementedError('z')\n"
    ),
}


@pytest.mark.parametrize("style", sorted(STUBS))
def test_every_stub_style_is_replaced_by_a_call_by_name(style):
    code = source(STUBS[style])
    result = plan(code)
    assert result.status is Status.PENDING, result.reason
    new = result.module.code
    compile(new, "x", "exec")
    assert "raise NotImplementedError" not in new
    func = pav.module_function(cst.parse_module(new), "paged_attention_v2")
    call_src = cst.Module([]).code_for_node(func)
    for name in params(SIG_07):
        assert f"        {name}={name},\n" in call_src
    assert (
        "from vllm._codemod_kernels import paged_attention_v2 as _codemod_paged_attention_v2"
        in (call_src)
    )
    assert "# vllm-codemod: paged-attention-v2:" in call_src
    if '"""' in STUBS[style]:
        assert '"""' in call_src.split("# vllm-codemod")[0]  # docstring kept, first
    # untouched text is byte-identical
    before, after = code.split("def paged_attention_v2(")
    assert new.startswith(before + "def paged_attention_v2(\n" + SIG_07 + ") -> None:\n")
    assert new.endswith(TAIL)


@pytest.mark.parametrize("style", sorted(STUBS))
def test_idempotent(style):
    first = plan(source(STUBS[style]))
    second = plan(first.module.code)
    assert second.status is Status.APPLIED, second.reason
    assert second.module is None
    assert second.added_files == first.added_files


def test_call_passes_every_parameter_of_the_signature_in_order():
    result = plan(source("raise NotImplementedError\n", SIG_04))
    func = pav.module_function(result.module, "paged_attention_v2")
    stmts = pav.body_statements(func.body)
    call = stmts[-1].body[0].value
    assert [a.keyword.value for a in call.args] == params(SIG_04)
    assert all(a.value.value == a.keyword.value for a in call.args)


IMPORT = "from vllm._codemod_kernels import paged_attention_v2 as _codemod_paged_attention_v2"
MARKER = (
    "# vllm-codemod: paged-attention-v2: NotImplementedError stub -> bundled split-KV V2 "
    "kernel (vllm/_codemod_kernels)"
)


def test_one_line_stub():
    assert_codemod(
        T,
        "def paged_attention_v2(out, query, scale): raise NotImplementedError\n",
        f"""\
        def paged_attention_v2(out, query, scale):
            {MARKER}
            {IMPORT}
            _codemod_paged_attention_v2(
                out=out,
                query=query,
                scale=scale,
            )
        """,
    )


@pytest.mark.parametrize(
    "stub",
    [
        'def paged_attention_v2(out, query): "Not on BI-V100."; raise NotImplementedError\n',
        'def paged_attention_v2(out, query):\n    "Not on BI-V100."; raise NotImplementedError\n',
    ],
    ids=["one-line-def", "one-line-body"],
)
def test_a_docstring_sharing_its_line_with_the_raise_is_kept(stub):
    assert_codemod(
        T,
        stub,
        f"""\
        def paged_attention_v2(out, query):
            "Not on BI-V100."
            {MARKER}
            {IMPORT}
            _codemod_paged_attention_v2(
                out=out,
                query=query,
            )
        """,
    )


def test_keyword_only_parameters_are_forwarded():
    code = "def paged_attention_v2(out, *, query, scale=1.0):\n    raise NotImplementedError\n"
    new = assert_codemod(T, code, plan(code).module.code).module.code
    assert "        query=query,\n        scale=scale,\n" in new


def test_tab_indented_module_keeps_its_indentation():
    assert_codemod(
        T,
        "def paged_attention_v2(out, query):\n\traise NotImplementedError\n",
        f"def paged_attention_v2(out, query):\n\t{MARKER}\n\t{IMPORT}\n"
        "\t_codemod_paged_attention_v2(\n\t\tout=out,\n\t\tquery=query,\n\t)\n",
    )


def test_added_files_are_the_kernel_package_py_files(fake_kernels):
    result = plan(source("raise NotImplementedError\n"))
    assert sorted(result.added_files) == [
        "_codemod_kernels/__init__.py",
        "_codemod_kernels/paged_attention.py",
        "_codemod_kernels/signature.py",
    ]
    assert result.added_files["_codemod_kernels/paged_attention.py"] == b"# kernel\n"
    applied = plan(result.module.code)
    assert applied.added_files == result.added_files


def test_real_bodies_are_not_applicable():
    upstream = (
        "torch.ops._C.paged_attention_v2(\n"
        "    out, exp_sum, max_logits, tmp_out, query, key_cache, value_cache,\n"
        "    num_kv_heads, scale, block_tables, seq_lens, block_size, max_seq_len,\n"
        "    alibi_slopes, kv_cache_dtype, k_scale, v_scale, tp_rank,\n"
        "    blocksparse_local_blocks, blocksparse_vert_stride,\n"
        "    blocksparse_block_size, blocksparse_head_sliding_step)\n"
    )
    result = plan(source(upstream))
    assert result.status is Status.NOT_APPLICABLE
    assert "torch.ops._C.paged_attention_v2" in result.reason
    assert result.added_files == {}
    old = "vllm_ops.paged_attention_v2(out, exp_sum)\n"
    result = plan(source(old, SIG_04))
    assert result.status is Status.NOT_APPLICABLE
    assert "vllm_ops.paged_attention_v2" in result.reason


def test_real_body_with_a_conditional_raise_is_not_a_stub():
    body = (
        "if kv_cache_dtype == 'fp8':\n    raise NotImplementedError\n"
        "torch.ops._C.paged_attention_v2(out, exp_sum)\n"
    )
    assert plan(source(body)).status is Status.NOT_APPLICABLE


@pytest.mark.parametrize(
    "body",
    [
        "raise RuntimeError('no v2')\n",
        "return None\n",
        "raise NotImplementedError\nprint('dead')\n",
        "x = 1\nraise NotImplementedError\n",
        "pass\n",
    ],
)
def test_unknown_bodies_conflict(body):
    assert_refused(T, source(body), "neither a NotImplementedError stub")


def test_missing_function_conflicts():
    assert_refused(T, HEAD + TAIL, "no module-level `def paged_attention_v2`")


def test_function_nested_in_a_class_is_not_the_module_level_one():
    code = "class Ops:\n    def paged_attention_v2(self, out):\n        raise NotImplementedError\n"
    assert_refused(T, code)


@pytest.mark.parametrize(
    "sig, version, needle",
    [
        ("*args, **kwargs", None, "the vLLM version is unknown"),
        ("out, query, /, scale", None, "the vLLM version is unknown"),
        ("query, *args", "0.8.3", "'query' is at position 0, where vLLM 0.8.3 passes 'out'"),
        ("out, exp_sum, query, *args", "0.6.3", "'query' is at position 2"),
        ("*args, tp_rank=0, **kwargs", "0.8.3", "keyword-only parameters after *args"),
        ("out, query, sinks=None", None, "'sinks'"),
        ("out, *args, sinks=None", "0.8.3", "'sinks'"),
        (", ".join(f"p{i}" for i in range(23)), None, "'p0'"),
    ],
)
def test_unforwardable_signatures_conflict(sig, version, needle):
    code = f"def paged_attention_v2({sig}) -> None:\n    raise NotImplementedError\n"
    assert_refused(T, code, needle, version=version)


def test_more_positional_parameters_than_vllm_passes_conflict():
    names = [n.replace("exp_sum", "exp_sums") for n in params(SIG_07)]  # all 22 positions
    code = f"def paged_attention_v2({', '.join(names)}, /, *args):\n    raise NotImplementedError\n"
    assert plan(code, "0.8.3").status is Status.PENDING
    longer = code.replace(", /", ", kv_scale, /")
    result = plan(longer, "0.8.3")
    assert result.status is Status.CONFLICT
    assert "23 positional parameters; vLLM 0.8.3 passes at most 22" in result.reason


def _call_lines(new_code: str):
    """The argument lines of the generated kernel call."""
    body = new_code.split("_codemod_paged_attention_v2(\n", 1)[1].split("    )\n", 1)[0]
    return [line.strip() for line in body.splitlines()]


POSITIONAL = "forwarded in vLLM's positional order"
KV_SCALE = "< 0.5.3: kv_scale passed as k_scale and v_scale)"
VARARGS = {
    # (signature, version): (the call's arguments, what the marker adds)
    ("*args, **kwargs", "0.6.3.post1+corex.4.1.3"): (
        ["*args,", "**kwargs,"],
        f"; *args {POSITIONAL}",
    ),
    ("*args", "0.8.3"): (["*args,"], f"; *args {POSITIONAL}"),
    ("out, exp_sum, *args, **kwargs", "0.11.0"): (
        ["out,", "exp_sum,", "*args,", "**kwargs,"],
        f"; *args {POSITIONAL}",
    ),
    ("out, exp_sums, /, max_logits", "0.8.3"): (
        ["out,", "exp_sums,", "max_logits,"],
        f"; positional-only parameters (out, exp_sums) {POSITIONAL}",
    ),
    ("*args, **kwargs", "0.4.3"): (
        ["*args[:16],", "*args[15:16],", "*args[16:],", "**kwargs,"],
        f"; *args {POSITIONAL} (vLLM 0.4.3 {KV_SCALE}",
    ),
    ("out, exp_sum, *a, **kw", "0.5.2"): (
        ["out,", "exp_sum,", "*a[:14],", "*a[13:14],", "*a[14:],", "**kw,"],
        f"; *a {POSITIONAL} (vLLM 0.5.2 {KV_SCALE}",
    ),
    ("out, **kwargs", "0.8.3"): (["out=out,", "**kwargs,"], ""),
}


@pytest.mark.parametrize("sig, version", sorted(VARARGS))
def test_varargs_stubs_forward_in_the_versions_positional_order(sig, version):
    code = f"def paged_attention_v2({sig}) -> None:\n    raise NotImplementedError\n"
    arguments, how = VARARGS[(sig, version)]
    call = "".join(f"        {argument}\n" for argument in arguments)
    after = (
        f"def paged_attention_v2({sig}) -> None:\n    {MARKER}{how}\n    {IMPORT}\n"
        f"    _codemod_paged_attention_v2(\n{call}    )\n"
    )
    assert_codemod(T, code, after, version=version)


def test_patched_varargs_body_is_regenerated_when_the_version_contract_changes():
    code = HEAD + "def paged_attention_v2(*args, **kwargs):\n    raise NotImplementedError\n"
    old = plan(code, "0.4.3").module.code
    result = plan(old, "0.8.3")  # the fork was upgraded under our edit
    assert result.status is Status.PENDING
    assert _call_lines(result.module.code) == ["*args,", "**kwargs,"]


def test_reformatted_call_still_counts_as_applied():
    new = plan(source("raise NotImplementedError\n"), "0.8.3").module.code
    call = new[new.index("    _codemod_paged_attention_v2(") : new.index("    )\n") + 6]
    one_line = (
        "    _codemod_paged_attention_v2("
        + ", ".join(line.strip().rstrip(",") for line in call.splitlines()[1:-1])
        + ")  # reformatted by the fork\n"
    )
    assert plan(new.replace(call, one_line), "0.8.3").status is Status.APPLIED


def test_signature_change_after_patching_regenerates_the_call():
    patched = plan(source("raise NotImplementedError\n")).module.code
    # a fork upgrade adds a parameter but keeps our body
    edited = patched.replace(
        "    tp_rank: int = 0,\n", "    tp_rank: int = 0,\n    context_lens=None,\n"
    )
    result = plan(edited)
    assert result.status is Status.PENDING
    assert "context_lens=context_lens," in result.module.code
    assert plan(result.module.code).status is Status.APPLIED


def test_missing_kernel_package_conflicts(monkeypatch):
    monkeypatch.setattr(pav, "kernel_package_dir", lambda: None)
    result = plan(source("raise NotImplementedError\n"))
    assert result.status is Status.CONFLICT
    assert "reinstall" in result.reason


def test_real_kernel_package_signature_is_importable_without_torch():
    """The installed kernels' signature.py loads without torch.

    A missing kernel package is a broken install, so it fails here rather than skipping.
    """
    import importlib.util

    spec = importlib.util.find_spec("vllm_codemod.kernels")
    assert spec is not None and spec.submodule_search_locations, "vllm_codemod.kernels missing"
    directory = Path(list(spec.submodule_search_locations)[0])
    assert (directory / "signature.py").is_file(), f"no signature.py in {directory}"
    import subprocess
    import sys

    probe = (
        "import sys; sys.modules['torch'] = None\n"
        "from vllm_codemod.transforms import paged_attention_v2 as p\n"
        "acc = p.accepted_parameters(); files = p.bundled_kernel_files()\n"
        "assert {'out', 'exp_sum', 'kv_scale', 'k_scale', 'v_scale', 'seq_lens'} <= acc, acc\n"
        "assert '_codemod_kernels/__init__.py' in files, sorted(files)\n"
        "assert 'torch' not in sys.modules or sys.modules['torch'] is None\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


FIXTURES = Path(__file__).resolve().parent.parent / "vendor_fixtures" / "upstream"


def _upstream_signature(version: str):
    """(positional parameter names, number without defaults) of upstream's function."""
    import ast

    tree = ast.parse((FIXTURES / f"vllm-{version}" / "vllm" / "_custom_ops.py").read_text())
    func = next(n for n in tree.body if getattr(n, "name", "") == "paged_attention_v2")
    names = [a.arg for a in func.args.args]
    return names, len(names) - len(func.args.defaults)


@pytest.mark.parametrize("version", ["0.4.3", "0.6.3.post1", "0.8.3"])
@pytest.mark.parametrize("sig", ["*args, **kwargs", "out, exp_sum, max_logits, *rest, **kw"])
def test_forwarded_call_binds_like_upstreams_signature(version, sig, monkeypatch):
    """Run the patched stub as vLLM's callers do (all positional, or required ones
    positional and the rest by keyword) and compare what the real entry point binds with
    what upstream's named signature would have received."""
    pytest.importorskip("torch")
    import sys
    import types

    from vllm_codemod.kernels.call import bind as _normalize

    code = HEAD + f"def paged_attention_v2({sig}) -> None:\n    raise NotImplementedError\n" + TAIL
    new = plan(code, version).module.code
    seen = []
    fake = types.ModuleType("vllm._codemod_kernels")
    fake.paged_attention_v2 = lambda *a, **k: seen.append(_normalize(a, dict(k)))
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm._codemod_kernels", fake)
    namespace = {"init_logger": lambda name: None}
    exec(compile(new, "patched", "exec"), namespace)

    names, required = _upstream_signature(version)

    def expected(passed):
        bound = {}
        for name, value in passed.items():
            if name == "kv_scale":
                bound["k_scale"] = bound["v_scale"] = value
            else:
                bound[{"exp_sum": "exp_sums"}.get(name, name)] = value
        return bound

    everything = {name: f"<{name}>" for name in names}
    namespace["paged_attention_v2"](*everything.values())
    assert seen.pop() == expected(everything)
    head = dict(list(everything.items())[:required])
    tail = {"tp_rank": "<tp>", "blocksparse_vert_stride": "<vs>"}
    namespace["paged_attention_v2"](*head.values(), **tail)
    assert seen.pop() == expected({**head, **tail})

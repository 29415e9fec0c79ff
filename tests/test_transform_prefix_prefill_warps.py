"""prefix-prefill-warps on in-memory sources: every NUM_WARPS shape 0.4.3 - 0.11.0."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from codemod_helpers import assert_codemod, assert_refused, assert_unchanged, run_codemod
from vllm_codemod.transforms import get_transform
from vllm_codemod.transforms.base import Status, TransformContext

T = get_transform("prefix-prefill-warps")

LAUNCHES = """\
    if alibi_slopes is not None:
        _fwd_kernel_alibi[grid](
            q,
            k,
            BLOCK_M=BLOCK,
            BLOCK_N=BLOCK,
            num_warps={VAR},
            num_stages=1,
        )
        return

    _fwd_kernel[grid](
        q,
        k,
        BLOCK_M=BLOCK,
        num_warps={SECOND},
        num_stages=1,
    )
    return
"""

# vLLM 0.4.3: function-local conditional, lower-case name, everything under an if.
V043 = (
    """\
import torch
import triton

if triton.__version__ >= "2.1.0":

    @triton.jit
    def _fwd_kernel(Q, K):
        pass

    def context_attention_fwd(q, k, v, alibi_slopes=None):

        cap = torch.cuda.get_device_capability()
        BLOCK = 128 if cap[0] >= 8 else 64
        Lq, Lk, Lv = q.shape[-1], k.shape[-1], v.shape[-1]
        grid = (1, 1, 1)

        num_warps = 8 if Lk <= 64 else 8
"""
    + "\n".join(
        "    " + line if line else line
        for line in LAUNCHES.replace("{VAR}", "num_warps")
        .replace("{SECOND}", "num_warps")
        .splitlines()
    )
    + "\n"
)

# vLLM 0.5 - 0.6.3: function-local constant.
V055 = """\
import torch
import triton

if triton.__version__ >= "2.1.0":

    def context_attention_fwd(q, k, v, alibi_slopes=None):

        cap = current_platform.get_device_capability()
        BLOCK = 128 if cap[0] >= 8 else 64
        NUM_WARPS = 8

        # need to reduce num. blocks when using fp32
        if q.dtype is torch.float32:
            BLOCK = BLOCK // 2
        grid = (1, 1, 1)
        _fwd_kernel[grid](q, k, BLOCK_M=BLOCK, num_warps=NUM_WARPS, num_stages=1)
        return
"""

MODULE_HEAD = """\
import torch
import triton

from vllm.platforms import current_platform

# Static kernels parameters
BASE_BLOCK = 128 if current_platform.has_device_capability(80) else 64
{BINDING}

# To check compatibility
IS_TURING = current_platform.get_device_capability() == (7, 5)


def context_attention_fwd(q, k, v, alibi_slopes=None):
    BLOCK = BASE_BLOCK // 2 if q.dtype is torch.float32 else BASE_BLOCK
    grid = (1, 1, 1)
"""


def module_level(binding: str, second: str = "NUM_WARPS") -> str:
    return MODULE_HEAD.replace("{BINDING}", binding) + LAUNCHES.replace(
        "{VAR}", "NUM_WARPS"
    ).replace("{SECOND}", second)


V066 = module_level("NUM_WARPS = 8")
V073 = module_level("NUM_WARPS = 4 if current_platform.is_rocm() else 8")
V085 = module_level("NUM_WARPS = 4 if current_platform.is_rocm() else 8", second="4")

SHAPES = {"0.4.3": V043, "0.5.5": V055, "0.6.6": V066, "0.7.3": V073, "0.8.5": V085}


def plan(code: str, warps=None):
    options = {} if warps is None else {"num_warps": warps}
    ctx = TransformContext(vllm_root=Path("/nonexistent/vllm"), version=None, options=options)
    return T.plan(cst.parse_module(code), ctx)


def changed_lines(old: str, new: str):
    import difflib

    return [
        line
        for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


#: the binding each shape launches with
BINDINGS = {
    "0.4.3": "num_warps = 8 if Lk <= 64 else 8",
    "0.5.5": "NUM_WARPS = 8",
    "0.6.6": "NUM_WARPS = 8",
    "0.7.3": "NUM_WARPS = 4 if current_platform.is_rocm() else 8",
    "0.8.5": "NUM_WARPS = 4 if current_platform.is_rocm() else 8",
}


def retuned(code: str, binding: str, warps: int = 4) -> str:
    """``code`` with the line ``binding`` set to ``warps`` under the transform's marker."""
    name, value = binding.split(" = ", 1)
    lines = code.splitlines(True)
    index = next(i for i, line in enumerate(lines) if line.strip() == binding)
    indent = lines[index][: len(lines[index]) - len(lines[index].lstrip())]
    lines[index] = (
        f"{indent}# vllm-codemod: prefix-prefill-warps: was `{value}`; {warps} warps "
        f"(see docs/transforms.md)\n{indent}{name} = {warps}\n"
    )
    return "".join(lines)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_gets_four_warps(shape):
    result = assert_codemod(T, SHAPES[shape], retuned(SHAPES[shape], BINDINGS[shape]))
    assert result.details["num_warps"] == BINDINGS[shape]


def test_literal_num_warps_of_other_launches_is_left_alone():
    result = plan(V085)
    new = result.module.code
    assert new.count("num_warps=4,") == 1  # the _fwd_kernel launch, untouched
    assert "num_warps=NUM_WARPS," in new
    assert result.details["left alone"] == "_fwd_kernel(num_warps=4)"


@pytest.mark.parametrize("warps", [1, 2, 16, 32])
def test_other_warp_counts(warps):
    assert_codemod(T, V066, retuned(V066, "NUM_WARPS = 8", warps), num_warps=warps)


def test_upstream_eight_is_applied_with_eight():
    assert_unchanged(T, V066, num_warps=8)
    # a conditional is never "applied": the tool writes one literal
    assert_codemod(T, V073, retuned(V073, BINDINGS["0.7.3"], 8), num_warps=8)


def test_retune_replaces_the_marker():
    four = retuned(V066, "NUM_WARPS = 8")
    eight = four.replace("was `8`; 4 warps", "was `4`; 8 warps").replace(
        "NUM_WARPS = 4", "NUM_WARPS = 8"
    )
    assert run_codemod(T, four, num_warps=8).module.code == eight


def test_retune_replaces_the_marker_on_the_planners_path():
    four = retuned(V066, "NUM_WARPS = 8")
    eight = four.replace("was `8`; 4 warps", "was `4`; 8 warps").replace(
        "NUM_WARPS = 4", "NUM_WARPS = 8"
    )
    assert_codemod(T, four, eight, num_warps=8)


@pytest.mark.parametrize("warps", [0, 3, 6, 64])
def test_invalid_warp_counts_conflict(warps):
    assert_refused(T, V066, "power of two", num_warps=warps)


def test_block_sizes_are_reported_not_changed():
    result = plan(V066)
    assert (
        result.details["BASE_BLOCK"] == "128 if current_platform.has_device_capability(80) else 64"
    )
    assert result.details["BLOCK"] == "BASE_BLOCK // 2 if q.dtype is torch.float32 else BASE_BLOCK"
    assert result.details["num_warps"] == "NUM_WARPS = 8"
    old = plan(V055)
    assert old.details["BLOCK"] == "128 if cap[0] >= 8 else 64; then BLOCK // 2"
    assert "BLOCK = BLOCK // 2" in old.module.code


def test_trailing_comment_on_the_binding_is_dropped_but_neighbours_kept():
    code = module_level("NUM_WARPS = 8  # tuned for BI-V100")
    new = plan(code).module.code
    assert "tuned for BI-V100" not in new
    assert "# Static kernels parameters\nBASE_BLOCK = 128" in new
    assert "\n\n# To check compatibility\n" in new


@pytest.mark.parametrize(
    "binding, needle",
    [
        ('NUM_WARPS = int(os.environ.get("IXUCA_PREFIX_PREFILL_NUM_WARPS", "8"))', "run time"),
        ("NUM_WARPS = get_num_warps()", "run time"),
        ("NUM_WARPS = 4 if current_platform.is_rocm() else WARPS", "run time"),
        ("NUM_WARPS = 8\nNUM_WARPS = 16", "assigned 2 times at module level"),
        ("WARPS = 8", "no assignment found"),
    ],
)
def test_unknown_shapes_conflict(binding, needle):
    assert_refused(T, module_level(binding), needle)


def test_parameter_conflicts():
    code = (
        "def context_attention_fwd(q, NUM_WARPS=8):\n"
        "    _fwd_kernel[grid](q, num_warps=NUM_WARPS)\n"
    )
    assert_refused(T, code, "parameter")


def test_no_named_launch_conflicts():
    code = "def context_attention_fwd(q):\n    _fwd_kernel[grid](q, num_warps=8)\n"
    assert_refused(T, code, "from a variable")


def test_local_binding_shadows_module_constant():
    code = module_level("NUM_WARPS = 8").replace(
        "    grid = (1, 1, 1)\n", "    grid = (1, 1, 1)\n    NUM_WARPS = 16\n"
    )
    new = plan(code).module.code
    assert "\nNUM_WARPS = 8\n" in new  # the module constant nobody launches with
    assert "    NUM_WARPS = 4\n" in new


def test_device_code_is_not_searched_for_launches():
    code = (
        "@triton.jit\n"
        "def _kernel(Q, NUM_WARPS: tl.constexpr):\n"
        "    helper[grid](Q, num_warps=NUM_WARPS)\n"
        "\n\n"
        "NUM_WARPS = 8\n"
        "\n\n"
        "def context_attention_fwd(q):\n"
        "    _kernel[grid](q, num_warps=NUM_WARPS)\n"
    )
    result = plan(code)
    assert result.status is Status.PENDING, result.reason
    assert "\nNUM_WARPS = 4\n" in result.module.code
    assert "helper[grid](Q, num_warps=NUM_WARPS)" in result.module.code


def _context(**fields):
    return TransformContext(vllm_root=Path("/nonexistent/vllm"), version=None, **fields)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_upstream_tree_is_left_as_shipped(shape):
    result = T.plan(cst.parse_module(SHAPES[shape]), _context(fork_markers=()))
    assert result.status is Status.NOT_APPLICABLE
    assert result.reason.startswith("upstream tree (no fork markers found): `")
    assert result.reason.endswith("` left as is; use --only prefix-prefill-warps to force")
    assert result.module is None
    assert result.details["num_warps"] in result.reason  # what stays, shown to the user


def test_upstream_tree_is_patched_when_named_with_only():
    after = retuned(V073, BINDINGS["0.7.3"])
    assert_codemod(T, V073, after, fork_markers=(), explicitly_selected={T.name})
    reason = assert_unchanged(
        T, V073, Status.NOT_APPLICABLE, fork_markers=(), explicitly_selected={"v2-dispatch"}
    ).reason
    assert "use --only prefix-prefill-warps to force" in reason


@pytest.mark.parametrize(
    "markers", [None, ("_custom_ops.py:71: paged_attention_v2 raises NotImplementedError",)]
)
def test_fork_or_unknown_tree_is_patched(markers):
    assert T.plan(cst.parse_module(V073), _context(fork_markers=markers)).status is (Status.PENDING)


def test_unknown_shape_on_upstream_tree_is_not_a_conflict():
    code = module_level('NUM_WARPS = int(os.environ.get("WARPS", "8"))')
    assert T.plan(cst.parse_module(code), _context()).status is Status.CONFLICT
    result = T.plan(cst.parse_module(code), _context(fork_markers=()))
    assert result.status is Status.NOT_APPLICABLE


def test_binding_sharing_a_line_is_edited_alone():
    # Before: the first statement of the line was taken as the binding: `BLOCK = 4;`
    # was written and `NUM_WARPS = 8` dropped (NameError at the first prefill).
    code = "BLOCK = 128; NUM_WARPS = 8\n\ndef context_attention_fwd(q):\n" + (
        "    _k[grid](q, BLOCK_M=BLOCK, num_warps=NUM_WARPS)\n"
    )
    after = code.replace(
        "BLOCK = 128; NUM_WARPS = 8\n",
        "# vllm-codemod: prefix-prefill-warps: was `8`; 4 warps (see docs/transforms.md)\n"
        "BLOCK = 128; NUM_WARPS = 4\n",
    )
    plan = assert_codemod(T, code, after)
    assert plan.details["BLOCK"] == "128"
    assert plan.details["num_warps"] == "NUM_WARPS = 8"


def test_bare_annotations_are_not_bindings():
    # Before: `BLOCK: int` crashed the plan (AssertionError, a traceback) and
    # `NUM_WARPS: int` counted as a second assignment (a conflict).
    code = (
        "BLOCK: int\nNUM_WARPS: int\nNUM_WARPS = 8\nBLOCK = 64\n\n"
        "def context_attention_fwd(q):\n    _k[grid](q, BLOCK_M=BLOCK, num_warps=NUM_WARPS)\n"
    )
    after = code.replace(
        "NUM_WARPS = 8\n",
        "# vllm-codemod: prefix-prefill-warps: was `8`; 4 warps (see docs/transforms.md)\n"
        "NUM_WARPS = 4\n",
    )
    assert assert_codemod(T, code, after).details["BLOCK"] == "64"


def test_binding_in_a_one_line_body_conflicts():
    # Before: `pending` with a module that still said 8: apply wrote nothing and the
    # transform stayed pending forever.
    code = "def context_attention_fwd(q): NUM_WARPS = 8; _k[grid](q, num_warps=NUM_WARPS)\n"
    assert_refused(T, code, "one-line body")

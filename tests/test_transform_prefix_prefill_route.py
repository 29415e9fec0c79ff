"""prefix-prefill-route: in-memory shapes, then the CLI on every fixture tree.

The fork goldens (``tests/snapshots/<tree>/vllm__attention__ops__prefix_prefill.py``)
carry the route by default (test_snapshots.py).  Upstream trees get it only when it is
named, so each tree's route edit alone also has a golden here,
``tests/snapshots/<tree>/prefix-prefill-route.patch`` (``diff --only
prefix-prefill-route`` without the kernel sections; regenerate as test_snapshots.py says).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemod_helpers import assert_codemod, assert_refused, assert_unchanged, run_codemod
from treeutil import FIXTURES, copy_fixture, snapshot
from vllm_codemod.cli import cli
from vllm_codemod.transforms import ALL_TRANSFORMS, get_transform
from vllm_codemod.transforms.base import Status
from vllm_codemod.transforms.paged_attention_v2 import KERNEL_DIR, bundled_kernel_files

T = get_transform("prefix-prefill-route")
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
UPDATE = os.environ.get("VLLM_CODEMOD_UPDATE_SNAPSHOTS") == "1"
TARGET = "vllm/attention/ops/prefix_prefill.py"

MARK = (
    "# vllm-codemod: prefix-prefill-route: bundled prefix-prefill kernel first "
    "(vllm/_codemod_kernels); the body below runs what it declines"
)
IMPORT = "from vllm._codemod_kernels import context_attention_fwd as _codemod_context_attention_fwd"


def _filled(code: str) -> str:
    """The marker and import lines are too long to write inline."""
    return code.replace("<MARK>", MARK).replace("<IMPORT>", IMPORT)


BODY = """\
    BLOCK = 64
    grid = (1, 1, 1)
    _fwd_kernel[grid](q, k, BLOCK_M=BLOCK, num_warps=NUM_WARPS)
    return
"""

V08 = (
    """\
import torch

NUM_WARPS = 8


@torch.inference_mode()
def context_attention_fwd(q,
                          k,
                          v,
                          o,
                          kv_cache_dtype: str,
                          k_cache,
                          v_cache,
                          b_loc,
                          b_start_loc,
                          b_seq_len,
                          max_seq_len,
                          max_input_len,
                          k_scale: torch.Tensor,
                          v_scale: torch.Tensor,
                          alibi_slopes=None,
                          sliding_window=None,
                          sm_scale=None,
                          skip_decode=False):

"""
    + BODY
)

ROUTE_08 = """\
    <MARK>
    <IMPORT>
    if _codemod_context_attention_fwd(
        q=q,
        k=k,
        v=v,
        o=o,
        kv_cache_dtype=kv_cache_dtype,
        k_cache=k_cache,
        v_cache=v_cache,
        b_loc=b_loc,
        b_start_loc=b_start_loc,
        b_seq_len=b_seq_len,
        max_seq_len=max_seq_len,
        max_input_len=max_input_len,
        k_scale=k_scale,
        v_scale=v_scale,
        alibi_slopes=alibi_slopes,
        sliding_window=sliding_window,
        sm_scale=sm_scale,
        skip_decode=skip_decode,
    ):
        return
"""
ROUTE_08 = _filled(ROUTE_08)

V08_AFTER = V08.replace("skip_decode=False):\n", "skip_decode=False):\n" + ROUTE_08, 1)


def test_routes_the_08_signature_by_name_keeping_decorator_and_body():
    plan = assert_codemod(T, V08, V08_AFTER)
    assert plan.added_files == bundled_kernel_files()
    assert f"{KERNEL_DIR}/prefill.py" in plan.added_files


def test_under_the_triton_version_check_of_older_releases():
    before = """\
        import triton

        if triton.__version__ >= "2.1.0":

            @triton.jit
            def _fwd_kernel(Q):
                pass

            def context_attention_fwd(q, k, v, o, k_cache, v_cache, b_loc, b_start_loc,
                                      b_seq_len, b_ctx_len, max_input_len,
                                      alibi_slopes=None, sliding_window=None):
                _fwd_kernel[(1,)](q, num_warps=8)
        """
    after = """\
        import triton

        if triton.__version__ >= "2.1.0":

            @triton.jit
            def _fwd_kernel(Q):
                pass

            def context_attention_fwd(q, k, v, o, k_cache, v_cache, b_loc, b_start_loc,
                                      b_seq_len, b_ctx_len, max_input_len,
                                      alibi_slopes=None, sliding_window=None):
                <MARK>
                <IMPORT>
                if _codemod_context_attention_fwd(
                    q=q,
                    k=k,
                    v=v,
                    o=o,
                    k_cache=k_cache,
                    v_cache=v_cache,
                    b_loc=b_loc,
                    b_start_loc=b_start_loc,
                    b_seq_len=b_seq_len,
                    b_ctx_len=b_ctx_len,
                    max_input_len=max_input_len,
                    alibi_slopes=alibi_slopes,
                    sliding_window=sliding_window,
                ):
                    return
                _fwd_kernel[(1,)](q, num_warps=8)
        """
    assert_codemod(T, before, _filled(after))


def test_docstring_stays_first():
    before = '''\
        def context_attention_fwd(q, k, v, o, k_cache, v_cache, b_loc, b_start_loc, b_seq_len,
                                  b_ctx_len, max_input_len):
            """Prefill."""
            _fwd_kernel[(1,)](q)
        '''
    plan = run_codemod(T, before)
    assert plan.status is Status.PENDING
    code = plan.module.code
    assert code.index('"""Prefill."""') < code.index("# vllm-codemod: prefix-prefill-route")
    assert code.index("return\n") < code.index("_fwd_kernel[(1,)](q)")


def test_varargs_fork_forwards_positions_and_keywords():
    before = """\
        def context_attention_fwd(q, k, v, o, *args, **kwargs):
            _fwd_kernel[(1,)](q)
        """
    plan = run_codemod(T, before)
    assert plan.status is Status.PENDING, plan.reason
    code = plan.module.code
    call = code[code.index("if _codemod_context_attention_fwd(") : code.index("):\n        return")]
    assert [a.strip() for a in call.splitlines()[1:] if a.strip()] == [
        "q,",
        "k,",
        "v,",
        "o,",
        "*args,",
        "**kwargs,",
    ]
    assert run_codemod(T, code).status is Status.APPLIED


def test_keyword_only_parameters_after_varargs_go_by_name():
    plan = run_codemod(
        T,
        """\
        def context_attention_fwd(*args, sinks=None):
            _fwd_kernel[(1,)](args)
        """,
    )
    assert plan.status is Status.PENDING
    assert "*args,\n        sinks=sinks,\n" in plan.module.code


def test_a_reformatted_route_is_applied():
    squeezed = V08_AFTER.replace(
        ROUTE_08.split("\n", 3)[3],
        "        q=q, k=k, v=v, o=o, kv_cache_dtype=kv_cache_dtype, k_cache=k_cache,\n"
        "        v_cache=v_cache, b_loc=b_loc, b_start_loc=b_start_loc, b_seq_len=b_seq_len,\n"
        "        max_seq_len=max_seq_len, max_input_len=max_input_len, k_scale=k_scale,\n"
        "        v_scale=v_scale, alibi_slopes=alibi_slopes, sliding_window=sliding_window,\n"
        "        sm_scale=sm_scale, skip_decode=skip_decode):\n"
        "        return\n",
    )
    assert squeezed != V08_AFTER
    assert_unchanged(T, squeezed, Status.APPLIED)


def test_a_stale_route_is_regenerated_not_stacked():
    """The fork's signature grew ``sinks`` after the route was written."""
    stale = V08_AFTER.replace("skip_decode=False):", "skip_decode=False,\n    sinks=None):")
    plan = run_codemod(T, stale)
    assert plan.status is Status.PENDING
    code = plan.module.code
    assert code.count("from vllm._codemod_kernels import") == 1
    assert code.count("# vllm-codemod: prefix-prefill-route") == 1
    assert "        sinks=sinks,\n" in code
    assert run_codemod(T, code).status is Status.APPLIED


def test_upstream_trees_are_left_alone_unless_named():
    plan = assert_unchanged(T, V08, Status.NOT_APPLICABLE, fork_markers=())
    assert "--only prefix-prefill-route" in plan.reason
    forced = run_codemod(T, V08, fork_markers=(), explicitly_selected={T.name})
    assert forced.status is Status.PENDING
    assert run_codemod(T, V08, fork_markers=("corex label",)).status is Status.PENDING


@pytest.mark.parametrize(
    "code,needle",
    [
        ("def other(q):\n    _k[(1,)](q)\n", "no `def context_attention_fwd`"),
        (
            "if a:\n    def context_attention_fwd(q):\n        _k[(1,)](q)\n"
            "else:\n    def context_attention_fwd(q):\n        _k[(1,)](q)\n",
            "2 definitions",
        ),
        (
            V08.replace(BODY, "    ixformer.context_attention_fwd(q, k, v, o)\n"),
            "launches no Triton kernel",
        ),
        (V08.replace("    return\n", "    return o\n"), "returns a value"),
        (V08.replace("skip_decode=False)", "skip_decode=False, foo=None)"), "'foo'"),
        (V08.replace("    b_loc,\n", ""), "no parameter b_loc"),
        (V08.replace("    max_seq_len,\n", ""), "exactly one of b_ctx_len / max_seq_len"),
        ("def context_attention_fwd(q, k_cache, *args):\n    _k[(1,)](q)\n", "not in the order"),
        ("async def context_attention_fwd(q):\n    _k[(1,)](q)\n", "async"),
        ("def context_attention_fwd(q): _k[(1,)](q)\n", "one-line"),
    ],
    ids=[
        "no-function",
        "two-definitions",
        "vendor-body",
        "returns-value",
        "unknown-parameter",
        "missing-parameter",
        "no-context-spelling",
        "misplaced-position",
        "async",
        "one-line",
    ],
)
def test_unknown_shapes_are_refused(code, needle):
    assert_refused(T, code, needle)


def test_registered_after_the_warps_transform():
    names = [t.name for t in ALL_TRANSFORMS]
    assert names.index("prefix-prefill-route") == names.index("prefix-prefill-warps") + 1


# ---- the CLI on every fixture tree -------------------------------------------------


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _trees():
    return [
        f"{group}/{d.name}"
        for group in ("upstream", "bi-v100")
        for d in sorted((FIXTURES / group).iterdir())
        if (d / "vllm").is_dir()
    ]


def _kernel_sections_dropped(text: str) -> str:
    sections = re.split(r"(?m)^(?=diff --git )", text)
    return "".join(s for s in sections if f"a/vllm/{KERNEL_DIR}/" not in s.split("\n", 1)[0])


@pytest.mark.parametrize("tree", [t for t in _trees() if t != "bi-v100/corex-unknown-shape"])
def test_route_alone_on_every_tree(tree, tmp_path):
    site = copy_fixture(tree, tmp_path)
    pristine = snapshot(site)
    only = ("--only", T.name)
    diff = run("diff", "--site-packages", str(site), *only)
    assert diff.exit_code == 1, diff.output
    golden = SNAPSHOTS / tree.split("/", 1)[1] / "prefix-prefill-route.patch"
    edited = _kernel_sections_dropped(diff.output).encode()
    if UPDATE:
        golden.write_bytes(edited)
    assert edited == golden.read_bytes(), f"{golden.name} of {tree} differs"
    assert len(re.findall(rb"(?m)^\+ +return$", edited)) == 1  # one route, one function
    assert snapshot(site) == pristine

    applied = run("apply", "--site-packages", str(site), *only)
    assert applied.exit_code == 0, applied.output
    # the route ships the kernels itself (paged-attention-v2 did not run)
    for rel, data in bundled_kernel_files().items():
        assert (site / "vllm" / rel).read_bytes() == data
    patched = snapshot(site)
    again = run("apply", "--site-packages", str(site), *only)
    assert again.exit_code == 0 and "nothing to do" in again.output
    assert snapshot(site) == patched
    assert run("check", "--site-packages", str(site), *only).exit_code == 0
    back = run("revert", "--site-packages", str(site))
    assert back.exit_code == 0, back.output
    assert snapshot(site) == pristine


def test_unknown_shape_fork_is_routable_alone(tmp_path):
    """Its prefix_prefill.py has a known signature (only its NUM_WARPS is unknown)."""
    site = copy_fixture("bi-v100/corex-unknown-shape", tmp_path)
    check = run("check", "--site-packages", str(site), "--only", T.name)
    assert check.exit_code == 1, check.output
    assert "prefix-prefill-route  pending" in check.output


def test_skip_leaves_the_route_out(tmp_path):
    site = copy_fixture("bi-v100/corex-0.8.3", tmp_path)
    result = run("apply", "--site-packages", str(site), "--skip", T.name)
    assert result.exit_code == 0, result.output
    text = (site / TARGET).read_text()
    assert "_codemod_context_attention_fwd" not in text
    assert "\nNUM_WARPS = 4\n" in text  # the warps transform still ran


def test_skipping_paged_attention_v2_still_ships_the_kernels(tmp_path):
    site = copy_fixture("bi-v100/corex-0.8.3", tmp_path)
    skip = ("--skip", "paged-attention-v2", "--skip", "v2-dispatch")  # v2-dispatch needs it
    result = run("apply", "--site-packages", str(site), *skip)
    assert result.exit_code == 0, result.output
    assert "_codemod_context_attention_fwd" in (site / TARGET).read_text()
    assert "raise NotImplementedError" in (site / "vllm/_custom_ops.py").read_text()
    for rel, data in bundled_kernel_files().items():
        assert (site / "vllm" / rel).read_bytes() == data


def test_list_shows_it():
    result = run("list")
    assert result.exit_code == 0
    assert T.name in result.output

"""v2-dispatch on in-memory sources: hardcode shapes, retuning, idempotency, refusals."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from codemod_helpers import assert_codemod, assert_refused, assert_unchanged
from vllm_codemod.transforms import get_transform
from vllm_codemod.transforms.base import Status, TransformContext
from vllm_codemod.transforms.v2_dispatch import heuristic_threshold

T = get_transform("v2-dispatch")

UPSTREAM_HEURISTIC = """\
use_v1 = (max_seq_len <= 8192
          and (max_num_partitions == 1 or num_seqs * num_heads > 512))
"""
PRELUDE = """\
output = torch.empty_like(query)
block_size = value_cache.shape[3]
num_seqs, num_heads, head_size = query.shape
max_num_partitions = ((max_seq_len + _PARTITION_SIZE - 1) //
                      _PARTITION_SIZE)
# NOTE(woosuk): We use a simple heuristic to decide whether to use
# PagedAttention V1 or V2.
"""
AFTER = """\

if use_v1:
    # Run PagedAttention V1.
    ops.paged_attention_v1(output, query)
else:
    ops.paged_attention_v2(output, query)
return output
"""
HEAD = """\
from typing import Optional

import torch

_PARTITION_SIZE = 512


class PagedAttention:

    @staticmethod
    def forward_decode(
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        block_tables: torch.Tensor,
        {LEN_NAME}: torch.Tensor,
        max_seq_len: int,
        kv_scale: float,
    ) -> torch.Tensor:
"""
TAIL = """
    @staticmethod
    def forward_prefix(query: torch.Tensor) -> torch.Tensor:
        use_v1 = True  # another method: not ours
        return query
"""


def source(
    decision: str, prelude: str = PRELUDE, after: str = AFTER, len_name: str = "seq_lens"
) -> str:
    body = textwrap.indent(prelude + decision + after, " " * 8)
    return HEAD.replace("{LEN_NAME}", len_name) + body + TAIL


def plan(code: str, threshold=None):
    options = {} if threshold is None else {"v2_threshold": threshold}
    ctx = TransformContext(vllm_root=Path("/nonexistent/vllm"), version=None, options=options)
    return T.plan(cst.parse_module(code), ctx)


def decision_lines(code: str):
    """The use_v1 lines and the marker lines of forward_decode, stripped."""
    method = code.split("def forward_decode")[1].split("def forward_prefix")[0]
    return [
        line.strip()
        for line in method.splitlines()
        if line.strip().startswith(("use_v1", "# vllm-codemod", "and ("))
    ]


HEURISTIC_8192 = (
    "use_v1 = max_seq_len <= 8192 and (max_num_partitions == 1 or num_seqs * num_heads > 512)"
)

HARDCODES = {
    "plain": "use_v1 = True\n",
    "trailing-comment": "use_v1 = True  # V2 not supported on BI-V100\n",
    "commented-out-heuristic": (
        "# use_v1 = (max_seq_len <= 8192\n"
        "#           and (max_num_partitions == 1 or num_seqs * num_heads > 512))\n"
        "use_v1 = True  # V2 not supported on BI-V100\n"
    ),
    "annotated": "use_v1: bool = True\n",
    "dead-true-then-true": "use_v1 = True\nuse_v1 = True\n",
}


@pytest.mark.parametrize("style", sorted(HARDCODES))
def test_hardcoded_true_becomes_the_heuristic(style):
    code = source(HARDCODES[style])
    result = plan(code)
    assert result.status is Status.PENDING, result.reason
    new = result.module.code
    compile(new, "x", "exec")
    lines = decision_lines(new)
    assert lines[-2].startswith("# vllm-codemod: v2-dispatch: was `use_v1 = True`")
    assert lines[-1] in (HEURISTIC_8192, HEURISTIC_8192.replace("use_v1 =", "use_v1: bool ="))
    assert "V2 not supported" not in new.split("def forward_prefix")[0].split("# use_v1")[-1]
    if "commented-out" in style:
        assert "# use_v1 = (max_seq_len <= 8192\n" in new  # comments are left alone
    # everything outside the edited statement is byte-identical
    before = code.split("use_v1")[0]
    assert new.startswith(before)
    assert new.endswith(textwrap.indent(AFTER, " " * 8) + TAIL)
    again = plan(new)
    assert again.status is Status.APPLIED and again.module is None


@pytest.mark.parametrize("comment", ["", "  # BI-V100: ixuca has no paged_attention_v2 kernel"])
def test_override_after_the_heuristic_is_removed(comment):
    result = assert_codemod(
        T,
        source(UPSTREAM_HEURISTIC + f"use_v1 = True{comment}\n"),
        source(
            UPSTREAM_HEURISTIC
            + "# vllm-codemod: v2-dispatch: removed `use_v1 = True` that overrode the heuristic "
            "(forced V1)\n"
        ),
    )
    assert "overridden" in result.reason


def test_override_comments_are_kept_with_the_marker():
    code = source(UPSTREAM_HEURISTIC + "# CoreX: force V1\nuse_v1 = True\n")
    new = plan(code).module.code
    assert "        # CoreX: force V1\n        # vllm-codemod: v2-dispatch: removed" in new


def test_override_comments_are_kept_when_the_override_was_last():
    # Nothing follows the override: its comments go above the heuristic with the marker.
    code = source(UPSTREAM_HEURISTIC + "# CoreX: force V1\nuse_v1 = True\n", after="")
    new = plan(code).module.code
    assert "        # CoreX: force V1\n        # vllm-codemod: v2-dispatch: removed" in new
    assert plan(new).status is Status.APPLIED


def test_upstream_heuristic_is_applied():
    assert "8192" in assert_unchanged(T, source(UPSTREAM_HEURISTIC)).reason


RETUNED_4096 = """\
# vllm-codemod: v2-dispatch: V1/V2 threshold 8192 -> 4096 tokens
use_v1 = (max_seq_len <= 4096
          and (max_num_partitions == 1 or num_seqs * num_heads > 512))
"""


def test_heuristic_with_another_threshold_is_retuned():
    new = assert_codemod(
        T, source(UPSTREAM_HEURISTIC), source(RETUNED_4096), v2_threshold=4096
    ).module.code
    # and back: the marker is replaced, not stacked
    assert_codemod(
        T,
        new,
        source(RETUNED_4096.replace("8192 -> 4096", "4096 -> 8192").replace("<= 4096", "<= 8192")),
        v2_threshold=8192,
    )


def test_hardcode_with_custom_threshold_and_idempotent():
    marker = (
        "# vllm-codemod: v2-dispatch: was `use_v1 = True`; upstream heuristic, V2 above "
        "16384 tokens\n"
    )
    heuristic = HEURISTIC_8192.replace("8192", "16384") + "\n"
    new = assert_codemod(
        T, source("use_v1 = True\n"), source(marker + heuristic), v2_threshold=16384
    ).module.code
    assert plan(new).status is Status.PENDING  # default 8192 differs: retune


def test_override_and_retune_together():
    code = source(UPSTREAM_HEURISTIC + "use_v1 = True\n")
    new = plan(code, threshold=2048).module.code
    lines = decision_lines(new)
    assert lines == [
        "# vllm-codemod: v2-dispatch: V1/V2 threshold 8192 -> 2048 tokens",
        "use_v1 = (max_seq_len <= 2048",
        "and (max_num_partitions == 1 or num_seqs * num_heads > 512))",
        "# vllm-codemod: v2-dispatch: removed `use_v1 = True` that overrode the heuristic "
        "(forced V1)",
    ]


def test_0_4_style_names_are_used_when_that_is_what_the_function_binds():
    prelude = PRELUDE.replace("max_seq_len", "max_context_len")
    code = source("use_v1 = True\n", prelude=prelude, len_name="context_lens")
    code = code.replace("max_seq_len: int,", "max_context_len: int,")
    new = plan(code).module.code
    assert "use_v1 = max_context_len <= 8192 and (max_num_partitions == 1" in new
    compile(new, "x", "exec")


@pytest.mark.parametrize(
    "prelude, missing",
    [
        (PRELUDE.replace("max_num_partitions = ", "partitions = "), "max_num_partitions"),
        (PRELUDE.replace("num_seqs, num_heads, head_size", "batch, heads, head_size"), "num_seqs"),
        (
            PRELUDE.replace(
                "num_seqs, num_heads, head_size = query.shape",
                "if query is not None:\n    num_seqs, num_heads, head_size = query.shape",
            ),
            "num_seqs",
        ),
    ],
)
def test_unbound_names_conflict(prelude, missing):
    assert_refused(T, source("use_v1 = True\n", prelude=prelude), missing, "NameError")


def test_names_bound_after_the_hardcode_do_not_count():
    prelude = PRELUDE.replace("max_num_partitions = ", "later = ")
    after = "max_num_partitions = 1\n" + AFTER
    assert_refused(T, source("use_v1 = True\n", prelude=prelude, after=after), "max_num_partitions")


def test_missing_length_name_conflicts():
    code = source("use_v1 = True\n").replace("max_seq_len: int,", "longest: int,")
    code = code.replace("max_num_partitions = ((max_seq_len", "max_num_partitions = ((longest")
    assert_refused(T, code, "max_seq_len or max_context_len")


@pytest.mark.parametrize(
    "decision",
    [
        "use_v1 = _ixuca_use_v1(max_seq_len)\n",
        "use_v1 = False\n",
        "use_v1 = envs.VLLM_USE_V1_PAGED_ATTN\n",
        "use_v1 = max_seq_len <= 8192\n",
        UPSTREAM_HEURISTIC + "use_v1 = use_v1 or is_corex()\n",
    ],
)
def test_unknown_shapes_conflict(decision):
    assert_refused(T, source(decision), "unknown shape")


@pytest.mark.parametrize(
    "decision, needle",
    [
        ("if is_corex():\n    use_v1 = True\nelse:\n    use_v1 = False\n", "nested block"),
        (UPSTREAM_HEURISTIC + "if is_corex():\n    use_v1 = True\n", "nested block"),
        ("use_v1, other = True, 1\n", "not a plain assignment"),
        ("use_v1 = flag = True\n", "not a plain assignment"),
        ("pass\n", "never assigns use_v1"),
    ],
)
def test_other_refusals(decision, needle):
    assert_refused(T, source(decision), needle)


def test_missing_method_conflicts():
    assert_refused(T, "class PagedAttention:\n    pass\n", "PagedAttention.forward_decode")


def test_other_methods_and_classes_are_untouched():
    code = source("use_v1 = True\n") + "\n\nclass Other:\n    def forward_decode(self):\n"
    code += "        use_v1 = True\n"
    new = plan(code).module.code
    assert new.endswith(
        TAIL + "\n\nclass Other:\n    def forward_decode(self):\n        use_v1 = True\n"
    )
    assert "use_v1 = True  # another method: not ours" in new


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("max_seq_len <= 8192 and (max_num_partitions == 1 or num_seqs * num_heads > 512)", 8192),
        ("(max_context_len <= 4096\n and (a == 1 or b * c > 512))", 4096),
        ("max_seq_len < 8192 and (a or b)", None),
        ("True", None),
        ("max_seq_len <= limit and (a or b)", None),
    ],
)
def test_heuristic_matcher(expr, expected):
    assert heuristic_threshold(cst.parse_expression(expr)) == expected


def _markers_of(tmp_path: Path, code: str):
    from vllm_codemod.transforms.fork_markers import find_fork_markers

    target = tmp_path / "vllm" / "attention" / "ops" / "paged_attn.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(code)
    return find_fork_markers(tmp_path / "vllm", None)


def test_retuning_a_patched_hardcode_keeps_its_record(tmp_path):
    # Before: `apply --v2-threshold 4096` on a tree patched at 8192 replaced the marker
    # `was use_v1 = True` by `threshold 8192 -> 4096`: the file forgot it was a fork's, and
    # fork_markers.py (which looks for that marker) then took the tree for upstream.
    patched = plan(source("use_v1 = True\n")).module.code
    marker = "# vllm-codemod: v2-dispatch: was `use_v1 = True`; upstream heuristic, V2 above "
    heuristic = HEURISTIC_8192.replace("8192", "4096") + "\n"
    new = assert_codemod(
        T, patched, source(marker + "4096 tokens\n" + heuristic), v2_threshold=4096
    ).module.code
    assert _markers_of(tmp_path, new)


def test_retuning_keeps_the_removed_override_marker_above_the_heuristic(tmp_path):
    # The override was the method's last statement, so its marker went above the heuristic.
    code = source(UPSTREAM_HEURISTIC + "use_v1 = True\n", after="")
    patched = plan(code).module.code
    assert _markers_of(tmp_path, patched)
    new = plan(patched, threshold=4096).module.code
    assert decision_lines(new) == [
        "# vllm-codemod: v2-dispatch: removed `use_v1 = True` that overrode the heuristic "
        "(forced V1)",
        "# vllm-codemod: v2-dispatch: V1/V2 threshold 8192 -> 4096 tokens",
        "use_v1 = (max_seq_len <= 4096",
        "and (max_num_partitions == 1 or num_seqs * num_heads > 512))",
    ]
    assert _markers_of(tmp_path, new)
    assert plan(new, threshold=4096).status is Status.APPLIED

"""Excerpt parsing: only anchored statements reach libcst, the rest stays byte-exact."""

from __future__ import annotations

import libcst as cst
import pytest

from vllm_codemod.excerpt import make_excerpt


class RenameTarget(cst.CSTTransformer):
    def leave_Name(self, original_node, updated_node):
        return updated_node.with_changes(value="NEW") if updated_node.value == "X" else updated_node


def roundtrip(source: str, anchors) -> str:
    excerpt = make_excerpt(source, anchors)
    assert excerpt is not None
    module = excerpt.parse()
    changed = module.visit(RenameTarget())
    result = excerpt.splice(module, changed)
    assert result is not None
    return result


SOURCE = (
    "import os  # keep\n"
    "\n"
    "# comment above f\n"
    "@decorator(\n"
    "    arg)\n"
    "def f():\n"
    "    X = 1\n"
    "    return X\n"
    "\n"
    "a = 1; X = 2\n"
    "if cond:\n"
    "    def g():\n"
    "        return X\n"
    "y = X  # not anchored\n"
)


def test_only_anchored_statements_change():
    result = roundtrip(SOURCE, ["f", "g"])
    expected = SOURCE.replace("    X = 1\n    return X", "    NEW = 1\n    return NEW")
    expected = expected.replace("        return X", "        return NEW")
    assert result == expected


def test_statements_sharing_a_line_travel_together():
    excerpt = make_excerpt(SOURCE, ["a"])
    assert excerpt.text == "\na = 1; X = 2\n"
    assert roundtrip(SOURCE, ["a"]) == SOURCE.replace("a = 1; X = 2", "a = 1; NEW = 2")


def test_decorators_are_part_of_the_statement():
    assert make_excerpt(SOURCE, ["f"]).text.startswith("\n# comment above f\n@decorator(\n")


def _comments(statement: cst.CSTNode):
    return [line.comment.value if line.comment else "" for line in statement.leading_lines]


def test_the_comment_lines_above_a_statement_are_its_leading_lines_as_in_the_whole_file():
    source = (
        "# the file's header\n"
        "import os\n"
        "\n"
        "# about B\n"
        "B = 1\n"
        "def f():\n"
        "    pass\n"
        "    # f's footer, indented\n"
        "# about C\n"
        "\n"
        "C = 2\n"
    )
    full = cst.parse_module(source).body
    excerpt = make_excerpt(source, ["B", "C"])
    module = excerpt.parse()
    assert module.header == ()  # moved onto the first chosen statement
    assert [_comments(s) for s in module.body] == [_comments(full[1]), _comments(full[3])]
    assert [_comments(s) for s in module.body] == [["", "# about B"], ["# about C", ""]]
    assert excerpt.splice(module, module) == source


def test_the_files_own_header_and_an_indented_footer_stay_outside():
    source = "# header\nA = 1\nif x:\n    pass\n    # the if's\nB = 2\n"
    assert make_excerpt(source, ["A"]).text == "A = 1\n"
    assert make_excerpt(source, ["B"]).text == "B = 2\n"
    # whitespace-only and form-feed lines may be a block's footer in libcst: not taken
    assert make_excerpt("if x:\n    pass\n    \n# c\nB = 2\n", ["B"]).text == "# c\nB = 2\n"


def test_a_comment_above_a_statement_can_be_replaced_in_place():
    source = "import os\n\n# old marker\nX = 1\n\ny = 2\n"
    excerpt = make_excerpt(source, ["X"])
    module = excerpt.parse()
    (statement,) = module.body
    new = statement.with_changes(
        leading_lines=[cst.EmptyLine(), cst.EmptyLine(comment=cst.Comment("# new marker"))]
    )
    changed = module.with_changes(body=[new])
    assert excerpt.splice(module, changed) == source.replace("old marker", "new marker")


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_other_line_endings(newline):
    source = SOURCE.replace("\n", newline)
    assert roundtrip(source, ["f"]) == source.replace("X = 1", "NEW = 1").replace(
        f"return X{newline}{newline}a", f"return NEW{newline}{newline}a"
    )


def test_missing_final_newline():
    source = "z = 0\ndef f():\n    return X"
    assert roundtrip(source, ["f"]) == "z = 0\ndef f():\n    return NEW"


def test_no_anchor_or_broken_source_means_no_excerpt():
    assert make_excerpt(SOURCE, ["nothing_here"]) is None
    assert make_excerpt("def f(:\n", ["f"]) is None


def test_changing_the_statement_count_cannot_be_spliced():
    excerpt = make_excerpt(SOURCE, ["f"])
    module = excerpt.parse()
    grown = module.with_changes(body=[*module.body, cst.parse_statement("z = 3\n")])
    assert excerpt.splice(module, grown) is None


def test_form_feed_is_not_a_line_break():
    source = "a = 1\n\x0c\ndef f():\n    return X  # \x0c inside\n"
    assert roundtrip(source, ["f"]) == source.replace("return X", "return NEW")


GUARDED = (
    '"""A module whose code sits in one if, as vLLM 0.4-0.8 prefix_prefill.py does."""\n'
    "import triton\n"
    "\n"
    "if triton.__version__ >= '2.1.0':  # guard\n"
    "    # about the kernel\n"
    "    @triton.jit\n"
    "    def kernel():\n"
    "        return X\n"
    "\n"
    "    # about f\n"
    "    def f():\n"
    "        X = 1\n"
    "        return X\n"
    "    # between\n"
    "    def g():\n"
    "        return X\n"
    "# after the if\n"
)


def whole_file(source: str) -> str:
    return cst.parse_module(source).visit(RenameTarget()).code


def test_a_module_level_if_is_pruned_to_its_anchored_children():
    excerpt = make_excerpt(GUARDED, ["f"])
    assert excerpt.pruned  # the if's other children are not parsed
    assert "def kernel" not in excerpt.text and "def g" not in excerpt.text
    assert "# about f" in excerpt.text and "if triton.__version__" in excerpt.text
    result = roundtrip(GUARDED, ["f"])
    expected = GUARDED.replace("X = 1\n        return X", "NEW = 1\n        return NEW")
    assert result == expected
    both = roundtrip(GUARDED, ["f", "g"])  # two children, a comment between them
    assert both == whole_file(GUARDED).replace(
        "def kernel():\n        return NEW", "def kernel():\n        return X"
    )


def test_a_pruned_if_whose_own_line_changed_is_planned_on_the_whole_file():
    excerpt = make_excerpt(GUARDED, ["f"])
    module = excerpt.parse()
    guard = module.body[0]
    changed = module.with_changes(body=[guard.with_changes(test=cst.parse_expression("True"))])
    assert excerpt.splice(module, changed) is None


def test_an_if_with_an_else_or_every_child_anchored_is_not_pruned():
    with_else = GUARDED.replace("# after the if\n", "else:\n    pass\n")
    assert not make_excerpt(with_else, ["f"]).pruned
    assert roundtrip(with_else, ["f"]) == whole_file(with_else)  # the whole if, renamed
    assert not make_excerpt(GUARDED, ["kernel", "f", "g"]).pruned


def test_the_vendored_prefix_prefill_of_0_8_3_is_pruned():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / (
        "vendor_fixtures/bi-v100/corex-0.8.3/vllm/attention/ops/prefix_prefill.py"
    )
    source = path.read_text()
    excerpt = make_excerpt(source, ["context_attention_fwd"])
    assert excerpt.pruned and len(excerpt.text) < len(source) / 2

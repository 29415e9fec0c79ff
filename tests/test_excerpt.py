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

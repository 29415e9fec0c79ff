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
    module = cst.parse_module(excerpt.text)
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
    assert excerpt.text == "a = 1; X = 2\n"
    assert roundtrip(SOURCE, ["a"]) == SOURCE.replace("a = 1; X = 2", "a = 1; NEW = 2")


def test_decorators_are_part_of_the_statement():
    assert make_excerpt(SOURCE, ["f"]).text.startswith("@decorator(\n")


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
    module = cst.parse_module(excerpt.text)
    grown = module.with_changes(body=[*module.body, cst.parse_statement("z = 3\n")])
    assert excerpt.splice(module, grown) is None


def test_form_feed_is_not_a_line_break():
    source = "a = 1\n\x0c\ndef f():\n    return X  # \x0c inside\n"
    assert roundtrip(source, ["f"]) == source.replace("return X", "return NEW")

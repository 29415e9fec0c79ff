"""codemod_helpers catches what it is there to catch (a helper that cannot fail is no test)."""

from __future__ import annotations

from typing import ClassVar, Tuple

import libcst as cst
import pytest
from packaging.specifiers import SpecifierSet

from codemod_helpers import assert_codemod, assert_refused, assert_unchanged
from vllm_codemod.transforms.base import Option, Status, Transform, TransformContext, Verdict


class AppendLine(Transform):
    """Appends ``x = 1`` unless present; with ``again`` it appends every time."""

    name = "append-line"
    description = "test double"
    target = "x.py"
    known_versions = SpecifierSet(">=0")
    options: ClassVar[Tuple[Option, ...]] = (
        Option("again", "--again", bool, False, "append even when present"),
        Option("line", "--line", str, "x = 1\n", "the line to append"),
    )

    def plan(self, module: cst.Module, context: TransformContext) -> Verdict:
        line = context.option(self, "line")
        if line in module.code and not context.option(self, "again"):
            return Verdict(Status.APPLIED, "present")
        if "refuse" in module.code:
            return Verdict(Status.CONFLICT, "asked to refuse")
        if "(" in line:  # a line that does not parse: the "module" is hand-made
            return Verdict(Status.PENDING, "broken", module=_Broken(module.code + line))
        return Verdict(Status.PENDING, "append", module=cst.parse_module(module.code + line))


class _Broken:
    """Quacks like a cst.Module whose code does not compile."""

    def __init__(self, code: str) -> None:
        self.code = code


T = AppendLine()


def test_a_correct_edit_passes():
    plan = assert_codemod(T, "y = 2\n", "y = 2\nx = 1\n")
    assert plan.reason == "append"
    assert_unchanged(T, "x = 1\n")
    assert_refused(T, "refuse = 1\n", "asked to refuse")


def test_inputs_are_dedented():
    assert_codemod(T, "    y = 2\n", "    y = 2\n    x = 1\n")


def test_wrong_output_fails():
    with pytest.raises(AssertionError, match="expected -> actual"):
        assert_codemod(T, "y = 2\n", "y = 2\nx = 2\n")


def test_a_second_run_that_changes_again_fails():
    with pytest.raises(AssertionError, match="not idempotent"):
        assert_codemod(T, "y = 2\n", "y = 2\nx = 1\n", again=True)


def test_output_that_does_not_compile_fails():
    with pytest.raises(SyntaxError):
        assert_codemod(T, "y = 2\n", "y = 2\nx = (\n", line="x = (\n")


def test_unknown_option_is_a_test_bug():
    with pytest.raises(TypeError, match="no option"):
        assert_codemod(T, "y = 2\n", "y = 2\nx = 1\n", num_warps=4)


def test_refusal_checks_the_reason():
    with pytest.raises(AssertionError, match="not in"):
        assert_refused(T, "refuse = 1\n", "something else")
    with pytest.raises(AssertionError, match="pending"):
        assert_refused(T, "y = 2\n")

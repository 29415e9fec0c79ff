"""Transforms that ship the same bundle: the files are written once, and leaving one of
the transforms out still ships them while another one is on."""

from __future__ import annotations

import libcst as cst
import pytest
from packaging.specifiers import SpecifierSet
from test_transaction import make_site

import vllm_codemod.engine as engine
from vllm_codemod.discovery import locate_tree
from vllm_codemod.errors import CodemodError
from vllm_codemod.transforms.base import Bundle, Status, Transform, Verdict

BUNDLE = Bundle(directory="_codemod_kernels", tuning_file="tuning.json")
KERNELS = {"_codemod_kernels/__init__.py": b"K = 1\n", "_codemod_kernels/k.py": b"K = 2\n"}


class Footer(Transform):
    """Appends its own footer to a target and ships the shared bundle."""

    known_versions = SpecifierSet(">=0")
    description = "test transform"
    bundle = BUNDLE

    def __init__(self, name: str, target: str, kernels=None) -> None:
        self.name, self.target, self.kernels = name, target, kernels or KERNELS

    def plan(self, module, context):
        footer = f"# {self.name}\n"
        files = BUNDLE.with_tuning_table(dict(self.kernels), context)
        if module.code.endswith(footer):
            return Verdict(Status.APPLIED, "footer present", added_files=files)
        new = cst.parse_module(module.code + footer)
        return Verdict(Status.PENDING, "footer missing", module=new, added_files=files)


@pytest.fixture
def site(tmp_path):
    site = make_site(tmp_path)
    (site / "vllm" / "other.py").write_text("x = 1\n")
    return site


def transforms(**kernels):
    return [Footer("one", "_custom_ops.py", kernels.get("one")), Footer("two", "other.py")]


def test_two_transforms_shipping_one_bundle_write_it_once(site):
    plan = engine.plan(locate_tree(site, None), registry=transforms())
    added = [c for c in plan.changes if c.added]
    assert sorted(c.path for c in added) == [
        "vllm/_codemod_kernels/__init__.py",
        "vllm/_codemod_kernels/k.py",
    ]
    assert all(c.transforms == ["one", "two"] for c in added)
    engine.apply(plan)
    assert (site / "vllm/_codemod_kernels/k.py").read_bytes() == b"K = 2\n"


def test_skipping_one_still_ships_the_bundle_the_other_declares(site):
    tree = locate_tree(site, None)
    options = engine.PlanOptions(skip=("one",))
    engine.apply(engine.plan(tree, options, registry=transforms()))
    assert (site / "vllm/_codemod_kernels/k.py").read_bytes() == b"K = 2\n"
    assert not (site / "vllm/_custom_ops.py").read_text().endswith("# one\n")
    # and turning the first one on later keeps the files where they are
    again = engine.plan(tree, engine.PlanOptions(only=("one", "two")), registry=transforms())
    assert [c.path for c in again.changes] == ["vllm/_custom_ops.py"]


def test_transforms_that_disagree_on_a_shared_file_refuse(site):
    different = {**KERNELS, "_codemod_kernels/k.py": b"K = 3\n"}
    with pytest.raises(CodemodError, match="ship different bytes"):
        engine.plan(locate_tree(site, None), registry=transforms(one=different))

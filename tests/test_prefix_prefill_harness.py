"""scripts/run_vllm_prefix_prefill_tests.py on CPU: it patches the tree, then runs the
given test file with the tree first on the import path and the bundled backend forced
(the vLLM import probe is stubbed: the fixture is a slice of a tree)."""

from __future__ import annotations

import sys

from treeutil import REPO, copy_fixture
from vllm_codemod.tuning.tree_imports import load_file

SCRIPT = REPO / "scripts" / "run_vllm_prefix_prefill_tests.py"

FAKE_TEST = """\
import os


def test_sees_the_patched_tree():
    site = os.environ["PYTHONPATH"].split(os.pathsep)[0]
    assert os.environ["VLLM_CODEMOD_PREFILL_BACKEND"] == "triton"
    text = open(os.path.join(site, "vllm", "attention", "ops", "prefix_prefill.py")).read()
    assert "_codemod_kernels" in text
"""


def test_harness_patches_then_runs_the_file(tmp_path, monkeypatch):
    harness = load_file("run_vllm_prefix_prefill_tests", SCRIPT, keep=False)
    site = copy_fixture("bi-v100/corex-0.8.3", tmp_path)
    test_file = tmp_path / "test_prefix_prefill.py"
    test_file.write_text(FAKE_TEST)
    monkeypatch.setattr(harness, "probe", lambda *a: 0)
    args = ["--site-packages", str(site), "--test-file", str(test_file), "--python", sys.executable]
    assert harness.main(args) == 0
    assert harness.main(args + ["--no-apply"]) == 0  # already patched: still passes
    assert harness.main(["--site-packages", str(tmp_path), "--test-file", str(test_file)]) == 2

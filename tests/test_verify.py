"""`vllm-codemod verify` runs the kernels that are in the patched tree, not the tool's copy."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from treeutil import copy_fixture, snapshot
from vllm_codemod.cli import cli

pytest.importorskip("torch")


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def patched(tmp_path):
    site = copy_fixture("bi-v100/corex-0.4.3", tmp_path)
    assert run("apply", "--site-packages", str(site)).exit_code == 0
    return site


def test_verify_passes_on_a_patched_tree_and_leaves_no_bytecode(patched):
    before = snapshot(patched)
    result = run("verify", "--site-packages", str(patched), "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["ok"] is True
    assert len(payload["results"]) >= 3
    assert any("long" in r["shape"] for r in payload["results"])
    assert any("GQA" in r["shape"] for r in payload["results"])
    assert {r["path"] for r in payload["results"]} == {"torch"}
    assert snapshot(patched) == before


def test_verify_catches_a_broken_copy_in_the_tree(patched):
    dispatch = patched / "vllm" / "_codemod_kernels" / "dispatch.py"
    dispatch.write_text(
        dispatch.read_text() + "\n_orig = paged_attention_v2_with_path\n\n\n"
        "def paged_attention_v2_with_path(*args, **kwargs):\n"
        "    path = _orig(*args, **kwargs)\n"
        "    kwargs['out'].mul_(1.5)\n"
        "    return path\n"
    )
    result = run("verify", "--site-packages", str(patched), "--device", "cpu")
    assert result.exit_code == 1
    assert "FAIL" in result.output
    assert "out of tolerance" in result.output


def test_verify_needs_an_applied_tree(tmp_path):
    site = copy_fixture("bi-v100/corex-0.4.3", tmp_path)
    result = run("verify", "--site-packages", str(site))
    assert result.exit_code == 2
    assert "run `vllm-codemod apply` first" in result.output

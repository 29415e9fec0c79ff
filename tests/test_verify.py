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
    # 2, not 1: exit status 1 means "changes pending" and belongs to check/diff alone.
    assert result.exit_code == 2
    assert "FAIL" in result.output
    assert "out of tolerance" in result.output
    quiet = run("verify", "--site-packages", str(patched), "--device", "cpu", "-q")
    assert quiet.exit_code == 2
    (line,) = quiet.output.splitlines()  # -q: the error line only
    assert line.startswith("vllm-codemod: error: ") and "out of tolerance" in line


def test_verify_needs_an_applied_tree(tmp_path):
    site = copy_fixture("bi-v100/corex-0.4.3", tmp_path)
    result = run("verify", "--site-packages", str(site))
    assert result.exit_code == 2
    assert "run `vllm-codemod apply` first" in result.output


def test_verify_on_cuda_without_a_gpu_is_an_environment_error(patched):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    before = snapshot(patched)
    result = run("verify", "--site-packages", str(patched), "--device", "cuda")
    assert result.exit_code == 2, result.output
    (line,) = result.output.splitlines()
    assert line.startswith("vllm-codemod: error: --device cuda: torch ")
    assert "--device cpu" in line
    assert snapshot(patched) == before


def test_verify_draws_progress_only_on_a_terminal(patched, monkeypatch):
    from vllm_codemod.commands import _output

    monkeypatch.setattr(_output, "_isatty", lambda stream: True)
    result = run("verify", "--site-packages", str(patched), "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "verify: [" in result.output and "shapes" in result.output
    monkeypatch.setattr(_output, "_isatty", lambda stream: False)
    plain = run("verify", "--site-packages", str(patched), "--device", "cpu")
    assert "verify: [" not in plain.output


def test_cases_this_setup_sends_to_the_tree_are_skipped_not_passed(patched, monkeypatch):
    """VLLM_CODEMOD_PREFILL_BACKEND=tree (like an fp8 cache under Triton 2.x) sends the
    prefill cases to the tree's own kernel: verify lists them apart, says why, and
    checks, and claims, nothing of them."""
    monkeypatch.setenv("VLLM_CODEMOD_PREFILL_BACKEND", "tree")
    result = run("verify", "--site-packages", str(patched), "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["ok"] is True
    assert payload["results"] and not any("prefill" in r["shape"] for r in payload["results"])
    assert len(payload["skipped"]) >= 4
    for entry in payload["skipped"]:
        assert "prefill" in entry["shape"] and entry["path"] == "tree"
        assert "VLLM_CODEMOD_PREFILL_BACKEND=tree" in entry["reason"]
    text = run("verify", "--site-packages", str(patched), "--device", "cpu")
    assert text.exit_code == 0
    assert text.output.count(" skip ") == len(payload["skipped"])
    assert "case(s) skipped" in text.output


def test_any_other_decline_of_a_case_fails(patched):
    """A kernel copy that declines well-formed calls would leave every prefill to the
    tree's kernel in production: that is a failure, not a skip."""
    prefill = patched / "vllm" / "_codemod_kernels" / "prefill.py"
    prefill.write_text(
        prefill.read_text() + "\n\ndef normalize(bound):\n    raise Declined('broken copy')\n"
    )
    result = run("verify", "--site-packages", str(patched), "--device", "cpu", "--json")
    assert result.exit_code == 2, result.output
    payload = json.loads(result.output)
    failed = [r for r in payload["results"] if not r["ok"]]
    assert failed and all("prefill" in r["shape"] for r in failed)
    assert all("declined this call (broken copy)" in r["error"] for r in failed)
    assert payload["skipped"] == []

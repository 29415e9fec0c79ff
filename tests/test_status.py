"""``vllm-codemod status``: one screen, and whether the patched code is reached at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from treeutil import copy_fixture, snapshot
from vllm_codemod.cli import cli
from vllm_codemod.report import load_schema

FORK = "bi-v100/corex-0.8.3"

#: A V0 backend as 0.8.x / 0.10.1.1 ship it: the decode path goes through the patch.
BACKEND = """\
from vllm.attention.ops.paged_attn import PagedAttention


class XFormersImpl:
    def forward(self, query, key_cache, value_cache, metadata):
        out = PagedAttention.forward_decode(
            query, key_cache, value_cache, metadata.block_tables, metadata.seq_lens
        )
        return out
"""


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def fork(tmp_path) -> Path:
    return copy_fixture(FORK, tmp_path)


def test_unpatched_fork_without_callers_says_the_patch_would_be_inert(fork):
    before = snapshot(fork)
    result = run("status", "--site-packages", str(fork))
    assert result.exit_code == 0, result.output
    text = result.output
    assert f"tree       {(fork / 'vllm').resolve()}" in text
    assert "version    0.8.3+corex.4.2.0 (from " in text
    assert "vendor label (+corex.4.2.0)" in text
    assert "paged_attention_v2 raises NotImplementedError" in text
    assert "patched    no" in text
    assert "paged-attention-v2" in text and "pending" in text
    assert "the patch is inert in this tree unless an out-of-tree backend calls it" in text
    assert snapshot(fork) == before  # status writes nothing


def test_patched_fork_with_a_caller_is_live(fork):
    backend = fork / "vllm" / "attention" / "backends" / "xformers.py"
    backend.parent.mkdir(parents=True)
    backend.write_text(BACKEND)
    assert run("apply", "--site-packages", str(fork), "--num-warps", "2").exit_code == 0

    payload = json.loads(run("status", "--site-packages", str(fork), "--json").output)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(payload, load_schema())
    assert payload["live"] is True
    assert payload["callers"] == [
        {
            "path": "vllm/attention/backends/xformers.py",
            "line": 6,
            "col": 15,
            "what": "PagedAttention.forward_decode",
        }
    ]
    assert payload["patched"] is True
    assert payload["patched_tool_version"] and payload["patched_at"]
    assert payload["recorded_options"]["num_warps"] == 2
    assert {t["status"] for t in payload["transforms"]} == {"applied"}
    assert payload["fork_markers"]  # a patched fork is still a fork
    assert payload["scan"]["parsed"] >= 1 and payload["scan"]["unparseable"] == []

    text = run("status", "--site-packages", str(fork)).output
    assert "live       yes: 1 call site(s)" in text
    assert "vllm/attention/backends/xformers.py:6:15  PagedAttention.forward_decode" in text
    assert "num_warps=2" in text
    assert "patched    20" in text and "by vllm-codemod " in text


def test_upstream_tree_has_no_fork_markers(tmp_path):
    site = copy_fixture("upstream/vllm-0.11.0", tmp_path)
    payload = json.loads(run("status", "--site-packages", str(site), "--json").output)
    assert payload["fork_markers"] == []
    assert payload["live"] is False
    assert "no fork markers" in run("status", "--site-packages", str(site)).output


def test_check_verbose_shows_the_recorded_options(fork):
    assert run("apply", "--site-packages", str(fork), "--v2-threshold", "4096").exit_code == 0
    plain = run("check", "--site-packages", str(fork))
    assert plain.exit_code == 0 and "recorded options" not in plain.output
    verbose = run("check", "--site-packages", str(fork), "-v")
    assert verbose.exit_code == 0
    assert "v2_threshold=4096" in verbose.output
    assert "patched 20" in verbose.output


def test_an_option_change_shows_old_and_new(fork):
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    check = run("check", "--site-packages", str(fork), "--num-warps", "2")
    assert check.exit_code == 1
    assert "--num-warps 4 -> 2" in check.output
    apply = run("apply", "--site-packages", str(fork), "--num-warps", "2")
    assert apply.exit_code == 0
    assert "option changed: --num-warps 4 -> 2" in apply.output


def test_a_hand_edit_after_apply_is_drift_and_check_says_1(fork):
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    target = fork / "vllm" / "_custom_ops.py"
    target.write_bytes(target.read_bytes() + b"# edited by hand\n")
    check = run("check", "--site-packages", str(fork))
    assert check.exit_code == 1, check.output  # every transform still looks applied
    assert "differs from the manifest: vllm/_custom_ops.py: changed since" in check.output
    payload = json.loads(run("status", "--site-packages", str(fork), "--json").output)
    assert payload["drift"] == [{"path": "vllm/_custom_ops.py", "state": "edited"}]
    assert run("revert", "--site-packages", str(fork), "--force").exit_code == 0
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    assert run("check", "--site-packages", str(fork)).exit_code == 0

"""Issue #12, "Persist the options": what an apply used is what check and apply assume."""

from __future__ import annotations

import json

from click.testing import CliRunner

from treeutil import copy_fixture, snapshot
from vllm_codemod.cli import cli

FORK = "bi-v100/corex-0.8.3"


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def manifest(site):
    return json.loads((site / "vllm/.vllm-codemod/manifest.json").read_text())


def test_options_are_recorded_and_kept(tmp_path):
    site = copy_fixture(FORK, tmp_path)
    tree = ["--site-packages", str(site)]
    assert run("apply", *tree, "--num-warps", "2", "--v2-threshold", "4096").exit_code == 0
    options = manifest(site)["options"]
    assert (options["num_warps"], options["v2_threshold"]) == (2, 4096)
    assert options["tuning"] is None  # the slot the tune command fills
    assert run("check", *tree).exit_code == 0  # compares against what apply used
    patched = snapshot(site)

    plain = run("apply", *tree)
    assert plain.exit_code == 0 and "nothing to do" in plain.output
    assert snapshot(site) == patched  # a plain apply keeps 2, it does not reset to 4

    changed = run("apply", *tree, "--num-warps", "4")
    assert changed.exit_code == 0
    assert "--num-warps 2 -> 4" in changed.output
    assert "\nNUM_WARPS = 4\n" in (site / "vllm/attention/ops/prefix_prefill.py").read_text()
    assert manifest(site)["options"]["num_warps"] == 4
    assert run("check", *tree).exit_code == 0
    as_json = json.loads(run("apply", *tree, "--num-warps", "8", "--json").output)
    assert as_json["option_changes"] == [
        {"name": "num_warps", "flag": "--num-warps", "old": 4, "new": 8}
    ]
    assert run("check", *tree, "--num-warps", "4").exit_code == 1  # explicit value: compared


def test_selection_is_recorded(tmp_path):
    site = copy_fixture(FORK, tmp_path)
    tree = ["--site-packages", str(site)]
    assert run("apply", *tree, "--only", "prefix-prefill-warps").exit_code == 0
    assert manifest(site)["options"]["only"] == ["prefix-prefill-warps"]
    assert run("check", *tree).exit_code == 0  # the others were left out on purpose
    before = snapshot(site)
    assert run("apply", *tree).exit_code == 0
    assert snapshot(site) == before
    # naming the transforms again widens the selection, explicitly
    wider = ["--only", "paged-attention-v2", "--only", "v2-dispatch"]
    assert run("apply", *tree, *wider, "--only", "prefix-prefill-warps").exit_code == 0
    assert run("check", *tree).exit_code == 0
    assert run("check", *tree, "--only", "v2-dispatch").exit_code == 0


def test_apply_reports_what_it_did_never_pending(tmp_path):
    site = copy_fixture("upstream/vllm-0.8.3", tmp_path)
    tree = ["--site-packages", str(site)]
    first = json.loads(run("apply", *tree, "--json").output)
    outcomes = {t["name"]: t["outcome"] for t in first["transforms"]}
    # prefix-prefill-warps is a fork remedy: on upstream it runs only when named.
    assert outcomes["prefix-prefill-warps"].startswith("skipped: upstream tree")
    assert outcomes["v2-dispatch"] == "already applied"
    assert outcomes["paged-attention-v2"].startswith("skipped: ")
    named = json.loads(run("apply", *tree, "--only", "prefix-prefill-warps", "--json").output)
    assert {t["name"]: t["outcome"] for t in named["transforms"]}["prefix-prefill-warps"] == (
        "applied"
    )
    fork = copy_fixture(FORK, tmp_path / "fork")
    text = run("apply", "--site-packages", str(fork)).output
    assert "pending" not in text and text.count(" applied\n") == 4, text
    again = json.loads(run("apply", *tree, "--json").output)
    assert {t["name"]: t["outcome"] for t in again["transforms"]}["prefix-prefill-warps"] == (
        "already applied"
    )

"""`apply --tuning FILE`: the table ships beside the kernels, its warps reach prefix prefill,
the choice persists in the manifest, and `revert` removes it byte-exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from treeutil import copy_fixture, snapshot
from vllm_codemod.cli import cli

FORK = "bi-v100/corex-0.8.3"
KERNELS = Path("vllm/_codemod_kernels")


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def tuning_file(path: Path, warps=2, name="NVIDIA H200", backend="v1") -> Path:
    doc = {
        "schema_version": 1,
        "generator": "test",
        "devices": [
            {
                "device": {"name": name, "capability": [9, 0]},
                "decode": [
                    {
                        "num_heads": 32,
                        "num_kv_heads": 8,
                        "head_size": 128,
                        "dtype": "bfloat16",
                        "num_seqs": 1,
                        "points": [
                            {"max_seq_len": 4096, "winner": {"backend": backend, "config": None}}
                        ],
                    }
                ],
                "prefill": [],
                "prefill_num_warps": warps,
            }
        ],
    }
    path.write_text(json.dumps(doc, indent=1))
    return path


def manifest(site: Path) -> dict:
    return json.loads((site / "vllm" / ".vllm-codemod" / "manifest.json").read_text())


def warps_line(site: Path) -> str:
    text = (site / "vllm/attention/ops/prefix_prefill.py").read_text()
    return next(line for line in text.splitlines() if line.startswith("NUM_WARPS ="))


@pytest.fixture
def fork(tmp_path) -> Path:
    return copy_fixture(FORK, tmp_path)


def test_apply_tuning_ships_the_table_and_its_warps_then_revert_is_byte_exact(fork, tmp_path):
    pristine = snapshot(fork)
    table = tuning_file(tmp_path / "h200.json", warps=2)
    result = run("apply", "--site-packages", str(fork), "--tuning", str(table))
    assert result.exit_code == 0, result.output
    assert (fork / KERNELS / "tuning.json").read_bytes() == table.read_bytes()
    assert warps_line(fork).startswith("NUM_WARPS = 2")
    recorded = manifest(fork)["options"]
    assert recorded["num_warps"] == 2
    assert recorded["tuning"]["source"] == str(table)
    assert recorded["tuning"]["devices"] == ["NVIDIA H200"]
    assert recorded["tuning"]["num_warps"] == 2
    assert "vllm/_codemod_kernels/tuning.json" in manifest(fork)["added"]

    # check and a plain apply keep what was recorded: nothing pending
    assert run("check", "--site-packages", str(fork)).exit_code == 0
    assert "nothing to do" in run("apply", "--site-packages", str(fork)).output
    table.unlink()  # the tree's copy is what persists, not the path
    assert run("check", "--site-packages", str(fork)).exit_code == 0

    result = run("revert", "--site-packages", str(fork))
    assert result.exit_code == 0, result.output
    assert snapshot(fork) == pristine


def test_explicit_num_warps_wins_and_a_new_table_is_an_option_change(fork, tmp_path):
    first = tuning_file(tmp_path / "a.json", warps=2)
    second = tuning_file(tmp_path / "b.json", warps=8, backend="v2")
    run_ = run("apply", "--site-packages", str(fork), "--tuning", str(first), "--num-warps", "4")
    assert run_.exit_code == 0, run_.output
    assert warps_line(fork).startswith("NUM_WARPS = 4")
    result = run("apply", "--site-packages", str(fork), "--tuning", str(second))
    assert result.exit_code == 0, result.output
    assert "option changed: --num-warps 4 -> 8" in result.output
    assert f"option changed: --tuning {first} (" in result.output
    assert (fork / KERNELS / "tuning.json").read_bytes() == second.read_bytes()
    assert warps_line(fork).startswith("NUM_WARPS = 8")


def test_no_tuning_removes_the_table(fork, tmp_path):
    table = tuning_file(tmp_path / "t.json")
    assert run("apply", "--site-packages", str(fork), "--tuning", str(table)).exit_code == 0
    diff = run("diff", "--site-packages", str(fork), "--no-tuning")
    assert diff.exit_code == 1
    assert "--- a/vllm/_codemod_kernels/tuning.json\n+++ /dev/null" in diff.output
    result = run("apply", "--site-packages", str(fork), "--no-tuning")
    assert result.exit_code == 0, result.output
    assert not (fork / KERNELS / "tuning.json").exists()
    assert manifest(fork)["options"]["tuning"] is None
    assert (fork / KERNELS / "dispatch.py").is_file()  # the kernels stay


def test_diff_shows_the_table_it_would_add(fork, tmp_path):
    table = tuning_file(tmp_path / "t.json")
    result = run("diff", "--site-packages", str(fork), "--tuning", str(table))
    assert result.exit_code == 1
    assert "--- /dev/null\n+++ b/vllm/_codemod_kernels/tuning.json" in result.output


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"schema_version": 1,\n "devices": [}', "bad.json:2:14: not valid JSON"),
        ('{"schema_version": 1, "devices": [{"device": {}}]}', r"devices[0].device.name: missing"),
        ('{"schema_version": 7, "devices": []}', "this reader knows version 1"),
    ],
)
def test_a_malformed_table_is_exit_2_and_writes_nothing(fork, tmp_path, content, message):
    pristine = snapshot(fork)
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = run("apply", "--site-packages", str(fork), "--tuning", str(bad))
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert snapshot(fork) == pristine


def test_refusals(fork, tmp_path):
    table = tuning_file(tmp_path / "t.json")
    missing = run("apply", "--site-packages", str(fork), "--tuning", str(tmp_path / "nope.json"))
    assert missing.exit_code == 2 and "no such file" in missing.output
    warps_only = run(
        "apply", "--site-packages", str(fork), "--tuning", str(table),
        "--only", "prefix-prefill-warps",
    )  # fmt: skip
    assert warps_only.exit_code == 0, warps_only.output  # prefix-prefill-warps takes the warps
    assert warps_line(fork).startswith("NUM_WARPS = 2")
    assert not (fork / KERNELS).exists()
    # the kernels come later without the table (it was never shipped): still consistent
    every = ["--only", "paged-attention-v2", "--only", "v2-dispatch"]
    assert run("apply", "--site-packages", str(fork), *every).exit_code == 0
    assert not (fork / KERNELS / "tuning.json").exists()
    assert run("check", "--site-packages", str(fork)).exit_code == 0
    nothing = run(
        "apply", "--site-packages", str(fork), "--tuning", str(table), "--only", "v2-dispatch"
    )  # fmt: skip
    assert nothing.exit_code == 2 and "nothing selected can use the table" in nothing.output
    both = run("apply", "--site-packages", str(fork), "--tuning", str(table), "--no-tuning")
    assert both.exit_code == 2 and "contradict" in both.output


def test_a_tuning_json_we_did_not_write_is_never_overwritten(fork, tmp_path):
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    theirs = fork / KERNELS / "tuning.json"
    theirs.write_text("someone else's file\n")
    result = run(
        "apply", "--site-packages", str(fork), "--tuning", str(tuning_file(tmp_path / "t.json"))
    )
    assert result.exit_code == 2
    assert theirs.read_text() == "someone else's file\n"


def test_a_table_changed_in_the_tree_is_reported(fork, tmp_path):
    table = tuning_file(tmp_path / "t.json")
    assert run("apply", "--site-packages", str(fork), "--tuning", str(table)).exit_code == 0
    (fork / KERNELS / "tuning.json").write_text("{}")
    result = run("check", "--site-packages", str(fork))
    assert result.exit_code == 2
    assert "missing or was changed; pass --tuning FILE" in result.output


def test_tune_then_apply_then_verify_on_cpu(fork, tmp_path):
    pytest.importorskip("torch")
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    out = tmp_path / "cpu.json"
    tuned = run("tune", "--site-packages", str(fork), "--device", "cpu", "--shape", "4/2/64",
                "--max-model-len", "512", "--max-num-seqs", "1", "--output", str(out))  # fmt: skip
    assert tuned.exit_code == 0, tuned.output
    applied = run("apply", "--site-packages", str(fork), "--tuning", str(out))
    assert applied.exit_code == 0, applied.output
    assert (fork / KERNELS / "tuning.json").read_bytes() == out.read_bytes()
    verified = run("verify", "--site-packages", str(fork), "--device", "cpu")
    assert verified.exit_code == 0, verified.output


def test_upstream_tree_records_the_table_without_shipping_it(tmp_path):
    site = copy_fixture("upstream/vllm-0.8.3", tmp_path)
    pristine = snapshot(site)
    table = tuning_file(tmp_path / "t.json", warps=2)
    result = run(
        "apply", "--site-packages", str(site), "--only", "prefix-prefill-warps",
        "--tuning", str(table),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert warps_line(site).startswith("NUM_WARPS = 2")
    assert not (site / KERNELS).exists()  # upstream has a real V2: no kernels, no table
    recorded = manifest(site)["options"]["tuning"]
    assert recorded["shipped"] is False and recorded["num_warps"] == 2
    # later runs keep it without looking for a table in the tree
    assert run("check", "--site-packages", str(site)).exit_code == 0
    assert "nothing to do" in run("apply", "--site-packages", str(site)).output
    assert run("revert", "--site-packages", str(site)).exit_code == 0
    assert snapshot(site) == pristine

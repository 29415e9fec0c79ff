"""`vllm-codemod tune` end to end on CPU, on a patched copy of the corex-0.8.3 fork tree."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from treeutil import copy_fixture, snapshot
from vllm_codemod.cli import cli
from vllm_codemod.kernels import tuning_table

pytest.importorskip("torch")

CONFIGS = Path(__file__).resolve().parent / "model_configs"


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    """One patched tree for the module: tune never writes into it (the first test checks)."""
    site = copy_fixture("bi-v100/corex-0.8.3", tmp_path_factory.mktemp("tree"))
    assert run("apply", "--site-packages", str(site)).exit_code == 0
    return site


TINY = ("--device", "cpu", "--shape", "4/2/64", "--shape", "4/4/64:alibi",
        "--max-model-len", "512", "--max-num-seqs", "1")  # fmt: skip


def test_tune_on_cpu_writes_a_valid_file_and_leaves_the_tree_alone(patched, tmp_path, monkeypatch):
    from vllm_codemod.tuning import measure

    def slow_decode(*args, **kwargs):
        """Decode's phase at least 0.2 s: on a fast CPU its few points round to 0.0 s."""
        result = real_decode(*args, **kwargs)
        time.sleep(0.2)
        return result

    real_decode = measure.measure_decode
    monkeypatch.setattr(measure, "measure_decode", slow_decode)
    before = snapshot(patched)
    out = tmp_path / "tuning.json"
    result = run("tune", "--site-packages", str(patched), *TINY, "--max-model-len", "1024",
                 "--output", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert snapshot(patched) == before  # no bytecode, nothing written into the tree
    assert "vllm" not in sys.modules  # the tree's package was unloaded again
    assert "4/2/64 bfloat16" in result.output and "1 x 1024 (eager)" in result.output
    assert f"wrote {out}" in result.output
    # the fork tree cannot import vllm here: V1 and prefix prefill are skipped with a reason
    assert "skipped: v1 (the tree's paged_attention_v1): skipped: `import vllm`" in result.output
    assert "prefix prefill: the tree's Triton kernels need a CUDA device" in result.output

    doc = json.loads(out.read_text())
    entry = doc["devices"][0]
    assert entry["device"] == {"name": "cpu", "capability": None}
    assert entry["tree"] == {"vllm_version": "0.8.3+corex.4.2.0"}
    assert set(entry["versions"]) == {"torch", "triton", "python", "tool"}
    # where the budget went: each phase's seconds, within the run's (which also holds
    # unloading the tree's modules; rounding aside)
    phases = entry["deployment"]["phases_s"]
    assert list(phases) == ["prefill_warps", "prefill_configs", "decode"]
    assert all(v >= 0 for v in phases.values()) and phases["decode"] > 0
    assert sum(phases.values()) <= entry["deployment"]["elapsed_s"] + 0.2
    time_line = next(line for line in result.output.splitlines() if "time:" in line)
    assert f"time: {entry['deployment']['elapsed_s']:.1f} s of a 300 s budget" in time_line
    assert f"decode {phases['decode']:.1f} s" in time_line
    assert [(e["num_heads"], e["num_kv_heads"], e["alibi"]) for e in entry["decode"]] == [
        (4, 2, False),
        (4, 4, True),
    ]
    point = entry["decode"][0]["points"][0]
    assert point["candidates"][0]["status"] == "ok" and point["default"]["us"] > 0
    device = tuning_table.load(out).for_device("cpu")
    assert device.decide(1, 4, 2, 64, 700, "bfloat16") == tuning_table.Decision("v2", None)
    assert device.decide(1, 4, 2, 64, 2000, "bfloat16") is None


def test_what_decode_leaves_goes_back_to_cut_prefill_configs(patched, tmp_path, monkeypatch):
    """On CPU nothing measures our prefill configs, so a stand-in for a tuner whose groups
    the share cut: after decode it gets the rest of the budget, its notes replace the
    first pass's, and its time counts as the configs' phase."""

    class CutTuner:
        skipped = ["first pass: cut"]

        def resume(self, entries, budget):
            self.left = budget.seconds
            time.sleep(0.3)
            self.skipped = ["resumed: cut again"]
            return entries

    tuner = CutTuner()
    monkeypatch.setattr(
        "vllm_codemod.tuning.prefill_configs.measure_tree",
        lambda *a, **k: ([], list(tuner.skipped), tuner),
    )
    out = tmp_path / "t.json"
    result = run("tune", "--site-packages", str(patched), *TINY, "--output", str(out))
    assert result.exit_code == 0, result.output
    entry = json.loads(out.read_text())["devices"][0]
    phases = entry["deployment"]["phases_s"]
    assert 0 < tuner.left <= 300 - phases["decode"] - phases["prefill_warps"] + 0.1
    assert phases["prefill_configs"] >= 0.3
    assert "skipped: resumed: cut again" in result.output
    assert "first pass: cut" not in result.output


def test_printed_times_are_the_files_microseconds(patched, tmp_path):
    """Issue #26 said the table printed microseconds under an ms header.  The header names
    no unit; each time carries its own, and it is the file's ``us`` value as measured."""
    out = tmp_path / "tuning.json"
    result = run("tune", "--site-packages", str(patched), *TINY, "--output", str(out))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["shape", "point"])
    assert header.split()[2:] == ["default", "->", "tuned", "speedup"]
    assert "ms" not in result.output.split()
    entry = json.loads(out.read_text())["devices"][0]
    expected = [
        (f"{p['default']['us']:.1f}us", f"{p['winner']['us']:.1f}us")
        for e in entry["decode"]
        for p in e["points"]
    ]
    printed = [
        tuple(re.findall(r"\s(-|[0-9.]+us)(?=\s)", line)[:2])
        for line in lines[lines.index(header) + 1 :]
        if " x " in line
    ]
    assert printed == expected and expected


def test_tune_json_report(patched, tmp_path):
    out = tmp_path / "t.json"
    result = run("tune", "--site-packages", str(patched), *TINY, "--output", str(out), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    jsonschema = pytest.importorskip("jsonschema")
    from vllm_codemod.report import load_schema

    jsonschema.validate(report, load_schema())  # the cmd_tune definition
    assert report["command"] == "tune" and report["exit_code"] == 0
    assert report["output"] == str(out)
    assert len(report["summary"]) == 2
    assert {"shape", "point", "default", "tuned", "speedup"} == set(report["summary"][0])


def test_default_output_name_in_the_cwd(patched, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("tune", "--site-packages", str(patched), *TINY)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "vllm-codemod-tuning-cpu.json").is_file()


def test_model_config_errors_are_exit_2_and_write_nothing(patched, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "config.json"
    bad.write_text('{"num_attention_heads": 32,\n "hidden_size": 4096,,}')
    result = run("tune", "--site-packages", str(patched), "--model-config", str(bad),
                 "--device", "cpu")  # fmt: skip
    assert result.exit_code == 2
    assert f"{bad}:2:22: not valid JSON" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_bad_shape_and_unpatched_tree_are_exit_2(tmp_path):
    site = copy_fixture("bi-v100/corex-0.8.3", tmp_path)
    result = run("tune", "--site-packages", str(site), "--shape", "32/6/128")
    assert result.exit_code == 2 and "not a multiple of 6 kv heads" in result.output
    result = run("tune", "--site-packages", str(site), "--device", "cpu", "--shape", "4/2/64")
    assert result.exit_code == 2 and "run `vllm-codemod apply` first" in result.output


def test_cuda_without_a_gpu_is_exit_2(patched):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    result = run("tune", "--site-packages", str(patched), "--device", "cuda", "--shape", "4/2/64")
    assert result.exit_code == 2 and "torch sees no CUDA device" in result.output


def test_interrupt_writes_nothing(patched, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("vllm_codemod.tuning.measure.measure_decode", interrupted)
    out = tmp_path / "t.json"
    result = run("tune", "--site-packages", str(patched), *TINY, "--output", str(out))
    assert result.exit_code == 130
    assert "interrupted; no tuning file written" in result.output
    assert not out.exists()
    assert "vllm" not in sys.modules


def test_model_config_drives_the_shapes(patched, tmp_path):
    out = tmp_path / "t.json"
    result = run("tune", "--site-packages", str(patched), "--device", "cpu",
                 "--model-config", str(CONFIGS / "qwen2-7b.json"), "--tensor-parallel", "4",
                 "--max-model-len", "512", "--max-num-seqs", "1", "--output", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    entry = json.loads(out.read_text())["devices"][0]
    assert entry["deployment"]["shapes"] == ["7/1/128 bf16"]
    assert [p["max_seq_len"] for p in entry["decode"][0]["points"]] == [512]

"""``vllm-codemod tune-config`` on real files: every shape, every exit code, every refusal."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from inspect import signature
from pathlib import Path

import pytest
from click.testing import CliRunner

from treeutil import read_only
from vllm_codemod.cli import cli

#: Comments, quoting, flow style, odd indentation, anchors, block scalars, CRLF-free.
MESSY = """\
# computility-run.yaml -- reviewed by ops; keep comments!
name:   demo      # odd spacing before the comment
engine:
     max-num-batched-tokens:   8192     # tuned for 8k
     gpu_memory_utilization: "0.9"
     max-model-len: 32k
     other: &anchor 7
flow: {max_num_batched_tokens: 4096, other: *anchor}
args: [--gpu-memory-utilization, '0.85', "--max-num-batched-tokens=2048"]
containers:
-   name: vllm
    args:
    - --max-num-batched-tokens
    - "8192"
    - --enable-chunked-prefill
    - --gpu-memory-utilization=0.80
    command: vllm serve m --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9
    script: |
      # --max-num-batched-tokens 1  (a shell comment: not a setting)
      vllm serve /models/x \\
        --max-num-batched-tokens \\
        4096 --gpu-memory-utilization=0.7
    folded: >-
      vllm serve m
      --max_num_batched_tokens "512"
"""

MESSY_EXPECTED = """\
# computility-run.yaml -- reviewed by ops; keep comments!
name:   demo      # odd spacing before the comment
engine:
     max-num-batched-tokens:   16384     # tuned for 8k
     gpu_memory_utilization: "0.95"
     max-model-len: 32k
     other: &anchor 7
flow: {max_num_batched_tokens: 16384, other: *anchor}
args: [--gpu-memory-utilization, '0.95', "--max-num-batched-tokens=16384"]
containers:
-   name: vllm
    args:
    - --max-num-batched-tokens
    - "16384"
    - --enable-chunked-prefill
    - --gpu-memory-utilization=0.95
    command: vllm serve m --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95
    script: |
      # --max-num-batched-tokens 1  (a shell comment: not a setting)
      vllm serve /models/x \\
        --max-num-batched-tokens \\
        16384 --gpu-memory-utilization=0.95
    folded: >-
      vllm serve m
      --max_num_batched_tokens "16384"
"""


def run(*args: str):
    # click < 8.2 mixes stderr into output unless told not to; 8.2+ always separates.
    kwargs = {"mix_stderr": False} if "mix_stderr" in signature(CliRunner).parameters else {}
    return CliRunner(**kwargs).invoke(cli, ["tune-config", *args], catch_exceptions=False)


def write(tmp_path: Path, text: str, name: str = "computility-run.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


def test_every_shape_changes_only_the_values(tmp_path):
    path = write(tmp_path, MESSY)
    result = run(str(path))
    assert result.exit_code == 0, result.output
    assert path.read_text() == MESSY_EXPECTED
    assert "updated 12 value(s)" in result.output


def test_second_run_changes_nothing_and_says_so(tmp_path):
    path = write(tmp_path, MESSY)
    assert run(str(path)).exit_code == 0
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    again = run(str(path))
    assert again.exit_code == 0
    assert "nothing to do" in again.output
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == mtime  # not even rewritten
    diff = run(str(path), "--diff")
    assert (diff.exit_code, diff.stdout) == (0, "")


def test_diff_is_a_dry_run_with_exit_1(tmp_path):
    path = write(tmp_path, MESSY)
    result = run(str(path), "--diff")
    assert result.exit_code == 1
    assert result.stdout.startswith(f"--- a/{path}\n+++ b/{path}\n")
    assert "-     max-num-batched-tokens:   8192     # tuned for 8k\n" in result.stdout
    assert "+     max-num-batched-tokens:   16384     # tuned for 8k\n" in result.stdout
    assert path.read_text() == MESSY


def test_set_accepts_both_spellings_and_equal_values_are_left_alone(tmp_path):
    text = "a:\n  max_num_batched_tokens: 8192\n  gpu-memory-utilization: 0.900\n"
    path = write(tmp_path, text)
    result = run(
        str(path), "--set", "max_num_batched_tokens=32768", "--set", "gpu-memory-utilization=.9"
    )
    assert result.exit_code == 0, result.output
    # 0.900 already means 0.9: its spelling is kept.
    assert (
        path.read_text() == "a:\n  max_num_batched_tokens: 32768\n  gpu-memory-utilization: 0.900\n"
    )


def test_crlf_bom_and_mode_survive(tmp_path):
    text = "\ufeff# c\r\nmax-num-batched-tokens: 1  # x\r\nk: v\r\n"
    path = write(tmp_path, text)
    path.chmod(0o640)
    assert run(str(path)).exit_code == 0
    assert (
        path.read_bytes() == "\ufeff# c\r\nmax-num-batched-tokens: 16384  # x\r\nk: v\r\n".encode()
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left


def test_absent_keys_are_not_added_without_add(tmp_path):
    path = write(tmp_path, "model: m\nmax-num-batched-tokens: 16384\n")
    result = run(str(path))
    assert result.exit_code == 0
    assert "no gpu-memory-utilization anywhere" in result.stderr
    assert result.stdout.splitlines()[-1] == (
        f"nothing to do: {path} already matches (max-num-batched-tokens=16384); "
        "gpu-memory-utilization left as found (see above)"
    )
    assert path.read_text() == "model: m\nmax-num-batched-tokens: 16384\n"


def test_add_appends_top_level_keys_after_the_last_entry(tmp_path):
    text = "  model: m  # the model\n  nested:\n    x: 1\n# trailing comment\n---\nsecond: doc\n"
    path = write(tmp_path, text)
    result = run(str(path), "--add", "--json")
    assert result.exit_code == 0, result.output
    assert path.read_text() == (
        "  model: m  # the model\n  nested:\n    x: 1\n# trailing comment\n"
        "  max-num-batched-tokens: 16384\n  gpu-memory-utilization: 0.95\n---\nsecond: doc\n"
    )
    payload = json.loads(result.output)
    assert [(e["key"], e["kind"], e["line"]) for e in payload["edits"]] == [
        ("max-num-batched-tokens", "added", 5),
        ("gpu-memory-utilization", "added", 6),
    ]
    before = path.read_bytes()
    again = run(str(path), "--add")
    assert again.exit_code == 0 and "nothing to do" in again.output
    assert path.read_bytes() == before


def test_add_follows_an_underscore_file_and_handles_a_missing_final_newline(tmp_path):
    path = write(tmp_path, "max_model_len: 4096\ngpu_memory_utilization: 0.5")
    assert run(str(path), "--add").exit_code == 0
    assert path.read_text() == (
        "max_model_len: 4096\ngpu_memory_utilization: 0.95\nmax_num_batched_tokens: 16384\n"
    )


def test_json_reports_edits(tmp_path):
    path = write(tmp_path, "command: vllm serve m --gpu-memory-utilization 0.5\n")
    result = run(str(path), "--json", "--diff")
    assert result.exit_code == 1
    payload = json.loads(result.output)
    assert payload["changed"] and payload["dry_run"] and payload["exit_code"] == 1
    assert payload["edits"] == [
        {
            "key": "gpu-memory-utilization",
            "spelling": "--gpu-memory-utilization",
            "kind": "string",
            "line": 1,
            "column": 23,
            "old": "0.5",
            "new": "0.95",
        }
    ]
    assert payload["missing"] == ["max-num-batched-tokens"]
    assert "+command: vllm serve m --gpu-memory-utilization 0.95" in payload["diff"]


def test_template_values_are_left_as_written(tmp_path):
    text = "command: vllm serve m --max-num-batched-tokens ${TOKENS}\n"
    path = write(tmp_path, text)
    result = run(str(path))
    assert result.exit_code == 0
    assert "not a literal value" in result.stderr
    assert path.read_text() == text


# ------------------------------------------------------------------ refusals (exit 2)


def assert_refused(path: Path, before: bytes, result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("vllm-codemod: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


@pytest.mark.parametrize(
    "text, fragments",
    [
        (
            "engine:\n  enable-chunked-prefill: false\n  max-model-len: 32768\n"
            "  max-num-batched-tokens: 8192\n",
            ["enable-chunked-prefill: false, line 2", "max-model-len: 32768 (line 3)", "16384"],
        ),
        (
            "enable_chunked_prefill: False\nmax_model_len: 20k\nmax_num_batched_tokens: 8192\n",
            ["enable_chunked_prefill: False", "max_model_len: 20k", "=20000"],
        ),
        (
            "command: vllm serve m --no-enable-chunked-prefill --max-model-len=131072 "
            "--max-num-batched-tokens 8192\n",
            ["--no-enable-chunked-prefill, line 1", "--max-model-len 131072"],
        ),
        (
            "args: [--enable-chunked-prefill, 'false', --max-model-len, '65536', "
            "--max-num-batched-tokens, '8192']\n",
            ["--enable-chunked-prefill false", "--max-model-len 65536"],
        ),
        (
            "script: |\n  vllm serve m --enable-chunked-prefill false \\\n"
            "    --max-model-len 32K --max-num-batched-tokens 4096\n",
            ["--enable-chunked-prefill false", "--max-model-len 32K", "=32768"],
        ),
    ],
)
def test_refuses_chunked_prefill_off_with_a_longer_model_len(tmp_path, text, fragments):
    path = write(tmp_path, text)
    before = path.read_bytes()
    assert_refused(path, before, run(str(path)), "vLLM will not start", *fragments)
    assert_refused(path, before, run(str(path), "--diff"), "vLLM will not start")


def test_chunked_prefill_off_is_fine_when_tokens_cover_the_model_len(tmp_path):
    text = "enable-chunked-prefill: false\nmax-model-len: 32768\nmax-num-batched-tokens: 8192\n"
    path = write(tmp_path, text)
    result = run(str(path), "--set", "max-num-batched-tokens=32768")
    assert result.exit_code == 0, result.output
    assert "max-num-batched-tokens: 32768\n" in path.read_text()


def test_chunked_prefill_enabled_or_tokens_absent_is_not_a_conflict(tmp_path):
    on = write(tmp_path, "args: [--enable-chunked-prefill, --max-model-len, '131072']\n", "a.yaml")
    assert run(str(on), "--add").exit_code == 0
    absent = write(tmp_path, "enable-chunked-prefill: false\nmax-model-len: 131072\n", "b.yaml")
    assert run(str(absent)).exit_code == 0  # we set nothing vLLM would reject


@pytest.mark.parametrize(
    "setting, fragments",
    [
        ("gpu-memory-utilization=0", ["(0, 1]"]),
        ("gpu_memory_utilization=1.5", ["(0, 1]"]),
        ("gpu-memory-utilization=nan", ["(0, 1]"]),
        ("gpu-memory-utilization=lots", ["(0, 1]"]),
        ("max-num-batched-tokens=0", ["positive integer"]),
        ("max-num-batched-tokens=-5", ["positive integer"]),
        ("max_num_batched_tokens=1.5", ["positive integer"]),
        ("max-num-batched-tokens", ["expected KEY=VALUE"]),
        (
            "max-num-seqs=8",
            ["unknown key 'max-num-seqs'", "max-num-batched-tokens", "gpu-memory-utilization"],
        ),
    ],
)
def test_bad_set_values_are_refused(tmp_path, setting, fragments):
    path = write(tmp_path, "max-num-batched-tokens: 8192\ngpu-memory-utilization: 0.9\n")
    before = path.read_bytes()
    assert_refused(path, before, run(str(path), "--set", setting), *fragments)


@pytest.mark.parametrize(
    "text, fragments",
    [
        ("a: 1\nb: [1, 2\nc: 3\n", [":3:", "malformed YAML"]),
        ("a: 1\n  b: 2\n", [":2:", "malformed YAML"]),
        ("max-num-batched-tokens: 1\nmax-num-batched-tokens: 2\n", [":2:", "duplicate key"]),
        ("a: {b: 1\n", ["malformed YAML"]),
    ],
)
def test_malformed_yaml_names_file_and_line(tmp_path, text, fragments):
    path = write(tmp_path, text)
    before = path.read_bytes()
    assert_refused(path, before, run(str(path)), str(path), *fragments)


def test_other_refusals(tmp_path):
    for sub in ("nested", "list"):
        (tmp_path / sub).mkdir()
    nested = write(tmp_path / "nested", "max-num-batched-tokens:\n  a: 1\n")
    assert_refused(nested, nested.read_bytes(), run(str(nested)), "line 1", "mapping value")
    top_list = write(tmp_path / "list", "- a\n- b\n")
    assert_refused(top_list, top_list.read_bytes(), run(str(top_list), "--add"), "sequence")
    latin = tmp_path / "latin" / "run.yaml"
    latin.parent.mkdir()
    latin.write_bytes(b"name: caf\xe9\n")
    assert_refused(latin, latin.read_bytes(), run(str(latin)), "not UTF-8")
    result = run(str(tmp_path / "missing.yaml"))
    assert result.exit_code == 2 and "no such file" in result.stderr


def test_unwritable_directory_is_an_error_not_a_traceback(tmp_path):
    path = write(tmp_path, "max-num-batched-tokens: 1\n")
    with read_only(tmp_path):
        result = run(str(path))
    assert result.exit_code == 2 and "cannot write" in result.stderr
    assert path.read_text() == "max-num-batched-tokens: 1\n"


def test_symlinked_config_keeps_its_link(tmp_path):
    real = write(tmp_path, "max-num-batched-tokens: 1\n", "real.yaml")
    link = tmp_path / "link.yaml"
    link.symlink_to(real.name)
    assert run(str(link)).exit_code == 0
    assert link.is_symlink()
    assert real.read_text() == "max-num-batched-tokens: 16384\n"


def test_module_entry_point_in_a_subprocess(tmp_path):
    path = write(tmp_path, MESSY)
    base = [sys.executable, "-m", "vllm_codemod.cli", "tune-config", str(path)]
    proc = subprocess.run([*base, "--diff"], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert path.read_text() == MESSY
    proc = subprocess.run(base, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert path.read_text() == MESSY_EXPECTED
    proc = subprocess.run([*base, "--set", "bogus=1"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "unknown key" in proc.stderr


def test_defaults_only_raise_values_and_set_may_lower_them(tmp_path):
    """The defaults are floors: a config already above them keeps its values.  A value
    named with --set is what the user asked for and is written as given."""
    config = tmp_path / "run.yaml"
    high = b"max-num-batched-tokens: 32768\ngpu-memory-utilization: 0.98\n"
    config.write_bytes(high)
    assert run(str(config)).exit_code == 0
    assert config.read_bytes() == high
    result = run(str(config), "--set", "max-num-batched-tokens=8192")
    assert result.exit_code == 0, result.output
    assert config.read_bytes() == b"max-num-batched-tokens: 8192\ngpu-memory-utilization: 0.98\n"

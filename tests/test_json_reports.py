"""``--json`` on every command: exactly one document, ``schema_version`` 1, valid against
the shipped JSON Schema, for successes and failures alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from treeutil import cli_runner, copy_fixture
from vllm_codemod.cli import COMMANDS, cli
from vllm_codemod.report import SCHEMA_FILE, load_schema

jsonschema = pytest.importorskip("jsonschema")

FORK = "bi-v100/corex-0.8.3"


def document(*args: str, code=None) -> dict:
    result = cli_runner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    if code is not None:
        assert result.exit_code == code, result.output
    payload = json.loads(result.stdout)  # the whole of stdout is one document
    jsonschema.validate(payload, load_schema())
    assert payload["schema_version"] == 1
    assert payload["command"] == args[0]
    assert payload["exit_code"] == result.exit_code
    return payload


@pytest.fixture
def fork(tmp_path) -> Path:
    return copy_fixture(FORK, tmp_path)


def test_the_schema_is_a_valid_draft_07_schema_shipped_in_the_package():
    assert SCHEMA_FILE.is_file()
    assert SCHEMA_FILE.parent.parent.name == "vllm_codemod"
    jsonschema.Draft7Validator.check_schema(load_schema())


def test_tree_commands_through_a_full_cycle(fork):
    site = str(fork)
    check = document("check", "--site-packages", site, code=1)
    assert {t["status"] for t in check["transforms"]} == {"pending"}
    diff = document("diff", "--site-packages", site, code=1)
    assert diff["pending"] is True
    custom_ops = next(f for f in diff["files"] if f["path"] == "vllm/_custom_ops.py")
    assert custom_ops["action"] == "patch" and custom_ops["hunks"]
    added = [f for f in diff["files"] if f["action"] == "add"]
    assert added and all(f["hunks"][0]["old_start"] == 0 for f in added)
    status = document("status", "--site-packages", site, code=0)
    assert status["patched"] is False and status["fork_markers"]
    apply = document("apply", "--site-packages", site, code=0)
    assert {t["outcome"] for t in apply["transforms"]} == {"applied"}
    assert apply["wrote"] is True
    again = document("apply", "--site-packages", site, code=0)
    assert {t["outcome"] for t in again["transforms"]} == {"already applied"}
    assert again["changed"] == [] and again["wrote"] is False
    assert document("diff", "--site-packages", site, code=0)["files"] == []
    assert document("check", "--site-packages", site, "-v", code=0)["patched"] is True
    patched = document("status", "--site-packages", site, code=0)
    assert patched["patched"] is True and patched["live"] is False
    revert = document("revert", "--site-packages", site, code=0)
    assert revert["restored"]


def test_diff_hunks_rebuild_the_new_file(fork):
    """The hunks as data carry the same edit as the text diff: replaying them works."""
    diff = document("diff", "--site-packages", str(fork), code=1)
    for entry in diff["files"]:
        if entry["action"] != "patch":
            continue
        old = (fork / entry["path"]).read_text().splitlines()
        new = list(old)
        shift = 0
        for hunk in entry["hunks"]:
            start = hunk["old_start"] - 1 + shift
            before = [line[1:] for line in hunk["lines"] if line[0] in " -"]
            after = [line[1:] for line in hunk["lines"] if line[0] in " +"]
            assert len(before) == hunk["old_lines"] and len(after) == hunk["new_lines"]
            assert new[start : start + len(before)] == before
            new[start : start + len(before)] = after
            shift += len(after) - len(before)
        assert new != old
        assert len(new) == len(old) + sum(h["new_lines"] - h["old_lines"] for h in entry["hunks"])


def test_list():
    names = [t["name"] for t in document("list", code=0)["transforms"]]
    assert names == [
        "paged-attention-v2",
        "v2-dispatch",
        "prefix-prefill-warps",
        "prefix-prefill-route",
    ]


def test_tune_config_both_modes(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("args:\n  - --max-num-batched-tokens=8192\n")
    dry = document("tune-config", str(config), "--diff", code=1)
    assert dry["changed"] is True and dry["diff"].startswith("--- ")
    done = document("tune-config", str(config), code=0)
    assert done["edits"][0]["new"] == "16384"


def test_verify(tmp_path):
    pytest.importorskip("torch")
    site = copy_fixture("bi-v100/corex-0.4.3", tmp_path)
    document("apply", "--site-packages", str(site), code=0)
    payload = document("verify", "--site-packages", str(site), "--device", "cpu", code=0)
    assert payload["ok"] is True and payload["results"]


@pytest.mark.parametrize(
    "args",
    [
        ["apply", "--site-packages", "/nonexistent/site"],
        ["check", "--site-packages", "/nonexistent/site"],
        ["diff", "--site-packages", "/nonexistent/site"],
        ["revert", "--site-packages", "/nonexistent/site"],
        ["status", "--site-packages", "/nonexistent/site"],
        ["verify", "--site-packages", "/nonexistent/site"],
        ["tune-config", "/nonexistent/run.yaml"],
    ],
)
def test_a_failure_is_still_one_document(args):
    payload = document(*args, code=2)
    assert "/nonexistent/" in payload["error"]["message"]
    assert not payload["error"]["message"].startswith("error:")


def test_every_command_takes_json_quiet_verbose_and_color():
    for name in COMMANDS:
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0, name
        for flag in ("--json", "-q, --quiet", "-v, --verbose", "--color / --no-color"):
            assert flag in result.output, (name, flag)


@pytest.mark.parametrize(
    "args",
    [
        ["apply", "--num-warps", "3"],
        ["check", "--v2-threshold", "0"],
        ["diff", "--only", "no-such-transform"],
        ["revert", "--no-such-flag"],
    ],
)
def test_a_usage_error_under_json_is_one_document_too(args):
    payload = document(*args, code=2)
    assert payload["error"]["message"]
    assert "--help" in payload["error"]["message"]


def test_report_envelope_cannot_be_overwritten_and_odd_values_are_named():
    from packaging.version import Version

    from vllm_codemod.report import Report, dumps
    from vllm_codemod.transforms.base import Status

    report = Report("check", data={"where": Path("/x"), "v": Version("0.8.3"), "s": Status.APPLIED})
    assert json.loads(dumps(report.to_json()))["v"] == "0.8.3"
    assert json.loads(dumps(report.to_json()))["s"] == "applied"
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        dumps({"x": object()})
    with pytest.raises(ValueError, match="exit_code"):
        Report("check", data={"exit_code": 0}).to_json()

"""An interrupted run's leftovers: read-only commands report them, writing ones remove them.

``diff`` and ``status`` change nothing in the tree (one line on stderr names the
leftovers); ``check`` removes them, as docs/engine.md (guarantee 3) promises, and says
so; ``apply``/``revert`` remove them as part of their recovery.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from treeutil import copy_fixture, snapshot, write_record

FORK = "bi-v100/corex-0.8.3"
LINE = "leftover files from an interrupted run at "


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vllm_codemod", *args], capture_output=True, text=True
    )


def _debris(site: Path) -> List[str]:
    """What a run killed between staging and its commit leaves: staging and temp files."""
    state = site / "vllm" / ".vllm-codemod"
    staged = state / "staged" / "new" / "vllm" / "_custom_ops.py"
    staged.parent.mkdir(parents=True)
    staged.write_text("# half a run\n")
    temp = site / "vllm" / "._custom_ops.py.vllm-codemod-999999999.tmp"
    temp.write_text("# half a file\n")
    return ["vllm/.vllm-codemod/staged/", "vllm/._custom_ops.py.vllm-codemod-999999999.tmp"]


@pytest.fixture
def patched(tmp_path) -> Path:
    site = copy_fixture(FORK, tmp_path)
    write_record(site)
    assert cli("apply", "--site-packages", str(site)).returncode == 0
    return site


@pytest.mark.parametrize("command, code", [("diff", 0), ("status", 0)])
def test_read_only_commands_report_debris_and_leave_it(patched, command, code):
    expected = _debris(patched)
    before = snapshot(patched)
    result = cli(command, "--site-packages", str(patched))
    assert result.returncode == code, result.stderr
    assert snapshot(patched) == before
    lines = [line for line in result.stderr.splitlines() if LINE in line]
    assert len(lines) == 1, result.stderr
    assert "vllm-codemod apply" in lines[0] and "revert" in lines[0]
    assert str(patched / "vllm") in lines[0]
    as_json = cli(command, "--site-packages", str(patched), "--json")
    assert sorted(json.loads(as_json.stdout)["debris"]) == sorted(expected)
    assert snapshot(patched) == before
    quiet = cli(command, "--site-packages", str(patched), "-q")
    assert quiet.stderr == ""


def test_without_debris_nothing_is_said(patched):
    for command in ("diff", "status", "check"):
        result = cli(command, "--site-packages", str(patched))
        assert LINE not in result.stderr and "leftover" not in result.stderr, result.stderr
        assert (
            json.loads(cli(command, "--site-packages", str(patched), "--json").stdout)["debris"]
            == []
        )


def test_check_removes_debris_and_says_so(patched):
    clean = snapshot(patched)
    _debris(patched)
    result = cli("check", "--site-packages", str(patched))
    assert result.returncode == 0, result.stderr
    assert snapshot(patched) == clean
    (line,) = [line for line in result.stderr.splitlines() if "leftover" in line]
    assert line.startswith("removed 2 leftover file(s) of an interrupted run at ")


@pytest.mark.parametrize("command", ["apply", "revert"])
def test_writing_commands_remove_debris(patched, command):
    _debris(patched)
    assert cli(command, "--site-packages", str(patched)).returncode == 0
    assert not list(patched.rglob("*.vllm-codemod-*.tmp"))
    assert not (patched / "vllm" / ".vllm-codemod" / "staged").exists()

"""A hand edit of a patched file is never lost, and neither is the true original.

Issue #26: after ``apply``, a hand edit of ``prefix_prefill.py`` was overwritten by the
next plain ``apply``, which also saved the hand-edited bytes as the "original", so
``revert`` could no longer bring back the file vLLM shipped.  A reinstall (none of our
changes left in the file) is still taken as the new original.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from treeutil import copy_fixture, snapshot
from vllm_codemod.cli import cli

TARGET = Path("vllm/attention/ops/prefix_prefill.py")


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def fork(tmp_path) -> Path:
    return copy_fixture("bi-v100/corex-0.8.3", tmp_path)


def hand_edit(site: Path) -> None:
    path = site / TARGET
    text = path.read_text()
    assert "NUM_WARPS = 4\n" in text
    path.write_text(text.replace("NUM_WARPS = 4\n", "NUM_WARPS = 2  # local hand edit\n"))


def test_apply_refuses_to_overwrite_a_hand_edit(fork):
    pristine = snapshot(fork)
    original = (fork / TARGET).read_bytes()
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    hand_edit(fork)
    edited = snapshot(fork)
    result = run("apply", "--site-packages", str(fork))
    assert result.exit_code == 2
    assert str(fork / TARGET) in result.output
    assert "--discard-local-changes" in result.output
    assert snapshot(fork) == edited
    # revert refuses too, then restores the true original when told to
    assert run("revert", "--site-packages", str(fork)).exit_code == 2
    assert snapshot(fork) == edited
    assert run("revert", "--site-packages", str(fork), "--discard-local-changes").exit_code == 0
    assert (fork / TARGET).read_bytes() == original
    assert snapshot(fork) == pristine


def test_apply_discard_local_changes_keeps_the_true_original(fork):
    pristine = snapshot(fork)
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    patched = (fork / TARGET).read_bytes()
    hand_edit(fork)
    result = run("apply", "--site-packages", str(fork), "--discard-local-changes")
    assert result.exit_code == 0, result.output
    assert (fork / TARGET).read_bytes() == patched
    assert run("check", "--site-packages", str(fork)).exit_code == 0
    assert run("revert", "--site-packages", str(fork)).exit_code == 0
    assert snapshot(fork) == pristine


def test_a_reinstalled_file_becomes_the_new_original(fork):
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    reinstalled = (
        b"# a newer build of the fork\n"
        + (
            Path(__file__).parent.parent / "vendor_fixtures/bi-v100/corex-0.8.3" / TARGET
        ).read_bytes()
    )
    (fork / TARGET).write_bytes(reinstalled)
    result = run("apply", "--site-packages", str(fork))
    assert result.exit_code == 0, result.output
    assert b"NUM_WARPS = 4\n" in (fork / TARGET).read_bytes()
    assert run("revert", "--site-packages", str(fork)).exit_code == 0
    assert (fork / TARGET).read_bytes() == reinstalled

"""Owner and mode of the files apply and revert replace (issue #26).

A read-only file (mode 0444) is replaced, keeps its mode, and the run says so.  A file
owned by another user keeps its owner; where the OS will not allow that (a non-root
patcher), the run is refused before anything is written unless --allow-owner-change.
The tests run as root, so the OS's refusal is simulated by an ``os.chown`` that raises.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from treeutil import copy_fixture, snapshot
from vllm_codemod.cli import cli

WARPS = Path("vllm/attention/ops/prefix_prefill.py")
OPS = Path("vllm/_custom_ops.py")


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def fork(tmp_path) -> Path:
    return copy_fixture("bi-v100/corex-0.8.3", tmp_path)


def test_a_read_only_file_keeps_its_mode_and_the_run_says_so(fork):
    os.chmod(fork / WARPS, 0o444)
    note = f"{WARPS.as_posix()} is read-only (mode 0444)"
    assert note in run("diff", "--site-packages", str(fork)).output
    result = run("apply", "--site-packages", str(fork))
    assert result.exit_code == 0, result.output
    assert note in result.output
    assert stat.S_IMODE(os.stat(fork / WARPS).st_mode) == 0o444
    assert run("revert", "--site-packages", str(fork)).exit_code == 0
    assert stat.S_IMODE(os.stat(fork / WARPS).st_mode) == 0o444


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_the_owner_of_a_replaced_file_is_kept(fork):
    os.chown(fork / OPS, 1234, 2345)
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    st = os.stat(fork / OPS)
    assert (st.st_uid, st.st_gid) == (1234, 2345)
    assert run("revert", "--site-packages", str(fork)).exit_code == 0
    st = os.stat(fork / OPS)
    assert (st.st_uid, st.st_gid) == (1234, 2345)


def refuse_chown(monkeypatch):
    def chown(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "chown", chown)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_apply_refuses_when_the_owner_cannot_be_kept(fork, monkeypatch):
    os.chown(fork / OPS, 1234, 2345)
    before = snapshot(fork)
    refuse_chown(monkeypatch)
    result = run("apply", "--site-packages", str(fork))
    assert result.exit_code == 2
    assert str(fork / OPS) in result.output and "(uid 1234, gid 2345)" in result.output
    assert "--allow-owner-change" in result.output
    assert snapshot(fork) == before
    assert os.stat(fork / OPS).st_uid == 1234
    result = run("apply", "--site-packages", str(fork), "--allow-owner-change")
    assert result.exit_code == 0, result.output
    assert os.stat(fork / OPS).st_uid == os.geteuid()  # allowed: it became the patcher's


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_revert_refuses_when_the_owner_cannot_be_kept(fork, monkeypatch):
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    os.chown(fork / OPS, 1234, 2345)
    patched = snapshot(fork)
    with monkeypatch.context() as patch:
        refuse_chown(patch)
        result = run("revert", "--site-packages", str(fork))
        assert result.exit_code == 2
        assert "--allow-owner-change" in result.output
        assert snapshot(fork) == patched
        result = run("revert", "--site-packages", str(fork), "--allow-owner-change")
        assert result.exit_code == 0, result.output

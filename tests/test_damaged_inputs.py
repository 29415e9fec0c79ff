"""Inputs the tool reads but does not own, damaged or of the wrong kind: one line, exit 2,
nothing written (and never a hang)."""

from __future__ import annotations

import os

import pytest

from treeutil import cli_runner, copy_fixture, snapshot, write_record
from vllm_codemod.cli import cli
from vllm_codemod.errors import NotARegularFile
from vllm_codemod.fsutil import sha256_file


def run(*args):
    return cli_runner().invoke(cli, list(args))


def test_a_record_that_is_not_utf8_is_a_user_error(tmp_path):
    site = copy_fixture("bi-v100/corex-0.8.3", tmp_path)
    record = write_record(site)
    record.write_bytes(record.read_bytes() + b"vllm/\xff\xfe.py,,\n")
    before = snapshot(site)
    result = run("apply", "--site-packages", str(site))
    assert result.exit_code == 2, result.output
    assert "unreadable RECORD" in result.stderr and "reinstall vllm" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert snapshot(site) == before


def test_hashing_a_fifo_is_refused_not_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(NotARegularFile):
        sha256_file(fifo)  # would block forever on a plain read
    assert sha256_file(tmp_path / "absent") is None


def test_check_says_why_a_conflict_fails_even_when_quiet(tmp_path):
    site = copy_fixture("bi-v100/corex-unknown-shape", tmp_path)
    result = run("check", "-q", "--site-packages", str(site))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "conflict in paged-attention-v2" in lines[0], lines

"""-q / -v / --color / NO_COLOR behave the same on every command, and the report says
what apply did ("applied", "already applied", "skipped: ..."), never "pending"."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from treeutil import copy_fixture
from vllm_codemod.cli import cli
from vllm_codemod.commands._output import LOGGER_NAME, configure_logging

FORK = "bi-v100/corex-0.8.3"
ESC = "\x1b["


def run(*args: str, env=None, color=False):
    return CliRunner().invoke(cli, list(args), env=env, color=color, catch_exceptions=False)


@pytest.fixture
def fork(tmp_path) -> Path:
    return copy_fixture(FORK, tmp_path)


def test_quiet_prints_nothing_but_the_status_says_it(fork):
    check = run("check", "--site-packages", str(fork), "-q")
    assert (check.exit_code, check.output) == (1, "")
    diff = run("diff", "--site-packages", str(fork), "-q")
    assert (diff.exit_code, diff.output) == (1, "")
    apply = run("apply", "--site-packages", str(fork), "-q")
    assert (apply.exit_code, apply.output) == (0, "")
    assert run("check", "--site-packages", str(fork), "-q").exit_code == 0


def test_quiet_still_prints_errors(tmp_path):
    result = run("check", "--site-packages", str(tmp_path), "-q")
    assert result.exit_code == 2
    assert result.output.startswith("vllm-codemod: error: ")


def test_verbose_adds_per_file_detail(fork):
    plain = run("apply", "--site-packages", str(fork))
    assert "vllm/_codemod_kernels/dispatch.py" not in plain.output
    fork2 = fork.parent.parent / "second"
    site2 = copy_fixture(FORK, fork2)
    verbose = run("apply", "--site-packages", str(site2), "-v")
    assert "add    vllm/_codemod_kernels/dispatch.py" in verbose.output
    assert "patch  vllm/_custom_ops.py" in verbose.output
    again = run("apply", "--site-packages", str(site2), "-v")
    assert "nothing to do" in again.output and "already applied" in again.output


def test_quiet_and_verbose_together_is_a_usage_error(fork):
    result = run("check", "--site-packages", str(fork), "-q", "-v")
    assert result.exit_code == 2 and "not both" in result.output


def test_apply_reports_what_it_did_never_pending(tmp_path):
    site = copy_fixture("upstream/vllm-0.8.3", tmp_path)
    first = run("apply", "--site-packages", str(site), "--only", "prefix-prefill-warps")
    assert first.exit_code == 0, first.output
    assert "pending" not in first.output
    assert "prefix-prefill-warps" in first.output and "applied" in first.output
    assert "skipped: not selected" in first.output
    second = run("apply", "--site-packages", str(site), "-v")
    assert "pending" not in second.output
    assert "already applied" in second.output or "skipped: " in second.output


def test_diff_colour_follows_flags_and_no_color(fork):
    site = str(fork)
    # CliRunner(color=True) plays a terminal: colour by default.
    tty = run("diff", "--site-packages", site, color=True)
    assert ESC + "32m+" in tty.output and ESC + "31m-" in tty.output
    assert ESC not in run("diff", "--site-packages", site, "--no-color", color=True).output
    no_color = run("diff", "--site-packages", site, env={"NO_COLOR": "1"}, color=True)
    assert ESC not in no_color.output
    forced = run("diff", "--site-packages", site, "--color", env={"NO_COLOR": "1"})
    assert ESC in forced.output  # the flag beats the variable, even into a pipe
    piped = run("diff", "--site-packages", site)
    assert ESC not in piped.output
    # The colour codes wrap lines; stripped, the text is the same diff.
    assert click_unstyle(tty.output) == piped.output


def click_unstyle(text: str) -> str:
    import click

    return click.unstyle(text)


def test_logging_level_follows_quiet_and_verbose():
    logger = logging.getLogger(LOGGER_NAME)

    def ours():
        return [h for h in logger.handlers if getattr(h, "_vllm_codemod", False)]

    levels = ((-1, logging.ERROR), (0, logging.WARNING), (1, logging.INFO), (2, logging.DEBUG))
    for verbosity, expected in levels:
        before = (logger.level, logger.propagate)
        restore = configure_logging(verbosity)
        assert logger.level == expected and len(ours()) == 1
        restore()  # what the command runs on close: the caller's logging as it was
        assert (logger.level, logger.propagate) == before and not ours()
    first = configure_logging(1)
    second = configure_logging(2)
    assert len(ours()) == 1  # replaced, never stacked
    second()
    first()


def test_a_log_record_reaches_stderr_only_at_its_level(fork, monkeypatch):
    from vllm_codemod.transforms.prefix_prefill_warps import PrefixPrefillWarps

    real = PrefixPrefillWarps.plan

    def chatty(self, module, context):
        logging.getLogger(LOGGER_NAME + ".test").info("planning prefix prefill")
        return real(self, module, context)

    monkeypatch.setattr(PrefixPrefillWarps, "plan", chatty)
    assert "planning prefix prefill" not in run("check", "--site-packages", str(fork)).output
    verbose = run("check", "--site-packages", str(fork), "-v")
    assert "vllm-codemod: INFO: planning prefix prefill" in verbose.output

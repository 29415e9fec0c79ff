"""Read-only commands report the state a tree is in, on the exit status the table gives it.

Issue #26: after an interrupted run, on a tree outside the known versions that
``apply --force`` patched, with a hand-edited bundled kernel, or on a tree patched by
hand from ``diff`` output, ``check``, ``status`` and ``diff`` failed with exit 2 where
they should say what they see (and a plain re-``apply`` should honour a recorded force).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from treeutil import copy_fixture, snapshot
from vllm_codemod.cli import cli


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def fork(tmp_path) -> Path:
    return copy_fixture("bi-v100/corex-0.8.3", tmp_path)


def commit_but_do_not_replay(fork: Path) -> None:
    """An apply that committed its journal and then died before any step."""
    import vllm_codemod.engine.applying as applying
    from vllm_codemod.discovery import locate_tree
    from vllm_codemod.engine import plan

    real = applying.replay
    applying.replay = lambda state, journal: None
    try:
        tree = locate_tree(fork, None)
        applying.apply(plan(tree))
    finally:
        applying.replay = real


@pytest.mark.parametrize("command", ["check", "diff", "status"])
def test_an_interrupted_apply_is_reported_not_an_error(fork, command):
    commit_but_do_not_replay(fork)
    before = snapshot(fork)
    result = run(command, "--site-packages", str(fork))
    assert result.exit_code == 1, result.output
    assert (
        "an interrupted apply; `vllm-codemod apply` finishes it, `vllm-codemod revert` "
        "undoes it" in result.output
    )
    assert snapshot(fork) == before  # only writers recover
    document = json.loads(run(command, "--site-packages", str(fork), "--json").output)
    assert document["exit_code"] == 1 and document["interrupted"] == {"op": "apply"}
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    assert run("check", "--site-packages", str(fork)).exit_code == 0

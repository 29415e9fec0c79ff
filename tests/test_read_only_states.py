"""Read-only commands report the state a tree is in, on the exit status the table gives it.

Issue #26: after an interrupted run, on a tree outside the known versions that
``apply --force`` patched, with a hand-edited bundled kernel, or on a tree patched by
hand from ``diff`` output, ``check``, ``status`` and ``diff`` failed with exit 2 where
they should say what they see (and a plain re-``apply`` should honour a recorded force).
"""

from __future__ import annotations

import json
import shutil
import subprocess
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


def out_of_range(site: Path, version: str = "0.12.0+corex.5") -> None:
    (metadata,) = site.glob("vllm-*.dist-info/METADATA")
    text = metadata.read_text()
    metadata.write_text(text.replace("Version: 0.8.3+corex.4.2.0", f"Version: {version}", 1))


def test_apply_force_is_recorded_and_honoured_by_every_later_command(fork):
    out_of_range(fork)
    assert run("apply", "--site-packages", str(fork), "--force").exit_code == 0
    manifest = json.loads((fork / "vllm/.vllm-codemod/manifest.json").read_text())
    assert manifest["forced_version"] == "0.12.0+corex.5"
    patched = snapshot(fork)
    for command, code in (("check", 0), ("status", 0), ("diff", 0), ("apply", 0)):
        result = run(command, "--site-packages", str(fork))
        assert result.exit_code == code, (command, result.output)
        assert "pass --force" not in result.output
    assert (
        "patched with `vllm-codemod apply --force`"
        in run("check", "--site-packages", str(fork)).output
    )
    assert snapshot(fork) == patched
    # the force belongs to that version: another unknown version is refused again
    (metadata,) = fork.glob("vllm-*.dist-info/METADATA")
    metadata.write_text(metadata.read_text().replace("0.12.0+corex.5", "0.13.0", 1))
    result = run("check", "--site-packages", str(fork))
    assert result.exit_code == 2
    assert "pass --force to check it anyway (`vllm-codemod check --force`)" in result.output
    assert "to apply" not in result.output


@pytest.mark.parametrize(
    "command, way_on",
    [
        ("check", "pass --force to check it anyway (`vllm-codemod check --force`)"),
        ("diff", "pass --force to see what `vllm-codemod apply --force` would change"),
        ("apply", "check `vllm-codemod diff --force` and pass --force to apply"),
    ],
)
def test_the_version_gate_names_the_way_on_for_the_command_run(fork, command, way_on):
    out_of_range(fork)
    result = run(command, "--site-packages", str(fork))
    assert result.exit_code == 2
    assert way_on in result.output


def test_status_reports_a_tree_outside_the_known_versions(fork):
    out_of_range(fork)
    result = run("status", "--site-packages", str(fork))
    assert result.exit_code == 0, result.output
    assert "0.12.0+corex.5" in result.output
    assert "outside the versions this tool knows (0.4.3 to 0.11.0)" in result.output
    assert "`vllm-codemod apply --force` patches it anyway" in result.output
    document = json.loads(run("status", "--site-packages", str(fork), "--json").output)
    assert document["exit_code"] == 0 and document["version"] == "0.12.0+corex.5"


KERNEL = Path("vllm/_codemod_kernels/dispatch.py")
WARPS_TARGET = Path("vllm/attention/ops/prefix_prefill.py")


def test_a_hand_edited_bundled_kernel_is_drift_not_an_error(fork):
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    patched = (fork / KERNEL).read_bytes()
    with (fork / KERNEL).open("a") as handle:
        handle.write("# local tweak\n")
    edited = snapshot(fork)
    way_on = (
        "vllm/_codemod_kernels/dispatch.py: changed since vllm-codemod added it; "
        "`vllm-codemod apply --discard-local-changes` puts vllm-codemod's copy back"
    )
    result = run("check", "--site-packages", str(fork))
    assert result.exit_code == 1, result.output  # as for drift in a patched file
    assert way_on in result.output
    result = run("status", "--site-packages", str(fork))
    assert result.exit_code == 0, result.output
    assert way_on in result.output
    result = run("apply", "--site-packages", str(fork))
    assert result.exit_code == 2
    assert str(fork / KERNEL) in result.output and "--discard-local-changes" in result.output
    assert snapshot(fork) == edited
    assert run("apply", "--site-packages", str(fork), "--discard-local-changes").exit_code == 0
    assert (fork / KERNEL).read_bytes() == patched
    assert run("check", "--site-packages", str(fork)).exit_code == 0


def hand_patch(site: Path, tmp_path: Path, reverse: bool = False) -> Path:
    """``patch -p1`` the tree with what ``vllm-codemod diff`` printed for it."""
    diff_file = tmp_path / "codemod.diff"
    if not reverse:
        result = run("diff", "--site-packages", str(site))
        assert result.exit_code == 1, result.output
        diff_file.write_text(result.output)
    flags = ["-R"] if reverse else []
    subprocess.run(
        ["patch", "-p1", "-s", *flags, "-i", str(diff_file)], cwd=site, check=True, timeout=60
    )
    return diff_file


NO_MANIFEST = (
    "vllm-codemod's files are in the tree but no manifest records them (patched by hand, "
    "e.g. `patch -p1` from `vllm-codemod diff`"
)


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the patch program")
def test_a_tree_patched_by_hand_from_diff_output_is_reported_and_can_be_adopted(fork, tmp_path):
    hand_patch(fork, tmp_path)
    patched = snapshot(fork)
    result = run("check", "--site-packages", str(fork))
    assert result.exit_code == 0, result.output  # nothing differs from what apply writes
    assert NO_MANIFEST in result.output and "`patch -R -p1`" in result.output
    assert "vllm/_codemod_kernels/ (" in result.output  # one directory, not 24 paths
    document = json.loads(run("check", "--site-packages", str(fork), "--json").output)
    assert document["exit_code"] == 0 and document["patched"] is False
    assert "vllm/_codemod_kernels/__init__.py" in "\n".join(document["unrecorded"])
    result = run("status", "--site-packages", str(fork))
    assert result.exit_code == 0 and NO_MANIFEST in result.output
    assert run("diff", "--site-packages", str(fork)).exit_code == 0
    result = run("apply", "--site-packages", str(fork))
    assert result.exit_code == 2 and NO_MANIFEST in result.output
    assert "nothing was changed" in result.output
    assert snapshot(fork) == patched
    # the way on the message names: undo the hand patch, then apply
    hand_patch(fork, tmp_path, reverse=True)
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    assert run("check", "--site-packages", str(fork)).exit_code == 0
    assert run("revert", "--site-packages", str(fork)).exit_code == 0


def test_a_tree_without_its_state_directory_differing_somewhere_is_pending(fork, tmp_path):
    """An applied tree whose .vllm-codemod directory was removed, then one patched file
    reinstalled: the pending-change status, the same report."""
    original = (fork / WARPS_TARGET).read_bytes()
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    shutil.rmtree(fork / "vllm" / ".vllm-codemod")
    (fork / WARPS_TARGET).write_bytes(original)
    result = run("check", "--site-packages", str(fork))
    assert result.exit_code == 1, result.output
    assert NO_MANIFEST in result.output and "pending" in result.output
    before = snapshot(fork)
    assert run("apply", "--site-packages", str(fork)).exit_code == 2
    assert snapshot(fork) == before

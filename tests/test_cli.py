"""The CLI as a user drives it, on copies of real fixture trees: every exit code."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import List

import pytest
from click.testing import CliRunner

from treeutil import FIXTURES, copy_fixture, read_only, snapshot
from vllm_codemod.cli import cli

FORK = "bi-v100/corex-0.8.3"
UPSTREAM = "upstream/vllm-0.8.3"


def run(*args: str, env=None):
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    return result


@pytest.fixture
def fork(tmp_path) -> Path:
    return copy_fixture(FORK, tmp_path)


def test_version_and_help():
    assert run("--version").output.startswith("vllm-codemod, version ")
    for command in ("apply", "diff", "check", "revert", "list", "verify", "tune-config"):
        result = run(command, "--help")
        assert result.exit_code == 0, command
        assert "Usage:" in result.output


def test_list_names_every_transform():
    result = run("list", "--json")
    names = [t["name"] for t in json.loads(result.output)["transforms"]]
    assert names == [
        "paged-attention-v2",
        "v2-dispatch",
        "prefix-prefill-warps",
        "prefix-prefill-route",
    ]
    assert "--num-warps" in run("list").output


def test_full_cycle_on_a_fork_tree(fork):
    pristine = snapshot(fork)

    check = run("check", "--site-packages", str(fork), "--json")
    assert check.exit_code == 1
    statuses = {t["name"]: t["status"] for t in json.loads(check.output)["transforms"]}
    assert statuses == dict.fromkeys(statuses, "pending")

    diff = run("diff", "--site-packages", str(fork))
    assert diff.exit_code == 1
    assert "--- a/vllm/_custom_ops.py\n+++ b/vllm/_custom_ops.py" in diff.output
    assert "+++ b/vllm/_codemod_kernels/__init__.py" in diff.output
    assert snapshot(fork) == pristine  # diff writes nothing

    applied = run("apply", "--site-packages", str(fork))
    assert applied.exit_code == 0, applied.output
    assert "patched 3 file(s)" in applied.output
    patched = snapshot(fork)

    assert run("check", "--site-packages", str(fork)).exit_code == 0
    again = run("diff", "--site-packages", str(fork))
    assert (again.exit_code, again.output) == (0, "")
    second = run("apply", "--site-packages", str(fork))
    assert second.exit_code == 0 and "nothing to do" in second.output
    assert snapshot(fork) == patched

    reverted = run("revert", "--site-packages", str(fork))
    assert reverted.exit_code == 0
    assert snapshot(fork) == pristine
    assert "nothing to revert" in run("revert", "--site-packages", str(fork)).output


def test_a_one_line_stub_keeps_its_docstring_and_reverts_byte_exactly(fork):
    ops = fork / "vllm" / "_custom_ops.py"
    text = ops.read_text()
    body = (
        "    # ixuca: the V2 (split-KV) paged attention kernel is not built for BI-V100.\n"
        '    logger.warning("paged_attention_v2 is not supported on BI-V100, "\n'
        '                   "use paged_attention_v1 instead")\n'
        "    raise NotImplementedError()\n"
    )
    assert text.count(") -> None:\n" + body) == 1
    text = text.replace(
        ") -> None:\n" + body, ') -> None: "No V2 kernel on BI-V100."; raise NotImplementedError\n'
    )
    ops.write_text(text)
    pristine = snapshot(fork)

    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    patched = ops.read_text()
    kept = ') -> None:\n    "No V2 kernel on BI-V100."\n    # vllm-codemod: paged-attention-v2:'
    assert kept in patched
    assert "nothing to do" in run("apply", "--site-packages", str(fork)).output
    assert ops.read_text() == patched

    assert run("revert", "--site-packages", str(fork)).exit_code == 0
    assert snapshot(fork) == pristine


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch(1)")
def test_diff_is_exactly_what_apply_writes(fork, tmp_path):
    """`patch -p1` of the diff on one copy gives the bytes `apply` writes on another."""
    diff = run("diff", "--site-packages", str(fork))
    assert diff.exit_code == 1
    other = copy_fixture(FORK, tmp_path / "other")
    assert run("apply", "--site-packages", str(other)).exit_code == 0
    proc = subprocess.run(
        ["patch", "-p1", "--quiet", "--batch", "--no-backup-if-mismatch"],
        input=diff.stdout,
        cwd=fork,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    patched_files, _ = snapshot(fork)
    applied_files, _ = snapshot(other)
    # apply also writes its state directory (originals, manifest): not part of the diff.
    applied_files = {k: v for k, v in applied_files.items() if "/.vllm-codemod/" not in k}
    assert sorted(patched_files) == sorted(applied_files)
    for rel, data in applied_files.items():
        assert patched_files[rel] == data, rel


def test_upstream_tree_needs_nothing_unless_the_warps_are_forced(tmp_path):
    site = copy_fixture(UPSTREAM, tmp_path)
    pristine = snapshot(site)
    rows = json.loads(run("check", "--site-packages", str(site), "--json").output)["transforms"]
    statuses = {t["name"]: t["status"] for t in rows}
    assert statuses["paged-attention-v2"] == "not-applicable"
    assert statuses["v2-dispatch"] == "applied"
    assert statuses["prefix-prefill-warps"] == "not-applicable"
    result = run("apply", "--site-packages", str(site))
    assert result.exit_code == 0
    assert snapshot(site) == pristine
    forced = run("apply", "--site-packages", str(site), "--only", "prefix-prefill-warps")
    assert forced.exit_code == 0
    assert "\nNUM_WARPS = 4\n" in (site / "vllm/attention/ops/prefix_prefill.py").read_text()
    assert not (site / "vllm" / "_codemod_kernels").exists()


def test_only_and_skip(fork):
    result = run("apply", "--site-packages", str(fork), "--only", "prefix-prefill-warps", "--json")
    assert result.exit_code == 0
    changed = [c["path"] for c in json.loads(result.output)["changed"]]
    assert changed == ["vllm/attention/ops/prefix_prefill.py"]
    rest = run("check", "--site-packages", str(fork), "--skip", "prefix-prefill-warps")
    assert rest.exit_code == 1
    unknown = run("apply", "--site-packages", str(fork), "--only", "nope")
    assert unknown.exit_code == 2 and "unknown transform 'nope'" in unknown.output


def test_dispatch_alone_would_route_decode_into_the_stub(fork):
    before = snapshot(fork)
    for args in (["--only", "v2-dispatch"], ["--skip", "paged-attention-v2"]):
        result = run("apply", "--site-packages", str(fork), *args)
        _assert_error(result, "v2-dispatch", "needs paged-attention-v2", "nothing was changed")
        assert snapshot(fork) == before
    both = ["--only", "v2-dispatch", "--only", "paged-attention-v2"]
    assert run("apply", "--site-packages", str(fork), *both).exit_code == 0
    assert run("check", "--site-packages", str(fork), "--only", "v2-dispatch").exit_code == 0


def _state(site: Path) -> str:
    """Which tree an apply acted on: only that one holds the manifest."""
    manifest = site / "vllm" / ".vllm-codemod" / "manifest.json"
    return "patched" if manifest.is_file() else "pristine"


def test_site_packages_from_environment(fork, tmp_path):
    decoy = copy_fixture(FORK, tmp_path / "decoy")
    env = {"VLLM_CODEMOD_SITE_PACKAGES": str(fork)}
    result = run("check", "--json", env=env)
    assert result.exit_code == 1
    assert json.loads(result.output)["vllm_root"] == str((fork / "vllm").resolve())
    assert run("apply", env=env).exit_code == 0
    assert (_state(fork), _state(decoy)) == ("patched", "pristine")
    # An explicit option wins over the variable.
    assert run("apply", "--vllm-root", str(decoy / "vllm"), env=env).exit_code == 0
    assert _state(decoy) == "patched"


def test_a_bad_site_packages_variable_is_named(tmp_path):
    result = run("check", env={"VLLM_CODEMOD_SITE_PACKAGES": str(tmp_path / "nowhere")})
    _assert_error(result, "VLLM_CODEMOD_SITE_PACKAGES=", "nowhere", "unset the variable")


def test_vllm_root_option(fork, tmp_path):
    decoy = copy_fixture(FORK, tmp_path / "decoy")
    result = run("check", "--vllm-root", str(fork / "vllm"), "--json")
    assert result.exit_code == 1
    assert json.loads(result.output)["vllm_root"] == str((fork / "vllm").resolve())
    assert run("apply", "--vllm-root", str(fork / "vllm")).exit_code == 0
    assert (_state(fork), _state(decoy)) == ("patched", "pristine")
    assert run("check", "--vllm-root", str(fork / "vllm")).exit_code == 0


def test_two_ways_of_naming_the_tree_are_refused(fork):
    result = run("check", "--site-packages", str(fork), "--vllm-root", str(fork / "vllm"))
    _assert_error(result, "--site-packages and --vllm-root", "pass only one")


def _assert_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("vllm-codemod: error: ")
    for needle in needles:
        assert needle in lines[0]


def test_vllm_not_found_in_interpreter(tmp_path):
    # A bare interpreter in an empty directory: no vllm anywhere.
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_codemod.cli", "check"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("vllm-codemod: error: vllm is not installed")
    assert "--site-packages" in proc.stderr


def test_missing_tree(tmp_path):
    _assert_error(run("apply", "--site-packages", str(tmp_path)), "contains vllm/")


@pytest.mark.parametrize("command", ["apply", "diff", "check"])
def test_unsupported_version_refused_unless_forced(fork, command):
    metadata = next(fork.glob("vllm-*.dist-info")) / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 0.8.3", "Version: 0.3.1", 1))
    before = snapshot(fork)
    _assert_error(run(command, "--site-packages", str(fork)), "0.3.1", "--force")
    assert snapshot(fork) == before
    assert run(command, "--site-packages", str(fork), "--force").exit_code in (0, 1)


def test_missing_target_file(fork):
    (fork / "vllm/attention/ops/prefix_prefill.py").unlink()
    before = snapshot(fork)
    _assert_error(
        run("apply", "--site-packages", str(fork)), "prefix_prefill.py", "--skip prefix-prefill"
    )
    assert snapshot(fork) == before
    assert (
        run(
            "apply", "--site-packages", str(fork),
            "--skip", "prefix-prefill-warps", "--skip", "prefix-prefill-route",
        ).exit_code
        == 0
    )  # fmt: skip


def test_all_missing_targets_are_named_at_once(fork):
    (fork / "vllm/attention/ops/prefix_prefill.py").unlink()
    (fork / "vllm/attention/ops/paged_attn.py").unlink()
    before = snapshot(fork)
    result = run("apply", "--site-packages", str(fork))
    _assert_error(
        result,
        "paged_attn.py",
        "prefix_prefill.py",
        "--skip v2-dispatch --skip prefix-prefill-warps",
    )
    assert snapshot(fork) == before


def test_unparseable_target(fork):
    target = fork / "vllm/attention/ops/paged_attn.py"
    target.write_text(target.read_text() + "\ndef broken(:\n")
    line = len(target.read_text().splitlines())
    before = snapshot(fork)
    _assert_error(
        run("apply", "--site-packages", str(fork)), f"paged_attn.py:{line}:", "cannot parse"
    )
    assert snapshot(fork) == before


def test_a_tokenizer_error_names_its_real_line_and_column(fork):
    target = fork / "vllm/attention/ops/paged_attn.py"
    lines = target.read_text().splitlines()
    lines.insert(40, "x = 'never closed")
    target.write_text("\n".join(lines) + "\n")
    result = run("apply", "--site-packages", str(fork))
    # libcst alone says 1:0 here; the column differs between Python versions' tokenizers.
    _assert_error(result, f"{target.resolve()}:41:", "cannot parse")
    assert ":1:0:" not in result.output


def test_unknown_shape_is_a_conflict_and_nothing_is_written(tmp_path):
    site = copy_fixture("bi-v100/corex-unknown-shape", tmp_path)
    before = snapshot(site)
    _assert_error(run("apply", "--site-packages", str(site)), "nothing was changed")
    assert snapshot(site) == before
    assert run("check", "--site-packages", str(site)).exit_code == 2
    assert run("diff", "--site-packages", str(site)).exit_code == 2


def test_read_only_tree(fork):
    before = snapshot(fork)
    with read_only(fork / "vllm" / "attention" / "ops"):
        _assert_error(run("apply", "--site-packages", str(fork)), "not writable")
    assert snapshot(fork) == before


def test_lock_held_by_another_run(fork):
    import fcntl

    fd = os.open(fork / "vllm", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        result = run(
            "apply", "--site-packages", str(fork), env={"VLLM_CODEMOD_LOCK_TIMEOUT": "0.2"}
        )
        _assert_error(result, "holds the lock")
    finally:
        os.close(fd)


def test_interrupted_run_is_reported_by_read_only_commands_and_finished_by_apply(fork):
    run("apply", "--site-packages", str(fork))
    patched = snapshot(fork)
    state = fork / "vllm" / ".vllm-codemod"
    # Simulate a revert that committed its journal and then died before any step.
    import vllm_codemod.engine.reverting as reverting
    from vllm_codemod.discovery import locate_tree

    real = reverting.replay
    reverting.replay = lambda state, journal: None
    try:
        reverting.revert(locate_tree(fork, None))
    finally:
        reverting.replay = real
    assert (state / "journal.json").exists()
    for command in ("check", "diff", "status"):  # read-only: report the state, exit 1
        result = run(command, "--site-packages", str(fork))
        assert result.exit_code == 1, (command, result.output)
        assert "an interrupted revert; `vllm-codemod revert` finishes it" in result.output
    assert (state / "journal.json").exists()
    result = run("apply", "--site-packages", str(fork))  # finishes the revert, then applies
    assert result.exit_code == 0
    assert "finished an interrupted revert" in result.output
    assert snapshot(fork) == patched


def test_bad_option_value(fork):
    before = snapshot(fork)
    result = run("apply", "--site-packages", str(fork), "--num-warps", "3")
    assert result.exit_code == 2
    assert "--num-warps" in result.output
    assert snapshot(fork) == before


def _console_script() -> List[str]:
    """The installed ``vllm-codemod`` entry point, run as this interpreter's environment
    runs it, whether or not that environment's bin directory is on PATH (a venv's python
    called without activating the venv)."""
    scripts = [Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))]
    for directory in scripts:
        if (directory / "vllm-codemod").is_file():
            return [str(directory / "vllm-codemod")]
    # No script file (e.g. a --user install): the entry point pip recorded, run the way
    # the script would run it.
    (entry,) = [
        ep
        for ep in importlib.metadata.distribution("vllm-codemod").entry_points
        if ep.group == "console_scripts" and ep.name == "vllm-codemod"
    ]
    module, _, attr = entry.value.partition(":")
    return [sys.executable, "-c", f"import sys; from {module} import {attr}; sys.exit({attr}())"]


def test_console_script_as_a_user_runs_it(fork):
    proc = subprocess.run(
        [*_console_script(), "diff", "--site-packages", str(fork)],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": os.defpath},  # found without PATH's help
    )
    assert proc.returncode == 1
    assert proc.stdout.startswith("diff --git a/vllm/")


def test_check_imports_neither_torch_nor_yaml(fork):
    code = (
        "import sys\n"
        "from vllm_codemod.cli import cli\n"
        f"try:\n    cli(['check', '--site-packages', {str(fork)!r}])\n"
        "except SystemExit as e:\n    code = e.code\n"
        "print(code, 'torch' in sys.modules, any(m.startswith('ruamel.') for m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.split()[-3:] == ["1", "False", "False"], proc.stdout + proc.stderr


def test_fixtures_present():
    assert (FIXTURES / FORK / "vllm").is_dir()


def test_revert_refuses_to_discard_a_later_change(fork):
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    target = fork / "vllm" / "_custom_ops.py"
    target.write_text("# reinstalled by hand\n")
    changed = snapshot(fork)
    _assert_error(run("revert", "--site-packages", str(fork)), "_custom_ops.py", "--force")
    assert snapshot(fork) == changed
    assert run("revert", "--site-packages", str(fork), "--force").exit_code == 0
    assert not (fork / "vllm" / ".vllm-codemod").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_diff_output_applies_with_git_to_the_same_tree(fork, tmp_path):
    patch = run("diff", "--site-packages", str(fork)).output
    other = copy_fixture(FORK, tmp_path / "other")
    run("apply", "--site-packages", str(other))
    proc = subprocess.run(
        ["git", "apply", "--unsafe-paths", f"--directory={fork.name}", "-"],
        input=patch,
        cwd=fork.parent,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    patched = snapshot(fork)[0]
    expected = {k: v for k, v in snapshot(other)[0].items() if "/.vllm-codemod/" not in k}
    assert patched == expected


def test_default_tree_is_this_interpreters_vllm_found_without_importing_it(fork, tmp_path):
    # The fixture's vllm/__init__.py imports modules the fixture lacks: importing it
    # would fail, so a clean run proves discovery never imports vllm.
    env = dict(os.environ, PYTHONPATH=str(fork))
    env.pop("VLLM_CODEMOD_SITE_PACKAGES", None)
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_codemod.cli", "check", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["vllm_root"] == str((fork / "vllm").resolve())
    assert payload["version"] == "0.8.3+corex.4.2.0"
    with pytest.raises(subprocess.CalledProcessError):
        subprocess.run(
            [sys.executable, "-c", "import vllm"],
            env=env,
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )


@pytest.mark.parametrize(
    "args",
    [["apply", "--num-warps", "3"], ["apply", "--no-such-flag"], ["no-such-command"]],
)
def test_usage_errors_are_one_line_too(args, fork):
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_codemod.cli", *args, "--site-packages", str(fork)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vllm-codemod: error: "), proc.stderr
    assert "--help" in lines[0]


def test_every_missing_target_is_named_at_once(fork):
    (fork / "vllm/attention/ops/prefix_prefill.py").unlink()
    (fork / "vllm/attention/ops/paged_attn.py").unlink()
    before = snapshot(fork)
    _assert_error(
        run("apply", "--site-packages", str(fork)),
        "prefix_prefill.py",
        "paged_attn.py",
        "--skip v2-dispatch --skip prefix-prefill-warps",
    )
    assert snapshot(fork) == before

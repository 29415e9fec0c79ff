"""Every row of the exit-status table, driven for real (README "Exit codes").

0 success, 1 only check/diff with changes pending, 2 user error / refusal /
environment problem, 3 internal error (one line + a saved traceback), 130 interrupted.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from treeutil import cli_runner, copy_fixture, snapshot
from vllm_codemod.cli import cli
from vllm_codemod.transforms.prefix_prefill_warps import PrefixPrefillWarps

FORK = "bi-v100/corex-0.8.3"


def run(*args: str, env=None):
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture
def fork(tmp_path) -> Path:
    return copy_fixture(FORK, tmp_path)


def test_0_success_and_1_pending_only_from_check_and_diff(fork):
    assert run("check", "--site-packages", str(fork)).exit_code == 1
    assert run("diff", "--site-packages", str(fork)).exit_code == 1
    assert run("apply", "--site-packages", str(fork)).exit_code == 0
    assert run("check", "--site-packages", str(fork)).exit_code == 0
    assert run("diff", "--site-packages", str(fork)).exit_code == 0
    assert run("revert", "--site-packages", str(fork)).exit_code == 0


@pytest.mark.parametrize(
    "args",
    [
        ["--v2-threshold", "0"],
        ["--v2-threshold", "-5"],
        ["--v2-threshold", str(10**12)],
        ["--num-warps", "3"],
        ["--only", "no-such-transform"],
    ],
)
def test_2_bad_option_values_touch_nothing(fork, args):
    before = snapshot(fork)
    result = run("apply", "--site-packages", str(fork), *args)
    assert result.exit_code == 2, result.output
    line = one_line(result.output)
    assert line.startswith("vllm-codemod: error: ")
    assert args[0] in line
    assert snapshot(fork) == before


def test_2_lock_timeout_from_environment_names_the_variable(fork):
    before = snapshot(fork)
    result = run("apply", "--site-packages", str(fork), env={"VLLM_CODEMOD_LOCK_TIMEOUT": "abc"})
    assert result.exit_code == 2, result.output
    assert "VLLM_CODEMOD_LOCK_TIMEOUT" in one_line(result.output)
    assert snapshot(fork) == before


def test_2_environment_problem_names_the_file_and_errno(fork, monkeypatch):
    target = str(fork / "vllm" / "attention" / "ops" / "prefix_prefill.py")

    def disk_full(self, module, context):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), target)

    monkeypatch.setattr(PrefixPrefillWarps, "plan", disk_full)
    before = snapshot(fork)
    result = run("apply", "--site-packages", str(fork))
    assert result.exit_code == 2, result.output
    line = one_line(result.output)
    assert target in line and os.strerror(errno.ENOSPC) in line and "ENOSPC" in line
    assert snapshot(fork) == before


def test_3_internal_error_is_one_line_and_a_saved_traceback(fork, monkeypatch, tmp_path):
    crash_dir = tmp_path / "crashes"
    crash_dir.mkdir()

    def bug(self, module, context):
        raise RuntimeError("a bug planted by the test")

    monkeypatch.setattr(PrefixPrefillWarps, "plan", bug)
    before = snapshot(fork)
    result = run(
        "apply", "--site-packages", str(fork), env={"VLLM_CODEMOD_CRASH_DIR": str(crash_dir)}
    )
    assert result.exit_code == 3, result.output
    line = one_line(result.output)
    assert line.startswith("vllm-codemod: internal error: RuntimeError: a bug planted by the test")
    assert "Traceback" not in result.output
    (saved,) = crash_dir.glob("vllm-codemod-crash-*.txt")
    assert str(saved) in line
    text = saved.read_text()
    assert "Traceback (most recent call last)" in text and "def bug" not in line
    assert "a bug planted by the test" in text
    assert snapshot(fork) == before


def test_2_a_missing_dependency_is_an_environment_problem(fork):
    """``pip install --no-deps`` into an image leaves libcst out: say what to install."""
    before = snapshot(fork)
    script = (
        "import sys; sys.modules['libcst'] = None; "  # import libcst now raises
        "from vllm_codemod.cli import main; main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, "apply", "--site-packages", str(fork)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc.stderr)
    assert "cannot import 'libcst'" in line and "pip install 'libcst>=1.1'" in line
    assert "internal error" not in line
    assert snapshot(fork) == before


def test_3_a_missing_module_we_do_not_declare_is_still_a_bug(fork, monkeypatch, tmp_path):
    def bug(self, module, context):
        raise ModuleNotFoundError("No module named 'vllm_codemod_gone'", name="vllm_codemod_gone")

    monkeypatch.setattr(PrefixPrefillWarps, "plan", bug)
    result = run(
        "apply", "--site-packages", str(fork), env={"VLLM_CODEMOD_CRASH_DIR": str(tmp_path)}
    )
    assert result.exit_code == 3, result.output


def test_declared_dependencies_match_pyproject():
    from vllm_codemod.boundary import DEPENDENCIES

    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    block = text.split("\ndependencies = [", 1)[1].split("]", 1)[0]
    declared = sorted(
        line.strip().strip(",").strip('"') for line in block.splitlines() if line.strip()
    )
    assert sorted(DEPENDENCIES.values()) == declared


def test_3_under_json_is_still_one_document(fork, monkeypatch, tmp_path):
    def bug(self, module, context):
        raise RuntimeError("planted")

    monkeypatch.setattr(PrefixPrefillWarps, "plan", bug)
    result = cli_runner().invoke(
        cli,
        ["check", "--site-packages", str(fork), "--json"],
        env={"VLLM_CODEMOD_CRASH_DIR": str(tmp_path)},
    )
    assert result.exit_code == 3
    document = json.loads(result.stdout)
    assert document["exit_code"] == 3 and "planted" in document["error"]["message"]


def _flock_free(directory: Path) -> bool:
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def test_130_ctrl_c_in_process_releases_the_lock(fork, monkeypatch):
    def interrupted(self, module, context):
        assert not _flock_free(fork / "vllm")  # the lock is held while planning
        raise KeyboardInterrupt

    monkeypatch.setattr(PrefixPrefillWarps, "plan", interrupted)
    before = snapshot(fork)
    result = run("apply", "--site-packages", str(fork))
    assert result.exit_code == 130, result.output
    assert "interrupted" in one_line(result.output)
    assert _flock_free(fork / "vllm")
    assert snapshot(fork) == before


#: Starts `apply` in a child whose planning blocks (after taking the lock) until killed.
#: SIGINT gets Python's default handler back, as an interactive shell gives it: a suite
#: started with SIGINT ignored (a background job of a non-interactive shell) passes the
#: ignore on to children, and the child would then rightly ignore the test's Ctrl-C.
_BLOCKING_APPLY = """\
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
from vllm_codemod.transforms.prefix_prefill_warps import PrefixPrefillWarps
def plan(self, module, context):
    sys.stderr.write("READY\\n"); sys.stderr.flush()
    time.sleep(60)
PrefixPrefillWarps.plan = plan
from vllm_codemod.cli import main
sys.argv = ["vllm-codemod", "apply", "--site-packages", sys.argv[1]]
main()
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_130_signal_to_a_running_apply(fork, signum):
    before = snapshot(fork)
    proc = subprocess.Popen(
        [sys.executable, "-c", _BLOCKING_APPLY, str(fork)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().strip() == "READY"
        assert not _flock_free(fork / "vllm")
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert one_line(err).startswith("vllm-codemod: interrupted; ")
    assert snapshot(fork) == before


def test_python_dash_m_is_the_console_script(fork):
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_codemod", "check", "--site-packages", str(fork), "--json"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["vllm_root"] == str((fork / "vllm").resolve())
    usage = subprocess.run(
        [sys.executable, "-m", "vllm_codemod", "--help"], capture_output=True, text=True
    )
    assert usage.returncode == 0 and "Exit status:" in usage.stdout
    assert "Usage: vllm-codemod" in usage.stdout


def test_0_bare_command_prints_its_help_as_help():
    """Like pip: no command is a request for help, not a usage error."""
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_codemod"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.startswith("Usage: vllm-codemod [OPTIONS] COMMAND [ARGS]...")
    assert "Commands:" in proc.stdout and "Exit status:" in proc.stdout


def test_2_a_bad_site_packages_names_where_the_value_came_from(fork, tmp_path):
    """The option when it came from the command line, the variable when from the
    environment: the user fixes the one that holds the value."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    given = one_line(run("check", "--site-packages", str(a_file)).output)
    assert "--site-packages" in given or str(a_file) in given
    assert "VLLM_CODEMOD_SITE_PACKAGES" not in given
    from_env = run("check", env={"VLLM_CODEMOD_SITE_PACKAGES": str(a_file)})
    assert from_env.exit_code == 2
    assert one_line(from_env.output).startswith(
        f"vllm-codemod: error: VLLM_CODEMOD_SITE_PACKAGES={a_file}: "
    )
    # A variable that another option overrides is not an error at all...
    vllm_root = str(fork / "vllm")
    env = {"VLLM_CODEMOD_SITE_PACKAGES": str(a_file)}
    assert run("check", "--vllm-root", vllm_root, env=env).exit_code == 1  # pending
    # ...nor part of a clash between two options (which names those two only).
    both = run("check", "--vllm-root", vllm_root, "--python", sys.executable, env=env)
    assert both.exit_code == 2
    assert one_line(both.output).endswith(
        "--vllm-root and --python each name the tree; pass only one"
    )


@pytest.mark.parametrize("code", [errno.EPERM, errno.EACCES])
def test_2_permission_errors_name_the_file_and_what_to_do(tmp_path, code):
    from vllm_codemod.errors import EnvironmentProblem

    target = tmp_path / "vllm" / "_custom_ops.py"
    message = str(EnvironmentProblem(target, PermissionError(code, os.strerror(code))))
    assert message.startswith(f"{target}: {os.strerror(code)}; ")
    assert "run as" in message  # the way on, not only the errno text
    # A caller's own hint still wins.
    hinted = EnvironmentProblem(target, PermissionError(code, os.strerror(code)), "do X")
    assert str(hinted).endswith("; do X")

"""Issue #12, item 3: a run killed at any instant leaves no debris after one recovery run.

The invariant, checked after every kill and one recovery run (``apply`` or ``revert``,
picked at random): the tree is exactly the pristine tree or exactly the patched tree
(the manifest's time stamp aside), with no temp file, staging or state directory left
over.  Two ways to kill:

* deterministic: ``strace -e inject=fsync:signal=KILL:when=N`` kills the real console
  script at its N-th fsync, for every N an apply or revert makes (skipped without strace);
* randomized: a forked child runs the command and is SIGKILLed after a random delay
  inside the command's measured run time; ``VLLM_CODEMOD_KILL_RUNS`` sets how many runs
  (default 60 for the tree and 100 for tune-config, which stays within the CI budget;
  setting it also makes the strace test kill at every fsync instead of every fifth).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, List, Tuple

import pytest

from treeutil import copy_fixture, snapshot, write_record

FORK = "bi-v100/corex-0.8.3"
STRACE = shutil.which("strace")


def _cli(*args: str) -> int:
    from vllm_codemod.cli import cli

    try:
        code = cli.main(list(args), standalone_mode=False)
    except SystemExit as exc:
        code = exc.code
    return code if isinstance(code, int) else 0


def _in_child(args: List[str], kill_after: float = -1.0) -> bool:
    """Run the CLI in a forked child, output silenced; SIGKILL it after ``kill_after`` s.

    Returns whether the child was killed (rather than finishing first).
    """
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        code = 99
        try:
            code = _cli(*args)
        finally:
            os._exit(code)
    if kill_after >= 0:
        time.sleep(kill_after)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return True
    assert os.WEXITSTATUS(status) == 0, f"{args} exited {os.WEXITSTATUS(status)}"
    return False


@pytest.fixture
def trees(tmp_path):
    site = copy_fixture(FORK, tmp_path)
    write_record(site)
    pristine = snapshot(site)
    assert _cli("apply", "--site-packages", str(site)) == 0
    patched = snapshot(site)
    assert _cli("revert", "--site-packages", str(site)) == 0
    assert snapshot(site) == pristine
    return site, pristine, patched


def _recover_and_check(site: Path, pristine, patched, rng: random.Random) -> Tuple[str, float]:
    """One recovery run, picked at random; returns which and how long it took."""
    op = "apply" if rng.random() < 0.5 else "revert"
    start = time.monotonic()
    assert _cli(op, "--site-packages", str(site)) == 0
    took = time.monotonic() - start
    assert snapshot(site) == (patched if op == "apply" else pristine)
    return op, took


def _duration(action: Callable[[], object]) -> float:
    start = time.monotonic()
    action()
    return time.monotonic() - start


def _runs(default: int) -> int:
    return int(os.environ.get("VLLM_CODEMOD_KILL_RUNS", default))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_random_kills_during_apply_and_revert(trees):
    site, pristine, patched = trees
    rng = random.Random(int(os.environ.get("VLLM_CODEMOD_KILL_SEED", "12")))
    args = {op: [op, "--site-packages", str(site)] for op in ("apply", "revert")}
    took = {"apply": _duration(lambda: _in_child(args["apply"]))}
    took["revert"] = _duration(lambda: _in_child(args["revert"]))
    runs = _runs(60)
    mid_write = 0
    for _ in range(runs):
        op = "apply" if snapshot(site) == pristine else "revert"
        # most kills land in the writing phase at the end; some anywhere
        span = took[op] * (rng.uniform(0.55, 1.1) if rng.random() < 0.7 else rng.random())
        if _in_child(args[op], kill_after=span):
            mid_write += snapshot(site) not in (pristine, patched)
        recovered, seconds = _recover_and_check(site, pristine, patched, rng)
        # follow the machine's load: a busy box stretches every run
        took[recovered] = 0.7 * took[recovered] + 0.3 * seconds
    print(f"\nrandom kills: {mid_write} of {runs} apply/revert runs killed inside a write")
    # the kills must really land inside writes, or the test proves nothing
    assert mid_write >= runs // 20, f"only {mid_write} of {runs} kills interrupted a write"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_random_kills_during_tune_config(tmp_path):
    config = tmp_path / "run.yaml"
    old = b"# deployment\nmax-num-batched-tokens: 8192\ngpu-memory-utilization: 0.9\n"
    rng = random.Random(int(os.environ.get("VLLM_CODEMOD_KILL_SEED", "12")))
    config.write_bytes(old)
    args = ["tune-config", str(config)]
    assert _cli(*args) == 0  # imports everything, as the recovery runs below will have
    new = config.read_bytes()
    assert new != old
    config.write_bytes(old)
    took = _duration(lambda: _in_child(args))
    runs = _runs(100)
    killed_mid_write = 0
    # The write is a sliver at the end of a run, so a kill time drawn over the whole run
    # almost never lands in it.  Track the instant the file flips from old to new (a kill
    # before it leaves the old bytes, after it the new) and draw most kills just before it.
    commit = took
    for _ in range(runs):
        config.write_bytes(old)
        near = rng.random() < 0.8
        delay = commit * (rng.uniform(0.7, 1.05) if near else rng.uniform(0.3, 1.1))
        killed = _in_child(args, kill_after=delay)
        assert config.read_bytes() in (old, new)
        temp_left = len(list(tmp_path.iterdir())) > 1
        killed_mid_write += temp_left
        if killed and config.read_bytes() == old and not temp_left:
            commit = max(commit, 0.8 * commit + 0.2 * delay * 1.1)  # killed too early
        elif not killed or config.read_bytes() == new:
            commit = min(commit, 0.8 * commit + 0.2 * delay * 0.9)  # too late
        assert _cli(*args) == 0  # the recovery run
        assert config.read_bytes() == new
        assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]
    print(f"\nrandom kills: {killed_mid_write} of {runs} tune-config runs left a temp file")
    # the kills must really land inside writes, or the test proves nothing
    assert killed_mid_write >= max(1, runs // 25), (
        f"only {killed_mid_write} of {runs} kills hit a write"
    )


def _strace_kill(args: List[str], n: int, cwd: Path) -> int:
    exe = [sys.executable, "-m", "vllm_codemod.cli"]
    inject = f"inject=fsync:signal=KILL:when={n}"
    proc = subprocess.run(
        [STRACE, "-f", "-qq", "-o", os.devnull, "-e", "trace=fsync", "-e", inject, *exe, *args],
        cwd=cwd,
        capture_output=True,
    )
    return proc.returncode


def _fsyncs(args: List[str], cwd: Path) -> int:
    log = cwd / "strace.log"
    exe = [sys.executable, "-m", "vllm_codemod.cli"]
    subprocess.run(
        [STRACE, "-f", "-qq", "-o", str(log), "-e", "trace=fsync", *exe, *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )
    count = sum(1 for line in log.read_text().splitlines() if "fsync(" in line)
    log.unlink()
    return count


@pytest.mark.skipif(STRACE is None, reason="strace not installed (apt-get install strace)")
@pytest.mark.parametrize("op", ["apply", "revert"])
def test_strace_kill_at_every_fsync(trees, tmp_path, op):
    site, pristine, patched = trees
    rng = random.Random(3)
    args = [op, "--site-packages", str(site)]
    if op == "revert":
        assert _cli("apply", "--site-packages", str(site)) == 0
    total = _fsyncs(args, tmp_path)
    assert total >= (20 if op == "apply" else 2), total
    if op == "revert":
        assert snapshot(site) == pristine
    # every fsync when asked for a long run; by default every fifth (and the last)
    step = 1 if "VLLM_CODEMOD_KILL_RUNS" in os.environ else 5
    points = sorted(set(range(1, total + 1, step)) | {total})
    interrupted = 0
    for n in points:
        if op == "revert":
            assert _cli("apply", "--site-packages", str(site)) == 0
        else:
            assert _cli("revert", "--site-packages", str(site)) == 0
        code = _strace_kill(args, n, tmp_path)
        assert code != 0, f"{op} was not killed at fsync {n}"
        interrupted += snapshot(site) not in (pristine, patched)
        _recover_and_check(site, pristine, patched, rng)
    assert interrupted == len(points), f"{interrupted} of {len(points)} kills left work to recover"


@pytest.mark.skipif(STRACE is None, reason="strace not installed (apt-get install strace)")
def test_strace_kill_during_tune_config(tmp_path):
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    config = config_dir / "run.yaml"
    old = b"max-num-batched-tokens: 8192\n"
    config.write_bytes(old)
    code = _strace_kill(["tune-config", str(config)], 1, tmp_path)
    assert code != 0, "tune-config was not killed at its fsync"
    assert config.read_bytes() == old
    assert len(list(config_dir.iterdir())) == 2  # the config and the killed run's temp file
    assert _cli("tune-config", str(config)) == 0  # the recovery run
    assert config.read_bytes() == b"max-num-batched-tokens: 16384\n"
    assert [p.name for p in config_dir.iterdir()] == ["run.yaml"]


@pytest.mark.skipif(STRACE is None, reason="strace not installed (apt-get install strace)")
def test_check_removes_the_debris_of_a_run_killed_before_its_commit(trees, tmp_path):
    site, pristine, _ = trees
    assert _strace_kill(["apply", "--site-packages", str(site)], 2, tmp_path) != 0
    assert snapshot(site) != pristine  # staging and a temp file are left
    assert _cli("check", "--site-packages", str(site)) == 1  # pending, and cleaned up
    assert snapshot(site) == pristine


@pytest.mark.skipif(STRACE is None, reason="strace not installed (apt-get install strace)")
def test_diff_and_status_leave_the_debris_of_a_killed_run_and_say_so(trees, tmp_path):
    site, pristine, patched = trees
    assert _strace_kill(["apply", "--site-packages", str(site)], 2, tmp_path) != 0
    left = snapshot(site)
    assert left != pristine
    exe = [sys.executable, "-m", "vllm_codemod"]
    for command, code in (("diff", 1), ("status", 0)):
        proc = subprocess.run([*exe, command, "--site-packages", str(site)], capture_output=True)
        assert proc.returncode == code, proc.stderr
        assert b"leftover files from an interrupted run at " in proc.stderr
        assert snapshot(site) == left  # read-only: nothing removed
    assert _cli("apply", "--site-packages", str(site)) == 0  # the recovery run
    assert snapshot(site) == patched

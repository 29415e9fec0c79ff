"""Logs of the tool's decisions: stderr only, INFO at -v, DEBUG at -vv, none by default."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from treeutil import copy_fixture

FORK = "bi-v100/corex-0.8.3"
CLI = [sys.executable, "-m", "vllm_codemod"]
LOG_LINE = re.compile(r"^vllm-codemod: (INFO|DEBUG): ", re.M)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True)


def _levels(stderr: str) -> set:
    return set(LOG_LINE.findall(stderr))


def test_no_logs_by_default(tmp_path):
    site = copy_fixture(FORK, tmp_path)
    for command in ("apply", "check", "status", "revert"):
        proc = _run(command, "--site-packages", str(site))
        assert proc.returncode == 0, proc.stderr
        assert _levels(proc.stderr) == set(), (command, proc.stderr)


def test_v_logs_the_decisions_at_info(tmp_path):
    site = copy_fixture(FORK, tmp_path)
    for argv in (["-v", "apply"], ["apply", "-v"]):  # before or after the command
        proc = _run(*argv, "--site-packages", str(site))
        assert proc.returncode == 0, proc.stderr
        assert _levels(proc.stderr) == {"INFO"}, proc.stderr
        if argv[0] == "-v":
            info = proc.stderr
            _run("revert", "--site-packages", str(site))
    assert f"INFO: vllm tree: {site / 'vllm'}" in info
    assert "INFO: vLLM version 0.8.3+corex" in info
    assert re.search(
        r"INFO: prefix-prefill-warps: vllm/attention/ops/prefix_prefill.py: "
        r"pending \(.*NUM_WARPS = 8",
        info,
    ), info
    assert "INFO: wrote vllm/_custom_ops.py" in info
    assert "INFO: wrote vllm/_codemod_kernels/dispatch.py" in info
    again = _run("-v", "apply", "--site-packages", str(site))
    assert "INFO: paged-attention-v2: vllm/_custom_ops.py: applied (" in again.stderr
    assert "INFO: nothing to write" in again.stderr


def test_vv_logs_debug_and_json_stdout_stays_json(tmp_path):
    site = copy_fixture(FORK, tmp_path)
    proc = _run("-vv", "check", "--json", "--site-packages", str(site))
    assert proc.returncode == 1, proc.stderr  # pending on the fork tree
    assert _levels(proc.stderr) == {"INFO", "DEBUG"}, proc.stderr
    assert f"DEBUG: lock taken on {site / 'vllm'}" in proc.stderr
    assert f"DEBUG: lock released on {site / 'vllm'}" in proc.stderr
    assert "DEBUG: prefix-prefill-route: planning on" in proc.stderr
    assert json.loads(proc.stdout)["command"] == "check"
    assert "vllm-codemod:" not in proc.stdout


def test_recovery_is_logged(tmp_path):
    site = copy_fixture(FORK, tmp_path)
    assert _run("apply", "--site-packages", str(site)).returncode == 0
    state = site / "vllm" / ".vllm-codemod"
    (state / "staged").mkdir()
    (state / "staged" / "leftover.py").write_text("debris\n")
    proc = _run("-v", "apply", "--site-packages", str(site))
    assert proc.returncode == 0, proc.stderr
    assert "INFO: removed debris of an interrupted run: vllm/.vllm-codemod/staged/" in proc.stderr

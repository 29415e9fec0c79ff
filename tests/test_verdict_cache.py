"""The verdict cache (engine/verdict_cache.py) never changes what a command reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from treeutil import copy_fixture

CLI = [sys.executable, "-m", "vllm_codemod"]


def _run(args, cache):
    env = {**os.environ, "VLLM_CODEMOD_CACHE_DIR": str(cache) if cache else ""}
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True)


@pytest.mark.parametrize("fixture", ["bi-v100/corex-0.8.3", "upstream/vllm-0.8.5.post1"])
def test_cached_check_reports_what_a_parsing_check_reports(tmp_path, fixture):
    site = copy_fixture(fixture, tmp_path)
    sp = ["--site-packages", str(site)]
    cache = tmp_path / "cache"
    assert _run(["apply", "-q", *sp], cache).returncode == 0
    cold = _run(["check", "--json", *sp], None)
    warm_up = _run(["check", "--json", *sp], cache)
    assert list((cache / "verdicts").glob("*.json"))
    warm = _run(["check", "--json", "-vv", *sp], cache)
    assert cold.returncode == warm.returncode == 0
    assert json.loads(cold.stdout) == json.loads(warm_up.stdout) == json.loads(warm.stdout)
    assert "verdict from the cache" in warm.stderr


def test_an_edit_of_a_target_or_of_a_shipped_file_misses_the_cache(tmp_path):
    site = copy_fixture("bi-v100/corex-0.8.3", tmp_path)
    sp = ["--site-packages", str(site)]
    cache = tmp_path / "cache"
    assert _run(["apply", "-q", *sp], cache).returncode == 0
    assert _run(["check", *sp], cache).returncode == 0
    target = site / "vllm" / "attention" / "ops" / "prefix_prefill.py"
    target.write_text(target.read_text().replace("NUM_WARPS = 4", "NUM_WARPS = 2"))
    kernel = site / "vllm" / "_codemod_kernels" / "dispatch.py"
    kernel.write_text(kernel.read_text() + "\n# local edit\n")
    cold = _run(["check", "--json", *sp], None)
    warm = _run(["check", "--json", *sp], cache)
    assert cold.returncode == warm.returncode != 0
    assert json.loads(cold.stdout) == json.loads(warm.stdout)

"""fork_markers: what tells a vendor fork from upstream, on every fixture tree."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from packaging.version import Version

from treeutil import FIXTURES, copy_fixture
from vllm_codemod.cli import cli
from vllm_codemod.transforms.fork_markers import find_fork_markers

UPSTREAM = sorted(p.name for p in (FIXTURES / "upstream").iterdir() if (p / "vllm").is_dir())
FORKS = sorted(p.name for p in (FIXTURES / "bi-v100").iterdir() if (p / "vllm").is_dir())


@pytest.mark.parametrize("name", UPSTREAM)
def test_no_upstream_release_carries_a_marker(name):
    version = Version(name.split("-", 1)[1])
    assert find_fork_markers(FIXTURES / "upstream" / name / "vllm", version) == ()


@pytest.mark.parametrize("name", FORKS)
def test_every_fork_fixture_is_recognised(name):
    markers = find_fork_markers(FIXTURES / "bi-v100" / name / "vllm", None)
    assert any("paged_attention_v2 raises NotImplementedError" in m for m in markers), markers


def test_markers_name_file_and_line():
    root = FIXTURES / "bi-v100" / "corex-0.8.3" / "vllm"
    assert find_fork_markers(root, Version("0.8.3+corex.4.2.0")) == (
        "version 0.8.3+corex.4.2.0 carries a vendor label (+corex.4.2.0)",
        "_custom_ops.py:71: paged_attention_v2 raises NotImplementedError",
        "attention/ops/paged_attn.py:132: use_v1 = True hardcoded",
    )


@pytest.mark.parametrize(
    "version, vendor",
    [("0.8.3+corex.4.2.0", True), ("0.6.3+IXUCA", True), ("0.8.3+cu124", False), ("0.8.3", False)],
)
def test_only_vendor_version_labels_count(tmp_path, version, vendor):
    (tmp_path / "vllm").mkdir()
    markers = find_fork_markers(tmp_path / "vllm", Version(version))
    assert bool(markers) is vendor


def test_a_patched_fork_is_still_a_fork(tmp_path):
    site = copy_fixture("bi-v100/corex-0.8.3", tmp_path)
    result = CliRunner().invoke(cli, ["apply", "--site-packages", str(site)])
    assert result.exit_code == 0, result.output
    assert find_fork_markers(site / "vllm", None) == (
        "_custom_ops.py: paged_attention_v2 was a NotImplementedError stub (replaced)",
        "attention/ops/paged_attn.py: use_v1 = True was hardcoded (replaced)",
    )


def test_missing_or_broken_files_count_for_nothing(tmp_path):
    root = tmp_path / "vllm"
    shutil.copytree(FIXTURES / "bi-v100" / "corex-0.8.3" / "vllm", root)
    (root / "_custom_ops.py").write_text("def broken(:\n")
    (root / "attention" / "ops" / "paged_attn.py").unlink()
    assert find_fork_markers(root, None) == ()
    assert find_fork_markers(Path("/nonexistent/vllm"), None) == ()

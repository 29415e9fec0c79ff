from pathlib import Path

import pytest
from packaging.version import Version

from vllm_codemod.discovery import VllmTree, locate_tree
from vllm_codemod.errors import CodemodError
from vllm_codemod.versions import gate_version, read_version


def make_tree(tmp_path: Path, version_header=None, version_py=None) -> VllmTree:
    root = tmp_path / "vllm"
    root.mkdir()
    (root / "__init__.py").write_text("")
    if version_header is not None:
        dist = tmp_path / f"vllm-{version_header}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: vllm\nVersion: {version_header}\n\nbody\n"
        )
    if version_py is not None:
        (root / "version.py").write_text(version_py)
    return locate_tree(tmp_path, None)


@pytest.mark.parametrize(
    "text",
    ["0.8.3+corex.4.3.0", "0.6.3.post1", "0.11.0", "0.4.3", "0.7.4.dev12+g123abc", "0.11.0rc1"],
)
def test_known_versions_pass_the_gate(tmp_path, text):
    tree = make_tree(tmp_path, version_header=text)
    version, source = read_version(tree)
    assert version == Version(text)
    assert source.endswith("METADATA")
    gate_version(tree, version, force=False)


@pytest.mark.parametrize("text", ["0.4.2", "0.3.0+corex", "0.11.1", "1.0.0"])
def test_unknown_versions_are_refused_unless_forced(tmp_path, text):
    tree = make_tree(tmp_path, version_header=text)
    version, _ = read_version(tree)
    with pytest.raises(CodemodError, match="outside the versions this tool knows"):
        gate_version(tree, version, force=False)
    gate_version(tree, version, force=True)


def test_version_parsed_from_source_without_importing(tmp_path):
    tree = make_tree(tmp_path, version_py="import os\nraise SystemExit\n__version__ = '0.5.5'\n")
    version, source = read_version(tree)
    assert version == Version("0.5.5")
    assert source.endswith("version.py")


def test_setuptools_scm_style_version_file(tmp_path):
    tree = make_tree(tmp_path)
    (tree.root / "_version.py").write_text(
        "__version__: str\n__version__ = version = '0.6.6.post1'\n"
    )
    assert read_version(tree)[0] == Version("0.6.6.post1")


def test_no_version_anywhere_is_refused(tmp_path):
    tree = make_tree(tmp_path)
    assert read_version(tree) == (None, "")
    with pytest.raises(CodemodError, match="cannot tell the vLLM version"):
        gate_version(tree, None, force=False)


def test_other_distributions_metadata_is_ignored(tmp_path):
    tree = make_tree(tmp_path, version_header="0.8.3")
    other = tmp_path / "vllm_flash_attn-2.6.2.dist-info"
    other.mkdir()
    (other / "METADATA").write_text("Name: vllm-flash-attn\nVersion: 2.6.2\n")
    assert read_version(tree)[0] == Version("0.8.3")


def test_two_vllm_dist_infos_are_an_error(tmp_path):
    tree = make_tree(tmp_path, version_header="0.8.3")
    dist = tmp_path / "vllm-0.7.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Name: vllm\nVersion: 0.7.3\n")
    with pytest.raises(CodemodError, match="several vllm dist-info"):
        read_version(tree)


def test_locate_errors(tmp_path):
    with pytest.raises(CodemodError, match="not a directory"):
        locate_tree(tmp_path / "nope", None)
    with pytest.raises(CodemodError, match="contains vllm/"):
        locate_tree(tmp_path, None)
    with pytest.raises(CodemodError, match="pass only one"):
        locate_tree(tmp_path, tmp_path)


def test_locate_by_vllm_root(tmp_path):
    tree = make_tree(tmp_path, version_header="0.8.3")
    by_root = locate_tree(None, tree.root)
    assert by_root == tree
    assert by_root.rel(tree.root / "_custom_ops.py") == "vllm/_custom_ops.py"

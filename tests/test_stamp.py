"""Copied kernels carry the tool's one version (vllm_codemod.stamp)."""

from __future__ import annotations

import importlib.util
import shutil
import sys

import pytest

from treeutil import REPO
from vllm_codemod import __version__
from vllm_codemod.stamp import StampError, stamp_kernel_files, stamp_version

KERNELS = REPO / "kernels"

# The layout proposed for kernels/__init__.py: the tool's own package reads the one
# source, a tree's copy holds the stamped literal.
PROPOSED_INIT = b'''"""kernels"""

if __name__ == "vllm_codemod.kernels":
    from .. import __version__
else:
    __version__ = "0+unstamped"  # written by vllm_codemod.stamp at copy time
'''


def test_stamps_the_one_version_line_and_keeps_every_other_byte():
    source = b'\xef\xbb\xbf"""doc"""\r\nX = 1\r\n__version__ = \'0.0.1\'  # note\r\nY = 2'
    stamped = stamp_version(source, "1.2.3rc1+corex.4")
    assert stamped == (
        b'\xef\xbb\xbf"""doc"""\r\nX = 1\r\n__version__ = "1.2.3rc1+corex.4"  # note\r\nY = 2'
    )


def test_idempotent():
    once = stamp_version(PROPOSED_INIT, "0.2.0")
    assert stamp_version(once, "0.2.0") == once
    assert b'    __version__ = "0.2.0"  # written by vllm_codemod.stamp' in once
    assert once.replace(b'"0.2.0"', b'"0+unstamped"') == PROPOSED_INIT


def test_the_default_is_the_tools_version():
    assert f'__version__ = "{__version__}"'.encode() in stamp_version(b'__version__ = "x"\n')


@pytest.mark.parametrize(
    "source",
    [b"X = 1\n", b'__version__ = "1"\n__version__ = "2"\n', b"__version__ = get()\n"],
    ids=["none", "two", "not-a-literal"],
)
def test_refuses_anything_but_one_literal_line(source):
    with pytest.raises(StampError):
        stamp_version(source, "1.0")


@pytest.mark.parametrize("version", ['1.0"; import os; "', "1.0\n", ""])
def test_refuses_a_version_that_would_need_escaping(version):
    with pytest.raises(StampError):
        stamp_version(b'__version__ = "0"\n', version)


def test_stamps_only_the_package_init():
    files = {
        "_codemod_kernels/__init__.py": b'__version__ = "0"\n',
        "_codemod_kernels/signature.py": b'__version__ = "0"\n',
        "_codemod_kernels/sub/__init__.py": b'__version__ = "0"\n',
    }
    stamped = stamp_kernel_files(files, "3.1")
    assert stamped["_codemod_kernels/__init__.py"] == b'__version__ = "3.1"\n'
    assert {k: v for k, v in stamped.items() if not k.endswith("s/__init__.py")} == {
        k: v for k, v in files.items() if not k.endswith("s/__init__.py")
    }
    assert files["_codemod_kernels/__init__.py"] == b'__version__ = "0"\n'  # not mutated
    with pytest.raises(StampError):
        stamp_kernel_files({"_codemod_kernels/signature.py": b""}, "3.1")


def test_the_bundled_kernels_can_be_stamped():
    """Whatever kernels/__init__.py holds today has exactly one line to stamp."""
    stamped = stamp_version((KERNELS / "__init__.py").read_bytes(), "9.9.9")
    assert b'__version__ = "9.9.9"' in stamped


@pytest.mark.parametrize("init", ["current", "proposed"])
def test_a_stamped_copy_reports_the_tools_version_in_a_tree(tmp_path, init):
    package = tmp_path / "vllm" / "_codemod_kernels"
    shutil.copytree(KERNELS, package, ignore=shutil.ignore_patterns("__pycache__"))
    if init == "proposed":
        (package / "__init__.py").write_bytes(PROPOSED_INIT)
    source = (package / "__init__.py").read_bytes()
    (package / "__init__.py").write_bytes(stamp_version(source, __version__))
    name = "_stamp_test_kernels"
    spec = importlib.util.spec_from_file_location(
        name, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        assert module.__version__ == __version__
    finally:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]

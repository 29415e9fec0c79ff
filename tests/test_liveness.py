"""liveness: which files call into the patched decode path (calls, not imports)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from treeutil import FIXTURES
from vllm_codemod.liveness import Caller, find_callers, scan_tree


def test_upstream_0_11_0_has_no_callers():
    scan = scan_tree(FIXTURES / "upstream" / "vllm-0.11.0" / "vllm")
    assert scan.callers == []
    assert scan.unparseable == []
    # what was looked at and ruled out: the V1 backend that imports PagedAttention for
    # its cache helpers, the ROCm override that delegates, paged_attn.py and the wrapper
    assert (FIXTURES / "upstream/vllm-0.11.0/vllm/v1/attention/backends/rocm_attn.py").is_file()
    assert scan.parsed >= 3


def test_upstream_0_10_1_1_xformers_backend_calls_forward_decode():
    assert find_callers(FIXTURES / "upstream" / "vllm-0.10.1.1" / "vllm") == [
        Caller("vllm/attention/backends/xformers.py", 613, 49, "PagedAttention.forward_decode")
    ]


@pytest.mark.parametrize("tree", ["bi-v100/corex-0.8.3", "upstream/vllm-0.4.3"])
def test_the_patched_files_themselves_are_not_callers(tree):
    # paged_attn.py calls ops.paged_attention_v2 inside forward_decode: delegation
    assert find_callers(FIXTURES / tree / "vllm") == []


def _tree(tmp_path: Path, files: dict) -> Path:
    root = tmp_path / "site" / "vllm"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        data = text if isinstance(text, bytes) else textwrap.dedent(text).encode()
        path.write_bytes(data)
    return root


def _found(tmp_path: Path, text) -> list:
    return [(c.line, c.col, c.what) for c in find_callers(_tree(tmp_path, {"backend.py": text}))]


def test_import_only_is_not_a_call(tmp_path):
    code = """\
        from vllm.attention.ops.paged_attn import PagedAttention

        def forward(q):
            k, v = PagedAttention.split_kv_cache(q, 1, 2)
            decode = PagedAttention.forward_decode  # a reference, not a call
            return decode
        """
    assert _found(tmp_path, code) == []


def test_call_is_found_with_line_and_column(tmp_path):
    code = """\
        from vllm.attention.ops.paged_attn import PagedAttention

        def forward(q):
            out = PagedAttention.forward_decode(q)
            return out
        """
    assert _found(tmp_path, code) == [(4, 11, "PagedAttention.forward_decode")]


def test_aliases_and_module_paths(tmp_path):
    code = """\
        import vllm.attention.ops.paged_attn as pa
        from vllm.attention.ops.paged_attn import PagedAttention as PA
        from .paged_attn import PagedAttention as Rel

        def forward(q):
            PA.forward_decode(q)
            pa.PagedAttention.forward_decode(q)
            Rel.forward_decode(q)
        """
    assert [what for _, _, what in _found(tmp_path, code)] == [
        "PA.forward_decode",
        "pa.PagedAttention.forward_decode",
        "Rel.forward_decode",
    ]


def test_ops_paged_attention_v2_calls(tmp_path):
    code = """\
        import torch
        import vllm._custom_ops
        from vllm import _custom_ops as ops

        def run(out):
            ops.paged_attention_v2(out)
            vllm._custom_ops.paged_attention_v2(out)
            torch.ops._C.paged_attention_v2(out)
        """
    assert [what for _, _, what in _found(tmp_path, code)] == [
        "ops.paged_attention_v2",
        "vllm._custom_ops.paged_attention_v2",
        "torch.ops._C.paged_attention_v2",
    ]


def test_other_implementations_of_the_same_names_do_not_count(tmp_path):
    code = """\
        from vllm._ipex_ops import ipex_ops as ops
        from intel_extension_for_pytorch.llm.modules import PagedAttention

        def run(out):
            ops.paged_attention_v2(out)
            PagedAttention.forward_decode(out)
            self.paged_attn_impl.forward_decode(out)
        """
    assert _found(tmp_path, code) == []


def test_delegation_inside_the_patched_names_does_not_count(tmp_path):
    code = """\
        from vllm import _custom_ops as ops
        from vllm.attention.ops.paged_attn import PagedAttention

        class AITERPagedAttention(PagedAttention):
            @staticmethod
            def forward_decode(q):
                if q is None:
                    return PagedAttention.forward_decode(q)
                ops.paged_attention_v2(q)

        def paged_attention_v2(out):
            torch.ops._C.paged_attention_v2(out)
        """
    assert _found(tmp_path, code) == []


def test_column_counts_characters(tmp_path):
    code = "x = 'é'; PagedAttention.forward_decode(q)\n".encode()
    assert _found(tmp_path, code) == [(1, 10, "PagedAttention.forward_decode")]


def test_unparseable_and_skipped_files(tmp_path):
    root = _tree(
        tmp_path,
        {
            "broken.py": "def forward_decode(:\n",
            "plain.py": "x = 1\n",
            "__pycache__/old.py": "PagedAttention.forward_decode(q)\n",
            ".vllm-codemod/backup.py": "PagedAttention.forward_decode(q)\n",
            "b/caller.py": "PagedAttention.forward_decode(q)\n",
        },
    )
    scan = scan_tree(root)
    assert scan.files == 3
    assert scan.parsed == 2  # plain.py never mentions a patched name
    assert scan.unparseable == ["vllm/broken.py"]
    assert [str(c) for c in scan.callers] == ["vllm/b/caller.py:1:1: PagedAttention.forward_decode"]

"""The Triton path on a CUDA device against the float64 reference (skipped without one)."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")  # the CPU suite runs without torch too
from pa_helpers import make_inputs, rel_err, tolerance  # noqa: E402

from vllm_codemod.kernels import dispatch  # noqa: E402
from vllm_codemod.kernels.reference import reference_paged_attention, reference_partitions  # noqa: E402

HAS_TRITON = importlib.util.find_spec("triton") is not None
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not (torch.cuda.is_available() and HAS_TRITON), reason="needs a CUDA device and Triton"
    ),
]

HEAD_SIZES = [32, 64, 80, 96, 112, 120, 128, 192, 256]


def _run_and_check(a, dtype, backend="triton"):
    path = dispatch.paged_attention_v2_with_path(**a, backend=backend)
    torch.cuda.synchronize()
    assert path == backend
    assert not torch.isnan(a["out"]).any(), "some element of out was never written"
    ref = reference_paged_attention(
        a["query"],
        a["key_cache"],
        a["value_cache"],
        a["block_tables"],
        a["seq_lens"].tolist(),
        a["scale"],
        a["alibi_slopes"],
    )
    err = rel_err(a["out"], ref)
    assert err < tolerance(dtype), err
    return err


def _check_partition_buffers(a, s):
    """vLLM's partition-buffer contract for sequence s (fp32 inputs): tmp_out normalized by
    the partition's own exp-sum, exp_sums and max_logits as the reference computes them."""
    tmp, sums, maxes = reference_partitions(
        a["query"],
        a["key_cache"],
        a["value_cache"],
        a["block_tables"],
        int(a["seq_lens"][s]),
        s,
        a["scale"],
        a["alibi_slopes"],
    )
    n = tmp.shape[1]
    assert rel_err(a["max_logits"][s, :, :n], maxes) < 1e-5
    assert rel_err(a["exp_sums"][s, :, :n], sums) < 1e-4
    assert rel_err(a["tmp_out"][s, :, :n], tmp) < 1e-4


@pytest.mark.parametrize("head_size", HEAD_SIZES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_triton_head_sizes_and_dtypes(head_size, dtype):
    bs = {32: 8, 64: 16, 80: 32, 96: 16, 112: 8, 120: 16, 128: 32, 192: 16, 256: 16}[head_size]
    a = make_inputs(
        [1, 512, 1537, 900], 8, 2, head_size, bs, dtype, "cuda", extra_partitions=2, seed=head_size
    )
    _run_and_check(a, dtype)


@pytest.mark.parametrize("group", [1, 4, 8, 32])
@pytest.mark.parametrize("alibi", [False, True])
@pytest.mark.parametrize("block_size", [8, 16, 32])
def test_triton_gqa_alibi_block_sizes(group, alibi, block_size):
    a = make_inputs(
        [3, 1024, 2049], 2 * group, 2, 128, block_size, torch.bfloat16, "cuda", alibi=alibi
    )
    _run_and_check(a, torch.bfloat16)


def test_triton_partition_buffers_follow_vllm_semantics():
    a = make_inputs([1800, 600], 8, 2, 64, 16, torch.float32, "cuda", alibi=True)
    _run_and_check(a, torch.float32)
    for s in range(2):
        _check_partition_buffers(a, s)


def test_triton_matches_torch_path_on_gpu():
    a = make_inputs([5000, 17], 16, 4, 128, 16, torch.float16, "cuda", seed=7)
    b = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in a.items()}
    _run_and_check(a, torch.float16, "triton")
    _run_and_check(b, torch.float16, "torch")
    assert rel_err(a["out"], b["out"].double()) < 2e-3


def test_triton_100k_gqa():
    a = make_inputs([100_000, 70_001], 16, 4, 128, 16, torch.bfloat16, "cuda", seed=11)
    _run_and_check(a, torch.bfloat16)


def test_auto_path_is_triton_on_gpu(monkeypatch):
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)
    a = make_inputs([700], 8, 2, 128, 16, torch.bfloat16, "cuda")
    assert dispatch.paged_attention_v2_with_path(**a) == "triton"


def test_selfcheck_on_gpu():
    from vllm_codemod.kernels.selfcheck import run_selfcheck

    results = run_selfcheck(device="cuda", quick=True)
    assert all(r["ok"] for r in results), results
    assert {r["path"] for r in results} == {"triton"}


@pytest.mark.parametrize(
    "config",
    [
        (16, 1, 2, True),
        (16, 2, 2, True),
        (64, 2, 1, False),
        (32, 1, 1, True),
        (64, 4, 2, True),
        (16, 1, 1, False),
        (16, 1, 1, False, 1, 1),
        (16, 1, 1, True, 1, 1),
        (32, 2, 1, True, 1, 1),
        (16, 2, 1, True, 1, 2),
        (32, 4, 1, True, 1, 2),
        (32, 2, 1, True, 2, 1),
        (16, 1, 1, False, 1, 0, True),
        (16, 1, 2, True, 1, 0, True),
        (32, 4, 1, True, 1, 0, True),
        (32, 2, 1, True, 1, 2, True),
        (64, 2, 1, True, 2, 1, True),
    ],
)
@pytest.mark.parametrize("head_size", [80, 128, 256])
def test_triton_tuning_configs(config, head_size):
    from vllm_codemod.kernels import triton_impl

    triton_impl.set_config_override(config)
    try:
        a = make_inputs([1, 700, 2600], 8, 2, head_size, 16, torch.bfloat16, "cuda", alibi=True)
        _run_and_check(a, torch.bfloat16)
    finally:
        triton_impl.set_config_override(None)


@pytest.mark.parametrize("junk", [-1, 2**31 - 1])
@pytest.mark.parametrize("prefetch", [0, 1, 2])
def test_triton_table_junk_past_the_sequence_is_never_followed(junk, prefetch):
    """Block-table entries past a sequence's last block can hold anything (vLLM reuses
    the table's rows); none of them may become a K/V address, with or without the
    block-id prefetch."""
    from vllm_codemod.kernels import triton_impl

    a = make_inputs([700, 1, 513, 1600], 8, 2, 128, 16, torch.bfloat16, "cuda", seed=5)
    for s, n in enumerate(a["seq_lens"].tolist()):
        a["block_tables"][s, -(-n // 16) :] = junk
    triton_impl.set_config_override((32, 2, 1, True, 1, prefetch, True))
    try:
        _run_and_check(a, torch.bfloat16)
    finally:
        triton_impl.set_config_override(None)


@pytest.mark.parametrize(
    "config",
    [
        None,
        (32, 4, 1, True, 1, 0, True),
        (32, 4, 1, True, 1, 1, True),
        (16, 4, 1, True, 1, 0, True),
        (64, 4, 1, True, 1, 0, True),
    ],
)
@pytest.mark.parametrize("heads", [(32, 1), (48, 1), (71, 1), (128, 2)])
def test_triton_large_groups(config, heads):
    """32-71 query heads per kv head (MQA models): 32-64 rows per program, in one or two
    group chunks."""
    from vllm_codemod.kernels import triton_impl

    triton_impl.set_config_override(config)
    try:
        a = make_inputs([1800, 600, 129], *heads, 128, 16, torch.bfloat16, "cuda", seed=7)
        _run_and_check(a, torch.bfloat16)
    finally:
        triton_impl.set_config_override(None)


def test_triton_many_programs_config(monkeypatch):
    from vllm_codemod.kernels import triton_impl

    monkeypatch.setattr(triton_impl, "MANY_PROGRAMS", 0)
    monkeypatch.setattr(triton_impl, "K3D_MANY_PROGRAMS", 0)
    a = make_inputs([3000, 1, 513], 32, 8, 128, 16, torch.float16, "cuda")
    _run_and_check(a, torch.float16)


SPLIT_CONFIGS = [
    (32, 2, 1, True, 2),
    (16, 1, 2, True, 2),
    (16, 1, 1, False, 2),
    (64, 2, 1, True, 2),
    (32, 2, 1, True, 4),
    (16, 1, 2, True, 4),
    (16, 2, 1, True, 4),
    (32, 1, 1, True, 2),
]


@pytest.mark.parametrize("config", SPLIT_CONFIGS)
@pytest.mark.parametrize("head_size", [80, 128, 256])
def test_triton_split_configs(config, head_size):
    """Split path: sub-partitions in scratch, folded into vLLM's buffers, then reduced."""
    from vllm_codemod.kernels import triton_impl

    triton_impl.set_config_override(config)
    try:
        a = make_inputs(
            [1, 700, 2600, 257], 8, 2, head_size, 16, torch.bfloat16, "cuda", alibi=True
        )
        _run_and_check(a, torch.bfloat16)
    finally:
        triton_impl.set_config_override(None)


@pytest.mark.parametrize("split", [2, 4])
@pytest.mark.parametrize("block_size", [8, 32])
def test_triton_split_partition_buffers(split, block_size):
    from vllm_codemod.kernels import triton_impl

    triton_impl.set_config_override((16, 1, 2, True, split))
    try:
        a = make_inputs([1800, 600, 129], 8, 2, 64, block_size, torch.float32, "cuda", alibi=True)
        _run_and_check(a, torch.float32)
    finally:
        triton_impl.set_config_override(None)
    for s in range(3):
        _check_partition_buffers(a, s)


def test_triton_split_by_policy_100k(monkeypatch):
    """The automatic choice takes the split path below the program threshold."""
    from vllm_codemod.kernels import triton_impl

    monkeypatch.setattr(triton_impl, "SPLIT_BELOW_PROGRAMS_PER_SM", 10_000)
    dev = torch.device("cuda")
    assert triton_impl.pick_config(392, 256, dev).split > 1
    a = make_inputs([100_000], 16, 2, 256, 16, torch.bfloat16, "cuda", seed=12)
    _run_and_check(a, torch.bfloat16)
    b = make_inputs([30_000, 3], 32, 8, 128, 16, torch.float16, "cuda", seed=13)
    _run_and_check(b, torch.float16)


def test_triton_mid_programs_default():
    """The default for 1024 <= programs < 4096 (one 100K sequence, 8 kv heads) is exact."""
    from vllm_codemod.kernels import triton_impl

    dev = torch.device("cuda")
    expected = (
        triton_impl.K3D_CONFIGS[128] if triton_impl.HAS_PERMUTE else triton_impl.MID_PROGRAMS_CONFIG
    )
    assert triton_impl.pick_config(1568, 128, dev) == expected
    a = make_inputs([20_000, 1, 513, 19_999], 32, 8, 128, 16, torch.bfloat16, "cuda", seed=21)
    _run_and_check(a, torch.bfloat16)
    b = make_inputs([100_000], 32, 8, 128, 16, torch.bfloat16, "cuda", seed=22)
    _run_and_check(b, torch.bfloat16)


@pytest.mark.parametrize("single_pass_max", [0, 256])
def test_triton_reduce_chunked_and_single_pass(monkeypatch, single_pass_max):
    """Both reduce variants: all partitions in one load, and the chunked loop (forced here;
    by default it runs only past 256 partitions = 128K tokens)."""
    from vllm_codemod.kernels import triton_impl

    monkeypatch.setattr(triton_impl, "REDUCE_SINGLE_PASS_MAX", single_pass_max)
    a = make_inputs([40_000, 1, 513, 17_000], 32, 8, 128, 16, torch.bfloat16, "cuda", seed=31)
    _run_and_check(a, torch.bfloat16)


def test_triton_long_sequence_chunked_reduce():
    """Past 256 partitions the reduce loops over chunks by default."""
    a = make_inputs([140_000, 700], 8, 1, 128, 32, torch.float16, "cuda", seed=32)
    _run_and_check(a, torch.float16)


@pytest.mark.parametrize("heads", [(48, 1), (128, 2)])
@pytest.mark.parametrize("many", [False, True])
def test_triton_pre_triton3_wide_groups(monkeypatch, heads, many):
    """The 64-row configs older Triton gets (2-D K loads), both program-count tiers (the
    many-programs tier forced by a zero threshold, to keep the float64 reference small)."""
    from vllm_codemod.kernels import triton_impl

    monkeypatch.setattr(triton_impl, "HAS_PERMUTE", False)
    if many:
        monkeypatch.setattr(triton_impl, "MANY_PROGRAMS", 0)
    a = make_inputs([20_000, 1, 513], *heads, 128, 16, torch.bfloat16, "cuda", seed=43)
    _run_and_check(a, torch.bfloat16)


@pytest.mark.parametrize("head_size", [64, 128, 256])
@pytest.mark.parametrize("lens", [[20_000, 1, 513], [1500] * 40])
def test_triton_pre_triton3_tables(monkeypatch, head_size, lens):
    """The launch tables older Triton gets (2-D K loads), run here on Triton 3."""
    from vllm_codemod.kernels import triton_impl

    monkeypatch.setattr(triton_impl, "HAS_PERMUTE", False)
    a = make_inputs(lens, 16, 4, head_size, 16, torch.bfloat16, "cuda", alibi=True, seed=41)
    _run_and_check(a, torch.bfloat16)

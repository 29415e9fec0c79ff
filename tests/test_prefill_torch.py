"""The prefix-prefill torch path (CPU) against the float64 reference, on small shapes.

Every call gets a NaN-poisoned ``o``: each element the reference defines must have
been written, and the rows ``skip_decode`` skips (NaN in the reference) left alone.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # the CPU suite runs without torch too

from vllm_codemod.kernels.prefill_selfcheck import make_case  # noqa: E402
from vllm_codemod.kernels.prefill_torch import prefix_prefill_torch  # noqa: E402

TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def assert_matches(o: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    out = o.to(torch.float64)
    skipped = torch.isnan(ref)
    assert torch.equal(torch.isnan(out), skipped), "an element written/unwritten wrongly"
    assert skipped.any() or torch.isfinite(out).all()
    got, want = out[~skipped], ref[~skipped]
    if want.numel() == 0:
        return
    rel = float((got - want).norm() / want.norm())
    assert rel < TOL[dtype], rel


def run_case(**kw):
    case = make_case(**kw)
    prefix_prefill_torch(**case.launcher_kwargs())
    assert_matches(case.o, case.reference(), case.q.dtype)
    return case


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "heads,kv_heads,head_size",
    [(4, 4, 64), (8, 2, 128), (6, 1, 96), (4, 2, 24), (2, 2, 128)],
    ids=["MHA-h64", "GQA-h128", "MQA-h96", "GQA-h24", "MHA-h128"],
)
def test_shapes_and_dtypes(dtype, heads, kv_heads, head_size):
    run_case(
        ctx_lens=[0, 37, 64, 5],
        new_lens=[9, 1, 20, 33],
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_size=head_size,
        block_size=16,
        dtype=dtype,
    )


@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize(
    "ctx_lens,new_lens",
    [([0], [1]), ([0], [40]), ([31], [1]), ([33, 100], [1, 2]), ([65, 0, 1], [17, 3, 1])],
)
def test_ragged_batches_and_edges(block_size, ctx_lens, new_lens):
    run_case(
        ctx_lens=ctx_lens,
        new_lens=new_lens,
        num_heads=4,
        num_kv_heads=2,
        head_size=64,
        block_size=block_size,
        dtype=torch.float32,
        seed=block_size,
    )


def test_alibi():
    run_case(
        ctx_lens=[50, 0, 17],
        new_lens=[30, 12, 1],
        num_heads=8,
        num_kv_heads=2,
        head_size=96,
        dtype=torch.float16,
        alibi=True,
    )


@pytest.mark.parametrize("window", [1, 8, 40, 500])
def test_sliding_window(window):
    run_case(
        ctx_lens=[70, 3, 0],
        new_lens=[25, 40, 9],
        num_heads=4,
        num_kv_heads=1,
        head_size=64,
        block_size=16,
        dtype=torch.float32,
        sliding_window=window,
    )


def test_alibi_with_sliding_window():
    run_case(
        ctx_lens=[70],
        new_lens=[25],
        num_heads=4,
        num_kv_heads=2,
        head_size=64,
        dtype=torch.float32,
        alibi=True,
        sliding_window=16,
    )


@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_fp8_caches(kv_cache_dtype, dtype):
    run_case(
        ctx_lens=[45, 16, 0],
        new_lens=[10, 3, 4],
        num_heads=8,
        num_kv_heads=2,
        head_size=128,
        block_size=16,
        dtype=dtype,
        kv_cache_dtype=kv_cache_dtype,
    )


def test_fp8_scales_as_floats():
    case = make_case(
        ctx_lens=[40],
        new_lens=[8],
        num_heads=4,
        num_kv_heads=4,
        head_size=64,
        dtype=torch.float32,
        kv_cache_dtype="fp8",
    )
    kwargs = case.launcher_kwargs()
    kwargs["k_scale"], kwargs["v_scale"] = case.k_scale, case.v_scale
    prefix_prefill_torch(**kwargs)
    assert_matches(case.o, case.reference(), torch.float32)


def test_fp8_scales_are_applied():
    """A wrong scale must show: the check above is not blind to the scales."""
    case = make_case(
        ctx_lens=[40],
        new_lens=[8],
        num_heads=4,
        num_kv_heads=4,
        head_size=64,
        dtype=torch.float32,
        kv_cache_dtype="fp8",
    )
    kwargs = case.launcher_kwargs()
    kwargs["v_scale"] = torch.tensor([1.0])
    prefix_prefill_torch(**kwargs)
    with pytest.raises(AssertionError):
        assert_matches(case.o, case.reference(), torch.float32)


def test_skip_decode_leaves_single_token_rows_untouched():
    case = run_case(
        ctx_lens=[20, 7, 0],
        new_lens=[1, 6, 1],
        num_heads=4,
        num_kv_heads=2,
        head_size=64,
        dtype=torch.float32,
        skip_decode=True,
    )
    assert torch.isnan(case.o[0]).all() and torch.isnan(case.o[7]).all()
    assert torch.isfinite(case.o[1:7]).all()


def test_strided_output_and_sm_scale():
    case = make_case(
        ctx_lens=[30, 2],
        new_lens=[5, 9],
        num_heads=4,
        num_kv_heads=2,
        head_size=64,
        dtype=torch.float32,
        sm_scale=0.3,
    )
    wide = torch.full((case.o.shape[0], 4, 2 * 64), float("nan"))
    o = wide[:, :, :64]  # a strided view, as vLLM's output slices can be
    kwargs = case.launcher_kwargs()
    kwargs["o"] = o
    prefix_prefill_torch(**kwargs)
    assert_matches(o, case.reference(), torch.float32)
    assert torch.isnan(wide[:, :, 64:]).all()


def test_query_chunks_match_one_pass(monkeypatch):
    """The row chunking that bounds memory on a GPU gives the same answer."""
    from vllm_codemod.kernels import prefill_torch

    monkeypatch.setattr(prefill_torch, "_CHUNK_ELEMENTS", 4 * 64)
    run_case(
        ctx_lens=[50, 10],
        new_lens=[37, 20],
        num_heads=4,
        num_kv_heads=2,
        head_size=64,
        dtype=torch.float32,
        sliding_window=12,
        alibi=True,
    )


def test_reference_in_row_steps_equals_one_step(monkeypatch):
    """The reference bounds its float64 logits by computing a few query rows at a time
    (a 1x(48K+16K) case held at once needs 69 GB); the steps must not change the answer,
    including ALiBi and a window, whose positions come from each step's own rows."""
    from vllm_codemod.kernels import reference

    case = make_case(
        ctx_lens=[37, 0],
        new_lens=[29, 6],
        num_heads=4,
        num_kv_heads=2,
        head_size=32,
        alibi=True,
        sliding_window=20,
    )
    whole = case.reference()
    monkeypatch.setattr(reference, "_LOGITS_BYTES", 8 * 4 * 66 * 3)  # 3 rows a step
    assert reference._rows_per_step(4, 66) == 3
    stepped = case.reference()
    assert torch.equal(torch.isnan(whole), torch.isnan(stepped))
    assert torch.allclose(whole.nan_to_num(), stepped.nan_to_num(), rtol=0, atol=1e-12)

"""PagedAttention V2 bundled kernels: the torch path (CPU) against the float64 reference."""

from __future__ import annotations

import random
import warnings

import pytest

torch = pytest.importorskip("torch")  # the CPU suite runs without torch too
from pa_helpers import make_inputs, rel_err, tolerance  # noqa: E402

from vllm_codemod.kernels import dispatch, paged_attention_v2, torch_impl  # noqa: E402
from vllm_codemod.kernels.reference import reference_paged_attention, reference_partitions  # noqa: E402
from vllm_codemod.kernels.signature import (  # noqa: E402
    ACCEPTED_PARAMETERS,
    ALIASES,
    CANONICAL_PARAMETERS,
    PARTITION_SIZE,
)

HEAD_SIZES = [32, 64, 80, 96, 112, 120, 128, 192, 256]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _ref(a, fp8_dtype=None, k_scale=1.0, v_scale=1.0):
    return reference_paged_attention(
        a["query"],
        a["key_cache"],
        a["value_cache"],
        a["block_tables"],
        a["seq_lens"].tolist(),
        a["scale"],
        a["alibi_slopes"],
        fp8_dtype=fp8_dtype,
        k_scale=k_scale,
        v_scale=v_scale,
    )


def _check_out(a, ref, dtype):
    out = a["out"]
    assert not torch.isnan(out).any(), "some element of out was never written"
    err = rel_err(out, ref)
    assert err < tolerance(dtype), err


def _random_case(i):
    rng = random.Random(1000 + i)
    head_size = HEAD_SIZES[i % len(HEAD_SIZES)]
    dtype = DTYPES[i % 3]
    block_size = rng.choice([8, 16, 32])
    num_kv = rng.choice([1, 2, 4])
    group = rng.choice([1, 2, 4, 8])
    specials = [1, 512, 1024, 513, 1025, 1536, 2]
    lens = [rng.choice(specials) if rng.random() < 0.5 else rng.randint(1, 2100) for _ in range(3)]
    return dict(
        seq_lens=lens,
        num_heads=num_kv * group,
        num_kv_heads=num_kv,
        head_size=head_size,
        block_size=block_size,
        dtype=dtype,
        alibi=rng.random() < 0.3,
        extra_partitions=rng.choice([0, 2]),
        seed=i,
    )


@pytest.mark.parametrize("i", range(18))
def test_randomized_shapes(i):
    case = _random_case(i)
    a = make_inputs(**case)
    paged_attention_v2(**a)
    _check_out(a, _ref(a), case["dtype"])


@pytest.mark.parametrize("seq_len", [1, 511, 512, 513, 1024, 1537, 3 * 512 + 1])
@pytest.mark.parametrize("block_size", [8, 16, 32])
def test_partition_boundaries(seq_len, block_size):
    a = make_inputs([seq_len, 5], 4, 2, 64, block_size, torch.float32, extra_partitions=1)
    paged_attention_v2(**a)
    _check_out(a, _ref(a), torch.float32)


def _check_partition_buffers(a, seq_index=0):
    """tmp_out/exp_sums/max_logits must follow vLLM's meaning, partition by partition."""
    seq_len = int(a["seq_lens"][seq_index])
    tmp, sums, maxes = reference_partitions(
        a["query"],
        a["key_cache"],
        a["value_cache"],
        a["block_tables"],
        seq_len,
        seq_index,
        a["scale"],
        a["alibi_slopes"],
    )
    n = tmp.shape[1]
    assert rel_err(a["max_logits"][seq_index, :, :n], maxes) < 1e-5
    assert rel_err(a["exp_sums"][seq_index, :, :n], sums) < 1e-4
    assert rel_err(a["tmp_out"][seq_index, :, :n], tmp) < 1e-4
    # vLLM's reduce kernel applied to the buffers must give out.
    m = a["max_logits"][seq_index, :, :n].double()
    w = torch.exp(m - m.amax(dim=1, keepdim=True)) * a["exp_sums"][seq_index, :, :n].double()
    combined = (w[..., None] * a["tmp_out"][seq_index, :, :n].double()).sum(1) / w.sum(1)[:, None]
    assert rel_err(combined, a["out"][seq_index]) < 1e-4


def test_partition_buffers_follow_vllm_semantics():
    a = make_inputs([1800, 700], 8, 2, 64, 16, torch.float32, alibi=True, extra_partitions=2)
    paged_attention_v2(**a)
    _check_out(a, _ref(a), torch.float32)
    _check_partition_buffers(a, 0)
    _check_partition_buffers(a, 1)


def test_regression_unnormalized_partials_are_caught():
    """The widely shared draft stores UNnormalized partials and weights by exp-sum again.

    Its output is off by orders of magnitude; the buffer check above must reject it.
    """
    a = make_inputs([1800], 4, 4, 64, 16, torch.float32, extra_partitions=1)
    paged_attention_v2(**a)
    n = 4
    good = a["tmp_out"][0, :, :n].clone()
    # The draft: partial = sum_t exp(l_t - m_p) v_t (not divided by exp_sum) ...
    a["tmp_out"][0, :, :n] = good * a["exp_sums"][0, :, :n, None]
    # ... reduced with the exp-sum weight again, as vLLM's reduce does.
    m = a["max_logits"][0, :, :n]
    w = torch.exp(m - m.amax(1, keepdim=True)) * a["exp_sums"][0, :, :n]
    wrong = (w[..., None] * a["tmp_out"][0, :, :n]).sum(1) / w.sum(1)[:, None]
    assert rel_err(wrong, _ref(a)[0]) > 1.0  # orders of magnitude off
    with pytest.raises(AssertionError):
        _check_partition_buffers(a, 0)


def test_small_chunks_bounded_memory(monkeypatch):
    """Force one partition per chunk: the cross-chunk log-sum-exp must match."""
    monkeypatch.setattr(torch_impl, "_WORKSET_BYTES", 1)
    a = make_inputs([4000, 1, 1600], 8, 2, 64, 16, torch.float32, alibi=True, extra_partitions=1)
    paged_attention_v2(**a)
    _check_out(a, _ref(a), torch.float32)
    _check_partition_buffers(a, 0)


def test_long_sequence_100k_gqa():
    a = make_inputs([100_001], 4, 1, 32, 16, torch.bfloat16, extra_partitions=1)
    paged_attention_v2(**a)
    _check_out(a, _ref(a), torch.bfloat16)


def _call_aliases(a, version):
    base = {k: a[k] for k in ("out", "max_logits", "tmp_out", "query", "key_cache")}
    base.update(value_cache=a["value_cache"], num_kv_heads=a["num_kv_heads"], scale=a["scale"])
    base.update(block_tables=a["block_tables"], block_size=a["block_size"])
    base.update(alibi_slopes=a["alibi_slopes"], kv_cache_dtype="auto")
    if version == "0.4.x":
        base.update(exp_sum=a["exp_sums"], context_lens=a["seq_lens"])
        base.update(max_context_len=a["max_seq_len"], kv_scale=1.0)
    elif version == "0.5.x":
        base.update(exp_sum=a["exp_sums"], seq_lens=a["seq_lens"], max_seq_len=a["max_seq_len"])
        base.update(k_scale=1.0, v_scale=1.0, tp_rank=0, blocksparse_local_blocks=0)
        base.update(blocksparse_vert_stride=0, blocksparse_block_size=64)
        base.update(blocksparse_head_sliding_step=0)
    else:
        base.update(exp_sums=a["exp_sums"], seq_lens=a["seq_lens"], max_seq_len=a["max_seq_len"])
        base.update(k_scale=torch.tensor([1.0]), v_scale=torch.tensor([1.0]))
    paged_attention_v2(**base)


@pytest.mark.parametrize("version", ["0.4.x", "0.5.x", "0.10.x"])
def test_alias_spellings(version):
    a = make_inputs([900, 3], 4, 2, 64, 16, torch.float32)
    _call_aliases(a, version)
    _check_out(a, _ref(a), torch.float32)


def test_positional_call():
    a = make_inputs([700], 4, 4, 64, 16, torch.float32)
    names = CANONICAL_PARAMETERS[:13]
    assert paged_attention_v2(*[a[n] for n in names]) is None
    _check_out(a, _ref(a), torch.float32)


def test_signature_module_is_consistent():
    assert set(ALIASES.values()) <= set(CANONICAL_PARAMETERS)
    assert ACCEPTED_PARAMETERS == frozenset(CANONICAL_PARAMETERS) | frozenset(ALIASES)
    assert {"exp_sum", "context_lens", "max_context_len", "kv_scale"} <= ACCEPTED_PARAMETERS
    assert PARTITION_SIZE == 512
    import inspect

    params = list(inspect.signature(dispatch._run).parameters)
    assert tuple(params[: len(CANONICAL_PARAMETERS)]) == CANONICAL_PARAMETERS


def test_bad_arguments():
    a = make_inputs([10], 4, 4, 64, 16, torch.float32)
    with pytest.raises(TypeError):
        paged_attention_v2(**a, bogus=1)
    with pytest.raises(TypeError):
        paged_attention_v2(**a, kv_scale=1.0, k_scale=1.0)
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        paged_attention_v2(**a, kv_cache_dtype="int4")


@pytest.mark.parametrize(
    "kwargs", [dict(blocksparse_vert_stride=4), dict(blocksparse_local_blocks=2)]
)
def test_blocksparse_is_refused(kwargs):
    a = make_inputs([100], 4, 4, 64, 16, torch.float32)
    with pytest.raises(NotImplementedError, match="block-sparse"):
        paged_attention_v2(**a, **kwargs)


def test_backend_env(monkeypatch):
    a = make_inputs([600], 4, 2, 64, 16, torch.float32)
    monkeypatch.setenv(dispatch.BACKEND_ENV, "torch")
    assert dispatch.paged_attention_v2_with_path(**a) == "torch"
    monkeypatch.setenv(dispatch.BACKEND_ENV, "cuda-graphs")
    with pytest.raises(ValueError):
        dispatch.paged_attention_v2(**a)
    if not dispatch.triton_available():
        monkeypatch.setenv(dispatch.BACKEND_ENV, "triton")
        with pytest.raises(RuntimeError, match="Triton"):
            dispatch.paged_attention_v2(**a)


class _FakeTriton:
    """Stands in for the Triton module; fails for the dtypes listed in ``failing``."""

    def __init__(self, failing=()):
        self.calls = []
        self.failing = set(failing)

    def paged_attention_v2_triton(self, *args):
        dtype = args[5].dtype  # key_cache
        self.calls.append(dtype)
        if dtype in self.failing:
            raise RuntimeError("no compiler for this GPU")
        raise _Handled()


class _Handled(BaseException):  # escapes the dispatcher's `except Exception`
    pass


def _fake_gpu(monkeypatch, fake, capability=(9, 0)):
    state = {"checked": True, "module": fake, "warned": False}
    monkeypatch.setattr(dispatch, "_triton_state", state)
    monkeypatch.setattr(dispatch, "_triton_failed_dtypes", set())
    monkeypatch.setattr(dispatch, "_capabilities", {})
    monkeypatch.setattr(dispatch, "_on_gpu", lambda t: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)


def test_triton_failure_warns_once_and_falls_back(monkeypatch):
    fake = _FakeTriton(failing={torch.float32})
    _fake_gpu(monkeypatch, fake)
    a = make_inputs([800], 4, 2, 64, 16, torch.float32)
    with pytest.warns(RuntimeWarning, match="PyTorch path"):
        assert dispatch.paged_attention_v2_with_path(**a) == "torch"
    _check_out(a, _ref(a), torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dispatch.paged_attention_v2_with_path(**a) == "torch"
    assert fake.calls == [torch.float32]
    # The failure is remembered per cache dtype: fp16 caches still get the Triton path.
    b = make_inputs([800], 4, 2, 64, 16, torch.float16)
    with pytest.raises(_Handled):
        dispatch.paged_attention_v2_with_path(**b)
    assert fake.calls == [torch.float32, torch.float16]


@pytest.mark.parametrize("capability, tried", [((7, 0), False), ((7, 5), False), ((8, 0), True)])
def test_fp32_caches_skip_triton_below_sm80(monkeypatch, capability, tried):
    """Triton 2.1 aborts the process compiling the fp32 path below sm_80: never try it."""
    fake = _FakeTriton()
    _fake_gpu(monkeypatch, fake, capability)
    a = make_inputs([700], 4, 2, 64, 16, torch.float32)
    if tried:
        with pytest.raises(_Handled):
            dispatch.paged_attention_v2_with_path(**a)
    else:
        assert dispatch.paged_attention_v2_with_path(**a) == "torch"
        _check_out(a, _ref(a), torch.float32)
    assert fake.calls == ([torch.float32] if tried else [])
    b = make_inputs([700], 4, 2, 64, 16, torch.float16)
    with pytest.raises(_Handled):  # other dtypes are not affected
        dispatch.paged_attention_v2_with_path(**b)


FP8 = [
    name
    for name, attr in (
        ("fp8", "float8_e4m3fn"),
        ("fp8_e4m3", "float8_e4m3fn"),
        ("fp8_e5m2", "float8_e5m2"),
    )
    if hasattr(torch, attr)
]


@pytest.mark.skipif(not FP8, reason="this torch has no float8 dtypes")
@pytest.mark.parametrize("kv_cache_dtype", FP8 or ["fp8"])
@pytest.mark.parametrize("tensor_scales", [False, True])
def test_fp8_cache(kv_cache_dtype, tensor_scales):
    fp8 = torch.float8_e5m2 if kv_cache_dtype == "fp8_e5m2" else torch.float8_e4m3fn
    a = make_inputs([1100, 40], 8, 2, 64, 16, torch.bfloat16, fp8_dtype=fp8)
    ks, vs = 0.5, 1.7
    scales = (torch.tensor([ks]), torch.tensor([vs])) if tensor_scales else (ks, vs)
    paged_attention_v2(**a, kv_cache_dtype=kv_cache_dtype, k_scale=scales[0], v_scale=scales[1])
    _check_out(a, _ref(a, fp8_dtype=fp8, k_scale=ks, v_scale=vs), torch.bfloat16)


def test_fp8_without_float8_dtypes_is_a_clear_error(monkeypatch):
    monkeypatch.delattr(torch, "float8_e5m2", raising=False)
    with pytest.raises(NotImplementedError, match="float8_e5m2"):
        dispatch.fp8_dtype("fp8_e5m2")


@pytest.mark.skipif(not FP8, reason="this torch has no float8 dtypes")
def test_uint8_cache_needs_fp8_dtype():
    a = make_inputs([20], 4, 4, 64, 16, torch.float32, fp8_dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="fp8"):
        paged_attention_v2(**a)


def test_launch_config_tiers(monkeypatch):
    """Which launch config each program count gets (pure policy; needs Triton importable).

    Triton >= 3.0 gets the k3d tables; older Triton (no tl.permute) the 2-D-load ones."""
    pytest.importorskip("triton")
    from vllm_codemod.kernels import triton_impl

    monkeypatch.setattr(triton_impl, "HAS_PERMUTE", True)
    assert triton_impl.pick_config(512, 128) == triton_impl.K3D_CONFIGS[128]
    assert triton_impl.pick_config(1568, 128) == triton_impl.K3D_CONFIGS[128]
    assert triton_impl.pick_config(4095, 128) == triton_impl.K3D_CONFIGS[128]
    assert triton_impl.pick_config(4096, 64) == triton_impl.K3D_MANY_PROGRAMS_CONFIG
    assert triton_impl.pick_config(9000, 256) == triton_impl.K3D_CONFIGS[256]
    # 64 rows per program (MQA-sized groups), head <= 128: four-warp configs.
    wide, wide_many = triton_impl.K3D_WIDE_GROUP_CONFIG, triton_impl.K3D_WIDE_GROUP_MANY_CONFIG
    assert triton_impl.pick_config(196, 128, g_pad=64) == wide
    assert triton_impl.pick_config(4096, 64, g_pad=64) == wide_many
    assert triton_impl.pick_config(1024, 128, g_pad=32) == triton_impl.K3D_CONFIGS[128]
    assert triton_impl.pick_config(1024, 256, g_pad=64) == triton_impl.K3D_CONFIGS[256]
    assert wide.warps == wide_many.warps == 4
    assert all(c.k3d for c in triton_impl.K3D_CONFIGS.values())

    monkeypatch.setattr(triton_impl, "HAS_PERMUTE", False)
    mid = triton_impl.MID_PROGRAMS_CONFIG
    many = triton_impl.MANY_PROGRAMS_CONFIG
    assert triton_impl.pick_config(512, 128) == triton_impl.DEFAULT_CONFIGS[128]
    assert triton_impl.pick_config(1568, 128) == mid
    assert triton_impl.pick_config(4095, 128) == mid
    assert triton_impl.pick_config(4096, 128) == many
    assert triton_impl.pick_config(1568, 256) == triton_impl.DEFAULT_CONFIGS[256]
    assert triton_impl.pick_config(196, 128, g_pad=64) == triton_impl.WIDE_GROUP_CONFIG
    assert triton_impl.pick_config(1024, 64, g_pad=64) == triton_impl.WIDE_GROUP_MANY_CONFIG
    assert triton_impl.pick_config(1024, 128, g_pad=32) == mid


class _FakeKernel:
    """Stands in for a @triton.jit kernel: records each launch's constexprs, or raises."""

    def __init__(self, fail_when):
        self.fail_when, self.launches = fail_when, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            if self.fail_when(kwargs):
                raise RuntimeError("fake compile error")
            self.launches.append(kwargs)

        return launch


def _k3d_call_args():
    a = make_inputs([700, 3], 8, 2, 128, 16, torch.bfloat16)
    keys = (
        "out exp_sums max_logits tmp_out query key_cache value_cache num_kv_heads scale "
        "block_tables seq_lens block_size max_seq_len alibi_slopes"
    ).split()
    return {k: a[k] for k in keys}


def test_k3d_failure_retries_with_2d_load(monkeypatch):
    """A Triton that has tl.permute but cannot compile the k3d kernel: one warning, the same
    call completes with the 2-D load, and later calls use the 2-D tables."""
    pytest.importorskip("triton")
    from vllm_codemod.kernels import triton_impl

    part = _FakeKernel(lambda kw: kw["K_3D"])
    reduce = _FakeKernel(lambda kw: False)
    monkeypatch.setattr(triton_impl, "HAS_PERMUTE", True)
    monkeypatch.setitem(triton_impl._k3d_state, "disabled", False)
    monkeypatch.setattr(triton_impl, "_pa_v2_partition_kernel", part)
    monkeypatch.setattr(triton_impl, "_pa_v2_reduce_kernel", reduce)
    with pytest.warns(RuntimeWarning, match="k3d Triton kernel failed"):
        triton_impl.paged_attention_v2_triton(**_k3d_call_args())
    assert [kw["K_3D"] for kw in part.launches] == [False]
    assert len(reduce.launches) == 1
    assert not triton_impl.k3d_enabled()
    assert triton_impl.pick_config(512, 128) == triton_impl.DEFAULT_CONFIGS[128]
    triton_impl.paged_attention_v2_triton(**_k3d_call_args())  # no second warning
    assert [kw["K_3D"] for kw in part.launches] == [False, False]


def test_k3d_stays_on_when_both_loads_fail(monkeypatch):
    """A failure that is not k3d's (the 2-D retry fails too) is raised for the dispatcher
    to handle, and k3d is not switched off for other calls."""
    pytest.importorskip("triton")
    from vllm_codemod.kernels import triton_impl

    monkeypatch.setattr(triton_impl, "HAS_PERMUTE", True)
    monkeypatch.setitem(triton_impl._k3d_state, "disabled", False)
    monkeypatch.setattr(triton_impl, "_pa_v2_partition_kernel", _FakeKernel(lambda kw: True))
    with pytest.raises(RuntimeError, match="fake compile error"):
        triton_impl.paged_attention_v2_triton(**_k3d_call_args())
    assert triton_impl.k3d_enabled()

"""PagedAttention V2 bundled kernels: the torch path (CPU) against the float64 reference."""

from __future__ import annotations

import dataclasses
import logging
import random
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the CPU suite runs without torch too
from pa_helpers import FakeCompiled, FakeJit, make_inputs, rel_err, shifted, tolerance  # noqa: E402

from vllm_codemod.kernels import call as call_mod  # noqa: E402
from vllm_codemod.kernels import (  # noqa: E402
    dispatch,
    launch_tables,
    paged_attention_v2,
    torch_impl,
    tuning_table,
)
from vllm_codemod.kernels.log import log as kernel_log  # noqa: E402
from vllm_codemod.kernels.reference import reference_for_args, reference_partitions  # noqa: E402
from vllm_codemod.kernels.signature import (  # noqa: E402
    ACCEPTED_PARAMETERS,
    ALIASES,
    CANONICAL_PARAMETERS,
    PARTITION_SIZE,
)
from vllm_codemod.tuning.tree_imports import load_file  # noqa: E402

HEAD_SIZES = [32, 64, 80, 96, 112, 120, 128, 192, 256]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _ref(a, fp8_dtype=None, k_scale=1.0, v_scale=1.0):
    return reference_for_args(a, fp8_dtype=fp8_dtype, k_scale=k_scale, v_scale=v_scale)


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
    # Positional arguments bind in CANONICAL_PARAMETERS order, every one of them.
    values = tuple(object() for _ in CANONICAL_PARAMETERS)
    bound = call_mod.bind(values, {})
    assert tuple(bound) == CANONICAL_PARAMETERS
    assert all(bound[n] is v for n, v in zip(CANONICAL_PARAMETERS, values))
    with pytest.raises(TypeError, match="too many"):
        call_mod.bind(values + (None,), {})
    # Every alias binds to its canonical name; kv_scale sets both scales.
    for alias, canonical in ALIASES.items():
        got = call_mod.bind((), {alias: 7})
        expected = {"k_scale": 7, "v_scale": 7} if alias == "kv_scale" else {canonical: 7}
        assert got == expected, alias
    # The call object carries every dense-attention parameter under its canonical name.
    fields = {f.name for f in dataclasses.fields(call_mod.DecodeCall)}
    assert fields == set(CANONICAL_PARAMETERS[:17])


def test_bind_rejects_duplicates():
    with pytest.raises(TypeError, match="given twice"):
        call_mod.bind((None,) * 11, {"context_lens": 1})
    with pytest.raises(TypeError, match="both given"):
        call_mod.bind((), {"kv_scale": 1.0, "v_scale": 1.0})


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
    with pytest.raises(ValueError, match="expected 'triton', 'torch' or unset"):
        dispatch.paged_attention_v2(**a)
    monkeypatch.setenv(dispatch.BACKEND_ENV, " Torch ")  # case and spaces do not matter
    assert dispatch.paged_attention_v2_with_path(**a) == "torch"
    monkeypatch.delenv(dispatch.BACKEND_ENV)
    # CPU tensors always take the torch path, Triton or not; backend= beats the environment.
    assert dispatch.paged_attention_v2_with_path(**a) == "torch"
    monkeypatch.setenv(dispatch.BACKEND_ENV, "triton")
    assert dispatch.paged_attention_v2_with_path(**a, backend="torch") == "torch"
    _check_out(a, _ref(a), torch.float32)


def test_empty_batch_and_zero_length_take_no_path():
    a = make_inputs([5], 4, 2, 64, 16, torch.float32)
    a["max_seq_len"] = 0
    assert dispatch.paged_attention_v2_with_path(**a) == "none"


def _placeholder_module():
    """What vLLM >= 0.9 puts in sys.modules["triton"] when Triton is missing: a module
    object of class TritonPlaceholder, no file behind it, a fake version and a no-op jit."""
    placeholder_type = type("TritonPlaceholder", (types.ModuleType,), {})
    module = placeholder_type("triton")
    module.__version__ = "3.3.0"
    module.jit = lambda fn=None, **kwargs: fn if fn is not None else (lambda f: f)
    module.language = types.ModuleType("triton.language")
    assert not getattr(module, "__file__", None)
    return module


def test_vllm_triton_placeholder_counts_as_absent(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", _placeholder_module())
    monkeypatch.setattr(
        dispatch, "_triton_state", {"checked": False, "module": None, "warned": False}
    )
    monkeypatch.setattr(dispatch, "_triton_failed_dtypes", set())
    assert dispatch.triton_available() is False
    assert "placeholder" in dispatch._triton_state["import_error"]
    a = make_inputs([300, 2], 4, 2, 64, 16, torch.float32)
    monkeypatch.setenv(dispatch.BACKEND_ENV, "triton")
    with pytest.raises(RuntimeError, match="Triton is unusable here") as info:
        dispatch.paged_attention_v2(**a)
    assert "TritonPlaceholder" in str(info.value)
    monkeypatch.delenv(dispatch.BACKEND_ENV)
    assert dispatch.paged_attention_v2_with_path(**a) == "torch"  # auto: the torch path
    _check_out(a, _ref(a), torch.float32)


def test_missing_triton_is_a_clear_error_when_forced(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` raises ImportError
    monkeypatch.setattr(
        dispatch, "_triton_state", {"checked": False, "module": None, "warned": False}
    )
    assert dispatch.triton_available() is False
    a = make_inputs([30], 4, 4, 64, 16, torch.float32)
    with pytest.raises(RuntimeError, match="Triton is unusable here"):
        dispatch.paged_attention_v2_with_path(**a, backend="triton")


def test_validation_runs_once_per_shape_and_still_rejects(monkeypatch):
    checked = []
    real_check = call_mod._check

    def counting_check(c):
        checked.append(tuple(c.query.shape))
        real_check(c)

    monkeypatch.setattr(call_mod, "_check", counting_check)
    monkeypatch.setattr(call_mod, "_validated", set())
    a = make_inputs([100, 3], 4, 2, 64, 16, torch.float32)
    for _ in range(3):
        paged_attention_v2(**a)
    assert checked == [(2, 4, 64)]
    b = make_inputs([100, 3, 9], 4, 2, 64, 16, torch.float32)
    paged_attention_v2(**b)
    assert checked == [(2, 4, 64), (3, 4, 64)]
    _check_out(b, _ref(b), torch.float32)
    # A bad shape is refused on every call: a failed check is never cached as valid.
    bad = dict(a, out=torch.empty(2, 4, 32))
    for _ in range(2):
        with pytest.raises(ValueError, match="out shape"):
            paged_attention_v2(**bad)
    assert len(checked) == 4
    with pytest.raises(ValueError, match="not a multiple"):
        paged_attention_v2(**dict(a, num_kv_heads=3))
    with pytest.raises(ValueError, match="must divide 512"):
        c = make_inputs([10], 4, 4, 64, 24, torch.float32)
        paged_attention_v2(**c)


class _FakeTritonImpl:
    """Stands in for the decode_launch module; fails for the dtypes listed in ``failing``."""

    class UnsupportedLayout(ValueError):
        pass

    def __init__(self, failing=(), layout_failing=()):
        self.calls = []
        self.failing = set(failing)
        self.layout_failing = set(layout_failing)

    def run(self, c, config=None):
        dtype = c.key_cache.dtype
        self.calls.append(dtype)
        if dtype in self.failing:
            raise RuntimeError("no compiler for this GPU")
        if dtype in self.layout_failing:
            raise self.UnsupportedLayout("strided query")
        raise _Handled()


class _Handled(BaseException):  # escapes the dispatcher's `except Exception`
    pass


class _CudaLooking:
    """A CPU tensor that reports a CUDA device: what choose_backend looks at."""

    device = torch.device("cuda", 0)
    is_cuda = True

    def __init__(self, tensor):
        self.tensor = tensor

    def __getattr__(self, name):
        return getattr(self.tensor, name)


def _fake_gpu(monkeypatch, fake, capability=(9, 0)):
    monkeypatch.setattr(
        dispatch, "_triton_state", {"checked": True, "module": fake, "warned": False}
    )
    monkeypatch.setattr(dispatch, "_triton_failed_dtypes", set())
    monkeypatch.setattr(dispatch, "_capabilities", {})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)
    monkeypatch.setattr(dispatch.tuned, "decision", lambda c: None)  # no table names it
    real_torch_path = dispatch._torch_path

    def torch_path_on_the_cpu_tensor(c):
        return real_torch_path(dataclasses.replace(c, query=c.query.tensor))

    monkeypatch.setattr(dispatch, "_torch_path", torch_path_on_the_cpu_tensor)


def _gpu_call(a):
    c = call_mod.build((), dict(a))
    return dataclasses.replace(c, query=_CudaLooking(c.query))


def _kernel_log(caplog):
    return [r for r in caplog.records if r.name == kernel_log.name]


def test_triton_failure_logs_once_and_falls_back(monkeypatch, caplog):
    fake = _FakeTritonImpl(failing={torch.float32})
    _fake_gpu(monkeypatch, fake)
    caplog.set_level(logging.INFO, logger=kernel_log.name)
    a = make_inputs([800], 4, 2, 64, 16, torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a log record, never a warning
        assert dispatch.run(_gpu_call(a)) == "torch"
        _check_out(a, _ref(a), torch.float32)
        assert dispatch.run(_gpu_call(a)) == "torch"
    records = _kernel_log(caplog)
    assert len(records) == 1, records
    assert records[0].levelno == logging.WARNING
    assert "PyTorch path" in records[0].getMessage()
    assert "no compiler for this GPU" in records[0].getMessage()
    assert fake.calls == [torch.float32]  # remembered: the second call did not try again
    # The failure is remembered per cache dtype: fp16 caches still get the Triton path.
    b = make_inputs([800], 4, 2, 64, 16, torch.float16)
    with pytest.raises(_Handled):
        dispatch.run(_gpu_call(b))
    assert fake.calls == [torch.float32, torch.float16]
    assert len(_kernel_log(caplog)) == 1


def test_unsupported_layout_falls_back_without_disabling_the_dtype(monkeypatch, caplog):
    fake = _FakeTritonImpl(layout_failing={torch.float16})
    _fake_gpu(monkeypatch, fake)
    caplog.set_level(logging.INFO, logger=kernel_log.name)
    a = make_inputs([300], 4, 2, 64, 16, torch.float16)
    assert dispatch.run(_gpu_call(a)) == "torch"
    _check_out(a, _ref(a), torch.float16)
    assert dispatch.run(_gpu_call(a)) == "torch"
    assert fake.calls == [torch.float16, torch.float16]  # tried again: a layout, not a dtype
    assert dispatch._triton_failed_dtypes == set()
    assert len(_kernel_log(caplog)) == 1


def test_forced_triton_failure_is_raised(monkeypatch, caplog):
    fake = _FakeTritonImpl(failing={torch.float32})
    _fake_gpu(monkeypatch, fake)
    a = make_inputs([100], 4, 2, 64, 16, torch.float32)
    with pytest.raises(RuntimeError, match="no compiler"):
        dispatch.run(_gpu_call(a), backend="triton")
    assert dispatch._triton_failed_dtypes == set()
    assert _kernel_log(caplog) == []


@pytest.mark.parametrize("capability, tried", [((7, 0), False), ((7, 5), False), ((8, 0), True)])
def test_fp32_caches_skip_triton_below_sm80(monkeypatch, capability, tried):
    """Triton 2.1 aborts the process compiling the fp32 path below sm_80: never try it."""
    fake = _FakeTritonImpl()
    _fake_gpu(monkeypatch, fake, capability)
    a = make_inputs([700], 4, 2, 64, 16, torch.float32)
    if tried:
        with pytest.raises(_Handled):
            dispatch.run(_gpu_call(a))
    else:
        assert dispatch.run(_gpu_call(a)) == "torch"
        _check_out(a, _ref(a), torch.float32)
    assert fake.calls == ([torch.float32] if tried else [])
    b = make_inputs([700], 4, 2, 64, 16, torch.float16)
    with pytest.raises(_Handled):  # other dtypes are not affected
        dispatch.run(_gpu_call(b))


def test_fp8_caches_take_the_torch_path_on_gpu(monkeypatch):
    fake = _FakeTritonImpl()
    _fake_gpu(monkeypatch, fake)
    if not FP8:
        pytest.skip("this torch has no float8 dtypes")
    a = make_inputs([40], 4, 2, 64, 16, torch.bfloat16, fp8_dtype=torch.float8_e4m3fn)
    c = dataclasses.replace(_gpu_call(a), kv_cache_dtype="fp8")
    assert dispatch.choose_backend(c) == "torch"
    with pytest.raises(NotImplementedError, match="fp8"):
        dispatch.choose_backend(c, "triton")
    assert fake.calls == []


def test_kernel_logger_name_inside_a_tree():
    """Inside a patched tree the kernels log under vLLM's hierarchy (vLLM's logging
    configuration routes them); under the tool's own name elsewhere."""
    path = Path(dispatch.__file__).with_name("log.py")
    module = load_file("vllm._codemod_kernels.log", path, keep=False)
    assert module.log.name == "vllm.codemod.kernels"
    assert kernel_log.name == "vllm_codemod.kernels"


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
        call_mod.fp8_dtype("fp8_e5m2")


@pytest.mark.skipif(not FP8, reason="this torch has no float8 dtypes")
def test_uint8_cache_needs_fp8_dtype():
    a = make_inputs([20], 4, 4, 64, 16, torch.float32, fp8_dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="fp8"):
        paged_attention_v2(**a)


# --------------------------------------------------------------------------- call building


def _build_inputs():
    a = make_inputs([300, 7], 4, 2, 64, 16, torch.float32, alibi=True)
    return a, [a[n] for n in CANONICAL_PARAMETERS[:13]]


_TAIL_VALUES = ("auto", 0.5, 2.0, 0, 0, 1, 64, 0)  # kv_cache_dtype .. head_sliding_step


def _call_fields(c):
    return {f.name: getattr(c, f.name) for f in dataclasses.fields(call_mod.DecodeCall)}


def _same_call(x, y):
    fx, fy = _call_fields(x), _call_fields(y)
    assert fx.keys() == fy.keys()
    for name in fx:
        if isinstance(fx[name], torch.Tensor) or isinstance(fy[name], torch.Tensor):
            assert fx[name] is fy[name], name
        else:
            assert fx[name] == fy[name] and type(fx[name]) is type(fy[name]), name


@pytest.mark.parametrize("n_positional", range(13, len(CANONICAL_PARAMETERS) + 1))
def test_build_positional_fast_path_equals_keywords(n_positional):
    """vLLM passes 13-22 arguments positionally (the short path builds the call straight from
    the tuple); the same values by keyword, or split positional + keyword, give the same call."""
    a, head = _build_inputs()
    values = head + [a["alibi_slopes"], *_TAIL_VALUES][: n_positional - 13]
    fast = call_mod.build(tuple(values), {})
    by_name = call_mod.build((), dict(zip(CANONICAL_PARAMETERS, values)))
    split = call_mod.build(tuple(values[:5]), dict(zip(CANONICAL_PARAMETERS[5:], values[5:])))
    _same_call(fast, by_name)
    _same_call(fast, split)
    assert fast.alibi_slopes is (a["alibi_slopes"] if n_positional > 13 else None)
    expected_scales = {13: (1.0, 1.0), 14: (1.0, 1.0), 15: (1.0, 1.0), 16: (0.5, 1.0)}
    assert (fast.k_scale, fast.v_scale) == expected_scales.get(n_positional, (0.5, 2.0))


def test_build_aliases_equal_canonical_names():
    a, head = _build_inputs()
    canonical = call_mod.build(tuple(head), {"k_scale": 0.25, "v_scale": 0.25})
    renamed = dict(zip(CANONICAL_PARAMETERS[:13], head))
    renamed["exp_sum"] = renamed.pop("exp_sums")
    renamed["context_lens"] = renamed.pop("seq_lens")
    renamed["max_context_len"] = renamed.pop("max_seq_len")
    _same_call(canonical, call_mod.build((), dict(renamed, kv_scale=0.25)))
    # 0.4's positional kv_scale lands in the k_scale slot (16 arguments).
    old = call_mod.build(tuple(head) + (a["alibi_slopes"], "auto", 0.25), {})
    assert (old.k_scale, old.v_scale) == (0.25, 1.0)


def test_build_normalizes_scalars_and_refuses_bad_calls():
    a, head = _build_inputs()
    values = list(head)
    values[7] = torch.tensor(2)  # num_kv_heads as a 0-d tensor
    values[8] = torch.tensor(0.125)  # scale
    values[11] = torch.tensor([16])  # block_size
    c = call_mod.build(tuple(values), {})
    assert (c.num_kv_heads, c.scale, c.block_size) == (2, 0.125, 16)
    assert type(c.num_kv_heads) is int and type(c.scale) is float
    with pytest.raises(TypeError, match="too many"):
        call_mod.build(tuple(head) + (None,) * 10, {})
    with pytest.raises(TypeError, match="missing"):
        call_mod.build(tuple(head[:12]), {})
    with pytest.raises(ValueError, match="scalar"):
        call_mod.build(tuple(head[:7]) + (torch.tensor([2, 2]),) + tuple(head[8:]), {})
    assert call_mod.build(tuple(head) + (None,) + _TAIL_VALUES, {}).num_partitions == 1
    assert call_mod.build(tuple(head[:12]) + (513,), {}).num_partitions == 2


# --------------------------------------------------------------------------- launch tables


def test_pick_config_k3d_tables():
    lt = launch_tables
    for d_pad, config in lt.K3D_CONFIGS.items():  # 32-row programs below K3D_MANY_PROGRAMS
        assert lt.pick_config(1, d_pad, 32) == config
        assert lt.pick_config(lt.K3D_MANY_PROGRAMS - 1, d_pad, 32) == config
        assert config.k3d
    assert lt.pick_config(1, 256) == lt.K3D_CONFIGS[256]
    # Many programs: one config at head <= 128; head 256 keeps its own.
    for d_pad in (32, 64, 128):
        assert lt.pick_config(lt.K3D_MANY_PROGRAMS, d_pad) == lt.K3D_MANY_PROGRAMS_CONFIG
    assert lt.pick_config(lt.K3D_MANY_PROGRAMS, 256) == lt.K3D_CONFIGS[256]
    # 64 rows per program (wide groups), head <= 128: the four-warp configs, both tiers.
    assert lt.pick_config(1, 128, lt.WIDE_GROUP_ROWS) == lt.K3D_WIDE_GROUP_CONFIG
    assert lt.pick_config(lt.K3D_MANY_PROGRAMS - 1, 64, 64) == lt.K3D_WIDE_GROUP_CONFIG
    assert lt.pick_config(lt.K3D_MANY_PROGRAMS, 128, 64) == lt.K3D_WIDE_GROUP_MANY_CONFIG
    assert lt.pick_config(1, 256, 64) == lt.K3D_CONFIGS[256]
    assert lt.pick_config(1, 512) == lt.FALLBACK_CONFIG._replace(k3d=True)


def test_pick_config_2d_tables():
    lt = launch_tables

    def pick(programs, d_pad, g_pad=16):
        return lt.pick_config(programs, d_pad, g_pad, k3d=False)

    for d_pad, config in lt.DEFAULT_CONFIGS.items():
        assert pick(lt.MANY_PROGRAMS - 1, d_pad) == config
        assert not config.k3d
    for d_pad in (32, 64, 128):
        assert pick(lt.MANY_PROGRAMS, d_pad) == lt.MID_PROGRAMS_CONFIG
        assert pick(lt.MID_PROGRAMS_LIMIT - 1, d_pad) == lt.MID_PROGRAMS_CONFIG
        assert pick(lt.MID_PROGRAMS_LIMIT, d_pad) == lt.MANY_PROGRAMS_CONFIG
    assert pick(1568, 128) == lt.MID_PROGRAMS_CONFIG  # one 100K sequence, 8 kv heads
    assert pick(10**6, 256) == lt.DEFAULT_CONFIGS[256]
    assert pick(1, 128, 64) == lt.WIDE_GROUP_CONFIG
    assert pick(lt.MANY_PROGRAMS - 1, 128, 64) == lt.WIDE_GROUP_CONFIG
    assert pick(lt.MANY_PROGRAMS, 128, 64) == lt.WIDE_GROUP_MANY_CONFIG
    assert pick(lt.MID_PROGRAMS_LIMIT, 64, 64) == lt.WIDE_GROUP_MANY_CONFIG
    assert pick(1, 256, 64) == lt.DEFAULT_CONFIGS[256]
    assert pick(1, 512) == lt.FALLBACK_CONFIG


def test_config_override():
    lt = launch_tables
    forced = lt.LaunchConfig(16, 1, 1, False, 2, True)
    try:
        lt.set_config_override(forced)
        assert lt.config_override() == forced
        assert lt.pick_config(1, 128) == forced
        assert lt.pick_config(10**6, 64, 64, k3d=False) == forced
        lt.set_config_override((32, 4, 2))  # leading fields, defaults for the rest
        assert lt.config_override() == lt.LaunchConfig(32, 4, 2, True, 0, False)
    finally:
        lt.set_config_override(None)
    assert lt.config_override() is None
    assert lt.pick_config(1, 128, 32) == lt.K3D_CONFIGS[128]


def _all_table_configs():
    lt = launch_tables
    configs = list(lt.K3D_CONFIGS.values()) + list(lt.DEFAULT_CONFIGS.values())
    configs += [lt.K3D_MANY_PROGRAMS_CONFIG, lt.K3D_WIDE_GROUP_CONFIG]
    configs += [lt.K3D_WIDE_GROUP_MANY_CONFIG, lt.FALLBACK_CONFIG, lt.MANY_PROGRAMS_CONFIG]
    configs += [lt.MID_PROGRAMS_CONFIG, lt.WIDE_GROUP_CONFIG, lt.WIDE_GROUP_MANY_CONFIG]
    return configs


def test_launch_table_entries_are_launchable():
    """Powers of two where Triton needs them; k3d only in the k3d tables; five fields plus
    k3d, chunk and slots (the old split field is gone), as the tuning file reads them; the
    tables leave the chunk to the rule and the residency to balanced_slots."""
    lt = launch_tables
    fields = ("tile", "warps", "stages", "early_v", "prefetch", "k3d", "chunk", "slots")
    assert lt.LaunchConfig._fields == fields == tuning_table.CONFIG_FIELDS
    for config in _all_table_configs():
        assert config.chunk == 0 and config.slots == 0, config
        assert config.tile >= 16 and config.tile & (config.tile - 1) == 0, config
        assert config.tile <= PARTITION_SIZE and PARTITION_SIZE % config.tile == 0, config
        assert config.warps in (1, 2, 4, 8), config
        assert config.stages >= 1 and config.prefetch in (0, 1, 2), config
    k3d = list(lt.K3D_CONFIGS.values()) + [lt.K3D_MANY_PROGRAMS_CONFIG]
    k3d += [lt.K3D_WIDE_GROUP_CONFIG, lt.K3D_WIDE_GROUP_MANY_CONFIG]
    assert all(c.k3d for c in k3d)
    assert not any(c.k3d for c in _all_table_configs() if c not in k3d)
    assert set(lt.DEFAULT_CONFIGS) == set(lt.K3D_CONFIGS) == {32, 64, 128, 256}
    assert lt.MANY_PROGRAMS < lt.MID_PROGRAMS_LIMIT


@pytest.mark.parametrize(
    "at_max,sms,expected",
    [
        (1568, 132, 256),  # one 100K sequence, 8 kv heads, H200: 2.97 waves, not 1.48
        (784, 132, 512),  # 4 kv heads: 512-token chunks fit one wave (0.74)
        (512, 132, 256),  # one 32K sequence: 0.97 waves at 256, 1.94 at 128
        (16, 132, 128),  # short: the smallest chunk still fits one wave
        (4096, 132, 512),  # 3.88 waves either way: the larger chunk
        (8192, 132, 512),
        (10, 0, 512),  # no SM count (the interpreter): vLLM's partitions
    ],
)
def test_chunk_rule_fills_the_last_wave(at_max, sms, expected):
    lt = launch_tables
    many = lt.K3D_MANY_PROGRAMS_CONFIG
    assert lt.pick_chunk(at_max, sms, many, 16, 128) == expected
    # Other configs, wider groups, head 256: vLLM's partitions; a config's own chunk wins.
    assert lt.pick_chunk(at_max, sms, lt.K3D_CONFIGS[128], 16, 128) == 512
    assert lt.pick_chunk(at_max, sms, many, 32, 128) == 512
    assert lt.pick_chunk(at_max, sms, many, 16, 256) == 512
    assert lt.pick_chunk(at_max, sms, many._replace(chunk=64), 16, 128) == 64


def test_k3d_small_groups_take_the_one_warp_config_at_every_program_count():
    lt = launch_tables
    for programs in (1, 512, 1568, lt.K3D_MANY_PROGRAMS, 10**6):
        assert lt.pick_config(programs, 128, 16, True) == lt.K3D_MANY_PROGRAMS_CONFIG
        assert lt.pick_config(programs, 64, 16, True) == lt.K3D_MANY_PROGRAMS_CONFIG
    assert lt.pick_config(1568, 128, 32, True) == lt.K3D_CONFIGS[128]  # 32 rows: spills
    assert lt.pick_config(1568, 256, 16, True) == lt.K3D_CONFIGS[256]


def test_launch_tables_import_neither_torch_nor_triton():
    """The tune command and the compile check read the tables without a GPU stack."""
    code = (
        "import sys; import vllm_codemod.kernels.launch_tables as t; "
        "assert t.pick_config(1, 128); "
        "bad = [m for m in ('torch', 'triton') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- Triton launcher
# Pure host logic of decode_launch (no kernel runs): needs Triton importable, not a GPU.


@pytest.fixture
def tf(monkeypatch):
    decode_launch = pytest.importorskip("vllm_codemod.kernels.decode_launch")
    monkeypatch.setattr(decode_launch, "_plans", {})
    monkeypatch.setattr(decode_launch, "_k3d_state", {"disabled": False})
    monkeypatch.setattr(decode_launch, "_fast", {"enabled": True})
    monkeypatch.setattr(decode_launch, "HAS_PERMUTE", True)
    # The two-launch plan with the (sequence, chunk) grid; the fused and compact plans
    # have their own tests below.
    monkeypatch.setattr(decode_launch, "FUSE_MAX_CHUNKS", 0)
    monkeypatch.setattr(decode_launch, "FUSE_MAX_PARTITIONS", 0)
    monkeypatch.setattr(decode_launch, "COMPACT_MAX_SEQS", 0)
    launch_tables.set_config_override(None)
    return decode_launch


def _decode_call(lens=(700, 3), heads=8, kv_heads=2, head_size=128, dtype=None, alibi=False):
    a = make_inputs(list(lens), heads, kv_heads, head_size, 16, dtype or torch.bfloat16)
    if alibi:
        a["alibi_slopes"] = torch.rand(heads)
    return call_mod.build((), a)


def test_group_rows():
    tf_mod = pytest.importorskip("vllm_codemod.kernels.decode_launch")
    assert [tf_mod.group_rows(q) for q in (1, 2, 7, 16, 17, 32, 48, 64, 71, 128)] == [
        16, 16, 16, 16, 32, 32, 64, 64, 64, 64,
    ]  # fmt: skip


def test_plan_key_flags_each_pointers_alignment(tf):
    """A plan relaunches its compiled kernels without Triton's specialization, so moving
    any one pointer off 16-byte alignment must make another plan, and two different
    pointers moved must not share one (the old key ORed every pointer: q moved and the
    cache moved gave the same key)."""
    c = _decode_call(lens=(700, 3, 40, 9))
    base = tf._plan_key(c, None, True)
    keys = {}
    for name in ("query", "key_cache", "out", "tmp_out", "block_tables", "seq_lens"):
        moved = dataclasses.replace(c, **{name: shifted(getattr(c, name))})
        assert getattr(moved, name).data_ptr() & 15, name
        assert getattr(moved, name).stride() == getattr(c, name).stride(), name
        keys[name] = tf._plan_key(moved, None, True)
        assert keys[name] != base, f"{name} moved off alignment, same plan"
    assert len(set(keys.values())) == len(keys), "two pointers moved share a plan"
    with_alibi = _decode_call(lens=(700, 3, 40, 9), alibi=True)
    moved = dataclasses.replace(with_alibi, alibi_slopes=shifted(with_alibi.alibi_slopes))
    assert tf._plan_key(moved, None, True) != tf._plan_key(with_alibi, None, True)
    wide = dataclasses.replace(c, block_tables=c.block_tables.long())
    assert tf._plan_key(wide, None, True) != base, "int64 block tables, same plan"
    assert tf.misaligned(None, c.query) == (0, 0)


def test_run_picks_the_table_config(tf, monkeypatch):
    """run() hands _launch the tables' config for the call's program count; the retry
    wrapper passes k3d only where Triton has tl.permute."""
    seen = []
    real_launch = tf._launch

    def recording_launch(c, config, k3d):
        if config is None:  # what _launch itself would pick
            num_seqs, num_heads, head_size = c.query.shape
            g_pad = tf.group_rows(num_heads // c.num_kv_heads)
            n_gc = -(-(num_heads // c.num_kv_heads) // g_pad)
            programs = num_seqs * c.num_kv_heads * n_gc * c.num_partitions
            d_pad = max(16, 1 << (head_size - 1).bit_length())
            config = launch_tables.pick_config(programs, d_pad, g_pad, k3d)
        seen.append((config, k3d))

    assert real_launch is not None
    monkeypatch.setattr(tf, "_launch", recording_launch)
    lt = launch_tables
    tf.run(_decode_call())  # 2 seqs x 2 kv heads x 2 partitions
    tf.run(_decode_call(heads=64, kv_heads=1))  # 64 rows: the wide-group config
    tf.run(_decode_call(heads=4, kv_heads=2, head_size=256))
    tf.run(_decode_call(head_size=80))  # padded to 128
    explicit = lt.LaunchConfig(16, 2, 1, k3d=False)
    tf.run(_decode_call(), explicit)
    assert seen == [
        (lt.K3D_MANY_PROGRAMS_CONFIG, True),  # 16 rows, head <= 128: the one-warp config
        (lt.K3D_WIDE_GROUP_CONFIG, True),
        (lt.K3D_CONFIGS[256], True),
        (lt.K3D_MANY_PROGRAMS_CONFIG, True),
        (explicit, True),
    ]
    lt.set_config_override((32, 1, 1))
    try:
        tf.run(_decode_call())
        assert seen[-1] == (lt.LaunchConfig(32, 1, 1), True)  # the override, passed down
    finally:
        lt.set_config_override(None)
    monkeypatch.setattr(tf, "HAS_PERMUTE", False)  # Triton 2.x: never the k3d load
    tf.run(_decode_call())
    assert seen[-1] == (lt.DEFAULT_CONFIGS[128], False)


def test_k3d_failure_retries_with_2d_load(tf, monkeypatch, caplog):
    """A Triton that has tl.permute but cannot compile the k3d kernel: one log record, the
    same call completes with the 2-D load, and later calls go straight to it."""
    launches = []

    def fake_launch(c, config, k3d):
        launches.append(k3d)
        if k3d:
            raise RuntimeError("fake k3d compile error")

    monkeypatch.setattr(tf, "_launch", fake_launch)
    caplog.set_level(logging.INFO, logger=kernel_log.name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tf.run(_decode_call())
    assert launches == [True, False]
    assert not tf.k3d_enabled()
    tf.run(_decode_call())
    assert launches == [True, False, False]
    records = _kernel_log(caplog)
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert "k3d Triton kernel failed" in records[0].getMessage()
    assert "fake k3d compile error" in records[0].getMessage()


def test_k3d_stays_on_when_both_loads_fail(tf, monkeypatch):
    """A failure that is not k3d's (the 2-D retry fails too) is raised for the dispatcher
    to handle, and k3d is not switched off for other calls."""
    launches = []

    def fake_launch(c, config, k3d):
        launches.append(k3d)
        raise RuntimeError("fake compile error")

    monkeypatch.setattr(tf, "_launch", fake_launch)
    with pytest.raises(RuntimeError, match="fake compile error"):
        tf.run(_decode_call())
    assert launches == [True, False]
    assert tf.k3d_enabled()


def test_unsupported_layout_is_not_retried(tf, monkeypatch):
    launches = []

    def fake_launch(c, config, k3d):
        launches.append(k3d)
        raise tf.UnsupportedLayout("strided")

    monkeypatch.setattr(tf, "_launch", fake_launch)
    with pytest.raises(tf.UnsupportedLayout):
        tf.run(_decode_call())
    assert launches == [True]
    assert tf.k3d_enabled()


def test_strided_query_is_an_unsupported_layout(tf):
    c = _decode_call()
    wide = torch.zeros(c.query.shape[0], c.query.shape[1], 2 * c.query.shape[2])
    c = dataclasses.replace(c, query=wide.to(c.query.dtype)[:, :, ::2])
    assert c.query.stride(2) == 2
    with pytest.raises(tf.UnsupportedLayout, match="dense"):
        tf._launch(c, launch_tables.K3D_CONFIGS[128], True)
    assert tf._plans == {}


@pytest.mark.parametrize("which", ["partition", "reduce"])
def test_plan_arguments_follow_the_kernel_signature(tf, which):
    """The fast path passes runtime arguments, then the constexpr values, positionally: the
    constexprs must be in the kernel's order and the runtime arguments fill the rest."""
    plan = tf._Plan(_decode_call(alibi=True), launch_tables.K3D_CONFIGS[128], True)
    kernel = getattr(plan, which)
    params = kernel.fn.params
    assert list(kernel.constexprs) == [p.name for p in params if p.is_constexpr]
    assert kernel.const_values == tuple(kernel.constexprs.values())
    runtime = [p.name for p in params if not p.is_constexpr]
    if which == "partition":
        head = ["exp_sums_ptr", "max_logits_ptr", "tmp_out_ptr", "out_ptr", "counters_ptr"]
        head += ["q_ptr", "k_cache_ptr", "v_cache_ptr", "block_tables_ptr", "seq_lens_ptr"]
        head += ["alibi_ptr", "scale"]
        strides = plan.part_strides
    else:
        head = ["out_ptr", "exp_sums_ptr", "max_logits_ptr", "tmp_out_ptr", "seq_lens_ptr"]
        strides = plan.reduce_strides
    assert runtime[: len(head)] == head
    assert len(runtime) == len(head) + len(strides)
    assert all(p.is_constexpr for p in params[len(runtime) :])  # constexprs last


@pytest.mark.parametrize(
    "heads, kv_heads, g_pad, n_gc",
    [(8, 2, 16, 1), (28, 4, 16, 1), (32, 1, 32, 1), (64, 1, 64, 1), (71, 1, 64, 2),
     (128, 2, 64, 1), (4, 4, 16, 1)],
)  # fmt: skip
def test_plan_group_chunks_and_grids(tf, heads, kv_heads, g_pad, n_gc):
    c = _decode_call(lens=(100, 3, 1100), heads=heads, kv_heads=kv_heads, head_size=80)
    plan = tf._Plan(c, launch_tables.LaunchConfig(32, 2, 1, True, 1, True), True)
    part = plan.partition.constexprs
    assert (part["G_PAD"], part["QUERIES_PER_KV"], plan.n_gc) == (g_pad, heads // kv_heads, n_gc)
    assert plan.partition.grid == (3 * kv_heads * n_gc, 3, 1)  # 1100 tokens: 3 partitions
    assert (part["HEAD_SIZE"], part["D_PAD"], part["X"], part["BLOCK_SIZE"]) == (80, 128, 8, 16)
    assert (part["TILE"], part["PREFETCH"], part["EARLY_V"], part["K_3D"]) == (32, 1, True, True)
    assert plan.partition.options == {"num_warps": 2, "num_stages": 1}
    assert plan.reduce.grid == (3 * heads, 1, 1)  # a batch: (sequence, head), whole head
    assert plan.part_strides[:3] == (3, kv_heads, n_gc)


def test_plan_constants(tf, monkeypatch):
    lt = launch_tables
    fp32 = tf._Plan(_decode_call(dtype=torch.float32), lt.LaunchConfig(128, 4, 1), True)
    assert fp32.partition.constexprs["TILE"] == 64  # the 3-pass fp32 product caps the tile
    assert fp32.partition.constexprs["F32_SPLIT"] is True
    bf16 = tf._Plan(_decode_call(alibi=True), lt.LaunchConfig(128, 4, 1, False, 2), True)
    part = bf16.partition.constexprs
    assert (part["TILE"], part["F32_SPLIT"], part["USE_ALIBI"]) == (128, False, True)
    assert part["K_3D"] is False  # the config says 2-D, whatever the Triton
    assert part["CONTIG_HINTS"] is True  # vLLM's dense cache layout
    no_k3d = tf._Plan(_decode_call(), lt.K3D_CONFIGS[128], False)
    assert no_k3d.partition.constexprs["K_3D"] is False  # Triton without tl.permute
    red = bf16.reduce.constexprs
    assert red["SINGLE_PASS"] is True and red["P_MAX"] == 2 and red["D_BLK"] == 128
    one = tf._Plan(_decode_call(lens=(700,)), lt.K3D_CONFIGS[128], True).reduce.constexprs
    assert one["SINGLE_PASS"] is True and one["P_MAX"] == 16 and one["D_BLK"] == 32
    monkeypatch.setattr(tf, "REDUCE_SINGLE_PASS_MAX", 1)
    chunked = tf._Plan(_decode_call(), lt.K3D_CONFIGS[128], True)
    assert chunked.reduce.constexprs["SINGLE_PASS"] is False  # 2 partitions > 1


def test_reduce_tile(tf):
    # One sequence: four-warp slices of the head, every partition in one load up to 512.
    assert tf.reduce_tile(1, 132, 128) == (256, 32, True, 4)
    assert tf.reduce_tile(1, 300, 128) == (512, 16, True, 4)
    assert tf.reduce_tile(1, 600, 128) == (256, 16, False, 4)
    # A batch: one-warp (sequence, head) programs over the whole head, <= 32 partials per
    # load.
    assert tf.reduce_tile(64, 8, 128) == (8, 128, True, 1)  # 64 x 4K, vLLM's partitions
    assert tf.reduce_tile(16, 256, 128) == (32, 128, False, 1)  # the ragged batch, balanced
    assert tf.reduce_tile(8, 32, 256) == (32, 128, True, 1)  # head 256: two slices
    assert tf.reduce_tile(3, 1, 64) == (2, 64, True, 1)


def _fake_kernels(tf, monkeypatch, fail=False):
    fakes = {}
    for name in ("partition_kernel", "reduce_kernel"):
        fakes[name] = FakeJit(getattr(tf.decode_kernels, name), FakeCompiled(fail))
        monkeypatch.setattr(tf.decode_kernels, name, fakes[name])
    return fakes["partition_kernel"], fakes["reduce_kernel"]


def test_launch_plain_then_compiled_fast_path(tf, monkeypatch):
    part, red = _fake_kernels(tf, monkeypatch)
    config = launch_tables.LaunchConfig(64, 4, 1, True, 0, True)
    c = _decode_call(lens=(700, 3))
    tf._launch(c, config, True)
    ((grid, args, kwargs),) = part.launches
    assert grid == (2 * 2, 2, 1)  # 2 seqs x 2 kv heads, 2 partitions of 512
    assert kwargs["num_warps"] == 4 and kwargs["num_stages"] == 1
    assert kwargs["K_3D"] is True and kwargs["TILE"] == 64
    assert args[:6] == (c.exp_sums, c.max_logits, c.tmp_out, c.out, c.out, c.query)
    assert args[4] is c.out  # not fused: a placeholder for the counters
    assert args[9] is c.seq_lens and args[10] is c.seq_lens  # no ALiBi: a placeholder
    ((rgrid, rargs, rkwargs),) = red.launches
    assert rgrid == (2 * 8, 1, 1) and rargs[0] is c.out and rkwargs["num_warps"] == 1
    tf._launch(c, config, True)  # same plan: the compiled handles, positional constexprs
    assert len(part.launches) == 1 and len(red.launches) == 1
    plan = next(iter(tf._plans.values()))
    ((grid2, args2),) = part.compiled.launches
    assert grid2 == grid and args2 == args + plan.partition.const_values
    ((rgrid2, rargs2),) = red.compiled.launches
    assert rgrid2 == rgrid and rargs2 == rargs + plan.reduce.const_values
    assert len(tf._plans) == 1
    other = _decode_call(lens=(3,))  # another shape: another plan, a plain launch first
    tf._launch(other, config, True)
    assert len(tf._plans) == 2 and len(part.launches) == 2
    assert part.launches[-1][0] == (2, 1, 1)


def test_plan_key_separates_what_triton_specializes_on(tf):
    c = _decode_call()
    config = launch_tables.K3D_CONFIGS[128]
    key = tf._plan_key(c, config, True)
    assert tf._plan_key(_decode_call(), config, True) == key  # same shapes, other tensors
    assert tf._plan_key(c, config, False) != key
    assert tf._plan_key(c, config._replace(tile=32), True) != key
    assert tf._plan_key(_decode_call(alibi=True), config, True) != key
    other_lens = dataclasses.replace(c, seq_lens=torch.tensor([600, 900], dtype=torch.int32))
    assert tf._plan_key(other_lens, config, True) == key  # lengths are runtime values
    assert tf._plan_key(dataclasses.replace(c, max_seq_len=1100), config, True) != key
    misaligned = dataclasses.replace(c, query=torch.empty(c.query.numel() + 1).to(c.query.dtype))
    misaligned.query = misaligned.query[1:].view(c.query.shape)
    assert misaligned.query.data_ptr() % 16 != 0
    assert tf._plan_key(misaligned, config, True) != key


def test_launch_fast_path_failure_falls_back_to_plain_launches(tf, monkeypatch, caplog):
    part, red = _fake_kernels(tf, monkeypatch, fail=True)
    caplog.set_level(logging.INFO, logger=kernel_log.name)
    c = _decode_call()
    config = launch_tables.K3D_CONFIGS[128]
    tf._launch(c, config, True)
    tf._launch(c, config, True)  # the launcher raises: plain launch, fast path off
    assert len(part.launches) == 2 and tf._fast["enabled"] is False
    tf._launch(c, config, True)
    assert len(part.launches) == 3 and len(red.launches) == 3
    assert len(_kernel_log(caplog)) == 1


def test_launch_with_fast_path_off_always_launches_plainly(tf, monkeypatch):
    part, red = _fake_kernels(tf, monkeypatch)
    monkeypatch.setitem(tf._fast, "enabled", False)
    c = _decode_call()
    for _ in range(3):
        tf._launch(c, launch_tables.DEFAULT_CONFIGS[128], False)
    assert len(part.launches) == 3 and part.compiled.launches == []
    assert len(red.launches) == 3 and red.compiled.launches == []


def test_plan_cache_is_bounded(tf, monkeypatch):
    _fake_kernels(tf, monkeypatch)
    monkeypatch.setattr(tf, "_MAX_PLANS", 2)
    config = launch_tables.K3D_CONFIGS[128]
    for lens in ((700,), (700, 3), (700, 3, 5)):
        tf._launch(_decode_call(lens=lens), config, True)
    assert len(tf._plans) == 1  # cleared when full, then the new plan


def test_fused_plan_is_one_launch_with_zeroed_counters(tf, monkeypatch):
    """Up to FUSE_MAX_PARTITIONS partitions per sequence the partition kernel merges (one
    launch): it gets the counters buffer (zeros at rest) and no reduce kernel is planned."""
    part, red = _fake_kernels(tf, monkeypatch)
    monkeypatch.setattr(tf, "FUSE_MAX_PARTITIONS", 4)
    monkeypatch.setattr(tf, "_scratch", tf.Scratch())
    c = _decode_call(lens=(700, 3))
    tf._launch(c, launch_tables.K3D_CONFIGS[128], True)
    (plan,) = tf._plans.values()
    assert plan.reduce is None and red.launches == []
    ((grid, args, kwargs),) = part.launches
    assert kwargs["FUSED"] is True and kwargs["P_FUSE"] == 2  # 2 partitions of 512
    counters = args[4]
    assert counters is plan.counters and counters.dtype == torch.int32
    assert counters.numel() >= 2 * 2 and not counters.any()
    monkeypatch.setattr(tf, "FUSE_MAX_PARTITIONS", 1)
    tf._plans.clear()
    tf._launch(c, launch_tables.K3D_CONFIGS[128], True)
    assert part.launches[-1][2]["FUSED"] is False and len(red.launches) == 1


def test_compact_plan_grid_covers_every_possible_chunk(tf, monkeypatch):
    """A ragged batch's compact grid: one program per (chunk, kv head) pair that may exist
    (an upper bound: sequences x chunks of the longest); one sequence keeps the 2-D grid."""
    part, _ = _fake_kernels(tf, monkeypatch)
    monkeypatch.setattr(tf, "COMPACT_MAX_SEQS", 256)
    c = _decode_call(lens=(700, 3, 1100))
    tf._launch(c, launch_tables.K3D_CONFIGS[128], True)
    grid, args, kwargs = part.launches[-1]
    assert kwargs["COMPACT"] is True and kwargs["NS_PAD"] == 4
    assert grid == (2 * 3 * 3, 1, 1)  # 2 kv heads x (3 sequences x 3 chunks)
    one = _decode_call(lens=(700,))
    tf._launch(one, launch_tables.K3D_CONFIGS[128], True)
    assert part.launches[-1][2]["COMPACT"] is False


@pytest.mark.parametrize("chunk", [16, 64, 256])
def test_small_chunks_use_our_scratch_not_vllms_buffers(tf, monkeypatch, chunk):
    part, red = _fake_kernels(tf, monkeypatch)
    c = _decode_call(lens=(700, 3))
    config = launch_tables.LaunchConfig(16, 1, 1, True, 0, True, chunk)
    tf._launch(c, config, True)
    (_, args, kwargs), (_, rargs, rkwargs) = part.launches[-1], red.launches[-1]
    n_chunks = -(-700 // chunk)
    assert kwargs["PART"] == rkwargs["PART"] == chunk
    es, ml, tmp = args[:3]
    assert all(t is not b for t, b in zip((es, ml, tmp), (c.exp_sums, c.max_logits, c.tmp_out)))
    assert tmp.shape == (2, 8, n_chunks, 128) and es.shape == ml.shape == (2, 8, n_chunks)
    assert rargs[1:4] == (es, ml, tmp)
    assert tf._plan_key(c, config, True) != tf._plan_key(
        dataclasses.replace(c, max_seq_len=700 + chunk), config, True
    )  # another chunk count: another grid


def test_balanced_budget_rule(monkeypatch):
    """Full items per (kv head, group chunk): one wave of the config's programs for one
    sequence, one wave of stream ranges for a batch of up to STREAM_MAX_SEQS (items: two
    waves for up to BALANCED_MAX_SEQS); 0 (the chunk rule) where the config's residency
    was not measured, a chunk is explicit or the SM count unknown."""
    lt = launch_tables
    many = lt.K3D_MANY_PROGRAMS_CONFIG
    assert lt.balanced_budget(many, 16, 128, 132, 8, 1) == 132
    assert lt.balanced_budget(many, 16, 128, 132, 4, 1) == 264
    assert lt.balanced_budget(many, 16, 128, 132, 8, 16) == 132
    assert lt.balanced_budget(many, 16, 128, 132, 8, lt.STREAM_MAX_SEQS) == 132
    assert lt.balanced_budget(many, 16, 128, 132, 8, lt.STREAM_MAX_SEQS + 1) == 0
    with monkeypatch.context() as m:
        m.setattr(lt, "BALANCED_STREAM", False)
        assert lt.balanced_budget(many, 16, 128, 132, 8, 16) == 264
        assert lt.balanced_budget(many, 16, 128, 132, 8, lt.BALANCED_MAX_SEQS + 1) == 0
    assert lt.balanced_budget(many._replace(chunk=256), 16, 128, 132, 8, 1) == 0
    assert lt.balanced_budget(many, 16, 128, 0, 8, 1) == 0
    assert lt.balanced_budget(lt.K3D_CONFIGS[128], 16, 128, 132, 8, 1) == 0
    assert lt.balanced_budget(many, 32, 128, 132, 8, 1) == 0
    assert lt.balanced_budget(many, 16, 256, 132, 8, 1) == 0
    assert lt.balanced_budget(many, 16, 128, 2, 64, 1) == 1  # never below one item
    # A config's own slots (a tuning file's, measured on the target device) set the wave,
    # also for a config the H200 never balanced (Triton 2.x's tables) or a wider group.
    assert lt.balanced_budget(many._replace(slots=6), 16, 128, 132, 8, 1) == 99
    assert lt.balanced_budget(lt.MID_PROGRAMS_CONFIG, 16, 128, 132, 8, 1) == 0
    assert lt.balanced_budget(lt.MID_PROGRAMS_CONFIG._replace(slots=12), 16, 128, 132, 8, 1) == 198
    assert lt.balanced_budget(many._replace(slots=4), 32, 128, 132, 8, 16) == 66
    assert lt.balanced_budget(many._replace(slots=4, chunk=256), 16, 128, 132, 8, 1) == 0
    monkeypatch.setattr(lt, "BALANCED_FORCE_SLOTS", 3)
    assert lt.balanced_budget(lt.K3D_CONFIGS[256], 16, 256, 132, 2, 1) == 198
    assert lt.balanced_budget(many._replace(slots=6), 16, 128, 132, 8, 1) == 49
    monkeypatch.setattr(lt, "BALANCED_WAVES", 0)
    assert lt.balanced_budget(many, 16, 128, 132, 8, 1) == 0
    assert lt.balanced_budget(many, 16, 128, 132, 8, 16) == 0


@pytest.mark.parametrize(
    "lens,stream", [((700, 3, 1100), True), ((700, 3, 1100), False), ((5000,), True)]
)
def test_balanced_plan_grid_and_item_buffers(tf, monkeypatch, lens, stream):
    """A balanced plan: budget + sequences items per kv head in the grid (a batch's
    stream: budget ranges); partials in our buffer, one slot per item shared by every
    sequence (stride 0), which the reduce kernel reads with the same budget; one sequence
    needs no lengths' vector."""
    part, red = _fake_kernels(tf, monkeypatch)
    monkeypatch.setattr(tf, "COMPACT_MAX_SEQS", 256)
    monkeypatch.setattr(tf, "sm_count", lambda device: 4)
    monkeypatch.setattr(launch_tables, "BALANCED_STREAM", stream)
    c = _decode_call(lens=lens)
    tf._launch(c, launch_tables.K3D_MANY_PROGRAMS_CONFIG, True)
    (plan,) = tf._plans.values()
    n = len(lens)
    budget = 8 * 4 * (1 if n == 1 or stream else 2) // 2
    assert plan.budget == budget
    grid, args, kwargs = part.launches[-1]
    assert grid == (2 * (budget + (0 if stream and n > 1 else n)), 1, 1)
    assert kwargs["BALANCED"] is True and kwargs["COMPACT"] is False
    assert kwargs["STREAM"] is (stream and n > 1)
    assert kwargs["NS_PAD"] == (1 if n == 1 else 4)
    assert kwargs["PART"] == launch_tables.BALANCED_MIN_CHUNK and kwargs["ALIGN"] == 32
    es, ml, tmp = args[:3]
    assert tmp.shape == (n, 8, budget + n, 128) and es.shape == ml.shape == (n, 8, budget + n)
    assert n == 1 or tmp.stride()[0] == es.stride()[0] == ml.stride()[0] == 0
    assert all(t is not b for t, b in zip((es, ml, tmp), (c.exp_sums, c.max_logits, c.tmp_out)))
    _, rargs, rkwargs = red.launches[-1]
    assert rargs[1:4] == (es, ml, tmp) and rargs[5:7] == (n, budget)
    assert rkwargs["BALANCED"] is True and rkwargs["NS_PAD"] == kwargs["NS_PAD"]


def test_a_configs_slots_balance_its_plan(tf, monkeypatch):
    """A tuning file's config with ``slots`` (here Triton 2.x's 2-D one-warp config,
    which the H200 never balanced) gets a balanced plan of slots x SMs programs, and
    another slots count is another plan."""
    part, _ = _fake_kernels(tf, monkeypatch)
    monkeypatch.setattr(tf, "COMPACT_MAX_SEQS", 256)
    monkeypatch.setattr(tf, "sm_count", lambda device: 4)
    c = _decode_call(lens=(5000,))
    config = launch_tables.MID_PROGRAMS_CONFIG
    tf._launch(c, config, False)
    assert next(iter(tf._plans.values())).budget == 0
    tf._plans.clear()
    tf._launch(c, config._replace(slots=6), False)
    (plan,) = tf._plans.values()
    assert plan.budget == 6 * 4 // 2 and plan.config.slots == 6
    grid, _, kwargs = part.launches[-1]
    assert grid == (2 * (12 + 1), 1, 1) and kwargs["BALANCED"] is True
    tf._launch(c, config._replace(slots=3), False)
    assert len(tf._plans) == 2


def test_balanced_config_and_slots_at_head_256():
    """Head 256: one sequence of a 16-row group takes the two-warp config, which balances
    at 4 programs per SM; batches, wider groups and other heads keep the table's config."""
    lt = launch_tables
    table = lt.K3D_CONFIGS[256]
    two = lt.K3D_BALANCED_HEAD256_CONFIG
    assert lt.balanced_config(table, 16, 256, 1) == two
    assert lt.balanced_config(table, 16, 256, 2) == table
    assert lt.balanced_config(table, 32, 256, 1) == table
    assert lt.balanced_config(lt.K3D_CONFIGS[128], 16, 128, 1) == lt.K3D_CONFIGS[128]
    assert lt.balanced_slots(two, 16, 256) == 4 and lt.balanced_slots(table, 16, 256) == 0
    assert lt.balanced_slots(two, 32, 256) == 0
    assert lt.balanced_budget(two, 16, 256, 132, 2, 1) == 264
    lt.set_config_override(table)
    try:
        assert lt.balanced_config(table, 16, 256, 1) == table  # a forced config stays
    finally:
        lt.set_config_override(None)


@pytest.mark.parametrize("fusable", [False, True])
def test_head_256_takes_the_two_warp_config_only_when_it_balances(tf, monkeypatch, fusable):
    """One head-256 sequence: the two-warp config with balanced items; a short eager call
    that fuses (no balancing) keeps the tables' config, which is faster unbalanced."""
    monkeypatch.setattr(tf, "sm_count", lambda device: 4)
    monkeypatch.setattr(tf, "COMPACT_MAX_SEQS", 256)
    c = _decode_call(lens=(700,), heads=16, kv_heads=2, head_size=256)
    plan = tf._Plan(c, None, True, fusable)
    lt = launch_tables
    assert plan.config == (lt.K3D_CONFIGS[256] if fusable else lt.K3D_BALANCED_HEAD256_CONFIG)
    assert bool(plan.budget) is not fusable
    monkeypatch.setattr(lt, "BALANCED_WAVES", 0)  # balancing off: the tables' config
    assert tf._Plan(c, None, True, False).config == lt.K3D_CONFIGS[256]

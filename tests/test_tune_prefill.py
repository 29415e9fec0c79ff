"""Prefix-prefill tuning: the float64 reference, the one NUM_WARPS chosen, skip reasons."""

from __future__ import annotations

import functools
import os
import types

import pytest

torch = pytest.importorskip("torch")

from vllm_codemod.kernels.reference import reference_paged_attention  # noqa: E402
from vllm_codemod.tuning import prefill  # noqa: E402
from vllm_codemod.tuning.progress import Budget, Progress  # noqa: E402
from vllm_codemod.tuning.shapes import Deployment, Shape  # noqa: E402
from vllm_codemod.tuning.tree_imports import TreeImportError  # noqa: E402


@pytest.mark.parametrize("alibi", [False, True])
def test_reference_with_one_new_token_is_decode_attention(alibi):
    # A prefill of one new token over a cached prefix is a decode step: the independent
    # decode reference must agree (causal mask, ALiBi sign, block-table gather).
    shape = Shape(8, 2, 64, "float32", alibi)
    a = prefill._inputs(shape, [(3, 40, 1)], "cpu", seed=3)
    out = prefill.reference_prefill(a)
    bs, x = prefill.BLOCK_SIZE, a["k_cache"].shape[4]
    nb = a["k_cache"].shape[0]
    key_cache, value_cache = a["k_cache"].clone(), a["v_cache"].clone()
    tables = torch.zeros(3, 4, dtype=torch.int32)
    spare = nb  # append one block per sequence for the new token (position 40 = block 2, slot 8)
    key_cache = torch.cat([key_cache, torch.zeros(3, *key_cache.shape[1:])])
    value_cache = torch.cat([value_cache, torch.zeros(3, *value_cache.shape[1:])])
    for s in range(3):
        tables[s, :3] = a["b_loc"][s, :3]
        tables[s, 2] = spare + s
        key_cache[spare + s, :, :, : 40 - 32] = a["k_cache"][a["b_loc"][s, 2], :, :, : 40 - 32]
        value_cache[spare + s, :, :, : 40 - 32] = a["v_cache"][a["b_loc"][s, 2], :, :, : 40 - 32]
        key_cache[spare + s, :, :, 8] = a["k"][s].reshape(2, 64 // x, x)
        value_cache[spare + s, :, :, 8] = a["v"][s]
    expected = reference_paged_attention(
        a["q"], key_cache, value_cache, tables, [41, 41, 41], 1 / 8, a["alibi_slopes"]
    )
    assert bs == 16
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-9)


def test_reference_is_causal_within_the_new_tokens():
    # Token i sees exactly the new tokens 0..i: a value moved at token j moves the output
    # of every token i >= j (a mask that keeps only the diagonal fails here) and of no
    # token before it (a mask that lets tokens see ahead fails here).
    a = prefill._inputs(Shape(2, 2, 32, "float32"), [(1, 0, 5)], "cpu", seed=0)
    before = prefill.reference_prefill(a)
    for j in range(5):
        moved = dict(a, v=a["v"].clone())
        moved["v"][j] += 100.0
        after = prefill.reference_prefill(moved)
        changed = [not torch.allclose(after[i], before[i]) for i in range(5)]
        assert changed == [i >= j for i in range(5)], (j, changed)


def _entry(default_us, times, default=4):
    return {
        "default_us": default_us,
        "candidates": [{"num_warps": w, "status": "ok", "us": t} for w, t in times.items()],
    }


def test_one_num_warps_for_the_tree():
    main = _entry(100.0, {2: 120.0, 4: 100.0, 8: 100.0})
    alibi = _entry(1812.0, {2: 2500.0, 4: 1812.0, 8: 1068.0})
    assert prefill._overall([main, alibi], 4) == 8
    assert prefill._overall([_entry(100.0, {4: 100.0, 8: 99.0})], 4) == 4  # within noise
    assert prefill._overall([], 4) is None


class _Modules:
    def __init__(self, module=None, error=None):
        self.module, self.error = module, error

    def load(self, name):
        if self.error:
            raise TreeImportError(self.error)
        return self.module


def _tuner(modules, device="cuda"):
    return prefill.PrefillTuner(modules, device, None, Budget(None), Progress(1, enabled=False))


DEPLOYMENT = Deployment([Shape(32, 8, 128)], 32768, 256, "t")


def test_skip_reasons():
    tuner = _tuner(_Modules(), device="cpu")
    assert tuner.run(DEPLOYMENT) == ([], None)
    assert tuner.skipped == ["prefix prefill: the tree's Triton kernels need a CUDA device"]

    tuner = _tuner(_Modules(error="`import vllm` from the tree fails: No module named 'x'"))
    tuner.run(DEPLOYMENT)
    assert tuner.skipped == [
        "prefix prefill: `import vllm` from the tree fails: No module named 'x'"
    ]

    local = types.SimpleNamespace(context_attention_fwd=lambda q: None)  # warps set inside
    tuner = _tuner(_Modules(local))
    tuner.run(DEPLOYMENT)
    assert "no module-level NUM_WARPS" in tuner.skipped[0]

    def old(q, k, v, o, k_cache, v_cache, b_loc, b_start_loc, b_seq_len, b_ctx_len, max_input_len):
        pass

    tuner = _tuner(_Modules(types.SimpleNamespace(NUM_WARPS=8, context_attention_fwd=old)))
    tuner.run(DEPLOYMENT)
    assert "predates the 0.8 signature" in tuner.skipped[0]


def test_prefill_cases_fit_the_deployment():
    assert prefill.prefill_cases(DEPLOYMENT) == [(8, 1024, 512), (1, 16384, 2048)]
    small = Deployment([Shape(32, 8, 128)], 4096, 4, "t")
    assert prefill.prefill_cases(small) == [(4, 1024, 512), (1, 2048, 2048)]


def test_prefill_cases_never_exceed_max_model_len():
    # Before: the prompt itself was not cut, so --max-model-len 1024 timed a 2048-token
    # prompt (and 16 a 512-token one), longer than the deployment can ever run.
    tiny = Deployment([Shape(32, 8, 128)], 1024, 4, "t")
    assert prefill.prefill_cases(tiny) == [(4, 512, 512), (1, 0, 1024)]
    for _seqs, ctx, new in prefill.prefill_cases(Deployment([Shape(4, 2, 64)], 16, 4, "t")):
        assert ctx + new <= 16


class _FakeTimer:
    """'Times' by the module's NUM_WARPS at call time (the ALiBi kernel likes 8)."""

    cuda = False

    def __init__(self, module):
        self.module = module

    def sync(self):
        pass

    def eager_us(self, fns):
        for fn in fns:
            fn()
        return {2: 300.0, 4: 1812.0, 8: 1068.0}[self.module.NUM_WARPS]


def _fake_prefix_prefill():
    module = types.SimpleNamespace(NUM_WARPS=4)

    def context_attention_fwd(q, k, v, o, kv_cache_dtype, k_cache, v_cache, b_loc, b_start_loc,
                              b_seq_len, max_seq_len, max_input_len, k_scale, v_scale,
                              alibi_slopes=None, sliding_window=None, sm_scale=None):  # fmt: skip
        args = dict(q=q, k=k, v=v, k_cache=k_cache, v_cache=v_cache, b_loc=b_loc,
                    b_start_loc=b_start_loc, b_seq_len=b_seq_len,
                    alibi_slopes=alibi_slopes)  # fmt: skip
        o.copy_(prefill.reference_prefill(args))
        if module.NUM_WARPS == 2:
            o.mul_(2)  # the fastest, and wrong: must never win

    module.context_attention_fwd = context_attention_fwd
    return module


def test_run_picks_the_fastest_correct_warps_and_restores_the_module():
    module = _fake_prefix_prefill()

    class CpuTuner(prefill.PrefillTuner):
        needs_cuda = False

    tuner = CpuTuner(_Modules(module), "cpu", _FakeTimer(module), Budget(None), Progress(1, False))
    small = Deployment([Shape(4, 4, 32, "float32", alibi=True)], 96, 2, "t")
    entries, warps = tuner.run_cases(small, [(2, 40, 24)])
    assert module.NUM_WARPS == 4
    assert warps == 8
    (entry,) = entries
    assert entry["kernel"] == "alibi"
    assert (entry["default_warps"], entry["winner_warps"]) == (4, 8)
    assert (entry["default_us"], entry["winner_us"]) == (1812.0, 1068.0)
    statuses = {c["num_warps"]: c["status"] for c in entry["candidates"]}
    assert statuses == {2: "wrong", 4: "ok", 8: "ok"}


def _routed_prefix_prefill(calls):
    """A tree the prefix-prefill-route codemod patched: the bundled kernel (which ignores
    NUM_WARPS) takes every call it is offered, the tree's own body only what it declines."""
    from vllm_codemod.kernels import prefill as bundled

    module = _fake_prefix_prefill()
    own = module.context_attention_fwd

    @functools.wraps(own)  # the tuner binds by the tree's parameter names
    def context_attention_fwd(**kwargs):
        if bundled._requested() != "tree":  # the bundled kernel would take this call
            calls.append("bundled")
            kwargs["o"].copy_(prefill.reference_prefill(kwargs))
            return
        calls.append(module.NUM_WARPS)
        own(**kwargs)

    module.context_attention_fwd = context_attention_fwd
    return module


@pytest.mark.parametrize("preset", [None, "triton"])
def test_the_warps_are_measured_on_the_trees_kernel_not_the_bundled_one(monkeypatch, preset):
    # From the route codemod (fd32b66) until this test, tune timed a routed tree's
    # context_attention_fwd, where the bundled kernel answered every call: the tree's warps
    # were the bundled kernel's noise.  Every measured call must reach the tree's own body,
    # at the candidate's warps.
    from vllm_codemod.kernels.prefill import BACKEND_ENV

    if preset is None:
        monkeypatch.delenv(BACKEND_ENV, raising=False)
    else:
        monkeypatch.setenv(BACKEND_ENV, preset)
    calls = []
    module = _routed_prefix_prefill(calls)

    class CpuTuner(prefill.PrefillTuner):
        needs_cuda = False

    tuner = CpuTuner(_Modules(module), "cpu", _FakeTimer(module), Budget(None), Progress(1, False))
    small = Deployment([Shape(4, 4, 32, "float32", alibi=True)], 96, 2, "t")
    _entries, warps = tuner.run_cases(small, [(2, 40, 24)])
    assert calls and "bundled" not in calls
    assert set(calls) == {2, 4, 8}
    assert warps == 8
    assert os.environ.get(BACKEND_ENV) == preset  # restored


def test_tree_kernel_only_makes_the_bundled_kernel_decline(monkeypatch):
    from vllm_codemod.kernels import prefill as bundled

    monkeypatch.delenv(bundled.BACKEND_ENV, raising=False)
    assert bundled._requested() == "auto"
    with prefill.tree_kernel_only():
        route = bundled.route()
        assert (route.path, route.setup) == ("tree", True)
    assert bundled._requested() == "auto"

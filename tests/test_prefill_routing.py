"""The prefix-prefill route: the entry point's spellings and declines, then patched trees.

First :func:`kernels.prefill.context_attention_fwd` on its own (every release's argument
spelling, by name and by position; what it declines and how it says so).  Then the
real thing: fixture trees patched with the CLI, their ``prefix_prefill.py`` imported by
path with stub ``vllm`` dependencies, ``context_attention_fwd`` called with CPU tensors
and checked against the float64 reference; a call with ``sinks`` reaches the tree's own
kernel launch instead.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import sys
import types
from pathlib import Path
from typing import Any, Dict, List

import pytest
from click.testing import CliRunner

from treeutil import copy_fixture
from vllm_codemod.cli import cli

torch = pytest.importorskip("torch")  # the CPU suite runs without torch too

from vllm_codemod.kernels import prefill  # noqa: E402
from vllm_codemod.kernels.prefill_selfcheck import make_case  # noqa: E402
from vllm_codemod.kernels.prefill_signature import (  # noqa: E402
    ORDER_0_4,
    ORDER_0_7,
    ORDER_0_10,
    ORDER_0_11,
)

LOGGER = "vllm_codemod.kernels.prefill"


def assert_matches(o, ref, tol=1e-5):
    out = o.to(torch.float64)
    skipped = torch.isnan(ref)
    assert torch.equal(torch.isnan(out), skipped), "an element written/unwritten wrongly"
    got, want = out[~skipped], ref[~skipped]
    rel = float((got - want).norm() / want.norm())
    assert rel < tol, rel


def small_case(**kw):
    base: Dict[str, Any] = dict(
        ctx_lens=[33, 0, 70],
        new_lens=[12, 5, 1],
        num_heads=4,
        num_kv_heads=2,
        head_size=64,
        block_size=16,
        dtype=torch.float32,
    )
    base.update(kw)
    return make_case(**base)


@pytest.fixture(autouse=True)
def fresh_entry_state(monkeypatch):
    monkeypatch.setattr(prefill, "_logged", set())
    monkeypatch.delenv(prefill.BACKEND_ENV, raising=False)


# ---- the entry point -----------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["0.4.3", "0.6", "0.7", "0.8"])
def test_every_spelling_by_name(spelling):
    case = small_case(alibi=spelling != "0.4.3")
    path = prefill.context_attention_fwd_with_path(
        **case.vllm_kwargs(spelling, tensor_scales=spelling in ("0.7", "0.8"))
    )
    assert path == "torch"
    assert_matches(case.o, case.reference())


@pytest.mark.parametrize(
    "order,spelling", [(ORDER_0_4, "0.4.3"), (ORDER_0_7, "0.7"), (ORDER_0_10, "0.8")]
)
def test_positional_calls_are_told_apart_by_types(order, spelling):
    case = small_case(kv_cache_dtype="auto" if spelling == "0.4.3" else "fp8", head_size=128)
    named = case.vllm_kwargs(spelling)
    args = [named.get(name) for name in order if name != "sinks"]
    assert prefill.context_attention_fwd(*args) is True
    assert_matches(case.o, case.reference(), tol=1e-5)


def test_positional_0_11_call_with_none_extras():
    case = small_case()
    named = dict(case.vllm_kwargs("0.8"), fp8_out_scale=None, sinks=None)
    assert prefill.context_attention_fwd(*[named[n] for n in ORDER_0_11]) is True
    assert_matches(case.o, case.reference())


def test_b_ctx_len_with_one_start_per_sequence():
    """vLLM's 0.4-0.7 tests pass ``b_start_loc`` without the final total."""
    case = small_case()
    kwargs = case.vllm_kwargs("0.6", tensor_scales=False)
    kwargs["b_start_loc"] = case.query_start[:-1].clone()
    assert prefill.context_attention_fwd(**kwargs) is True
    assert_matches(case.o, case.reference())


@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("tensor_scales", [True, False], ids=["tensor-scales", "float-scales"])
def test_fp8_caches_with_either_scale_type(kv_cache_dtype, tensor_scales):
    case = small_case(kv_cache_dtype=kv_cache_dtype, head_size=128, dtype=torch.bfloat16)
    assert case.k_cache.dtype == torch.uint8  # as vLLM stores it; the entry views it
    kwargs = case.vllm_kwargs("0.8" if tensor_scales else "0.6", tensor_scales=tensor_scales)
    assert prefill.context_attention_fwd(**kwargs) is True
    assert_matches(case.o, case.reference(), tol=3e-2)


def test_skip_decode_sliding_window_and_sm_scale_reach_the_kernel():
    case = small_case(skip_decode=True, sliding_window=9, sm_scale=0.2)
    assert prefill.context_attention_fwd(**case.vllm_kwargs("0.8")) is True
    assert torch.isnan(case.o[-1]).all()  # the one-token sequence was skipped
    assert_matches(case.o, case.reference())


def _sinks(case):
    return torch.zeros(case.q.shape[1])


@pytest.mark.parametrize(
    "change,reason",
    [
        (lambda c, a: a.update(sinks=_sinks(c)), "sinks given"),
        (lambda c, a: a.update(fp8_out_scale=torch.tensor(1.0)), "fp8_out_scale"),
        (lambda c, a: a.update(kv_cache_dtype="int8"), "kv_cache_dtype 'int8'"),
        (
            lambda c, a: a.update(k_cache=c.k_cache.view(torch.uint8)[..., :4]),
            "torch.uint8 cache with kv_cache_dtype 'auto'",
        ),
        (
            lambda c, a: a.update(k_cache=c.k_cache.view(torch.int8)[..., :4]),
            "torch.int8 cache with kv_cache_dtype 'auto'",
        ),
        (
            lambda c, a: a.update(
                kv_cache_dtype="fp8", k_cache=c.k_cache.view(torch.uint8)[..., :4]
            ),
            "8-bit key cache with a torch.float32 value cache",
        ),
        (lambda c, a: a.update(v_scale=torch.ones(2)), "per-channel"),
        (lambda c, a: a.update(bogus=1), "unknown argument(s) bogus"),
        (lambda c, a: a.pop("b_loc"), "missing argument(s) b_loc"),
        (lambda c, a: a.update(b_start_loc=c.query_start[:-1]), "b_start_loc of 3 entries"),
        (lambda c, a: a.update(k_cache=c.k_cache[None]), "layout"),
        (lambda c, a: a.update(v_cache=c.v_cache.to(torch.float16)), "caches with torch.float32"),
    ],
    ids=[
        "sinks",
        "fp8-out",
        "int8-cache",
        "uint8-auto",
        "int8-auto",
        "fp8-key-only",
        "per-channel-scale",
        "unknown-kwarg",
        "missing",
        "short-starts",
        "layout",
        "mixed-dtypes",
    ],
)
def test_declines_leave_o_untouched_and_log_once_at_debug(change, reason, caplog):
    fp8 = reason == "per-channel"  # scales only matter for an fp8 cache
    case = small_case(head_size=128, kv_cache_dtype="fp8" if fp8 else "auto")
    kwargs = case.vllm_kwargs("0.8")
    change(case, kwargs)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    assert prefill.context_attention_fwd(**kwargs) is False
    taken = prefill.route(**kwargs)
    assert taken.path == "tree" and reason in taken.reason
    assert not taken.setup  # the call, not the box: verify would count it as a failure
    assert torch.isnan(case.o).all()
    records = [r for r in caplog.records if r.name == LOGGER]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert records[0].levelno == logging.DEBUG
    assert reason in records[0].getMessage()
    assert "the tree's own kernel runs this call" in records[0].getMessage()


def test_backend_env(monkeypatch):
    case = small_case()
    monkeypatch.setenv(prefill.BACKEND_ENV, "tree")
    assert prefill.context_attention_fwd(**case.vllm_kwargs("0.8")) is False
    assert prefill.route(**case.vllm_kwargs("0.8")) == ("tree", f"{prefill.BACKEND_ENV}=tree", True)
    assert torch.isnan(case.o).all()
    monkeypatch.setenv(prefill.BACKEND_ENV, "torch")
    assert prefill.context_attention_fwd_with_path(**case.vllm_kwargs("0.8")) == "torch"
    monkeypatch.setenv(prefill.BACKEND_ENV, "cuda")
    with pytest.raises(ValueError, match=prefill.BACKEND_ENV):
        prefill.context_attention_fwd(**case.vllm_kwargs("0.8"))


def test_cpu_calls_never_import_triton(monkeypatch):
    state = {"checked": False, "launch": None, "error": None}
    monkeypatch.setattr(prefill, "_triton_state", state)
    case = small_case()
    assert prefill.context_attention_fwd_with_path(**case.vllm_kwargs("0.8")) == "torch"
    assert state["checked"] is False


def test_package_export_is_lazy_and_routes():
    import vllm_codemod.kernels as package

    case = small_case()
    assert package.context_attention_fwd(**case.vllm_kwargs("0.8")) is True
    assert_matches(case.o, case.reference())


# ---- patched fixture trees -----------------------------------------------------------


class _Platform:
    """What prefix_prefill.py asks ``current_platform`` at import and call time."""

    def has_device_capability(self, capability):
        return True

    def get_device_capability(self):
        return (8, 0)

    def is_rocm(self):
        return False

    def fp8_dtype(self):
        return torch.float8_e4m3fn


class _LaunchRecorder:
    """Stands in for a tree kernel: ``kernel[grid](...)`` is recorded, nothing runs."""

    def __init__(self, calls: List[str], name: str) -> None:
        self.calls, self.name = calls, name

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append(self.name)


@pytest.fixture
def patched_tree(tmp_path, monkeypatch):
    """``load(fixture, *cli_args)``: apply the CLI to a copy, import its prefix_prefill.py."""
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}

    def load(fixture: str, *cli_args: str):
        site = copy_fixture(fixture, tmp_path / fixture.replace("/", "_"))
        result = CliRunner().invoke(
            cli, ["apply", "--site-packages", str(site), *cli_args], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
            del sys.modules[name]
        root = site / "vllm"
        for name, path in (
            ("vllm", root),
            ("vllm.attention", root / "attention"),
            ("vllm.attention.ops", root / "attention" / "ops"),
        ):
            package = types.ModuleType(name)
            package.__path__ = [str(path)]  # type: ignore[attr-defined]
            sys.modules[name] = package
        platforms = types.ModuleType("vllm.platforms")
        platforms.current_platform = _Platform()  # type: ignore[attr-defined]
        sys.modules["vllm.platforms"] = platforms
        import triton
        import triton.language as tl

        triton_utils = types.ModuleType("vllm.triton_utils")
        triton_utils.triton, triton_utils.tl = triton, tl  # type: ignore[attr-defined]
        sys.modules["vllm.triton_utils"] = triton_utils
        name = "vllm.attention.ops.prefix_prefill"
        spec = importlib.util.spec_from_file_location(
            name, root / "attention" / "ops" / "prefix_prefill.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        launches: List[str] = []
        for kernel in ("_fwd_kernel", "_fwd_kernel_alibi", "_fwd_kernel_flash_attn_v2"):
            if hasattr(module, kernel):
                monkeypatch.setattr(module, kernel, _LaunchRecorder(launches, kernel))
        return site, module, launches

    yield load
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]
    sys.modules.update(saved)


def _call(func, case, spelling: str, **extra) -> None:
    given = dict(case.vllm_kwargs(spelling), **extra)
    params = inspect.signature(func).parameters
    func(**{name: value for name, value in given.items() if name in params})


TREES = [
    # (fixture, CLI arguments, spelling of its context_attention_fwd)
    pytest.param("bi-v100/corex-0.8.3", (), "0.8", id="corex-0.8.3"),
    pytest.param(
        "upstream/vllm-0.8.5.post1", ("--only", "prefix-prefill-route"), "0.8", id="vllm-0.8.5"
    ),
    pytest.param("bi-v100/corex-0.4.3", (), "0.4.3", id="corex-0.4.3"),
    pytest.param("bi-v100/corex-0.6.3", (), "0.6", id="corex-0.6.3"),
    pytest.param("bi-v100/corex-0.11.0", (), "0.8", id="corex-0.11.0"),
]


VARIANTS = {
    "plain": {},
    "alibi": {"alibi": True, "num_heads": 8, "num_kv_heads": 2},
    "fp8": {"kv_cache_dtype": "fp8", "head_size": 128, "dtype": torch.bfloat16},
    "window": {"sliding_window": 20, "num_kv_heads": 1, "dtype": torch.float16},
}


@pytest.mark.parametrize(
    "fixture,cli_args,spelling,variant",
    [
        pytest.param(*tree.values, VARIANTS[name], id=f"{tree.id}-{name}")
        for tree in TREES
        for name in VARIANTS
        if not (name == "fp8" and tree.values[2] == "0.4.3")  # 0.4.3 has no fp8 caches
    ],
)
def test_patched_tree_answers_on_cpu(patched_tree, fixture, cli_args, spelling, variant):
    site, module, launches = patched_tree(fixture, *cli_args)
    case = small_case(**variant)
    _call(module.context_attention_fwd, case, spelling)
    assert launches == []  # the tree's own kernel never launched
    assert_matches(case.o, case.reference(), tol=5e-3 if case.q.dtype != torch.float32 else 1e-5)
    # and it was the copy shipped into the tree that ran
    loaded = sys.modules["vllm._codemod_kernels"]
    assert Path(loaded.__file__).resolve().parent == (site / "vllm" / "_codemod_kernels").resolve()


@pytest.mark.parametrize("fixture", ["upstream/vllm-0.11.0", "bi-v100/corex-0.11.0"])
def test_sinks_fall_back_to_the_tree_kernel(patched_tree, fixture, caplog):
    cli_args = ("--only", "prefix-prefill-route") if fixture.startswith("upstream") else ()
    _, module, launches = patched_tree(fixture, *cli_args)
    case = small_case()
    caplog.set_level(logging.DEBUG)
    _call(module.context_attention_fwd, case, "0.8", sinks=torch.zeros(case.q.shape[1]))
    assert launches == ["_fwd_kernel"]  # the original body ran and launched its kernel
    assert torch.isnan(case.o).all()  # ours wrote nothing
    declined = [r for r in caplog.records if r.name == "vllm._codemod_kernels.prefill"]
    assert [r.levelno for r in declined] == [logging.DEBUG]
    assert "sinks" in declined[0].getMessage()
    # without sinks the same tree routes to the bundled kernel
    plain = small_case()
    _call(module.context_attention_fwd, plain, "0.8")
    assert launches == ["_fwd_kernel"]
    assert_matches(plain.o, plain.reference())


# ---- verify ----------------------------------------------------------------------------


def test_verify_runs_the_prefill_cases_and_catches_a_broken_copy(tmp_path):
    import json

    site = copy_fixture("bi-v100/corex-0.8.3", tmp_path)
    runner = CliRunner()
    assert runner.invoke(cli, ["apply", "--site-packages", str(site)]).exit_code == 0
    args = ["verify", "--site-packages", str(site), "--device", "cpu", "--json"]
    result = runner.invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    prefill_rows = [r for r in json.loads(result.output)["results"] if "prefill" in r["shape"]]
    labels = " ".join(r["shape"] for r in prefill_rows)
    for needle in ("batch", "alibi", "fp8", "GQA"):
        assert needle in labels
    assert {r["path"] for r in prefill_rows} == {"torch"}
    assert all(r["ok"] for r in prefill_rows)

    torch_path = site / "vllm" / "_codemod_kernels" / "prefill_torch.py"
    torch_path.write_text(torch_path.read_text().replace("* sm_scale", "* sm_scale * 1.1"))
    broken = runner.invoke(cli, args, catch_exceptions=False)
    assert broken.exit_code == 2
    rows = json.loads(broken.output)["results"]
    assert {r["shape"] for r in rows if not r["ok"]} == {r["shape"] for r in prefill_rows}


def test_a_triton_older_than_2_1_leaves_cuda_calls_to_the_tree(monkeypatch):
    # The kernel's LEGACY forms were written for (and compile-checked on) Triton 2.1;
    # an older one runs the tree's own kernel, built for it.
    fake = types.ModuleType("triton")
    fake.__version__ = "2.0.0"
    fake.__file__ = "/site-packages/triton/__init__.py"  # a real install, not vLLM's stand-in
    monkeypatch.setitem(sys.modules, "triton", fake)
    state = {"checked": False, "launch": None, "error": None}
    monkeypatch.setattr(prefill, "_triton_state", state)
    assert prefill._triton_launch() is None
    assert "2.0.0" in state["too_old"]
    call = types.SimpleNamespace(q=types.SimpleNamespace(is_cuda=True))
    taken = prefill.run(call)
    assert taken.path == "tree" and taken.setup and "2.0.0" in taken.reason
    with pytest.raises(RuntimeError, match="older than 2.1"):
        prefill.run(call, "triton")


@pytest.mark.parametrize(
    "version, used",
    [
        ("2.0.0", False),
        ("2.1.0", True),
        ("2.2.0", True),
        ("2.3.1", True),
        ("3.0.0", True),
        ("3.6.0", True),
    ],
)
def test_the_releases_the_kernel_runs_on(monkeypatch, version, used):
    """2.1 on (compile-checked on 2.1, 2.2, 2.3 and 3.6); anything older: the tree's
    kernel."""
    fake = types.ModuleType("triton")
    fake.__version__ = version
    fake.__file__ = "/site-packages/triton/__init__.py"
    monkeypatch.setitem(sys.modules, "triton", fake)
    state = {"checked": False, "launch": None, "error": None}
    monkeypatch.setattr(prefill, "_triton_state", state)
    prefill._triton_launch()
    assert ("too_old" not in state) == used


def test_triton_version_parsing():
    assert prefill._triton_version(types.SimpleNamespace(__version__="3.6.0")) == (3, 6)
    assert prefill._triton_version(types.SimpleNamespace(__version__="2.1.0+abc")) == (2, 1)
    assert prefill._triton_version(types.SimpleNamespace(__version__="weird")) == (0, 0)

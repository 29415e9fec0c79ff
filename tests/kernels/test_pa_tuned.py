"""The entry point follows a shipped tuning table (``vllm-codemod tune`` ->
``apply --tuning``): per call, the tree's V1 kernel or a launch config; without a table,
or for a device the table does not name, nothing changes."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from pa_helpers import make_inputs  # noqa: E402  (this directory)

from vllm_codemod.kernels import call as call_mod  # noqa: E402
from vllm_codemod.kernels import dispatch, tuned, tuning_table, vendor_v1  # noqa: E402

# The table bundled with the kernels (session 23's tune: 512 to 128K tokens, prefill configs),
# and one tune wrote on the same GPU in run v24 (512 to 128K tokens, against the launch
# defaults of that time): the fixture for the decision logic.
H200_TABLE = Path(__file__).resolve().parents[2] / "kernels" / "tuning-h200.json"
H100_TABLE = H200_TABLE.with_name("tuning-h100.json")
FULL_TABLE = Path(__file__).resolve().parent / "data" / "tuning-h200-v24.json"


@pytest.fixture
def table(tmp_path, monkeypatch):
    """A table the tool produced on an H200 (run v24), installed as the tree's table (no
    bundled ones)."""
    path = tmp_path / "tuning.json"
    shutil.copy(FULL_TABLE, path)
    monkeypatch.setattr(tuned, "TABLE_FILE", str(path))
    monkeypatch.setattr(tuned, "BUNDLED_FILES", ())
    monkeypatch.setattr(tuned, "_state", {"present": None, "tables": None, "devices": {}})
    monkeypatch.setattr(tuned, "_capturing", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return path


def _fake_cuda_call(heads, kv_heads, head_size, max_seq_len, alibi=False):
    query = SimpleNamespace(device=torch.device("cuda", 0), shape=(1, heads, head_size))
    return SimpleNamespace(
        query=query,
        num_kv_heads=kv_heads,
        max_seq_len=max_seq_len,
        key_cache=SimpleNamespace(dtype=torch.bfloat16),
        alibi_slopes=object() if alibi else None,
    )


def test_the_v24_example_validates_and_covers_the_deployment_shape():
    t = tuning_table.load(str(FULL_TABLE))
    device = t.for_device("NVIDIA H200")
    assert device is not None and device.prefill_num_warps == 8
    # Single-sequence decode up to 128K tokens, 32/8/128, measured at every length point.
    for n in (512, 4096, 16384, 100_000, 131_072):
        assert device.decide(1, 32, 8, 128, n, "bfloat16") is not None
    assert device.decide(1, 32, 8, 128, 200_000, "bfloat16") is None  # past the grid


def test_the_bundled_h200_table_decides_only_what_it_measured():
    """The bundled table (``tune`` on an H200, session 23, 430 s): no warps for the tree's
    prefix prefill (they were the bundled kernel's timings); single-sequence decode
    measured from 512 to 128K tokens, with the launch defaults kept where they won; past
    the grid, or for a batch, the built-in rules."""
    device = tuning_table.load(str(H200_TABLE)).for_device("NVIDIA H200")
    assert device is not None and device.prefill_num_warps is None  # dropped: see docs/tuning.md
    assert device.decide(1, 32, 8, 128, 512, "bfloat16").config is None  # the default won
    assert device.decide(1, 32, 8, 128, 4096, "bfloat16").config == (32, 1, 1, True, 1, True, 128)
    for n in (100_000, 131_072):
        assert device.decide(1, 32, 8, 128, n, "bfloat16").config is None
    assert device.decide(1, 32, 8, 128, 131_073, "bfloat16") is None  # past the grid
    assert device.decide(8, 32, 8, 128, 2048, "bfloat16") is None  # not measured


def test_decisions_follow_the_table_for_this_device(table, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda idx=None: "NVIDIA H200")
    short = tuned.decision(_fake_cuda_call(32, 8, 128, 1024))
    assert short.backend == "v2" and tuple(short.config) == (64, 4, 1, True, 0, True)
    long = tuned.decision(_fake_cuda_call(32, 8, 128, 100_000))
    assert long.backend == "v2" and long.config is None  # the default won: built-in tables
    assert tuned.decision(_fake_cuda_call(40, 40, 128, 8192, alibi=True)).config[1] == 1
    assert tuned.decision(_fake_cuda_call(20, 4, 64, 1024)) is None  # shape not measured


def test_another_device_keeps_the_defaults_with_one_log_line(table, monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda idx=None: "Iluvatar BI-V100")
    with caplog.at_level(logging.INFO):
        assert tuned.decision(_fake_cuda_call(32, 8, 128, 1024)) is None
        assert tuned.decision(_fake_cuda_call(32, 8, 128, 1024)) is None
    assert len([r for r in caplog.records if "no tuning table names" in r.getMessage()]) == 1


def test_without_a_table_there_is_no_decision(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned, "TABLE_FILE", str(tmp_path / "absent.json"))
    monkeypatch.setattr(tuned, "BUNDLED_FILES", ())
    monkeypatch.setattr(tuned, "_state", {"present": None, "tables": None, "devices": {}})
    assert tuned.decision(_fake_cuda_call(32, 8, 128, 1024)) is None


def test_the_bundled_h200_table_is_the_default_for_that_device_only(tmp_path, monkeypatch):
    """No tree table: the H200 gets the table the project measured; another GPU, or a batch
    or length the table did not measure, keeps the built-in launch tables."""
    assert tuned.BUNDLED_FILES == (str(H100_TABLE), str(H200_TABLE))
    monkeypatch.setattr(tuned, "BUNDLED_FILES", (str(FULL_TABLE),))
    monkeypatch.setattr(tuned, "TABLE_FILE", str(tmp_path / "absent.json"))
    monkeypatch.setattr(tuned, "_capturing", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    for name, expect in (("NVIDIA H200", (64, 4, 1, True, 0, True)), ("Iluvatar BI-V100", None)):
        monkeypatch.setattr(tuned, "_state", {"present": None, "tables": None, "devices": {}})
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda idx=None, n=name: n)
        got = tuned.decision(_fake_cuda_call(32, 8, 128, 2048))
        assert (tuple(got.config) if got else None) == expect
    batch = _fake_cuda_call(32, 8, 128, 2048)
    batch.query.shape = (8, 32, 128)
    monkeypatch.setattr(tuned, "_state", {"present": None, "tables": None, "devices": {}})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda idx=None: "NVIDIA H200")
    assert tuned.decision(batch) is None  # only single sequences were measured


def test_the_bundled_prefill_configs_follow_each_devices_own_tune(tmp_path, monkeypatch):
    """Each table is its device's ``tune``: the H100's (session 20; head 128's tiers
    redrawn in session 22 by the per-side margin from the same measurements) and the
    H200's (session 23) both chose (128, 128, 8, 3) for head 128 in 16-bit from a work of
    53.6M on, (128, 64, 8, 1) below it, and (128, 64, 8, 2) for head 256 from a work of
    24.0M on (the built-in default below it); other devices get none."""
    monkeypatch.setattr(tuned, "TABLE_FILE", str(tmp_path / "absent.json"))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    measured = (
        {(128, 2): (128, 128, 8, 3), (256, 2): (128, 64, 8, 2)},
        {(128, 2): (53571420, (128, 64, 8, 1)), (256, 2): (23957867, None)},
    )
    expected = {
        "NVIDIA H100 80GB HBM3": measured,
        "NVIDIA H200": measured,
        "Iluvatar BI-V100": ({}, {}),
    }
    for name, (configs, small) in expected.items():
        monkeypatch.setattr(tuned, "_state", {"present": None, "tables": None, "devices": {}})
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda idx=None, n=name: n)
        assert tuned.prefill_configs(torch.device("cuda")) == configs
        assert tuned.prefill_small(torch.device("cuda")) == small


def test_a_trees_table_wins_over_the_bundled_one(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(tuned, "BUNDLED_FILES", (str(FULL_TABLE),))
    doc = json.loads(FULL_TABLE.read_text())
    for entry in doc["devices"][0]["decode"]:
        for point in entry["points"]:
            point["winner"] = {"backend": "v1", "config": None, "us": 1.0}
    tree_table = tmp_path / "tuning.json"
    tree_table.write_text(json.dumps(doc))
    monkeypatch.setattr(tuned, "TABLE_FILE", str(tree_table))
    monkeypatch.setattr(tuned, "_state", {"present": None, "tables": None, "devices": {}})
    monkeypatch.setattr(tuned, "_capturing", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda idx=None: "NVIDIA H200")
    assert tuned.decision(_fake_cuda_call(32, 8, 128, 2048)).backend == "v1"


def _cpu_call():
    a = make_inputs([700], 8, 2, 64, 16, torch.float32)
    return a, call_mod.build((), dict(a))


def test_entry_point_hands_v1_ranges_to_the_trees_kernel(monkeypatch):
    a, c = _cpu_call()
    seen = []
    monkeypatch.setattr(tuned, "decision", lambda call: tuning_table.Decision("v1", None))
    monkeypatch.setattr(vendor_v1, "run", lambda call: seen.append(call))
    assert dispatch.run(c) == "vendor-v1"
    assert seen == [c]


def test_v1_unavailable_falls_back_to_our_kernels_and_says_so_once(monkeypatch, caplog):
    a, c = _cpu_call()
    monkeypatch.setattr(tuned, "decision", lambda call: tuning_table.Decision("v1", None))
    monkeypatch.setattr(dispatch, "_triton_state", {"checked": False, "module": None})

    def unavailable(call):
        raise vendor_v1.V1Unavailable("vllm._custom_ops has no paged_attention_v1")

    monkeypatch.setattr(vendor_v1, "run", unavailable)
    with caplog.at_level(logging.WARNING):
        assert dispatch.run(c) == "torch"
        assert dispatch.run(c) == "torch"
    assert len([r for r in caplog.records if "vendor V1" in r.getMessage()]) == 1


def test_entry_point_launches_the_tables_v2_config(monkeypatch):
    a, c = _cpu_call()
    launched = []

    class FakeTriton:
        from vllm_codemod.kernels.launch_tables import LaunchConfig

        UnsupportedLayout = ValueError

        @staticmethod
        def run(call, config=None):
            launched.append(config)

    config = [64, 4, 1, True, 0, True]
    monkeypatch.setattr(tuned, "decision", lambda call: tuning_table.Decision("v2", config))
    monkeypatch.setattr(dispatch, "_triton_impl", lambda: FakeTriton)
    monkeypatch.setattr(dispatch, "_choose", lambda call, choice: "triton")
    assert dispatch.run(c) == "triton"
    assert launched == [FakeTriton.LaunchConfig(*config)]


def test_forced_backend_ignores_the_table(monkeypatch):
    a, c = _cpu_call()
    monkeypatch.setattr(tuned, "decision", lambda call: pytest.fail("table consulted"))
    assert dispatch.run(c, backend="torch") == "torch"


def test_vendor_v1_outside_a_tree_is_unavailable():
    _, c = _cpu_call()
    vendor_v1._state.update(bound=None, why=None)
    with pytest.raises(vendor_v1.V1Unavailable, match="not inside a vLLM tree"):
        vendor_v1.run(c)
    vendor_v1._state.update(bound=None, why=None)

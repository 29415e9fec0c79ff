"""The tuning file: round trip, validation, and the decisions the entry point reads."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_codemod.errors import CodemodError
from vllm_codemod.kernels import tuning_table
from vllm_codemod.kernels.tuning_table import Decision
from vllm_codemod.tuning import table

KERNEL_SIDE = Path(tuning_table.__file__)
TUNED = [64, 4, 1, True, 0, True]


def _point(length, winner, eager=None):
    point = {
        "max_seq_len": length,
        "mode": "graph",
        "winner": winner,
        "default": {"backend": "v2", "config": [64, 2, 1, True, 0, True], "us": 10.0},
        "candidates": [],
    }
    if eager is not None:
        point["eager_winner"] = eager
    return point


def _entry(num_seqs=1, dtype="bfloat16", alibi=False, points=None):
    return {
        "num_heads": 32,
        "num_kv_heads": 8,
        "head_size": 128,
        "dtype": dtype,
        "alibi": alibi,
        "num_seqs": num_seqs,
        "points": points
        if points is not None
        else [
            _point(4096, {"backend": "v2", "config": None, "us": 9.0}),
            _point(
                1024,
                {"backend": "v2", "config": TUNED, "us": 5.0},
                eager={"backend": "v1", "config": None, "us": 30.0},
            ),
            _point(32768, {"backend": "v2", "config": [32, 1, 1], "us": 50.0}),
        ],
    }


def _document(*entries, name="NVIDIA H200"):
    header = table.device_header(
        name, [9, 0], {"torch": "2.11.0", "triton": "3.6.0", "python": "3.12.3"}, {}, {}
    )
    header["decode"] = list(entries) or [_entry()]
    header["prefill"] = [
        {"kernel": "alibi", "winner_warps": 8, "default_warps": 4, "candidates": []},
        {"kernel": "main", "winner_warps": None, "default_warps": 4, "candidates": []},
    ]
    header["prefill_num_warps"] = 8
    return table.build_document(header)


def test_round_trip_through_the_file(tmp_path):
    doc = _document()
    path = tmp_path / "tuning.json"
    table.write(path, doc)
    assert json.loads(path.read_text()) == doc
    loaded = tuning_table.load(path)
    device = loaded.for_device("NVIDIA H200")
    assert device is not None
    assert device.prefill_warps == {"alibi": 8}
    assert device.raw == doc["devices"][0]
    assert loaded.for_device("nvidia h200") is device  # case-insensitive fallback
    assert loaded.for_device("Iluvatar BI-V100") is None


def test_decide_picks_the_bucket_that_covers_the_length():
    device = tuning_table.parse(_document()).for_device("NVIDIA H200")
    args = (1, 32, 8, 128)
    assert device.decide(*args, 1, "bfloat16") == Decision("v2", tuple(TUNED))
    assert device.decide(*args, 1024, "torch.bfloat16") == Decision("v2", tuple(TUNED))
    assert device.decide(*args, 1025, "bf16") == Decision("v2", None)  # the 4096 bucket
    assert device.decide(*args, 32768, "bfloat16") == Decision("v2", (32, 1, 1))
    assert device.decide(*args, 32769, "bfloat16") is None  # longer than anything measured
    # eager: the winner timed without graphs, where the file has one
    assert device.decide(*args, 1000, "bfloat16", eager=True) == Decision("v1", None)
    assert device.decide(*args, 2000, "bfloat16", eager=True) == Decision("v2", None)


def test_decide_needs_the_exact_shape_and_dtype():
    device = tuning_table.parse(_document()).for_device("NVIDIA H200")
    assert device.decide(1, 32, 8, 64, 1000, "bfloat16") is None
    assert device.decide(1, 32, 4, 128, 1000, "bfloat16") is None
    assert device.decide(1, 32, 8, 128, 1000, "float16") is None


def test_decide_batch_buckets_and_alibi():
    small = _entry(1, points=[_point(8192, {"backend": "v1", "config": None, "us": 1.0})])
    big = _entry(16, points=[_point(8192, {"backend": "v2", "config": [16, 1, 2], "us": 1.0})])
    alibi = _entry(1, alibi=True, points=[_point(8192, {"backend": "v2", "config": None, "us": 1})])
    device = tuning_table.parse(_document(small, big, alibi)).for_device("NVIDIA H200")
    shape = (32, 8, 128, 4096, "bfloat16")
    assert device.decide(1, *shape, alibi=False) == Decision("v1", None)
    assert device.decide(2, *shape) == Decision("v2", (16, 1, 2))  # smallest batch >= 2
    assert device.decide(64, *shape) is None  # bigger than any batch measured
    assert device.decide(1, *shape, alibi=True) == Decision("v2", None)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("schema_version"), "schema_version: missing"),
        (lambda d: d.update(schema_version=2), "this reader knows version 1"),
        (lambda d: d.update(devices={}), "devices: expected list"),
        (lambda d: d["devices"][0]["device"].pop("name"), r"devices\[0\]\.device\.name: missing"),
        (
            lambda d: d["devices"][0]["decode"][0].update(num_heads=30),
            "num_heads 30 is not a multiple of num_kv_heads 8",
        ),
        (
            lambda d: d["devices"][0]["decode"][0]["points"][0]["winner"].update(backend="v3"),
            r"points\[0\]\.winner\.backend: expected one of",
        ),
        (
            lambda d: d["devices"][0]["decode"][0]["points"][1]["winner"].update(config=[64, 4]),
            r"winner\.config: expected 3 to 8 fields",
        ),
        (
            lambda d: d["devices"][0]["decode"][0]["points"][1]["winner"].update(
                config=[64, 4, 1, True, 0, True, 0, 6, 1]
            ),
            r"winner\.config: expected 3 to 8 fields",
        ),
        (
            lambda d: d["devices"][0]["decode"][0]["points"][1]["winner"].update(
                config=[64, 4, 1, True, 0, True, 0, -1]
            ),
            r"winner\.config\[7\] \(slots\): out of range: -1",
        ),
        (
            lambda d: d["devices"][0]["decode"][0]["points"][1]["winner"].update(
                config=[64, 4, 1, True, 0, True, 0, 33]
            ),
            r"winner\.config\[7\] \(slots\): 0-32, got 33",
        ),
        (
            lambda d: d["devices"][0]["decode"][0]["points"][1]["winner"].update(
                config=[64, 4, 1, True, 0, True, 96]
            ),
            r"winner\.config\[6\] \(chunk\): 0 or a power of two 16-512, got 96",
        ),
        (
            lambda d: d["devices"][0]["decode"][0]["points"][1]["winner"].update(
                config=[64, "4", 1]
            ),
            r"config\[1\] \(warps\): expected int",
        ),
        (
            lambda d: d["devices"][0]["decode"][0]["points"][1]["eager_winner"].update(
                config=[64, 4, 1]
            ),
            "only a v2 decision has a launch config",
        ),
        (
            lambda d: d["devices"][0]["decode"][0]["points"][0].update(max_seq_len=0),
            "must be a positive integer",
        ),
        (
            lambda d: d["devices"][0]["prefill"][0].update(winner_warps=3),
            "not a power of two",
        ),
    ],
)
def test_validation_names_the_field(mutate, message):
    doc = _document()
    mutate(doc)
    with pytest.raises(tuning_table.TuningFileError, match=message):
        tuning_table.parse(doc, "t.json")
    with pytest.raises(CodemodError, match="t.json: "):
        table.validate(doc, "t.json")


def test_json_syntax_errors_name_line_and_column(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "schema_version": 1,\n  "devices": [,]\n}\n')
    with pytest.raises(CodemodError, match=r"bad\.json:3:15: not valid JSON"):
        table.load(path)


def test_write_refuses_an_invalid_document_and_writes_nothing(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("previous")
    doc = _document()
    doc["devices"][0]["decode"][0]["dtype"] = 5
    with pytest.raises(CodemodError, match="dtype: expected str"):
        table.write(path, doc)
    assert path.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_default_output_name_is_a_safe_file_name():
    assert table.default_output_name("NVIDIA H200") == "vllm-codemod-tuning-NVIDIA-H200.json"
    assert (
        table.default_output_name("Iluvatar/BI V100") == "vllm-codemod-tuning-Iluvatar-BI-V100.json"
    )


def test_kernel_side_is_light_and_python38():
    # Read by the entry point inside vLLM workers: no torch, no CUDA, Python 3.8 syntax.
    ast.parse(KERNEL_SIDE.read_text(), feature_version=(3, 8))
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('tt', {str(KERNEL_SIDE)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "heavy = [n for n in ('torch', 'triton', 'numpy') if n in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_summary_rows_and_rejected_counts():
    entry = _document()["devices"][0]
    entry["decode"][0]["points"][0]["candidates"] = [
        {"backend": "v2", "config": None, "status": "ok"},
        {"backend": "v2", "config": [128, 2, 1], "status": "failed", "reason": "shared memory"},
        {"backend": "v2", "config": [32, 2, 1], "status": "wrong", "reason": "error 0.3"},
    ]
    entry["prefill"] = [
        {"kernel": "alibi", "num_heads": 40, "num_kv_heads": 40, "head_size": 128,
         "dtype": "bfloat16", "num_seqs": 8, "context_len": 1024, "query_len": 512,
         "default_warps": 4, "default_us": 1812.0, "winner_warps": 8, "winner_us": 1068.0,
         "candidates": [{"num_warps": 2, "status": "failed", "reason": "out of resources"}]},
    ]  # fmt: skip
    rows = table.summary_rows(entry)  # in file order (tune writes lengths ascending)
    assert rows[1] == {
        "shape": "32/8/128 bfloat16",
        "point": "1 x 1024 (graph)",
        "default": "10.0us",
        "tuned": "5.0us v2 64,4,1,True,0,True",
        "speedup": "2.00x",
    }
    assert rows[0]["tuned"] == "9.0us v2 default" and rows[0]["speedup"] == "1.11x"
    assert rows[-1] == {
        "shape": "40/40/128 bfloat16 prefill-alibi",
        "point": "8 x (1024+512)",
        "default": "1812.0us w4",
        "tuned": "1068.0us w8",
        "speedup": "1.70x",
    }
    assert table.rejected(entry) == {"wrong": 1, "failed": 2}

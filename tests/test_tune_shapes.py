"""Shapes for `tune`: read from Hugging Face config.json the way vLLM reads them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vllm_codemod.errors import CodemodError
from vllm_codemod.tuning.deployment import read_run_config
from vllm_codemod.tuning.shapes import (
    BUILTIN_SHAPES,
    Shape,
    parse_shape,
    read_model_config,
    resolve,
)

CONFIGS = Path(__file__).resolve().parent / "model_configs"


@pytest.mark.parametrize(
    "name, tp, expected, max_len",
    [
        ("llama-3-8b.json", 1, Shape(32, 8, 128, "bfloat16", False), 8192),
        ("llama-3-8b.json", 2, Shape(16, 4, 128, "bfloat16", False), 8192),
        ("llama-3-8b.json", 16, Shape(2, 1, 128, "bfloat16", False), 8192),  # kv replicated
        ("baichuan2-13b.json", 1, Shape(40, 40, 128, "bfloat16", True), 4096),
        ("baichuan2-13b.json", 4, Shape(10, 10, 128, "bfloat16", True), 4096),
        ("qwen2-7b.json", 1, Shape(28, 4, 128, "bfloat16", False), 32768),
        ("qwen2-7b.json", 4, Shape(7, 1, 128, "bfloat16", False), 32768),
        ("falcon-7b.json", 1, Shape(71, 1, 64, "bfloat16", False), None),  # multi_query
        ("bloom-560m.json", 1, Shape(16, 16, 64, "float16", True), None),  # no dtype: fp16
    ],
)
def test_model_config_shapes(name, tp, expected, max_len):
    assert read_model_config(CONFIGS / name, tp) == (expected, max_len)


def test_model_directory_is_read_through_its_config(tmp_path):
    model = tmp_path / "Qwen2-7B"
    model.mkdir()
    shutil.copy(CONFIGS / "qwen2-7b.json", model / "config.json")
    assert read_model_config(model)[0] == Shape(28, 4, 128)


def test_baichuan_7b_width_is_rope_not_alibi(tmp_path):
    text = (
        (CONFIGS / "baichuan2-13b.json")
        .read_text()
        .replace('"hidden_size": 5120', '"hidden_size": 4096')
    )
    text = text.replace('"num_attention_heads": 40', '"num_attention_heads": 32')
    (tmp_path / "config.json").write_text(text)
    assert read_model_config(tmp_path)[0] == Shape(32, 32, 128, "bfloat16", False)


def test_explicit_alibi_keys(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"model_type": "mpt", "n_heads": 32, "d_model": 4096, '
        '"attn_config": {"alibi": true}, "torch_dtype": "float32"}'
    )
    # vLLM serves float32 checkpoints as float16 by default
    assert read_model_config(tmp_path)[0] == Shape(32, 32, 128, "float16", True)


def test_malformed_json_names_line_and_column(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{\n  "num_attention_heads": 32,\n  "hidden_size": ,\n}\n')
    with pytest.raises(CodemodError, match=r"config\.json:3:18: not valid JSON"):
        read_model_config(bad)


def test_bad_field_names_its_position(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{\n  "num_attention_heads": 32,\n    "num_key_value_heads": "eight"\n}\n')
    with pytest.raises(CodemodError, match=r"config\.json:3:5: num_key_value_heads = 'eight'"):
        read_model_config(bad)


@pytest.mark.parametrize(
    "text, message",
    [
        # multimodal: the vision tower's keys come first; the error is the language model's
        (
            '{"vision_config": {"num_attention_heads": 16},\n'
            ' "text_config": {"num_attention_heads": "many", "hidden_size": 4096}}\n',
            "2:18: num_attention_heads = 'many'",
        ),
        # json.loads keeps the last of repeated keys: so does the position
        (
            '{"num_attention_heads": 32,\n "num_attention_heads": 0}\n',
            "2:2: num_attention_heads = 0",
        ),
        # the width named by the key the config uses, at that key
        ('{"n_head": 12,\n "n_embd": 770}\n', "2:2: n_embd 770 is not a multiple of 12 heads"),
        # a bad head size points at the key that gave it, not at the heads
        ('{"num_attention_heads": 32,\n "head_dim": 100}\n', "2:2: head size 100"),
        ('{"n_head": 32,\n "d_model": 3200}\n', "2:2: head size 100"),
        # heads read from n_head: the message still has a position
        ('{"n_head": 30,\n "n_head_kv": 8, "hidden_size": 3840}\n', "1:2: 30 heads are not"),
        # the top-level value is not at 1:1 when the file starts with blank lines
        ("\n\n  [1, 2]\n", "3:3: expected a JSON object"),
    ],
)
def test_config_errors_point_at_the_key_they_name(tmp_path, text, message):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(CodemodError) as error:
        read_model_config(tmp_path)
    assert str(error.value).startswith(f"{tmp_path / 'config.json'}:{message}"), str(error.value)


def test_a_byte_that_is_not_utf8_is_counted_from_the_start_of_the_file(tmp_path):
    config = tmp_path / "config.json"
    config.write_bytes(b'\xef\xbb\xbf{"model_type": "\xff"}')  # BOM, then byte 19 is bad
    with pytest.raises(CodemodError, match=r"not UTF-8 \(byte 19\)"):
        read_model_config(config)


@pytest.mark.parametrize(
    "text, match",
    [
        ('{"hidden_size": 4096}', "no num_attention_heads"),
        ('{"num_attention_heads": 32}', "neither head_dim nor hidden_size"),
        ('{"num_attention_heads": 32, "hidden_size": 4097}', "not a multiple of 32 heads"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_unusable_configs_are_user_errors(tmp_path, text, match):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(CodemodError, match=match):
        read_model_config(tmp_path)


def test_tensor_parallel_must_split_the_heads():
    with pytest.raises(CodemodError, match="71 attention heads cannot be split"):
        read_model_config(CONFIGS / "falcon-7b.json", 2)
    with pytest.raises(CodemodError, match="4 kv heads cannot be split"):
        read_model_config(CONFIGS / "qwen2-7b.json", 7)


def test_missing_model_config():
    with pytest.raises(CodemodError, match="no such file"):
        read_model_config(CONFIGS / "nope.json")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("32/8/128", Shape(32, 8, 128)),
        ("40/40/128:alibi", Shape(40, 40, 128, alibi=True)),
        (" 16/2/256 ", Shape(16, 2, 256)),
    ],
)
def test_parse_shape(text, expected):
    assert parse_shape(text) == expected


@pytest.mark.parametrize(
    "text, match",
    [
        ("32x8x128", "expected HEADS/KV_HEADS/HEAD_SIZE"),
        ("32/6/128", "not a multiple of 6 kv heads"),
        ("32/8/100", "head size 100 is not supported"),
        ("32/8/512", "head size 512 is not supported"),
        ("0/0/128", "must be positive"),
    ],
)
def test_bad_shapes(text, match):
    with pytest.raises(CodemodError, match=match):
        parse_shape(text)


def test_builtin_set_has_the_reference_shapes():
    labels = {(s.num_heads, s.num_kv_heads, s.head_size) for s in BUILTIN_SHAPES}
    assert {(32, 8, 128), (16, 2, 256), (28, 4, 128)} <= labels
    assert any(s.alibi for s in BUILTIN_SHAPES)
    deployment = resolve(None, None, (), None, None, None, None)
    assert deployment.shapes == list(BUILTIN_SHAPES)
    assert deployment.max_model_len == 32768


def test_resolve_combines_model_shapes_and_options():
    d = resolve(CONFIGS / "llama-3-8b.json", None, ("16/2/256",), 2, None, 8, "fp16")
    assert d.shapes == [Shape(16, 4, 128, "float16"), Shape(16, 2, 256, "float16")]
    assert (d.max_model_len, d.max_num_seqs) == (8192, 8)  # the model's own maximum
    assert (
        resolve(CONFIGS / "llama-3-8b.json", None, (), None, 4096, None, None).max_model_len == 4096
    )


RUN_CONFIG = """\
# deployment of the 13B
engine:
  model: {model}
  tensor_parallel_size: 2
  max-model-len: 4k   # a comment --max-num-seqs 999
command: >
  vllm serve ignored --max-num-seqs 64
"""


def test_run_config_names_the_model_tp_and_lengths(tmp_path):
    model = tmp_path / "models" / "baichuan"
    model.mkdir(parents=True)
    shutil.copy(CONFIGS / "baichuan2-13b.json", model / "config.json")
    run = tmp_path / "run.yaml"
    run.write_text(RUN_CONFIG.format(model="models/baichuan"))
    found = read_run_config(run)
    assert found == {
        "model": model,
        "tensor_parallel": 2,
        "max_model_len": 4000,
        "max_num_seqs": 64,
    }
    d = resolve(None, run, (), None, None, None, None)
    assert d.shapes == [Shape(20, 20, 128, "bfloat16", True)]
    assert (d.max_model_len, d.max_num_seqs) == (4000, 64)
    assert resolve(None, run, (), 1, 2048, None, None).shapes == [
        Shape(40, 40, 128, "bfloat16", True)
    ]


def test_run_config_flags_in_a_list(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(
        f"args:\n  - --model\n  - {CONFIGS / 'qwen2-7b.json'}\n  - -tp\n  - '2'\n"
        "  - --max_model_len=16384\n"
    )
    assert read_run_config(run) == {
        "model": CONFIGS / "qwen2-7b.json",
        "tensor_parallel": 2,
        "max_model_len": 16384,
    }


def test_values_from_the_run_config_are_named_as_the_run_config_spells_them(tmp_path):
    # Before: "--max-model-len 8: must be at least 16 tokens" and "cannot be split over
    # --tensor-parallel 2", options the user never passed.
    run = tmp_path / "run.yaml"
    run.write_text("engine:\n  max-model-len: 8\n")
    with pytest.raises(CodemodError) as error:
        resolve(None, run, ["32/8/128"], None, None, None, None)
    assert str(error.value) == f"{run}:2:3: max-model-len 8: must be at least 16 tokens"
    run.write_text(f"model: {CONFIGS / 'falcon-7b.json'}\ntensor_parallel_size: 2\n")
    with pytest.raises(CodemodError) as error:
        resolve(None, run, (), None, None, None, None)
    assert f"71 attention heads cannot be split over tensor-parallel-size 2 ({run}:2:1)" in str(
        error.value
    )
    # an option given on the command line is still named as the option
    with pytest.raises(CodemodError, match="71 attention heads cannot be split over --tensor-pa"):
        resolve(None, run, (), 2, None, None, None)
    model = tmp_path / "config.json"
    model.write_text('{"num_attention_heads": 32, "hidden_size": 4096, "n_positions": 8}')
    with pytest.raises(CodemodError) as error:
        resolve(model, None, (), None, None, None, None)
    assert str(error.value) == f"{model}: the model's maximum context 8: must be at least 16 tokens"


def test_run_config_errors_name_the_place(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("a: 1\nmax-num-seqs: lots\n")
    with pytest.raises(CodemodError, match=r"run\.yaml:2:1: 'lots' is not a positive integer"):
        read_run_config(run)
    run.write_text("model: meta-llama/Llama-3-8B\n")
    with pytest.raises(CodemodError, match="not a local directory or file; pass its config.json"):
        read_run_config(run)
    run.write_text("a: [1,\n")
    with pytest.raises(CodemodError, match=r"run\.yaml:\d+:\d+: malformed YAML"):
        read_run_config(run)


@pytest.mark.parametrize("value", ["0", "true", "-4"])
def test_bad_mpt_kv_n_heads_is_a_user_error(tmp_path, value):
    # Before: kv_n_heads 0 was a ZeroDivisionError traceback (exit 3) and `true` was read
    # as one kv head; now it is the one-line error every other bad head count gets.
    bad = tmp_path / "config.json"
    bad.write_text(
        '{"model_type": "mpt", "n_heads": 32, "d_model": 4096,\n'
        ' "attn_config": {"kv_n_heads": ' + value + "}}\n"
    )
    with pytest.raises(CodemodError, match=r"config\.json:2:18: kv_n_heads = .* positive"):
        read_model_config(bad, 2)


@pytest.mark.parametrize(
    "text, dtype",
    [
        # a null torch_dtype does not hide dtype
        ('{"num_attention_heads": 8, "hidden_size": 1024, "torch_dtype": null,'
         ' "dtype": "bfloat16"}', "bfloat16"),
        # multimodal: the top level's dtype when the language model states none
        ('{"torch_dtype": "bfloat16",'
         ' "text_config": {"num_attention_heads": 8, "hidden_size": 1024}}', "bfloat16"),
        # ... and the language model's own when it does
        ('{"torch_dtype": "float16", "text_config": {"num_attention_heads": 8,'
         ' "hidden_size": 1024, "torch_dtype": "bfloat16"}}', "bfloat16"),
        ('{"num_attention_heads": 8, "hidden_size": 1024}', "float16"),
        ('{"num_attention_heads": 8, "hidden_size": 1024, "torch_dtype": "float32"}', "float16"),
    ],
)  # fmt: skip
def test_the_served_dtype_is_the_first_one_set(tmp_path, text, dtype):
    (tmp_path / "config.json").write_text(text)
    assert read_model_config(tmp_path)[0].dtype == dtype


def test_a_bad_top_level_dtype_of_a_multimodal_config_points_at_it(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"text_config": {"num_attention_heads": 8, "hidden_size": 1024},\n "torch_dtype": "int3"}'
    )
    with pytest.raises(CodemodError, match=r"config\.json:2:2"):
        read_model_config(tmp_path)

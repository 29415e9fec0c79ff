"""The attention shapes a deployment runs, from its model config or from the command line.

Tuning is per shape because the best launch (and whether the vendor V1 kernel wins)
depends on heads, kv heads and head size as the GPU sees them: after tensor parallelism
splits the heads, in the dtype vLLM will serve.  These are read from Hugging Face
``config.json`` the way vLLM reads them, without importing transformers.
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from json.decoder import scanstring
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import UserError
from ..kernels.tuning_table import DTYPE_ALIASES

DTYPES = ("bfloat16", "float16", "float32")
#: model_type values whose attention always uses ALiBi (vLLM's model code for them).
ALIBI_MODEL_TYPES = ("bloom",)
#: Baichuan: vLLM builds the 4096-wide (7B) models with RoPE, every other width with ALiBi.
BAICHUAN_ROPE_HIDDEN = 4096
DEFAULT_MAX_MODEL_LEN = 32768
DEFAULT_MAX_NUM_SEQS = 256


@dataclass(frozen=True)
class Shape:
    """One attention layer as one GPU runs it."""

    num_heads: int
    num_kv_heads: int
    head_size: int
    dtype: str = "bfloat16"
    alibi: bool = False

    def label(self) -> str:
        short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(self.dtype)
        text = f"{self.num_heads}/{self.num_kv_heads}/{self.head_size} {short or self.dtype}"
        return text + (" alibi" if self.alibi else "")


@dataclass
class Deployment:
    """What to tune for: the shapes, the longest context, the largest batch."""

    shapes: List[Shape]
    max_model_len: int
    max_num_seqs: int
    source: str


#: Used when neither a model nor shapes are given: common GQA layouts at TP 1 and one
#: ALiBi model (Baichuan2-13B).
BUILTIN_SHAPES: Tuple[Shape, ...] = (
    Shape(32, 8, 128),  # Llama-3-8B, Mistral-7B
    Shape(16, 2, 256),  # Gemma-2 class, head 256
    Shape(28, 4, 128),  # Qwen2-7B
    Shape(40, 40, 128, alibi=True),  # Baichuan2-13B
)


def normalize_dtype(raw: str, where: str) -> str:
    name = str(raw).strip().lower()
    if name.startswith("torch."):
        name = name[len("torch.") :]
    if name not in DTYPE_ALIASES:
        raise UserError(
            f"{where}: unsupported dtype {raw!r}; use one of {', '.join(DTYPES)} (or bf16/fp16)"
        )
    return DTYPE_ALIASES[name]


def parse_shape(text: str, dtype: str = "bfloat16") -> Shape:
    """``Hq/Hkv/D`` with an optional ``:alibi``, e.g. ``32/8/128`` or ``40/40/128:alibi``."""
    match = re.fullmatch(r"\s*(\d+)/(\d+)/(\d+)\s*(?::\s*(alibi)\s*)?", text, flags=re.I)
    if not match:
        raise UserError(
            f"--shape {text!r}: expected HEADS/KV_HEADS/HEAD_SIZE, e.g. 32/8/128 or 40/40/128:alibi"
        )
    heads, kv_heads, head_size = (int(match.group(i)) for i in (1, 2, 3))
    _check_shape(heads, kv_heads, head_size, f"--shape {text!r}")
    return Shape(heads, kv_heads, head_size, dtype, bool(match.group(4)))


def _check_shape(
    heads: int, kv_heads: int, head_size: int, where: str, head_size_where: str = ""
) -> None:
    """Refuse a shape the kernels cannot run; ``head_size_where`` (default ``where``)
    is where a config spelled the head size, when that is another key than the heads."""
    if heads <= 0 or kv_heads <= 0 or head_size <= 0:
        raise UserError(f"{where}: heads, kv heads and head size must be positive")
    if heads % kv_heads:
        raise UserError(
            f"{where}: {heads} heads are not a multiple of {kv_heads} kv heads; check the shape"
        )
    if head_size > 256 or head_size % 8:
        raise UserError(
            f"{head_size_where or where}: head size {head_size} is not supported (a multiple "
            "of 8, at most 256)"
        )


# --------------------------------------------------------------------------- HF config.json


KeyPath = Tuple[Optional[str], ...]


@lru_cache(maxsize=4)
def _key_offsets(text: str) -> Dict[KeyPath, int]:
    """Offset of every object key in valid JSON ``text``, by its path of keys.

    ``{"a": {"b": 1}}`` gives ``("a",)`` and ``("a", "b")``; a key inside an array has a
    None in its path.  A repeated key maps to its last spelling, the one ``json.loads``
    keeps.  One plain scan per config (cached): a config.json is a few kilobytes.
    """
    offsets: Dict[KeyPath, int] = {}
    path: List[Optional[str]] = []  # per open container: its current key
    in_object: List[bool] = []
    expect_key = False
    index = 0
    while index < len(text):
        char = text[index]
        if char == '"':
            value, end = scanstring(text, index + 1)
            if expect_key:
                path[-1] = value
                offsets[tuple(path)] = index
                expect_key = False
            index = end
            continue
        if char in "{[":
            in_object.append(char == "{")
            path.append(None)
            expect_key = char == "{"
        elif char in "}]":
            in_object.pop()
            path.pop()
            expect_key = False
        elif char == "," and in_object and in_object[-1]:
            expect_key = True
        index += 1
    return offsets


def _line_col(text: str, index: int) -> str:
    """``:line:col`` (both from 1, as JSON decode errors count) of offset ``index``."""
    line = text.count("\n", 0, index) + 1
    col = index - (text.rfind("\n", 0, index) + 1) + 1
    return f":{line}:{col}"


@dataclass(frozen=True)
class _Source:
    """Where a config object sits in its file, so that a message names the right key.

    ``prefix`` is the keys leading to the object read: ``("text_config",)`` for a
    multimodal model's language model, whose keys a vision tower may repeat earlier on.
    """

    path: Path
    text: str
    prefix: Tuple[str, ...] = ()

    def at(self, key: str) -> str:
        """``path:line:col`` of ``key`` in this object (just the path if it is not there)."""
        index = _key_offsets(self.text).get((*self.prefix, key))
        return f"{self.path}" if index is None else f"{self.path}{_line_col(self.text, index)}"

    def inside(self, key: str) -> _Source:
        return replace(self, prefix=(*self.prefix, key))


def _read_json(path: Path) -> Tuple[Dict[str, Any], str]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UserError(
            f"{path}: no such file; pass a model directory or its config.json"
        ) from None
    except UnicodeDecodeError as exc:
        # utf-8-sig counts from after a byte order mark; the user's tools count the file.
        try:
            with path.open("rb") as stream:
                bom = len(codecs.BOM_UTF8) if stream.read(3) == codecs.BOM_UTF8 else 0
        except OSError:
            bom = 0
        raise UserError(f"{path}: not UTF-8 (byte {exc.start + bom})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}); "
            "pass the model's Hugging Face config.json"
        ) from None
    if not isinstance(data, dict):
        start = len(text) - len(text.lstrip(" \t\r\n"))  # the value, after JSON whitespace
        raise UserError(
            f"{path}{_line_col(text, start)}: expected a JSON object (a Hugging Face config.json)"
        )
    return data, text


def _int_field(
    config: Dict[str, Any], keys: Sequence[str], source: _Source
) -> Optional[Tuple[str, int]]:
    """The first of ``keys`` set in ``config``, and its value (a positive integer)."""
    for key in keys:
        if key in config and config[key] is not None:
            value = config[key]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise UserError(
                    f"{source.at(key)}: {key} = {value!r} is not a positive integer; "
                    "fix the model config"
                )
            return key, value
    return None


def _is_alibi(config: Dict[str, Any]) -> bool:
    """Whether vLLM's model code for this config uses ALiBi attention."""
    model_type = str(config.get("model_type", "")).lower()
    if model_type in ALIBI_MODEL_TYPES:
        return True
    if config.get("alibi") is True:  # Falcon (RW) with alibi, explicit flags
        return True
    if str(config.get("position_embedding_type", "")).lower() == "alibi":  # JAIS
        return True
    attn = config.get("attn_config")
    if model_type == "mpt" and isinstance(attn, dict) and attn.get("alibi") is True:
        return True
    archs = [str(a).lower() for a in config.get("architectures") or []]
    if model_type == "baichuan" or any(a.startswith("baichuan") for a in archs):
        return config.get("hidden_size") != BAICHUAN_ROPE_HIDDEN
    return False


def _kv_heads(config: Dict[str, Any], heads: int, source: _Source) -> int:
    explicit = _int_field(
        config, ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"),
        source,
    )  # fmt: skip
    if explicit is not None:
        return explicit[1]
    attn = config.get("attn_config")
    if isinstance(attn, dict):
        mpt = _int_field(attn, ("kv_n_heads",), source.inside("attn_config"))  # MPT
        if mpt is not None:
            return mpt[1]
    if config.get("multi_query") is True:
        return 1  # Falcon-7B style MQA
    return heads


def _model_dtype(places: Sequence[Tuple[Dict[str, Any], _Source]]) -> str:
    """The dtype vLLM serves by default ("auto"): the first ``torch_dtype`` or ``dtype``
    that is set (not null) in ``places`` (a multimodal config's language model, then its
    top level), with float32 as float16; float16 when none is."""
    for config, source in places:
        for key in ("torch_dtype", "dtype"):
            raw = config.get(key)
            if raw is not None:
                dtype = normalize_dtype(raw, source.at(key))
                return "float16" if dtype == "float32" else dtype
    return "float16"


def _config_path(path: Path) -> Path:
    if path.is_dir():
        candidate = path / "config.json"
        if not candidate.is_file():
            raise UserError(
                f"{path}: no config.json in this directory; pass the model directory or its "
                "config.json"
            )
        return candidate
    return path


def read_model_config(
    path: Path, tensor_parallel: int = 1, tensor_parallel_from: str = ""
) -> Tuple[Shape, Optional[int]]:
    """The per-GPU attention shape of a model and its maximum context (None if unstated).

    ``tensor_parallel_from`` is the run config's ``path:line:col`` when the TP size came
    from there, so that a message names it there rather than as ``--tensor-parallel``.
    """
    tp_label = (
        f"tensor-parallel-size {tensor_parallel} ({tensor_parallel_from})"
        if tensor_parallel_from
        else f"--tensor-parallel {tensor_parallel}"
    )
    path = _config_path(path)
    config, text = _read_json(path)
    source = _Source(path, text)
    dtype_places = [(config, source)]
    if isinstance(config.get("text_config"), dict):  # multimodal: the language model's
        config = {**config["text_config"], "architectures": config.get("architectures")}
        source = source.inside("text_config")
        dtype_places.insert(0, (config, source))
    found_heads = _int_field(
        config, ("num_attention_heads", "n_head", "n_heads", "num_heads"), source
    )
    if found_heads is None:
        raise UserError(
            f"{path}: no num_attention_heads (or n_head); is this a Hugging Face config.json?"
        )
    heads_key, heads = found_heads
    kv_heads = _kv_heads(config, heads, source)
    found_size = _int_field(config, ("head_dim",), source)
    if found_size is None:
        hidden = _int_field(config, ("hidden_size", "n_embd", "d_model"), source)
        if hidden is None:
            raise UserError(f"{path}: neither head_dim nor hidden_size; cannot tell the head size")
        hidden_key, width = hidden
        if width % heads:
            raise UserError(
                f"{source.at(hidden_key)}: {hidden_key} {width} is not a multiple "
                f"of {heads} heads; pass --shape instead"
            )
        size_key, head_size = hidden_key, width // heads
    else:
        size_key, head_size = found_size
    if tensor_parallel < 1:
        raise UserError(f"{tp_label}: must be at least 1")
    if heads % tensor_parallel:
        raise UserError(
            f"{path}: {heads} attention heads cannot be split over {tp_label}; vLLM needs "
            "heads divisible by the TP size"
        )
    if (kv_heads >= tensor_parallel and kv_heads % tensor_parallel) or (
        kv_heads < tensor_parallel and tensor_parallel % kv_heads
    ):
        raise UserError(
            f"{path}: {kv_heads} kv heads cannot be split over {tp_label}; vLLM needs one "
            "to divide the other"
        )
    shape = Shape(
        heads // tensor_parallel,
        max(1, kv_heads // tensor_parallel),
        head_size,
        _model_dtype(dtype_places),
        _is_alibi(config),
    )
    _check_shape(
        shape.num_heads, shape.num_kv_heads, shape.head_size, source.at(heads_key),
        source.at(size_key),
    )  # fmt: skip
    max_len = _int_field(
        config, ("max_position_embeddings", "model_max_length", "seq_length", "n_positions",
                 "max_sequence_length"), source,
    )  # fmt: skip
    return shape, None if max_len is None else max_len[1]


def resolve(
    model_config: Optional[Path],
    run_config: Optional[Path],
    shapes: Sequence[str],
    tensor_parallel: Optional[int],
    max_model_len: Optional[int],
    max_num_seqs: Optional[int],
    dtype: Optional[str],
) -> Deployment:
    """Combine the sources: explicit options win over the run config, which names the model.

    A message about a value names where it came from: the option, or the run config's
    key and place.
    """
    from_run: Dict[str, Any] = {}
    run_places: Dict[str, str] = {}
    if run_config is not None:
        from .deployment import read_run_config_places

        from_run, run_places = read_run_config_places(run_config)
        if model_config is None and from_run.get("model") is not None:
            model_config = from_run["model"]
    tp = tensor_parallel or from_run.get("tensor_parallel") or 1
    tp_from = "" if tensor_parallel else run_places.get("tensor_parallel", "")
    length = max_model_len or from_run.get("max_model_len")
    length_name = "--max-model-len"
    if not max_model_len and "max_model_len" in from_run:
        length_name = f"{run_places['max_model_len']}: max-model-len"
    seqs = max_num_seqs or from_run.get("max_num_seqs") or DEFAULT_MAX_NUM_SEQS
    chosen_dtype = normalize_dtype(dtype, "--dtype") if dtype else None
    found: List[Shape] = []
    source = "built-in shapes"
    if model_config is not None:
        shape, model_len = read_model_config(Path(model_config), tp, tp_from)
        if chosen_dtype:
            shape = replace(shape, dtype=chosen_dtype)
        found.append(shape)
        if not length and model_len:
            length, length_name = model_len, f"{model_config}: the model's maximum context"
        source = str(model_config)
    for text in shapes:
        found.append(parse_shape(text, chosen_dtype or "bfloat16"))
        source = "--shape" if model_config is None else source + " and --shape"
    if not found:
        found = [replace(s, dtype=chosen_dtype) if chosen_dtype else s for s in BUILTIN_SHAPES]
    unique: List[Shape] = []
    for shape in found:
        if shape not in unique:
            unique.append(shape)
    length = length or DEFAULT_MAX_MODEL_LEN
    if length < 16:
        raise UserError(f"{length_name} {length}: must be at least 16 tokens")
    if seqs < 1:
        raise UserError(f"--max-num-seqs {seqs}: must be at least 1")
    return Deployment(unique, int(length), int(seqs), source)

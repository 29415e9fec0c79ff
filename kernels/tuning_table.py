"""Read a tuning file written by ``vllm-codemod tune`` and answer "which kernel, which launch".

Copied into patched trees with the kernels and read by the entry point at its first
call, inside vLLM worker processes: so it is pure Python (json only), imports nothing
heavy, never touches CUDA, and runs on Python 3.8.  The tool validates files with this
same module, so a file ``apply --tuning`` accepts is one the entry point can read.
The format is documented in docs/tuning.md.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

SCHEMA_VERSION = 1
BACKENDS = ("v1", "v2")
#: LaunchConfig fields (kernels/launch_tables.py), in order; a table config holds 3 to 8.
CONFIG_FIELDS = ("tile", "warps", "stages", "early_v", "prefetch", "k3d", "chunk", "slots")
#: Programs per SM a config's ``slots`` may ask for (the most blocks an NVIDIA SM holds).
MAX_SLOTS = 32
#: Triton warp counts a prefix-prefill launch accepts.
VALID_WARPS = (1, 2, 4, 8, 16, 32)
#: PrefillConfig fields (kernels/prefill_launch.py), in order: a prefill config holds all 4.
PREFILL_CONFIG_FIELDS = ("block_m", "block_n", "num_warps", "num_stages")
#: Bytes per element of the query dtypes a prefill config is keyed by.
ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}

#: Every dtype spelling a tuning file, a model config or a shape may use -> the one name.
DTYPE_ALIASES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}


class TuningFileError(ValueError):
    """A tuning file that cannot be used; the message names the file and what is wrong."""


class Decision(NamedTuple):
    """What to run: ``backend`` "v1" (the tree's own paged_attention_v1) or "v2" (ours),
    and for "v2" the launch config fields (None: the built-in tables)."""

    backend: str
    config: Optional[Tuple[Any, ...]]


class _Point(NamedTuple):
    max_seq_len: int
    winner: Decision
    eager_winner: Optional[Decision]


class _DecodeEntry(NamedTuple):
    num_heads: int
    num_kv_heads: int
    head_size: int
    dtype: str
    alibi: bool
    num_seqs: int
    points: Tuple[_Point, ...]


def normalize_dtype(value: Any) -> str:
    """``torch.bfloat16``, ``"bf16"``, ``"bfloat16"`` -> ``"bfloat16"`` (unknown: as given)."""
    text = str(value).strip().lower()
    if text.startswith("torch."):
        text = text[len("torch.") :]
    return DTYPE_ALIASES.get(text, text)


class DeviceTable:
    """The measurements of one device: decode decisions per shape and length bucket."""

    def __init__(
        self,
        name: str,
        decode: Sequence[_DecodeEntry],
        prefill_warps: Dict[str, int],
        raw: Dict[str, Any],
        prefill_num_warps: Optional[int] = None,
        prefill_configs: Optional[Dict[Tuple[int, int], Tuple[int, int, int, int]]] = None,
        prefill_small: Optional[Dict[Tuple[int, int], Tuple[int, Any]]] = None,
    ) -> None:
        self.name = name
        self._decode = list(decode)
        #: the fastest warps per prefix-prefill kernel ("main", "alibi") where measured
        self.prefill_warps = dict(prefill_warps)
        #: the one NUM_WARPS for the tree that ``apply --tuning`` writes (None: unmeasured)
        self.prefill_num_warps = prefill_num_warps
        #: our prefix-prefill kernel's measured launch configs: (padded head size,
        #: element bytes) -> (block_m, block_n, num_warps, num_stages); a key not here
        #: (a file without ``prefill_configs``, or a default that won) keeps the built-in
        self.prefill_configs = dict(prefill_configs or {})
        #: their size tiers: (padded head, element bytes) -> (below, config or None):
        #: launches smaller than ``below`` (``prefill_launch.work_estimate``) run that
        #: config, None meaning the built-in default
        self.prefill_small = dict(prefill_small or {})
        self.raw = raw

    def decide(
        self,
        num_seqs: int,
        num_heads: int,
        num_kv_heads: int,
        head_size: int,
        max_seq_len: int,
        dtype_name: Any,
        alibi: Optional[bool] = None,
        eager: bool = False,
    ) -> Optional[Decision]:
        """The measured choice for this call, or None where nothing measured covers it.

        The shape must match exactly (heads, kv heads, head size, dtype; ``alibi`` when
        given prefers the entry measured with the same setting).  Among the batch sizes
        measured for it, the smallest one >= ``num_seqs`` is used; a batch bigger than
        any measured gets None (never extrapolated).  Among its context-length points,
        the smallest ``max_seq_len`` >= this call's (a point covers the lengths above the
        previous point up to its own).  Longer than every point: None.  ``eager`` picks
        the winner timed without CUDA graphs where the file has one.
        """
        return pick(
            self.points(num_seqs, num_heads, num_kv_heads, head_size, dtype_name, alibi),
            max_seq_len,
            eager,
        )

    def points(
        self,
        num_seqs: int,
        num_heads: int,
        num_kv_heads: int,
        head_size: int,
        dtype_name: Any,
        alibi: Optional[bool] = None,
    ) -> Tuple[_Point, ...]:
        """The measured length points for this batch and shape (``decide`` without the
        length); empty where nothing covers it.  Fixed per shape, so callers may cache it
        and pay only :func:`pick` per call."""
        dtype = normalize_dtype(dtype_name)
        matches = [
            e
            for e in self._decode
            if (e.num_heads, e.num_kv_heads, e.head_size, e.dtype)
            == (int(num_heads), int(num_kv_heads), int(head_size), dtype)
        ]
        if alibi is not None and any(e.alibi == bool(alibi) for e in matches):
            matches = [e for e in matches if e.alibi == bool(alibi)]
        covering = [e for e in matches if e.num_seqs >= int(num_seqs)]
        if not covering:
            return ()
        return min(covering, key=lambda e: e.num_seqs).points


def pick(points: Sequence[_Point], max_seq_len: int, eager: bool = False) -> Optional[Decision]:
    """The winner of the first point (sorted by length) covering ``max_seq_len``."""
    for point in points:
        if point.max_seq_len >= max_seq_len:
            if eager and point.eager_winner is not None:
                return point.eager_winner
            return point.winner
    return None


class Table:
    """A whole tuning file: one DeviceTable per device measured."""

    def __init__(self, devices: Sequence[DeviceTable], raw: Dict[str, Any]) -> None:
        self.devices = list(devices)
        self.raw = raw

    def for_device(self, device_name: str) -> Optional[DeviceTable]:
        """The table measured on a device of this name (exact, then case-insensitive)."""
        for device in self.devices:
            if device.name == device_name:
                return device
        wanted = str(device_name).strip().lower()
        for device in self.devices:
            if device.name.strip().lower() == wanted:
                return device
        return None


# --------------------------------------------------------------------------- parsing


class _Reader:
    """Field access that names the JSON path of whatever is missing or malformed."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, what: str) -> TuningFileError:
        return TuningFileError(
            f"{self.source}: {where}: {what}; produce the file with `vllm-codemod tune` "
            "or fix that field (format: docs/tuning.md)"
        )

    def get(self, obj: Dict[str, Any], key: str, where: str, kind: Any) -> Any:
        if key not in obj:
            raise self.fail(f"{where}.{key}", "missing")
        return self.check(obj[key], f"{where}.{key}", kind)

    def check(self, value: Any, where: str, kind: Any) -> Any:
        if kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind is bool:
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, kind)
        if not ok:
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise self.fail(where, f"expected {names}, got {type(value).__name__}")
        return value

    def positive(self, obj: Dict[str, Any], key: str, where: str) -> int:
        value = self.get(obj, key, where, int)
        if value <= 0:
            raise self.fail(f"{where}.{key}", f"must be a positive integer, got {value}")
        return value


def _decision(reader: _Reader, raw: Any, where: str) -> Decision:
    reader.check(raw, where, dict)
    backend = reader.get(raw, "backend", where, str)
    if backend not in BACKENDS:
        raise reader.fail(f"{where}.backend", f"expected one of {list(BACKENDS)}, got {backend!r}")
    config = raw.get("config")
    if config is None:
        return Decision(backend, None)
    if backend != "v2":
        raise reader.fail(f"{where}.config", "only a v2 decision has a launch config")
    reader.check(config, f"{where}.config", list)
    if not 3 <= len(config) <= len(CONFIG_FIELDS):
        raise reader.fail(
            f"{where}.config", f"expected 3 to {len(CONFIG_FIELDS)} fields {CONFIG_FIELDS}"
        )
    for i, (field, value) in enumerate(zip(CONFIG_FIELDS, config)):
        kind = bool if field in ("early_v", "k3d") else int
        reader.check(value, f"{where}.config[{i}] ({field})", kind)
        if kind is int and value < (0 if field in ("prefetch", "chunk", "slots") else 1):
            raise reader.fail(f"{where}.config[{i}] ({field})", f"out of range: {value}")
        if field == "slots" and value > MAX_SLOTS:
            raise reader.fail(f"{where}.config[{i}] ({field})", f"0-{MAX_SLOTS}, got {value}")
        if field == "chunk" and value and (value & (value - 1) or not 16 <= value <= 512):
            raise reader.fail(
                f"{where}.config[{i}] ({field})", f"0 or a power of two 16-512, got {value}"
            )
    return Decision(backend, tuple(config))


def _decode_entry(reader: _Reader, raw: Any, where: str) -> _DecodeEntry:
    reader.check(raw, where, dict)
    heads = reader.positive(raw, "num_heads", where)
    kv_heads = reader.positive(raw, "num_kv_heads", where)
    if heads % kv_heads:
        raise reader.fail(where, f"num_heads {heads} is not a multiple of num_kv_heads {kv_heads}")
    points: List[_Point] = []
    for i, point in enumerate(reader.get(raw, "points", where, list)):
        pwhere = f"{where}.points[{i}]"
        reader.check(point, pwhere, dict)
        eager = point.get("eager_winner")
        points.append(
            _Point(
                reader.positive(point, "max_seq_len", pwhere),
                _decision(reader, point.get("winner"), f"{pwhere}.winner"),
                None if eager is None else _decision(reader, eager, f"{pwhere}.eager_winner"),
            )
        )
    points.sort(key=lambda p: p.max_seq_len)
    return _DecodeEntry(
        heads,
        kv_heads,
        reader.positive(raw, "head_size", where),
        normalize_dtype(reader.get(raw, "dtype", where, str)),
        bool(reader.get(raw, "alibi", where, bool)) if "alibi" in raw else False,
        reader.positive(raw, "num_seqs", where) if "num_seqs" in raw else 1,
        tuple(points),
    )


def _prefill_config(reader: _Reader, config: Any, cwhere: str) -> Tuple[int, int, int, int]:
    """One ``[block_m, block_n, num_warps, num_stages]``, checked."""
    reader.check(config, cwhere, list)
    if len(config) != len(PREFILL_CONFIG_FIELDS):
        raise reader.fail(cwhere, f"expected the 4 fields {PREFILL_CONFIG_FIELDS}")
    for j, (field, value) in enumerate(zip(PREFILL_CONFIG_FIELDS, config)):
        reader.check(value, f"{cwhere}[{j}] ({field})", int)
    block_m, block_n, warps, stages = config
    for j, value in ((0, block_m), (1, block_n)):
        if value & (value - 1) or not 16 <= value <= 256:
            raise reader.fail(f"{cwhere}[{j}]", f"a power of two 16-256, got {value}")
    if block_m % block_n:
        raise reader.fail(cwhere, f"block_m {block_m} is not a multiple of block_n {block_n}")
    if warps not in VALID_WARPS:
        raise reader.fail(f"{cwhere}[2] (num_warps)", f"not a power of two <= 32: {warps}")
    if not 1 <= stages <= 8:
        raise reader.fail(f"{cwhere}[3] (num_stages)", f"1-8, got {stages}")
    return block_m, block_n, warps, stages


def _prefill_configs(
    reader: _Reader, raw: Any, where: str
) -> Tuple[Dict[Tuple[int, int], Tuple[int, int, int, int]], Dict[Tuple[int, int], Any]]:
    """``prefill_configs[]``: the bundled prefill kernel's winners by (padded head, dtype),
    and their size tiers (an entry's optional ``small``: ``below``, a positive integer,
    and ``config``, null for the built-in default).

    An entry whose ``config`` is null (the built-in default won) adds no config.  Two
    dtypes of one width (bf16 and fp16) share a key; the first entry in the file wins.
    """
    found: Dict[Tuple[int, int], Tuple[int, int, int, int]] = {}
    small: Dict[Tuple[int, int], Any] = {}
    for i, entry in enumerate(reader.check(raw, where, list)):
        ewhere = f"{where}[{i}]"
        reader.check(entry, ewhere, dict)
        d_pad = reader.positive(entry, "head_size_padded", ewhere)
        if d_pad & (d_pad - 1) or not 16 <= d_pad <= 256:
            raise reader.fail(f"{ewhere}.head_size_padded", f"a power of two 16-256, got {d_pad}")
        dtype = normalize_dtype(reader.get(entry, "dtype", ewhere, str))
        if dtype not in ELEMENT_BYTES:
            raise reader.fail(f"{ewhere}.dtype", f"one of {sorted(ELEMENT_BYTES)}, got {dtype!r}")
        key = (d_pad, ELEMENT_BYTES[dtype])
        tier = entry.get("small")
        if tier is not None:
            twhere = f"{ewhere}.small"
            reader.check(tier, twhere, dict)
            below = reader.positive(tier, "below", twhere)
            cfg = tier.get("config")
            cfg = None if cfg is None else _prefill_config(reader, cfg, f"{twhere}.config")
            tier = (below, cfg)
        config = entry.get("config")
        if config is not None:
            config = _prefill_config(reader, config, f"{ewhere}.config")
        if key in found or key in small or (config is None and tier is None):
            continue
        if config is not None:
            found[key] = config
        if tier is not None:
            small[key] = tier
    return found, small


def _device(reader: _Reader, raw: Any, where: str) -> DeviceTable:
    reader.check(raw, where, dict)
    device = reader.get(raw, "device", where, dict)
    name = reader.get(device, "name", f"{where}.device", str)
    if not name.strip():
        raise reader.fail(f"{where}.device.name", "empty")
    decode = [
        _decode_entry(reader, entry, f"{where}.decode[{i}]")
        for i, entry in enumerate(reader.get(raw, "decode", where, list))
    ]
    warps: Dict[str, int] = {}
    for i, entry in enumerate(raw.get("prefill", []) if "prefill" in raw else []):
        pwhere = f"{where}.prefill[{i}]"
        reader.check(entry, pwhere, dict)
        kernel = reader.get(entry, "kernel", pwhere, str)
        winner = entry.get("winner_warps")
        if winner is None:
            continue
        reader.check(winner, f"{pwhere}.winner_warps", int)
        if winner not in VALID_WARPS:
            raise reader.fail(f"{pwhere}.winner_warps", f"not a power of two <= 32: {winner}")
        warps[kernel] = winner
    overall = raw.get("prefill_num_warps")
    if overall is not None:
        reader.check(overall, f"{where}.prefill_num_warps", int)
        if overall not in VALID_WARPS:
            raise reader.fail(f"{where}.prefill_num_warps", f"not a power of two <= 32: {overall}")
    configs = raw.get("prefill_configs")
    prefill_configs, prefill_small = (
        ({}, {}) if configs is None
        else _prefill_configs(reader, configs, f"{where}.prefill_configs")
    )  # fmt: skip
    return DeviceTable(name, decode, warps, raw, overall, prefill_configs, prefill_small)


def parse(data: Dict[str, Any], source: str = "<tuning>") -> Table:
    """Validate a decoded tuning document; raises :class:`TuningFileError`."""
    reader = _Reader(source)
    reader.check(data, "top level", dict)
    version = reader.get(data, "schema_version", "top level", int)
    if version != SCHEMA_VERSION:
        raise reader.fail(
            "schema_version", f"this reader knows version {SCHEMA_VERSION}, the file has {version}"
        )
    devices = [
        _device(reader, entry, f"devices[{i}]")
        for i, entry in enumerate(reader.get(data, "devices", "top level", list))
    ]
    return Table(devices, data)


def loads(text: str, source: str = "<tuning>") -> Table:
    """Parse the text of a tuning file; a JSON syntax error names ``source:line:col``."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        col = getattr(exc, "colno", None)
        where = f"{source}:{line}:{col}" if line is not None else source
        msg = getattr(exc, "msg", str(exc))
        raise TuningFileError(f"{where}: not valid JSON ({msg}); fix or regenerate it") from None
    return parse(data, source)


def load(path: Any) -> Table:
    """Read and validate a tuning file (UTF-8 JSON)."""
    try:
        with open(str(path), "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise TuningFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TuningFileError(f"{path}: not UTF-8 (byte {exc.start})") from None
    return loads(text, str(path))

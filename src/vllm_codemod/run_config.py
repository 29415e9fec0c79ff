"""Locate and retune vLLM engine settings inside a deployment's run config (YAML).

Why text spans instead of ``load``/``dump``: a run config is owned by whoever deploys
vLLM; its comments, key order, quoting and indentation are part of what they review.
Even ruamel.yaml's round-trip dumper re-flows some constructs (flow sequences, odd
indentation, block-scalar headers), so we use ruamel.yaml only to *parse*: it composes
the node graph, whose marks give the exact character span of every scalar, and we
rewrite just the characters of the values we change.  Every other byte stays identical.

A setting can hide in three shapes, all found at any depth:

* a mapping key, either spelling: ``max-num-batched-tokens: 8192`` /
  ``max_num_batched_tokens: 8192`` (a leading ``--`` on the key is tolerated);
* a CLI flag in a YAML list: ``- --max-num-batched-tokens`` then ``- "8192"``, or one item
  ``- --max-num-batched-tokens=8192``;
* a CLI flag inside a string scalar (plain, quoted, or a ``|``/``>`` block):
  ``command: vllm serve m --max-num-batched-tokens 8192``.

Comments are never scalars, so a flag mentioned in a comment is left alone.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from .errors import CodemodError

TOKENS_KEY = "max-num-batched-tokens"
UTIL_KEY = "gpu-memory-utilization"
CHUNKED_KEY = "enable-chunked-prefill"
MODEL_LEN_KEY = "max-model-len"


def _parse_tokens(raw: str) -> int:
    text = raw.strip().replace("_", "")
    if not re.fullmatch(r"\+?[0-9]+", text) or int(text) <= 0:
        raise ValueError("must be a positive integer")
    return int(text)


def _parse_utilization(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError("must be a number in (0, 1]") from None
    if not math.isfinite(value) or not 0.0 < value <= 1.0:
        raise ValueError("must be in (0, 1]: a fraction of device memory, e.g. 0.9")
    return value


def _render_tokens(value: Any) -> str:
    return str(int(value))


def _render_utilization(value: Any) -> str:
    # repr gives the shortest text that round-trips: 0.95, 1.0, 0.875.
    return repr(float(value))


@dataclass(frozen=True)
class TunableKey:
    """A setting ``tune-config`` writes: its default, parser and canonical rendering."""

    name: str
    default: Any
    parse: Callable[[str], Any]
    render: Callable[[Any], str]
    help: str


TUNABLE: Dict[str, TunableKey] = {
    TOKENS_KEY: TunableKey(
        TOKENS_KEY,
        16384,
        _parse_tokens,
        _render_tokens,
        "tokens per scheduler step; a positive integer",
    ),
    UTIL_KEY: TunableKey(
        UTIL_KEY,
        0.95,
        _parse_utilization,
        _render_utilization,
        "fraction of device memory vLLM may use; in (0, 1]",
    ),
}


def canonical_key(name: str) -> str:
    """``--max_num_batched_tokens`` and ``max-num-batched-tokens`` are the same setting."""
    return name.strip().lstrip("-").replace("_", "-").lower()


def parse_overrides(pairs: Sequence[str]) -> Dict[str, Any]:
    """Turn ``--set KEY=VALUE`` strings into validated target values (defaults filled in).

    Raises :class:`CodemodError` naming the offending pair and what is accepted.
    """
    targets: Dict[str, Any] = {name: key.default for name, key in TUNABLE.items()}
    for pair in pairs:
        if "=" not in pair:
            raise CodemodError(f"--set {pair!r}: expected KEY=VALUE, e.g. --set {UTIL_KEY}=0.9")
        raw_key, raw_value = pair.split("=", 1)
        name = canonical_key(raw_key)
        if name not in TUNABLE:
            known = ", ".join(
                f"{k} (or {k.replace('-', '_')})"
                for k in TUNABLE  # both spellings are accepted
            )
            raise CodemodError(f"--set {pair!r}: unknown key {raw_key.strip()!r}; known: {known}")
        try:
            targets[name] = TUNABLE[name].parse(raw_value)
        except ValueError as exc:
            raise CodemodError(f"--set {pair!r}: {name} {exc}") from None
    return targets


# --------------------------------------------------------------------------- locating


@dataclass
class Occurrence:
    """One place a setting appears.  ``span`` is the value's characters (None: bare flag)."""

    key: str
    kind: str  # "mapping", "list", "string"
    spelling: str
    line: int  # 1-based, of the key or flag
    column: int  # 1-based
    span: Optional[Tuple[int, int]]
    raw: Optional[str]  # the value's text as written (inside quotes), None for a bare flag

    def describe(self) -> str:
        """The setting as written, for messages: ``max_model_len: 32768``, ``--x 5``."""
        if self.span is None:
            return self.spelling
        if self.kind == "mapping":
            return f"{self.spelling}: {self.raw}"
        return f"{self.spelling} {self.raw}"


def _names_pattern(names: Sequence[str]) -> str:
    alts = []
    for name in names:
        parts = name.split("-")
        alts.append("[-_]".join(re.escape(p) for p in parts))
    return "|".join(alts)


_ALL_NAMES = [TOKENS_KEY, UTIL_KEY, CHUNKED_KEY, MODEL_LEN_KEY, "no-" + CHUNKED_KEY]

# --flag, --flag=VALUE, --flag VALUE (whitespace may include a shell line continuation).
# A value may be shell-quoted; a following ``--other`` flag is not a value.
_FLAG_RE = re.compile(
    r"(?<![\w\-])--(?P<name>" + _names_pattern(_ALL_NAMES) + r")(?![\w\-])"
    r"(?:(?P<sep>=|(?:[ \t]|\\?\r?\n)+)"
    r"(?P<q>[\"']?)(?P<value>(?!--)[^\s\"'\\;&|]+)(?P=q)(?![^\s;&|)]))?"
)

_PROPS_RE = re.compile(r"(?:[&!][^\s]*[ \t]+)*")


def _line_col(text: str, index: int) -> Tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    col = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, col


def _scalar_value_span(text: str, node: Any) -> Tuple[int, int]:
    """Characters of a scalar's content: without anchor/tag, quotes, or block header."""
    start, end = node.start_mark.index, node.end_mark.index
    props = _PROPS_RE.match(text, start, end)
    if props:
        start = props.end()
    style = node.style
    if style in ('"', "'"):
        return start + 1, end - 1
    if style in ("|", ">"):
        newline = text.find("\n", start, end)
        body_start = newline + 1 if newline >= 0 else end
        stripped = text[body_start:end].rstrip()
        lead = len(stripped) - len(stripped.lstrip())
        return body_start + lead, body_start + len(stripped)
    return start, end


def _walk(node: Any, seen: Set[int]) -> Iterator[Tuple[str, Any, Any]]:
    """Yield (kind, node, extra) for mapping pairs, sequences and scalars, each node once."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if node.id == "mapping":
        for key_node, value_node in node.value:
            yield "pair", key_node, value_node
            if value_node.id != "scalar":
                yield from _walk(value_node, seen)
            elif id(value_node) not in seen:
                seen.add(id(value_node))
                yield "scalar", value_node, None
            if key_node.id != "scalar":
                yield from _walk(key_node, seen)
    elif node.id == "sequence":
        yield "sequence", node, None
        for item in node.value:
            if item.id == "scalar":
                if id(item) not in seen:
                    seen.add(id(item))
                    yield "scalar", item, None
            else:
                yield from _walk(item, seen)
    elif node.id == "scalar":
        yield "scalar", node, None


def find_occurrences(text: str, documents: Sequence[Any]) -> List[Occurrence]:
    """Every place any setting we read or write appears, in file order."""
    found: List[Occurrence] = []
    claimed: Set[int] = set()  # scalar nodes consumed as a list flag's value
    seen: Set[int] = set()
    scalars: List[Any] = []
    for doc in documents:
        if doc is None:
            continue
        for kind, node, extra in _walk(doc, seen):
            if kind == "pair":
                if node.id != "scalar" or not isinstance(node.value, str):
                    continue
                name = canonical_key(node.value)
                if name not in _ALL_NAMES or name == "no-" + CHUNKED_KEY:
                    continue
                line, col = _line_col(text, node.start_mark.index)
                spelling = node.value.strip()
                if extra.id != "scalar":
                    raise CodemodError(
                        f"line {line}: {spelling} has a {extra.id} value; expected a single "
                        "value such as 8192 - fix that key and run again"
                    )
                claimed.add(id(extra))
                start, end = _scalar_value_span(text, extra)
                found.append(
                    Occurrence(name, "mapping", spelling, line, col, (start, end), text[start:end])
                )
            elif kind == "sequence":
                items = node.value
                for i, item in enumerate(items[:-1]):
                    nxt = items[i + 1]
                    if item.id != "scalar" or nxt.id != "scalar":
                        continue
                    value = str(item.value).strip()
                    if not value.startswith("--") or any(c.isspace() for c in value):
                        continue
                    name = canonical_key(value)
                    if name not in _ALL_NAMES or name == "no-" + CHUNKED_KEY:
                        continue
                    if str(nxt.value).startswith("--"):
                        continue  # a bare boolean flag followed by the next flag
                    if name == CHUNKED_KEY and _as_bool(str(nxt.value)) is None:
                        continue
                    claimed.add(id(item))
                    claimed.add(id(nxt))
                    line, col = _line_col(text, item.start_mark.index)
                    start, end = _scalar_value_span(text, nxt)
                    found.append(
                        Occurrence(name, "list", value, line, col, (start, end), text[start:end])
                    )
            elif kind == "scalar":
                scalars.append(node)
    for node in scalars:
        if id(node) in claimed or not isinstance(node.value, str) or "--" not in node.value:
            continue
        start, end = _scalar_value_span(text, node)
        for match in _FLAG_RE.finditer(text, start, end):
            if _in_shell_comment(text, max(start, text.rfind("\n", 0, match.start()) + 1), match):
                continue
            name = canonical_key(match.group("name"))
            line, col = _line_col(text, match.start())
            spelling = "--" + match.group("name")
            value = match.group("value")
            if name == "no-" + CHUNKED_KEY:
                if match.group("sep") == "=":
                    continue  # --no-enable-chunked-prefill=x is not a real spelling
                found.append(Occurrence(CHUNKED_KEY, "string", spelling, line, col, None, "false"))
                continue
            if value is not None and name == CHUNKED_KEY and _as_bool(value) is None:
                value = None  # "--enable-chunked-prefill model" is a bare flag
            if value is None:
                if name == CHUNKED_KEY:
                    found.append(
                        Occurrence(CHUNKED_KEY, "string", spelling, line, col, None, "true")
                    )
                continue
            span = (match.start("value"), match.end("value"))
            found.append(Occurrence(name, "string", spelling, line, col, span, value))
    found.sort(key=lambda o: (o.line, o.column))
    return found


def _in_shell_comment(text: str, line_start: int, match: re.Match[str]) -> bool:
    """A flag after ``#`` on its line is documentation in a shell script, not a setting."""
    before = text[line_start : match.start()]
    return re.search(r"(?:^|\s)#", before) is not None


def _as_bool(raw: str) -> Optional[bool]:
    lowered = raw.strip().strip("\"'").lower()
    if lowered in ("true", "yes", "on", "1"):
        return True
    if lowered in ("false", "no", "off", "0"):
        return False
    return None


def _model_len(raw: str) -> Optional[int]:
    """vLLM's --max-model-len: an integer, or 32k / 32K (decimal / binary), or -1 (auto)."""
    text = raw.strip().strip("\"'").replace("_", "")
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kKmMgG]?)", text)
    if not match:
        return None
    number, suffix = float(match.group(1)), match.group(2)
    scale = {"": 1, "k": 1000, "K": 1024, "m": 10**6, "M": 1024**2, "g": 10**9, "G": 1024**3}
    return int(number * scale[suffix])


# --------------------------------------------------------------------------- planning


@dataclass
class Edit:
    key: str
    line: int
    column: int
    kind: str
    spelling: str
    old: Optional[str]
    new: str
    span: Optional[Tuple[int, int]]  # None: an addition


@dataclass
class Plan:
    """What ``tune-config`` would do to one file; ``new_text`` is the whole result."""

    old_text: str
    new_text: str
    edits: List[Edit] = field(default_factory=list)
    unchanged: List[Occurrence] = field(default_factory=list)
    skipped: List[Tuple[Occurrence, str]] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.new_text != self.old_text

    def unified_diff(self, label: str) -> str:
        lines = difflib.unified_diff(
            self.old_text.splitlines(keepends=True),
            self.new_text.splitlines(keepends=True),
            fromfile=f"a/{label}",
            tofile=f"b/{label}",
        )
        out = []
        for line in lines:
            if not line.endswith("\n"):
                line += "\n\\ No newline at end of file\n"
            out.append(line)
        return "".join(out)


def parse_documents(text: str, filename: str) -> List[Any]:
    """Validate the whole file with ruamel.yaml round-trip and return its composed nodes."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    yaml = YAML(typ="rt")
    try:
        list(yaml.load_all(text))  # full round-trip load: duplicate keys etc. surface here
        return list(YAML(typ="rt").compose_all(text))
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = (exc.problem or exc.context or "invalid YAML").strip().splitlines()[0]
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        raise CodemodError(f"{where}: malformed YAML: {problem}; fix it and run again") from None
    except YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid YAML"
        raise CodemodError(f"{filename}: malformed YAML: {first}; fix it and run again") from None


def _same_value(key: TunableKey, raw: str, target: Any) -> Optional[bool]:
    """Whether ``raw`` already means ``target``; None when it is not a literal we understand."""
    try:
        current = key.parse(raw)
    except ValueError:
        try:
            float(raw)
        except ValueError:
            return None  # ${VAR}, $VAR, a template: not ours to decide
        return False  # a number, but an invalid one (e.g. 1.5): we replace it
    return current == target


def _addition(text: str, documents: Sequence[Any], lines: Sequence[str]) -> Tuple[int, str]:
    """Where and what to insert so ``lines`` become top-level keys of the first document.

    They go after the last entry of the root block mapping (after its trailing
    comment, before a following ``---``), at the indentation of its first key.
    """
    newline = "\r\n" if "\r\n" in text else "\n"
    root = next((d for d in documents if d is not None), None)
    if root is None:
        at, indent = len(text), 0
    elif root.id != "mapping" or root.flow_style:
        shape = "flow mapping" if root.id == "mapping" else root.id
        raise CodemodError(
            f"--add: the top level is a {shape}, so {lines[0].split(':')[0]} cannot be added "
            "as a top-level key; add it by hand where your launcher reads it"
        )
    else:
        indent = root.value[0][0].start_mark.column if root.value else 0
        at = root.end_mark.index
        if at > 0 and text[at - 1] != "\n":
            eol = text.find("\n", at)
            at = len(text) if eol < 0 else eol + 1
    prefix = "" if at == 0 or text[at - 1] == "\n" else newline
    body = "".join(f"{' ' * indent}{line}{newline}" for line in lines)
    return at, prefix + body


def _top_level_spelling(documents: Sequence[Any], key: str) -> str:
    """Follow the file's habit: underscores if its top-level keys use only underscores."""
    root = next((d for d in documents if d is not None), None)
    if root is None or root.id != "mapping":
        return key
    names = [str(k.value) for k, _ in root.value if k.id == "scalar"]
    if any("_" in n for n in names) and not any("-" in n for n in names):
        return key.replace("-", "_")
    return key


def plan(text: str, filename: str, targets: Dict[str, Any], add: bool = False) -> Plan:
    """Compute the new text; raise :class:`CodemodError` if vLLM could not start with it."""
    documents = parse_documents(text, filename)
    occurrences = find_occurrences(text, documents)
    result = Plan(old_text=text, new_text=text)
    for occ in occurrences:
        key = TUNABLE.get(occ.key)
        if key is None or occ.span is None or occ.raw is None:
            continue
        same = _same_value(key, occ.raw, targets[occ.key])
        if same is None:
            result.skipped.append((occ, "not a literal value; left as written"))
        elif same:
            result.unchanged.append(occ)
        else:
            result.edits.append(
                Edit(
                    occ.key,
                    occ.line,
                    occ.column,
                    occ.kind,
                    occ.spelling,
                    occ.raw,
                    key.render(targets[occ.key]),
                    occ.span,
                )
            )
    present = {o.key for o in occurrences}
    to_add: List[str] = []
    for name, key in TUNABLE.items():
        if name in present:
            continue
        if not add:
            result.missing.append(name)
            continue
        spelled = _top_level_spelling(documents, name)
        to_add.append(f"{spelled}: {key.render(targets[name])}")
        result.edits.append(
            Edit(name, 0, 1, "added", spelled, None, key.render(targets[name]), None)
        )
    additions: List[Tuple[int, str]] = []
    if to_add:
        at, snippet = _addition(text, documents, to_add)
        first_line = _line_col(text, at)[0] + (1 if at and text[at - 1] != "\n" else 0)
        for offset, edit in enumerate(e for e in result.edits if e.span is None):
            edit.line = first_line + offset
        additions.append((at, snippet))

    _check_chunked_prefill(filename, occurrences, targets, add)

    pieces: List[Tuple[int, int, str]] = [
        (e.span[0], e.span[1], e.new) for e in result.edits if e.span is not None
    ]
    pieces += [(at, at, snippet) for at, snippet in additions]
    new_text = text
    for start, end, replacement in sorted(pieces, key=lambda p: (p[0], p[1]), reverse=True):
        new_text = new_text[:start] + replacement + new_text[end:]
    result.new_text = new_text
    if new_text != text:
        parse_documents(new_text, filename + " (after editing)")  # never write broken YAML
    return result


def _check_chunked_prefill(
    filename: str, occurrences: Sequence[Occurrence], targets: Dict[str, Any], add: bool
) -> None:
    """Refuse a config vLLM rejects at start-up.

    Without chunked prefill a whole prompt must fit in one batch, so vLLM refuses
    ``max_num_batched_tokens < max_model_len``.  We only judge what the file says
    explicitly; the file is treated as one configuration.
    """
    tokens_set = add or any(o.key == TOKENS_KEY for o in occurrences)
    disabled = [
        o for o in occurrences if o.key == CHUNKED_KEY and o.raw is not None and not _as_bool_any(o)
    ]
    if not tokens_set or not disabled:
        return
    tokens = targets[TOKENS_KEY]
    too_long = [
        o
        for o in occurrences
        if o.key == MODEL_LEN_KEY and o.raw is not None and (_model_len(o.raw) or 0) > tokens
    ]
    if not too_long:
        return
    off = disabled[0]
    longest = max(too_long, key=lambda o: _model_len(o.raw or "") or 0)
    need = _model_len(longest.raw or "")
    raise CodemodError(
        f"{filename}: chunked prefill is disabled ({off.describe()}, line {off.line}) and "
        f"{longest.describe()} (line {longest.line}) exceeds "
        f"{TOKENS_KEY} {tokens}; vLLM will not start that way. Use "
        f"--set {TOKENS_KEY}={need}, lower {MODEL_LEN_KEY}, or enable chunked prefill"
    )


def _as_bool_any(occ: Occurrence) -> bool:
    value = _as_bool(occ.raw or "")
    return True if value is None else value

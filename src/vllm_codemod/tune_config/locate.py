"""Find every place a vLLM setting appears in a run config, as exact character spans.

ruamel.yaml is used only to *parse*: it composes the node graph, whose marks give the
exact character span of every scalar.  A setting can hide in three shapes, all found at
any depth:

* a mapping key, either spelling: ``max-num-batched-tokens: 8192`` /
  ``max_num_batched_tokens: 8192`` (a leading ``--`` on the key is tolerated);
* a CLI flag in a YAML list: ``- --max-num-batched-tokens`` then ``- "8192"``, or one item
  ``- --max-num-batched-tokens=8192``;
* a CLI flag inside a string scalar (plain, quoted, or a ``|``/``>`` block):
  ``command: vllm serve m --max-num-batched-tokens 8192``.

Comments are never scalars, so a flag mentioned in a comment is left alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Sequence, Set, Tuple

from ..errors import UserError
from .keys import CHUNKED_KEY, MODEL_LEN_KEY, TOKENS_KEY, UTIL_KEY, canonical_key


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
                    raise UserError(
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
        raise UserError(f"{where}: malformed YAML: {problem}; fix it and run again") from None
    except YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid YAML"
        raise UserError(f"{filename}: malformed YAML: {first}; fix it and run again") from None

"""Plan the edit of a run config: the new text, changed only in the values we set.

Why text spans instead of ``load``/``dump``: a run config is owned by whoever deploys
vLLM; its comments, key order, quoting and indentation are part of what they review.
Even ruamel.yaml's round-trip dumper re-flows some constructs (flow sequences, odd
indentation, block-scalar headers), so we rewrite just the characters of the values we
change (spans from :mod:`.locate`).  Every other byte stays identical.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Dict, List, Optional, Sequence, Tuple

from ..errors import UserError
from ..udiff import file_diff
from .keys import MODEL_LEN_KEY, TOKENS_KEY, TUNABLE, TunableKey
from .locate import (
    CHUNKED_KEY,
    Occurrence,
    _as_bool,
    _line_col,
    _model_len,
    find_occurrences,
    parse_documents,
)


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
class ConfigEdit:
    """What ``tune-config`` would do to one file; ``new_text`` is the whole result.

    (Named apart from the codemod engine's :class:`vllm_codemod.engine.Plan`.)
    """

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
        return file_diff(label, self.old_text, self.new_text, git_header=False)


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
        raise UserError(
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


def plan_edit(
    text: str,
    filename: str,
    targets: Dict[str, Any],
    add: bool = False,
    floors: Collection[str] = (),
) -> ConfigEdit:
    """Compute the new text; raise :class:`UserError` if vLLM could not start with it.

    For keys in ``floors`` the target is a minimum (the built-in defaults: a config
    already tuned higher knows its hardware better); other targets are written as given.
    """
    documents = parse_documents(text, filename)
    occurrences = find_occurrences(text, documents)
    result = ConfigEdit(old_text=text, new_text=text)
    for occ in occurrences:
        key = TUNABLE.get(occ.key)
        if key is None or occ.span is None or occ.raw is None:
            continue
        same = _same_value(key, occ.raw, targets[occ.key])
        if same is False and occ.key in floors:
            try:
                same = key.parse(occ.raw) > targets[occ.key]
            except ValueError:
                pass
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
    raise UserError(
        f"{filename}: chunked prefill is disabled ({off.describe()}, line {off.line}) and "
        f"{longest.describe()} (line {longest.line}) exceeds "
        f"{TOKENS_KEY} {tokens}; vLLM will not start that way. Use "
        f"--set {TOKENS_KEY}={need}, lower {MODEL_LEN_KEY}, or enable chunked prefill"
    )


def _as_bool_any(occ: Occurrence) -> bool:
    value = _as_bool(occ.raw or "")
    return True if value is None else value

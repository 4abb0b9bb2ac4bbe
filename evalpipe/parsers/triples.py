"""Parse relation triples (CMeIE) written one per line as ``头实体 | 关系 | 尾实体``.

The CMeIE prompt asks for exactly that form (:func:`format_triples` writes it for few-shot
answers) and for ``无`` when the text holds no relation. The parser is pure and never raises:

1. **Body**: reasoning and code fences are removed (:func:`evalpipe.parsers.zh_labels.answer_body`).
2. **None answer**: a body whose label key is one of :data:`NONE_ANSWERS` (``无``, ``没有``,
   ``[]`` …) is a valid prediction of *no* triple.
3. **JSON**: a body that is a JSON list of 3-string lists is read as such.
4. **Lines**: otherwise every non-blank line is one triple. A leading list marker (``1.``,
   ``2、``, ``-``, ``*``, ``•``) is removed and the line must split on ``|`` or full-width ``｜``
   into exactly three non-empty fields (a line holding a JSON array of three strings is
   accepted too). Each field is stripped, and quotes around it are removed. Other lines count
   in ``bad_lines``; a header line ending in ``:``/``：`` without a separator (``三元组如下：``)
   is skipped, and a line that is a none answer is skipped too.
5. **Predicates** not in ``predicates`` (when given) are kept — they are predictions and count
   as false positives — and counted in ``unknown_predicates``.
6. **Failure**: ``failed`` when the body is empty (``empty``) or when no triple was found and
   the body is not a none answer (a body whose only content besides headers is a none line is
   one).

Values are stored as written (whitespace-stripped); the scorer compares
:func:`evalpipe.text.chinese.match_key` forms, so width and spacing differences do not count.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from evalpipe.jsonlimits import loads as json_loads
from evalpipe.parsers.zh_labels import answer_body
from evalpipe.records import Prediction
from evalpipe.text.chinese import fold, label_key, match_key

__all__ = ["NONE_ANSWERS", "Triple", "format_triples", "parse_triples", "triple_key"]

#: answers meaning "no triple" (compared as label keys)
NONE_ANSWERS = frozenset({"无", "没有", "无关系", "无三元组", "没有三元组", "none", "[]", "空"})
_MARKER = re.compile(r"^\s*(?:[-*•·]\s*|\(?\d{1,3}[.)、:]\s*)")
_QUOTES = "\"'“”‘’「」"
_SEPARATOR = re.compile(r"[|｜]")


@dataclass(frozen=True, order=True)
class Triple:
    subject: str
    predicate: str
    object: str


def triple_key(triple: Triple) -> tuple[str, str, str]:
    """What two triples must share to be the same answer: match keys of all three fields."""
    return (match_key(triple.subject), match_key(triple.predicate), match_key(triple.object))


def format_triples(triples: Iterable[Triple]) -> str:
    """The answer form the prompt asks for: one ``S | P | O`` per line, ``无`` when none."""
    lines = [f"{t.subject} | {t.predicate} | {t.object}" for t in triples]
    return "\n".join(lines) if lines else "无"


def _field(text: str) -> str:
    return text.strip().strip(_QUOTES).strip()


def _from_json(text: str) -> list[Triple] | None:
    try:
        data = json_loads(text)  # the one nesting limit for JSON from a model (evalpipe.jsonlimits)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, list):
        return None
    rows = [data] if len(data) == 3 and all(isinstance(x, str) for x in data) else data
    out = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and all(isinstance(x, str) and x.strip() for x in row)):
            return None
        out.append(Triple(*(_field(x) for x in row)))
    return out


def _from_line(line: str) -> Triple | None:
    body = _MARKER.sub("", line, count=1).strip()
    if body.startswith("["):
        parsed = _from_json(body)
        return parsed[0] if parsed and len(parsed) == 1 else None
    parts = [_field(p) for p in _SEPARATOR.split(body)]
    if len(parts) != 3 or not all(parts):
        return None
    return Triple(*parts)


def parse_triples(answer: str | None, predicates: Collection[str] | None = None) -> Prediction:
    """Answer → ``tuple[Triple, ...]`` (sorted, unique), see the module docstring."""
    body, reasoning = answer_body(answer)
    diagnostics = {"empty": False, "none_answer": False, "bad_lines": 0, "unknown_predicates": 0,
                   "reasoning_stripped": reasoning}
    if not body:
        diagnostics["empty"] = True
        return Prediction(value=(), failed=True, diagnostics=diagnostics)
    if label_key(body) in NONE_ANSWERS:
        diagnostics["none_answer"] = True
        return Prediction(value=(), failed=False, diagnostics=diagnostics)
    triples = _from_json(body)
    saw_none = False
    if triples is None:
        triples = []
        for line in body.splitlines():
            if not line.strip() or (fold(line).rstrip().endswith(":") and not _SEPARATOR.search(line)):
                continue  # blank line or a header such as "三元组如下："
            if label_key(line) in NONE_ANSWERS:
                saw_none = True
                continue
            triple = _from_line(line)
            if triple is None:
                diagnostics["bad_lines"] += 1
            else:
                triples.append(triple)
    if predicates is not None:
        known = {match_key(p) for p in predicates}
        diagnostics["unknown_predicates"] = sum(1 for t in triples if match_key(t.predicate) not in known)
    value = tuple(sorted(set(triples)))
    if not value and saw_none and not diagnostics["bad_lines"]:
        diagnostics["none_answer"] = True
        return Prediction(value=(), failed=False, diagnostics=diagnostics)
    return Prediction(value=value, failed=not value, diagnostics=diagnostics)

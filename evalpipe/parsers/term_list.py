"""Parse a list of standard terms (CHIP-CDN) written ``term##term##term``.

CHIP-CDN's gold ``normalized_result`` joins standard terms with ``##``; the prompt asks the model
for the same form (:func:`format_term_list`). The parser is pure and never raises:

1. **Body**: reasoning and code fences are removed (:func:`evalpipe.parsers.zh_labels.answer_body`).
2. **Split**: the body is cut at ``##`` (full-width ``＃＃`` too) and at line breaks. Nothing
   else separates terms: ICD-10 terms can contain commas, so ``，`` is left inside terms. A
   leading list marker (``1.``, ``-``, ``•``) and surrounding quotes are removed from each piece,
   trailing sentence punctuation too, and blanks are dropped. A header piece ending in
   ``:``/``：`` (``标准词：``) is dropped; one ``标准词：`` style prefix before the first term is
   removed.
3. **None answer**: a body whose label key is ``无``/``没有``/``none`` predicts no term; the
   task's gold always has one, so this is simply wrong, but it is a valid answer.
4. **Unknown terms**: when the task has a term table, predicted terms not in it (compared as
   match keys, ``known_keys``) are kept — they are false positives — and counted in ``unknown_terms``.
5. **Failure**: ``failed`` only when the body is empty (``empty``) or nothing but headers.

The value is a tuple of unique terms in answer order, as written; the scorer compares
:func:`evalpipe.text.chinese.match_key` forms.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from evalpipe.parsers.zh_labels import answer_body
from evalpipe.records import Prediction
from evalpipe.text.chinese import fold, label_key, match_key

__all__ = ["NONE_ANSWERS", "format_term_list", "parse_term_list"]

NONE_ANSWERS = frozenset({"无", "没有", "none", "无对应标准词", "没有对应的标准词"})
_SPLIT = re.compile(r"##|＃＃|\r?\n")
_MARKER = re.compile(r"^\s*(?:[-*•·]\s*|\(?\d{1,3}[.)、]\s*)")
_PREFIX = re.compile(r"^(?:标准词|标准术语|标准化术语|答案|答)\s*[:：]\s*")
_QUOTES = "\"'“”‘’「」《》"


def format_term_list(terms: Iterable[str]) -> str:
    return "##".join(terms)


def _clean(piece: str) -> str:
    piece = _MARKER.sub("", piece, count=1).strip().strip(_QUOTES).strip()
    return piece.rstrip("。.;；,，").strip()


def parse_term_list(answer: str | None, known_keys: Collection[str] | None = None) -> Prediction:
    """Answer → ``tuple[str, ...]`` of unique terms (see the module docstring).

    ``known_keys`` are the :func:`~evalpipe.text.chinese.match_key` forms of the terms the answer
    may use (CHIP-CDN: the candidates offered in that sample's prompt); None = no check.
    """
    body, reasoning = answer_body(answer)
    diagnostics = {"empty": False, "none_answer": False, "unknown_terms": 0, "reasoning_stripped": reasoning}
    if not body:
        diagnostics["empty"] = True
        return Prediction(value=(), failed=True, diagnostics=diagnostics)
    if label_key(body) in NONE_ANSWERS:
        diagnostics["none_answer"] = True
        return Prediction(value=(), failed=False, diagnostics=diagnostics)
    terms: dict[str, None] = {}  # insertion-ordered set: answer order, duplicates dropped in O(1)
    for piece in _SPLIT.split(_PREFIX.sub("", body, count=1)):
        term = _clean(piece)
        if not term or fold(term).endswith(":"):
            continue
        terms.setdefault(term)
    if known_keys is not None:
        diagnostics["unknown_terms"] = sum(1 for t in terms if match_key(t) not in known_keys)
    return Prediction(value=tuple(terms), failed=not terms, diagnostics=diagnostics)

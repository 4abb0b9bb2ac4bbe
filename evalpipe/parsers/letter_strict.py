"""The option letter by evalpipe's first, strict rules (scoring ``strict-v1``: earlier numbers reproduced).

The default is now :mod:`evalpipe.parsers.letter` (a careful reader: the stated answer is read before
the hedge rule, option text and ``B - Intussusception`` count). These rules stay as they were:

Built for generative answers to MedQA / MedMCQA / PubMedQA / MMLU-style questions, where a model may
answer ``C``, ``Answer: C.``, ``(B)``, ``**D**``, ``the answer is c``, reason in a ``<think>`` block
first, or talk around the question. Steps, in order:

1. **Clean-up.** Reasoning up to the last ``</think>`` is dropped (an unclosed ``<think>`` drops the
   rest: the model never answered); code fences, markdown emphasis (``**``, ``__``), backticks and
   heading marks are removed; the rest is stripped. Nothing left → failure ``empty``.
2. **Hedge.** Two different offered letters joined by ``or``, ``/``, ``and/or`` or ``either … or``
   (``B or C``, ``(A)/(D)``) → failure ``hedged``: a model that names two options has not chosen one.
3. **Stated answer.** ``answer`` (``final``/``correct``/``best`` answer) or ``correct``/``best``
   ``option``/``choice``, then (after ``is``, ``:``, ``would be`` and the like, and an optional
   ``option``) a letter: ``Answer: C``, ``The correct answer is (B).``, ``final answer: d``, ``the
   best option is B``. A lower-case letter counts only when bracketed or followed by punctuation or
   the end (``the answer is a rare …`` is not option A). Two stated answers naming different letters
   → ``hedged``; one letter stated (once or more) → that letter. ``I choose``/``I'd go with``/
   ``it is``/``that's`` + a letter state it too. A bare ``Option A`` in an
   explanation (``Option A is wrong because …``) is not a statement of the answer.
4. **Letter alone or leading.** The whole answer is a letter (``C``, ``c.``, ``(b)``, ``[D]``,
   ``Option B``), or it opens with one followed by ``.``, ``:`` or ``)`` (``C. Acute bronchitis``,
   ``b) …``) — a capital ``A`` opening a sentence (``A patient with …``) is not option A.
5. **Option text.** The whole answer equals one option's text (case, spaces and a final period
   ignored): ``Maybe`` for PubMedQA's ``C: maybe``.
6. Otherwise failure ``no_choice`` (with ``refusal`` set when the answer reads as a refusal:
   ``I cannot …``, ``I'm sorry``, ``consult a doctor``).

A letter that is not among the options (``E`` for a four-option question) is never chosen; when it
is the only letter found the failure is ``invalid_letter``. A failure is a counted, reported
outcome (``Prediction.failed``), scored as wrong — never a crash, never silently dropped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from evalpipe.records import Prediction
from evalpipe.text.reasoning import strip_reasoning

__all__ = ["FLAGS", "clean_answer", "parse_letter_strict"]

#: every diagnostic flag :func:`parse_letter` reports (all present on every prediction)
FLAGS = ("empty", "hedged", "no_choice", "invalid_letter", "refusal", "reasoning_stripped", "by_option_text")

_MARKUP = re.compile(r"```[A-Za-z0-9_+-]{0,20}|\*\*|__|`|^#+\s*", re.MULTILINE)
#: a letter token: bracketed (any case), or bare upper case, or bare lower case followed by punctuation/end
_TOKEN = r"(?:\(\s*(?P<{n}p>[A-Za-z])\s*\)|\[\s*(?P<{n}b>[A-Za-z])\s*\]|(?P<{n}u>[A-Z])(?![A-Za-z0-9])|(?P<{n}l>[a-z])(?=\s*(?:[.,;:!)]|$)))"
#: keywords are matched in any case (``(?i:…)``), letters by the case rules of ``_TOKEN``
_STATED = re.compile(
    r"(?i:\b(?:(?:final|correct|best|right)\s+)?answer\b|\b(?:correct|best|right)\s+(?:option|choice)\b"
    r"|\bI(?:\s+would|\s+will|'d)?\s+(?:choose|pick|select|go\s+with)|\bit(?:'s|\s+is)|\bthat(?:'s|\s+is))"
    r"(?:\s+(?i:is|would\s+be|will\s+be|should\s+be|must\s+be))?\s*(?:[:\-=]\s*)?"
    r"(?:(?i:option|choice|letter)\s+)?" + _TOKEN.format(n="s")
)
# blank runs are possessive (``*+``) where what follows cannot start with a blank: the same matches,
# without quadratic backtracking on long runs of blanks (a fuzz finding)
_ALONE = re.compile(r"^\s*(?:(?i:option|choice)\s+)?" + _TOKEN.format(n="a") + r"\s*+[.:)]?\s*+$")
_LEADING = re.compile(r"^\s*(?:(?i:option|choice)\s+)?"
                      r"(?:\(\s*(?P<p>[A-Za-z])\s*\)|\[\s*(?P<b>[A-Za-z])\s*\]|(?P<u>[A-Za-z])\s*[.:)])")
_HEDGE = re.compile(
    r"(?:(?i:either)\s+)?(?:(?i:option)\s+)?" + _TOKEN.format(n="x")
    + r"\s*+(?:,?\s*+(?i:or)|/|(?i:and)\s*+/\s*+(?i:or))\s*+(?:(?i:option)\s+)?" + _TOKEN.format(n="y")
)
_REFUSAL = re.compile(
    r"\b(?:I\s+(?:can(?:no|')t|am\s+(?:not\s+able|unable)|won't|will\s+not)|I'm\s+(?:sorry|not\s+able|unable)|"
    r"sorry|consult\s+(?:a|your)\s+(?:doctor|physician|healthcare)|as\s+an\s+AI)\b",
    re.IGNORECASE,
)


def clean_answer(answer: str | None) -> tuple[str, bool]:
    """The answer without reasoning and markup, stripped; and whether reasoning was removed."""
    split = strip_reasoning(answer)
    return _MARKUP.sub("", split.answer).strip(), split.stripped


def _group(match: re.Match[str], prefix: str) -> str | None:
    for suffix in ("p", "b", "u", "l"):
        value = match.groupdict().get(prefix + suffix)
        if value:
            return value.upper()
    return None


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold().rstrip(".").strip()


def parse_letter_strict(answer: str | None, options: Mapping[str, str]) -> Prediction:
    """Answer text → ``Prediction(letter or None)``; ``options`` maps upper-case letters to texts.

    Never raises. See the module docstring for the rules and the diagnostics.
    """
    flags = dict.fromkeys(FLAGS, False)
    body, flags["reasoning_stripped"] = clean_answer(answer)

    def failed(flag: str) -> Prediction:
        flags[flag] = True
        if flag == "no_choice":
            flags["refusal"] = bool(_REFUSAL.search(body))
        return Prediction(None, True, flags)

    if not body:
        return failed("empty")
    for hedge in _HEDGE.finditer(body):
        first, second = _group(hedge, "x"), _group(hedge, "y")
        if first != second and first in options and second in options:
            return failed("hedged")
    invalid = False
    stated = []
    for match in _STATED.finditer(body):
        letter = _group(match, "s")
        if letter in options:
            stated.append(letter)
        else:
            invalid = True
    if len(set(stated)) > 1:
        return failed("hedged")
    letter = stated[0] if stated else None
    if letter is None:
        for pattern, prefix in ((_ALONE, "a"), (_LEADING, "")):
            bare = pattern.match(body)
            if bare:
                found = _group(bare, prefix)
                if found in options:
                    letter = found
                    break
                invalid = True
    if letter is None:
        said = _norm(body)
        hits = [key for key, text in options.items() if _norm(text) and _norm(text) == said]
        if len(hits) == 1:
            letter, flags["by_option_text"] = hits[0], True
    if letter is not None:
        return Prediction(letter, False, flags)
    return failed("invalid_letter" if invalid else "no_choice")

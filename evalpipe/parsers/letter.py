"""The option a multiple-choice answer commits to, read the way a careful human grader reads it.

For generated answers to MedQA / MedMCQA / PubMedQA / MMLU-style questions (``options`` maps the
letters ``A``, ``B`` … to the option texts; PubMedQA's are ``yes`` / ``no`` / ``maybe``). A grader
credits the option the text *commits to* and nothing else: a hedge, a refusal, an empty answer or an
answer that never left its reasoning is a counted failure (``Prediction.failed``), never a guess.
The rules, in order (the first that decides wins); ``docs/grading.md`` has the same with more examples:

1. **Clean-up.** The reasoning block goes (:func:`evalpipe.text.reasoning.strip_reasoning`); an
   answer that stopped inside an unclosed ``<think>`` with nothing before it fails
   ``truncated_in_reasoning`` (``<think>Option B looks right but`` is no answer). Full-width forms are
   folded (``Ｂ`` → ``B``, ``：`` → ``:``); code fences, ``**``/``__``, backticks, heading and quote
   marks are removed. Nothing left → ``empty``.
2. **Stated answer**, read *before* any hedge rule, so ``The answer is B. Options A or C are not
   supported`` is B and ``Answer: C (not A/B)`` is C. A statement is one of:
   ``Answer: B`` / ``The (final|correct|best) answer (here) is (option) B`` / ``the most appropriate
   choice is B``; ``B is the correct answer`` / ``C is correct``; ``I'd go with B`` / ``I choose B`` /
   ``it's B``; a conclusion ``so A, plasma free metanephrines`` / ``Therefore, B.``; a parenthesis
   naming the option ``Ethambutol (option C) causes …``; after ``Answer:``, a bracketed letter in the
   same sentence ``Answer: The patient has Graves disease (A).``; Chinese ``答案：B`` / ``正确答案是B`` /
   ``选B`` / ``故选B``. A statement immediately joined to another letter (``The answer is B or C``)
   is a hedge. Statements naming different letters: a ``final answer`` one decides (the last of
   them); without one they are a hedge (``hedged``).
3. **Hedge.** Two offered letters (or two option texts) joined by ``or``, ``/``, ``and/or``, ``或``,
   ``, or maybe``, or presented together (``between B and C``, ``both A and D``, ``Options A and
   B are both …``) → ``hedged``: a model that names two options has not chosen one.
4. **Leading letter.** The answer is a letter or opens with one followed by ``.``, ``:``, ``)``, a
   dash, a bracket or the start of that option's text: ``C``, ``(b)``, ``Option B``, ``C. Acute
   bronchitis``, ``B - Intussusception``, ``B (no)``, ``**D** Intramuscular epinephrine``. A capital
   ``A`` followed by an ordinary word (``A patient with …``) is the article, not option A.
5. **Option text.** The answer is one option's text (``Maybe``, ``Ethambutol.``), states it
   (``The answer is no.``), or opens with it followed by punctuation (``Yes, the pharmacist review
   reduced …``); the longest option text wins when one contains another.
6. Otherwise ``no_choice`` (with ``refusal`` set when it reads as one: ``I cannot …``, ``I'm
   sorry``, ``consult a doctor``, ``I don't know``, ``not enough information``).

A letter that is not among the options (``E`` for a four-option question) is never chosen; when it
is the only letter found the failure is ``invalid_letter``. The previous, stricter rules are
:mod:`evalpipe.parsers.letter_strict` (scoring ``strict-v1``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

from evalpipe.records import Prediction
from evalpipe.text.reasoning import strip_reasoning

__all__ = ["FLAGS", "clean_answer", "parse_letter"]

#: every diagnostic flag :func:`parse_letter` reports (all present on every prediction)
FLAGS = ("empty", "hedged", "no_choice", "invalid_letter", "refusal", "reasoning_stripped", "by_option_text",
         "truncated_in_reasoning")

_MARKUP = re.compile(r"```[A-Za-z0-9_+-]{0,20}|\*\*|__|`|^[ \t]*(?:#+|>+)[ \t]*", re.MULTILINE)
#: words after a capital ``A`` that keep it a letter (``A because …``, ``A is correct``)
_AFTER_LETTER = (r"because|since|as|is|was|or|and|but|which|would|seems|fits|best|explains|here|then|so|"
                 r"remains|looks|appears|matches|wins|over|versus|vs")
#: a letter: bracketed (any case); bare upper case (``A`` not the article); bare lower case before punctuation/end
_TOKEN = (r"(?:\(\s*(?P<{n}p>[A-Za-z])\s*\)|\[\s*(?P<{n}b>[A-Za-z])\s*\]"
          r"|(?P<{n}u>A(?![A-Za-z0-9])(?!\s++(?!(?:" + _AFTER_LETTER + r")\b)[a-z])|[B-Z](?![A-Za-z0-9]))"
          r"|(?P<{n}l>[a-z])(?=\s*+(?:[.,;:!)]|$)))")
_OPTION_WORD = r"(?:(?i:option|choice|letter)\s+)?"
_IS = r"(?:\s+(?i:is|would\s+be|will\s+be|should\s+be|must\s+be|here\s+is))?\s*+(?:[:\-=–—]\s*+)?"
_PHRASE = (r"(?i:\b(?:(?:final|correct|best|right|my)\s+)?answer(?:\s+here)?\b"
           r"|\b(?:correct|best|right|most\s+(?:appropriate|likely|correct))\s+(?:option|choice|response)\b"
           r"|\bI(?:\s+would|\s+will|'d)?\s+(?:choose|pick|select|go\s+with)|\bit(?:'s|\s+is)|\bthat(?:'s|\s+is))")
_STATEMENTS = [
    # Answer: B · the correct answer is (B) · I'd go with B · it's B
    re.compile(_PHRASE + _IS + _OPTION_WORD + _TOKEN.format(n="s")),
    # B is the correct answer · C is correct · B is the best answer
    re.compile(r"(?<![A-Za-z])" + _OPTION_WORD + _TOKEN.format(n="s")
               + r"\s+(?i:is|would\s+be)\s+(?i:the\s+)?(?i:correct|right|best)\b(?!\s+(?i:in|for|if|when|only))"),
    # so A, plasma free metanephrines · Therefore, B.
    re.compile(r"(?i:\b(?:so|therefore|thus|hence))[,:]?\s++" + _OPTION_WORD + _TOKEN.format(n="s")
               + r"(?=\s*+(?:[,.;:!)]|$|\s[-–—]))"),
    # Ethambutol (option C) causes … · (answer: C)
    re.compile(r"\(\s*+(?i:option|choice|answer)\s*+:?\s*+(?P<sp>[A-Z])\s*+\)"),
    # Answer: The patient has Graves disease (A).
    re.compile(r"(?i:\banswer)\s*[:\-]\s*[^\n.?!()]{1,200}?\(\s*+(?P<sp>[A-Z])\s*+\)"),
    # 答案：B · 正确答案是B · 选B · 故选B · 我选B
    re.compile(r"答案\s*+(?:是|为|:)?\s*+:?\s*+" + _TOKEN.format(n="s")),
    re.compile(r"选(?:择)?\s*+(?:项)?\s*+" + _TOKEN.format(n="s")),
]
_JOINED = re.compile(r"\s*+(?:,?\s*+(?i:or)(?:\s+(?i:maybe|possibly|perhaps))?|/|(?i:and)\s*+/\s*+(?i:or)|或)\s*+"
                     + _OPTION_WORD + _TOKEN.format(n="y"))
_HEDGES = [
    re.compile(_OPTION_WORD + _TOKEN.format(n="x") + _JOINED.pattern),
    re.compile(r"(?i:\b(?:between|both)\s+)" + _OPTION_WORD + _TOKEN.format(n="x") + r"\s+(?i:and)\s+"
               + _OPTION_WORD + _TOKEN.format(n="y")),
    re.compile(r"(?i:\boptions\s+)" + _TOKEN.format(n="x") + r"\s*+(?:,|(?i:and)|&)\s*+" + _TOKEN.format(n="y")),
    re.compile(_TOKEN.format(n="x") + r"\s*+(?:,|(?i:and)|&)\s*+" + _TOKEN.format(n="y") + r"\s+(?i:are\s+both)"),
]
_LEADING = re.compile(r"^\s*+" + _OPTION_WORD + r"(?:\(\s*(?P<p>[A-Za-z])\s*\)|\[\s*(?P<b>[A-Za-z])\s*\]"
                      r"|(?P<u>[A-Za-z])(?=\s*+(?:[.:)\-–—(]|$)))")
_BARE_LEADING = re.compile(r"^\s*+(?P<u>[A-Z])\s++(?P<rest>\S[^\n]{0,40})")
_STATED_TEXT = re.compile(r"(?i:\b(?:(?:final|correct|best|right|my)\s+)?answer\b)" + _IS + r"(?P<rest>[^\n]{1,300})")
_REFUSAL = re.compile(
    r"\b(?:I\s+(?:can(?:no|')t|am\s+(?:not\s+able|unable)|won't|will\s+not|don't\s+know)|I'm\s+(?:sorry|not\s+(?:able|sure)|unable)|"
    r"sorry|consult\s+(?:a|your)\s+(?:doctor|physician|healthcare)|as\s+an\s+AI|not\s+enough\s+information|"
    r"insufficient\s+information|cannot\s+(?:be\s+)?determined?)\b|无法|不确定",
    re.IGNORECASE,
)


def clean_answer(answer: str | None) -> tuple[str, bool]:
    """The answer without reasoning and markup, width-folded and stripped; and whether reasoning was removed."""
    split = strip_reasoning(answer)
    return _MARKUP.sub("", unicodedata.normalize("NFKC", split.answer)).strip(), split.stripped


def _group(match: re.Match[str], prefix: str) -> str | None:
    for suffix in ("p", "b", "u", "l"):
        value = match.groupdict().get(prefix + suffix)
        if value:
            return value.upper()
    return None


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold().rstrip(".!").strip()


def _statements(body: str, options: Mapping[str, str]) -> tuple[list[tuple[int, str, bool]], bool, bool]:
    """(position, letter, final) of each statement naming an offered letter; whether one is joined to
    another offered letter (a hedge); whether a statement named a letter that is not offered."""
    found: list[tuple[int, str, bool]] = []
    hedged = invalid = False
    for pattern in _STATEMENTS:
        for match in pattern.finditer(body):
            letter = _group(match, "s")
            if letter is None or letter not in options:
                invalid = True
                continue
            joined = _JOINED.match(body, match.end())
            if joined and _group(joined, "y") in options and _group(joined, "y") != letter:
                hedged = True
            final = "final" in match.group(0).casefold()
            found.append((match.start(), letter, final))
    return sorted(found), hedged, invalid


def _hedged(body: str, options: Mapping[str, str]) -> bool:
    for pattern in _HEDGES:
        for match in pattern.finditer(body):
            first, second = _group(match, "x"), _group(match, "y")
            if first != second and first in options and second in options:
                return True
    texts = {letter: _norm(text) for letter, text in options.items() if _norm(text)}
    words = "|".join(re.escape(t) for t in sorted(texts.values(), key=len, reverse=True))
    if words:
        pair = re.compile(rf"(?<!\w)({words})\s*+(?:,?\s*+or(?:\s+maybe)?|/|and\s*/\s*or)\s*+({words})(?!\w)")
        for match in pair.finditer(_norm(body)):
            if match.group(1) != match.group(2):
                return True
    return False


def _leading_letter(body: str, options: Mapping[str, str]) -> tuple[str | None, bool]:
    """(letter, invalid) from rule 4."""
    match = _LEADING.match(body)
    if match:
        letter = _group(match, "")
        bare_lower = match.group("u") is not None and match.group("u").islower()
        if bare_lower and not re.match(r"^\s*+(?i:option|choice\s+)?[a-z]\s*+(?:[.:)]|$)", body):
            return None, False  # "a - …" reads as a word more often than as option a
        if letter in options:
            return letter, False
        return None, True
    bare = _BARE_LEADING.match(body)
    if bare and bare.group("u") in options:
        text = _norm(options[bare.group("u")])
        head = _norm(bare.group("rest"))
        if text and head.startswith(text[: max(4, min(len(text), 12))]):
            return bare.group("u"), False
    return None, False


def _by_text(body: str, options: Mapping[str, str]) -> str | None:
    """Rule 5: the option whose text the answer is, states, or opens with."""
    said = _norm(body)
    texts = sorted(((letter, _norm(text)) for letter, text in options.items() if _norm(text)),
                   key=lambda item: len(item[1]), reverse=True)
    for letter, text in texts:
        if said == text:
            return letter
    stated = _STATED_TEXT.search(body)
    candidates = [said]
    if stated:
        candidates.insert(0, _norm(stated.group("rest")))
    for candidate in candidates:
        for letter, text in texts:
            if re.match(rf"{re.escape(text)}(?=\s*+(?:[,.;:!)(\-–—]|$))", candidate):
                return letter
    return None


def parse_letter(answer: str | None, options: Mapping[str, str]) -> Prediction:
    """Answer text → ``Prediction(letter or None)``; ``options`` maps upper-case letters to texts.

    Never raises. See the module docstring for the rules and the diagnostics.
    """
    flags = dict.fromkeys(FLAGS, False)
    split = strip_reasoning(answer)
    body, flags["reasoning_stripped"] = clean_answer(answer)

    def failed(flag: str) -> Prediction:
        flags[flag] = True
        if flag == "no_choice":
            flags["refusal"] = bool(_REFUSAL.search(body))
        return Prediction(None, True, flags)

    if split.only_reasoning:
        return failed("truncated_in_reasoning")
    if not body:
        return failed("empty")
    statements, joined, invalid = _statements(body, options)
    if joined:
        return failed("hedged")
    if statements:
        finals = [letter for _, letter, final in statements if final]
        if finals:
            return Prediction(finals[-1], False, flags)
        if len({letter for _, letter, _ in statements}) > 1:
            return failed("hedged")
        return Prediction(statements[0][1], False, flags)
    if _hedged(body, options):
        return failed("hedged")
    letter, leading_invalid = _leading_letter(body, options)
    if letter is not None:
        return Prediction(letter, False, flags)
    letter = _by_text(body, options)
    if letter is not None:
        flags["by_option_text"] = True
        return Prediction(letter, False, flags)
    return failed("invalid_letter" if invalid or leading_invalid else "no_choice")

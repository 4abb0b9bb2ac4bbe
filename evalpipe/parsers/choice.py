"""The option letter a multiple-choice answer chose (LongHealth: A–E, or A–F with "cannot be answered").

Tried in order; the first rule that finds a letter decides:

1. **Stated answer** — ``The correct answer is C: …``, ``The answer is (C)``, ``Answer: C``,
   ``Answer: **C**``, ``answer is option C`` (the phrase in any case; the letter upper-case, or
   in parentheses/brackets in any case).
2. **Leading letter** — the answer opens with the letter, alone or followed by ``:``, ``.``,
   ``)`` or ``-``: ``C``, ``C: Acute bronchitis``, ``(C)``, ``**C**``, ``Option C``. A capital
   ``A`` opening a sentence (``A patient …``) is not taken for option A.
3. **Bold letter** anywhere — ``… I choose **C**``.
4. **Option text** — the answer contains exactly one option's text (case and whitespace
   ignored); when several options' texts occur and all but one are contained in the longest
   (``hypertension`` vs ``pulmonary hypertension``), the longest wins; otherwise ambiguous.

A letter that is not one of the offered options is skipped (the search goes on); if nothing
else is found the answer is a parse failure flagged ``invalid_letter``. An answer where no rule
finds anything (``no_choice``) or rule 4 is ambiguous (``ambiguous``) is a failure too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from evalpipe.records import Prediction

_LETTER = r"(?:\(\s*([A-Za-z])\s*\)|\[\s*([A-Za-z])\s*\]|\**([A-Z])\**)"
# Runs of blanks and stars are matched possessively (``*+``): no element after them can start
# with what they take, so this changes no match, but "answer" + 200 blanks no longer costs
# O(n⁴) backtracking (2.6 s for 160 blanks before).
_STATED = re.compile(
    rf"\banswer\b\s*+(?:is|would\s++be|:)?\s*+[:\-]?\s*+\**+\s*+(?:option\s++)?{_LETTER}(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_LEADING = re.compile(
    r"^[\s*_`>#]*(?:option\s+)?"
    r"(?:\(\s*([A-Za-z])\s*\)|\[\s*([A-Za-z])\s*\]|([A-Z])(?=\s*(?:[:.)\-]|$|\*)))",
    re.IGNORECASE,
)
_BOLD = re.compile(r"\*\*\s*+\(?([A-Z])\)?\s*+[:.]?\s*+\*\*")


def _letter(match: re.Match[str]) -> str:
    return next(g for g in match.groups() if g).upper()


def _case_ok(match: re.Match[str]) -> bool:
    """A bare (unbracketed) letter must be upper-case; ``a``/``c`` are words too often."""
    bracketed = match.group(1) or match.group(2)
    return bool(bracketed) or (match.group(3) or "").isupper()


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold().rstrip(".")


def _by_text(answer: str, options: Mapping[str, str]) -> tuple[str | None, bool]:
    """(letter, ambiguous) from option texts occurring in the answer."""
    said = _norm(answer)
    hits = [letter for letter, text in options.items() if _norm(text) and _norm(text) in said]
    if not hits:
        return None, False
    longest = max(hits, key=lambda letter: len(_norm(options[letter])))
    if all(_norm(options[h]) in _norm(options[longest]) for h in hits):
        return longest, False
    return None, True


def parse_choice(answer: str, options: Mapping[str, str]) -> Prediction:
    """Answer text → Prediction(letter or None); ``options`` maps upper-case letters to texts.

    Rules 1–3 skip a letter that is not an option (``Answer: I think …`` is not option I) and
    go on looking; only when nothing else is found is such a letter reported (``invalid_letter``).
    """
    text = answer or ""
    letter = via = invalid = None
    for name, pattern in (("stated", _STATED), ("leading", _LEADING), ("bold", _BOLD)):
        for match in pattern.finditer(text):
            if name != "bold" and not _case_ok(match):
                continue
            found = _letter(match)
            if found in options:
                letter, via = found, name
                break
            invalid = invalid or found
        if letter:
            break
    ambiguous = False
    if letter is None:
        letter, ambiguous = _by_text(text, options)
        via = "option_text" if letter else None
    flags = {"invalid_letter": False, "no_choice": False, "ambiguous": ambiguous,
             "by_option_text": via == "option_text"}
    if letter is None and invalid is not None and not ambiguous:
        return Prediction(None, True, {**flags, "invalid_letter": True})
    if letter is None:
        return Prediction(None, True, {**flags, "no_choice": not ambiguous})
    return Prediction(letter, False, flags)

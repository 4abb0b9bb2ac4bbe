"""The NLI label an answer commits to: entailment, contradiction or neutral.

Rule, in order (label words match as whole words, any case):

1. **Leading label.** If the answer opens with a label — after punctuation/markdown and an
   optional lead-in such as ``Answer:``, ``Label:``, ``The answer is``, ``The (logical) relation
   (ship) is`` — that label is the answer, whatever follows (``NEUTRAL. Neither sentence implies
   an entailment …`` is neutral) — unless the label is rejected right away (``Neutral is
   wrong, …``), or a later committing phrase names another label (then it is ambiguous) …
2. **Committing phrase.** … otherwise the first lead-in + label anywhere (``… so the answer is
   contradiction``). In both cases a label directly followed by ``or``/``/``/``and/or`` and
   another label (``ENTAILMENT or NEUTRAL``) is a hedge: ambiguous, a parse failure.
3. **Sole label.** Otherwise the label words that are not negated (``not``/``no``/``isn't``
   directly before them) are collected: exactly one distinct label is the answer; two or more is
   *ambiguous* (a hedge such as ``entailment or neutral`` must not be credited with either);
   none is *no label*. Both are parse failures, scored as wrong.

The value is the lower-case label or None; diagnostics flag ``ambiguous`` and ``no_label``.
"""

from __future__ import annotations

import re

from evalpipe.records import Prediction

LABELS = ("entailment", "contradiction", "neutral")

_LABEL = r"(entailment|contradiction|neutral)"
# Blank and noise runs are possessive (``*+``): what follows them never starts with what they
# take, so no match changes, but "answer" + n blanks is no longer O(n²) backtracking.
_LEAD_IN = (
    r"(?:(?:final\s+)?answer|label|prediction|relation(?:ship)?|output)\s*+(?:is\s*+)?[:=\-]?"
    r"|the\s+(?:final\s+|correct\s+)?answer\s+is"
    r"|the\s+(?:logical\s+)?relation(?:ship)?(?:\s+between\s+the\s+(?:two\s+)?sentences)?\s+is"
    r"|it\s+is|this\s+is"
)
_NOISE = r"[\s*_`'\"\[\](){}#>.:\-]*+"
_LEADING = re.compile(rf"^{_NOISE}(?:(?:{_LEAD_IN}){_NOISE})?{_LABEL}\b", re.IGNORECASE)
_COMMITTING = re.compile(rf"(?:{_LEAD_IN}){_NOISE}{_LABEL}\b", re.IGNORECASE)
_MENTION = re.compile(rf"\b{_LABEL}\b", re.IGNORECASE)
_NEGATION = re.compile(r"\b(?:not|no|isn't|is\s+not|neither|nor)\s*$", re.IGNORECASE)
_HEDGE = re.compile(rf"^[\s*_`'\"]*+(?:or|/|and\s*+/\s*+or)[\s*_`'\"]*+{_LABEL}\b", re.IGNORECASE)


_REJECTED = re.compile(r"^[\s*_`'\"]*+(?:is|would\s+be|seems)?\s*+(?:wrong|incorrect|not\b|isn't|unlikely)",
                       re.IGNORECASE)


def _ambiguous() -> Prediction:
    return Prediction(None, True, {"ambiguous": True, "no_label": False})


def parse_nli_label(answer: str) -> Prediction:
    """Answer text → Prediction(label or None); never raises."""
    text = answer or ""
    for pattern in (_LEADING, _COMMITTING):
        match = pattern.search(text)
        if match and _REJECTED.match(text[match.end():]):
            match = None  # "Neutral is wrong, …" names a label to reject it
        if match:
            label = match.group(1).lower()
            hedge = _HEDGE.match(text[match.end():])
            if hedge and hedge.group(1).lower() != label:
                return _ambiguous()
            later = {m.group(1).lower() for m in _COMMITTING.finditer(text, match.end())}
            if later - {label}:
                return _ambiguous()  # "Neutral. … the answer is entailment": two commitments
            return Prediction(label, False, {"ambiguous": False, "no_label": False})
    found = []
    for match in _MENTION.finditer(text):
        if not _NEGATION.search(text[max(0, match.start() - 12): match.start()]):
            found.append(match.group(1).lower())
    distinct = list(dict.fromkeys(found))
    if len(distinct) == 1:
        return Prediction(distinct[0], False, {"ambiguous": False, "no_label": False})
    return Prediction(None, True, {"ambiguous": len(distinct) > 1, "no_label": not distinct})

"""The label a free-text answer commits to, for a fixed set of label words (English prose answers).

Rule, in order (label words match as whole words, any case; aliases count as their label):

0. **Reasoning.** The ``<think>`` block goes first (:func:`evalpipe.text.reasoning.strip_reasoning`:
   ``<think>maybe neutral?</think> entailment`` is entailment); an answer that stopped inside an
   unclosed block is a failure flagged ``truncated_in_reasoning``.

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

The value is the canonical label (as the label set spells it) or None; diagnostics flag
``ambiguous``, ``no_label`` and ``truncated_in_reasoning``. :mod:`evalpipe.parsers.nli_label` is this rule over MedNLI's three
labels; a classification task file chooses it with ``parser: committed``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache

from evalpipe.records import Prediction
from evalpipe.text.reasoning import strip_reasoning

_LEAD_IN = (
    r"(?:(?:final\s+)?answer|label|prediction|relation(?:ship)?|output)\s*+(?:is\s*+)?[:=\-]?"
    r"|the\s+(?:final\s+|correct\s+)?answer\s+is"
    r"|the\s+(?:logical\s+)?relation(?:ship)?(?:\s+between\s+the\s+(?:two\s+)?sentences)?\s+is"
    r"|it\s+is|this\s+is"
)
# blank and noise runs are possessive (``*+``): what follows them never starts with what they take,
# so no match changes, but "answer" + n blanks is no longer O(n²) backtracking
_NOISE = r"[\s*_`'\"\[\](){}#>.:\-]*+"
_NEGATION = re.compile(r"\b(?:not|no|isn't|is\s+not|neither|nor)\s*$", re.IGNORECASE)
_REJECTED = re.compile(r"^[\s*_`'\"]*+(?:is|would\s+be|seems)?\s*+(?:wrong|incorrect|not\b|isn't|unlikely)",
                       re.IGNORECASE)


class CommittedLabels:
    """The compiled patterns for one label set (labels and their aliases, by lower-case spelling)."""

    def __init__(self, labels: Iterable[str], aliases: Mapping[str, str] | None = None) -> None:
        labels = tuple(labels)
        self.spellings: dict[str, str] = {label.casefold(): label for label in labels}
        for alias, label in (aliases or {}).items():
            if label not in labels:
                raise ValueError(f"alias {alias!r} points to {label!r}, which is not a label")
            self.spellings[alias.casefold()] = label
        words = "|".join(re.escape(s) for s in sorted(self.spellings, key=len, reverse=True))
        label = rf"({words})"
        self.leading = re.compile(rf"^{_NOISE}(?:(?:{_LEAD_IN}){_NOISE})?{label}\b", re.IGNORECASE)
        self.committing = re.compile(rf"(?:{_LEAD_IN}){_NOISE}{label}\b", re.IGNORECASE)
        self.mention = re.compile(rf"\b{label}\b", re.IGNORECASE)
        self.hedge = re.compile(rf"^[\s*_`'\"]*+(?:or|/|and\s*+/\s*+or)[\s*_`'\"]*+{label}\b", re.IGNORECASE)

    def canonical(self, spelling: str) -> str:
        return self.spellings[spelling.casefold()]


@lru_cache(maxsize=64)
def committed_labels(labels: tuple[str, ...], aliases: tuple[tuple[str, str], ...] = ()) -> CommittedLabels:
    return CommittedLabels(labels, dict(aliases))


def _flags(ambiguous: bool = False, no_label: bool = False, truncated: bool = False) -> dict[str, bool]:
    return {"ambiguous": ambiguous, "no_label": no_label, "truncated_in_reasoning": truncated}


def _ambiguous() -> Prediction:
    return Prediction(None, True, _flags(ambiguous=True))


def parse_committed_label(answer: str | None, labels: CommittedLabels) -> Prediction:
    """Answer text → Prediction(label or None); never raises (see the module docstring)."""
    split = strip_reasoning(answer)
    if split.only_reasoning:
        return Prediction(None, True, _flags(no_label=True, truncated=True))
    text = split.answer
    for pattern in (labels.leading, labels.committing):
        match = pattern.search(text)
        if match and _REJECTED.match(text[match.end():]):
            match = None  # "Neutral is wrong, …" names a label to reject it
        if match:
            label = labels.canonical(match.group(1))
            hedge = labels.hedge.match(text[match.end():])
            if hedge and labels.canonical(hedge.group(1)) != label:
                return _ambiguous()
            later = {labels.canonical(m.group(1)) for m in labels.committing.finditer(text, match.end())}
            if later - {label}:
                return _ambiguous()  # "Neutral. … the answer is entailment": two commitments
            return Prediction(label, False, _flags())
    found = []
    for match in labels.mention.finditer(text):
        if not _NEGATION.search(text[max(0, match.start() - 12): match.start()]):
            found.append(labels.canonical(match.group(1)))
    distinct = list(dict.fromkeys(found))
    if len(distinct) == 1:
        return Prediction(distinct[0], False, _flags())
    return Prediction(None, True, _flags(ambiguous=len(distinct) > 1, no_label=not distinct))

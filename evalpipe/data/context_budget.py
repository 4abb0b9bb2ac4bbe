"""Fitting documents into a context budget (LongHealth puts a patient's letters into one prompt).

The budget is measured by a :class:`Measure`: characters (:data:`CHARACTERS`, the default), or
tokens through :class:`CountedMeasure` wrapping any token counter (e.g. the counters in
``evalpipe.context_fit``) — which is why the fitting rule takes the measure as an argument instead of
hard-coding ``len``.

Rule (:func:`fit_documents`):

1. *Required* documents (the ones holding the answer) go in first, in the order given. If one
   does not fit, it is cut to the room left and no further required document is added; the
   result is flagged ``truncated`` so a report can tell a model never saw (all of) the answer.
2. *Optional* documents (the patient's other letters, or distractors) are added whole, in the
   order given, each only if it fits; one that does not fit is skipped and the next is tried.
   Optional documents are never cut: a half letter is noise the benchmark does not intend.
3. A separator is counted between consecutive documents.

The caller shuffles the chosen documents afterwards (seeded), so position carries no hint.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol


class Measure(Protocol):
    """How text is counted against a budget, and how it is cut to fit."""

    @property
    def name(self) -> str: ...

    def length(self, text: str) -> int: ...

    def truncate(self, text: str, size: int) -> str: ...


@dataclass(frozen=True)
class CharacterMeasure:
    name: str = "characters"

    def length(self, text: str) -> int:
        return len(text)

    def truncate(self, text: str, size: int) -> str:
        return text[: max(size, 0)]


CHARACTERS = CharacterMeasure()


class CountedMeasure:
    """A Measure from any ``count(text) -> int`` (e.g. a tokenizer, ``evalpipe.context_fit``'s counters).

    Lengths are cached per text (LongHealth measures the same letters many times); truncation keeps
    the longest prefix whose count fits, found by bisection over characters (a few counts).
    """

    def __init__(self, count: Callable[[str], int], name: str = "tokens") -> None:
        self._count = count
        self._cache: dict[str, int] = {}
        self.name = name

    def length(self, text: str) -> int:
        if text not in self._cache:
            self._cache[text] = self._count(text)
        return self._cache[text]

    def truncate(self, text: str, size: int) -> str:
        low, high = 0, len(text)
        while low < high:
            mid = (low + high + 1) // 2
            if self._count(text[:mid]) <= size:
                low = mid
            else:
                high = mid - 1
        return text[:low]


@dataclass(frozen=True)
class Document:
    id: str
    text: str


@dataclass(frozen=True)
class FittedDocuments:
    documents: tuple[Document, ...]
    #: a required document was cut (or left out) because the budget was too small
    truncated: bool
    #: optional documents that did not fit
    skipped: int
    #: size of the documents plus separators, in the measure's unit
    used: int


def fit_documents(
    required: Sequence[Document],
    optional: Sequence[Document],
    budget: int,
    separator: str,
    measure: Measure = CHARACTERS,
) -> FittedDocuments:
    """Choose documents for a prompt under ``budget`` (see the module docstring for the rule)."""
    if budget <= 0:
        raise ValueError(f"the context budget must be positive, got {budget}")
    sep = measure.length(separator)
    chosen: list[Document] = []
    used = 0
    truncated = False

    def cost(doc_size: int) -> int:
        return doc_size + (sep if chosen else 0)

    for doc in required:
        size = measure.length(doc.text)
        if used + cost(size) <= budget:
            used += cost(size)
            chosen.append(doc)
            continue
        room = budget - used - (sep if chosen else 0)
        if room > 0:
            cut = measure.truncate(doc.text, room)
            used += cost(measure.length(cut))
            chosen.append(Document(doc.id, cut))
        truncated = True
        break
    skipped = 0
    for doc in optional:
        size = measure.length(doc.text)
        if used + cost(size) <= budget:
            used += cost(size)
            chosen.append(doc)
        else:
            skipped += 1
    return FittedDocuments(tuple(chosen), truncated, skipped, used)

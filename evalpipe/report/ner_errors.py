"""NER error analysis: what kind of mistake each gold and each predicted entity is.

Applies to any task whose gold has ``.spans`` or is itself a sequence of :class:`~evalpipe.records.Span`
and whose prediction values are sequences of Spans (NCBI, CMeEE, …); a prediction given as IOB2
tags with one tag per gold tag (a compatibility mode) is decoded into spans first. Spans are
half-open; two spans *overlap* when they share at least one position (token or character, as
the task defines them). Within a sample both sides are sets (duplicates collapse), as in the
strict metrics.

Every entity gets exactly one category; the first rule that applies wins:

========  =================  ====================================================================
order     category           a gold entity … / a predicted entity …
========  =================  ====================================================================
1         ``correct``        some entity on the other side has the same start, end and type
2         ``type``           … has the same start and end but another type
3         ``boundary``       … overlaps it with the same type (other start or end)
4         ``boundary+type``  … overlaps it with another type and other boundaries
5         ``missed``         (gold) no prediction overlaps it at all
5         ``spurious``       (predicted) it overlaps no gold entity
========  =================  ====================================================================

So the gold side sums to the number of gold entities and the predicted side to the number of
predictions; ``correct`` is the same number on both sides (strict true positives), and the other
counts can differ between sides (one gold entity split into two predictions is one gold
``boundary`` but two predicted ``boundary`` entities). Rule 2 comes before rule 3: matching
boundaries with a wrong type is reported as a type error even if another, overlapping gold
entity has the predicted type. The counterpart shown for an error is the entity that decided
its category (the one with the largest overlap, ties by position).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evalpipe.metrics.spans import bio_to_spans
from evalpipe.records import Span

__all__ = [
    "CATEGORIES",
    "EntityOutcome",
    "ErrorExample",
    "NerAnalysis",
    "analyse",
    "classify",
    "gold_spans",
    "is_span_task",
    "prediction_spans",
    "span_text",
]

Side = Literal["gold", "pred"]
GOLD_CATEGORIES = ("correct", "type", "boundary", "boundary+type", "missed")
PRED_CATEGORIES = ("correct", "type", "boundary", "boundary+type", "spurious")
#: every category, in table order
CATEGORIES = ("correct", "type", "boundary", "boundary+type", "missed", "spurious")


@dataclass(frozen=True)
class EntityOutcome:
    side: Side
    span: Span
    category: str
    #: the entity on the other side that decided the category (None for correct/missed/spurious)
    counterpart: Span | None


@dataclass(frozen=True)
class ErrorExample:
    sample_id: str
    side: Side
    category: str
    span: Span
    text: str
    counterpart: Span | None
    counterpart_text: str
    context: str


@dataclass(frozen=True)
class NerAnalysis:
    task: str
    #: (side, entity type, category) → count
    counts: Mapping[tuple[str, str, str], int]
    #: category → a few examples (errors only; ``correct`` has none)
    examples: Mapping[str, tuple[ErrorExample, ...]]

    def labels(self) -> list[str]:
        return sorted({label for _, label, _ in self.counts})

    def total(self, side: str, category: str, label: str | None = None) -> int:
        return sum(v for (s, lab, c), v in self.counts.items()
                   if s == side and c == category and (label is None or lab == label))


def _overlap(a: Span, b: Span) -> int:
    return max(0, min(a.end, b.end) - max(a.start, b.start))


def _categorise(side: Side, span: Span, others: Sequence[Span]) -> EntityOutcome:
    if span in others:
        return EntityOutcome(side, span, "correct", None)
    same_bounds = [o for o in others if (o.start, o.end) == (span.start, span.end)]
    if same_bounds:
        return EntityOutcome(side, span, "type", same_bounds[0])
    overlapping = sorted((o for o in others if _overlap(o, span) > 0), key=lambda o: (-_overlap(o, span), o))
    same_type = [o for o in overlapping if o.label == span.label]
    if same_type:
        return EntityOutcome(side, span, "boundary", same_type[0])
    if overlapping:
        return EntityOutcome(side, span, "boundary+type", overlapping[0])
    return EntityOutcome(side, span, "missed" if side == "gold" else "spurious", None)


def classify(gold: Iterable[Span], pred: Iterable[Span]) -> tuple[list[EntityOutcome], list[EntityOutcome]]:
    """Categories of one sample's gold entities and predicted entities (see the module table)."""
    gold_set, pred_set = sorted(set(gold)), sorted(set(pred))
    return ([_categorise("gold", g, pred_set) for g in gold_set],
            [_categorise("pred", p, gold_set) for p in pred_set])


def prediction_spans(value: Any, gold: Any) -> tuple[Span, ...] | None:
    """A prediction value as spans: Spans as they are, IOB2 tags decoded; None if neither."""
    if not isinstance(value, (list, tuple)):
        return None
    if all(isinstance(v, Span) for v in value):
        return tuple(value)
    tags = getattr(gold, "tags", None)
    if tags is not None and len(value) == len(tags) and all(isinstance(v, str) for v in value):
        try:
            return bio_to_spans(value)
        except ValueError:
            return None
    return None


def gold_spans(gold: Any) -> tuple[Span, ...] | None:
    """The gold entities: ``gold.spans`` (NCBI) or the gold itself when it is a sequence of Spans
    (CMeEE); None for any other gold."""
    spans = getattr(gold, "spans", gold)
    if isinstance(spans, (list, tuple)) and all(isinstance(s, Span) for s in spans):
        return tuple(spans)
    return None


def is_span_task(examples: Sequence[Any], predictions: Sequence[Any]) -> bool:
    """True when every gold has ``.spans`` of Spans and every prediction reads as spans."""
    if not examples or len(examples) != len(predictions):
        return False
    return all(
        gold_spans(ex.gold) is not None and prediction_spans(p.value, ex.gold) is not None
        for ex, p in zip(examples, predictions)
    )


def span_text(inputs: Mapping[str, Any], span: Span) -> str:
    """The covered text: tokens joined by spaces when inputs have ``tokens``, else ``text[start:end]``."""
    tokens = inputs.get("tokens")
    if isinstance(tokens, (list, tuple)) and span.end <= len(tokens):
        return " ".join(str(t) for t in tokens[span.start:span.end])
    text = inputs.get("text")
    if isinstance(text, str) and span.end <= len(text):
        return text[span.start:span.end]
    return f"[{span.start}, {span.end})"


def _context(inputs: Mapping[str, Any], span: Span, width: int = 8) -> str:
    """The sentence around ``span`` with the span in ⟦ ⟧ (``width`` tokens, or 4x chars, each side)."""
    tokens = inputs.get("tokens")
    if isinstance(tokens, (list, tuple)) and span.end <= len(tokens):
        left = tokens[max(0, span.start - width):span.start]
        right = tokens[span.end:span.end + width]
        return " ".join([*map(str, left), "⟦", *map(str, tokens[span.start:span.end]), "⟧", *map(str, right)])
    text = inputs.get("text")
    if isinstance(text, str) and span.end <= len(text):
        w = 4 * width
        return f"{text[max(0, span.start - w):span.start]}⟦{text[span.start:span.end]}⟧{text[span.end:span.end + w]}"
    return ""


def analyse(task: str, examples: Sequence[Any], predictions: Sequence[Any], *, per_category: int = 3) -> NerAnalysis:
    """Counts per (side, type, category) over a corpus, and the first few examples of each error
    (at most one per sample and category, in sample order).

    ``examples`` are :class:`~evalpipe.records.Example` and ``predictions`` are
    :class:`~evalpipe.records.Prediction` (call :func:`is_span_task` first).
    """
    counts: Counter[tuple[str, str, str]] = Counter()
    found: dict[str, list[ErrorExample]] = {c: [] for c in CATEGORIES if c != "correct"}
    shown: set[tuple[str, str]] = set()  # (category, sample): one example per sample, for variety
    for example, prediction in zip(examples, predictions):
        gold = gold_spans(example.gold) or ()
        pred = prediction_spans(prediction.value, example.gold) or ()
        gold_out, pred_out = classify(gold, pred)
        for outcome in (*gold_out, *pred_out):
            counts[(outcome.side, outcome.span.label, outcome.category)] += 1
            bucket = found.get(outcome.category)
            # a type/boundary error shows up on both sides: show it once, from the prediction
            if bucket is None or len(bucket) >= per_category:
                continue
            if outcome.side == "gold" and outcome.category != "missed":
                continue
            if (outcome.category, example.id) in shown:
                continue
            shown.add((outcome.category, example.id))
            bucket.append(ErrorExample(
                sample_id=example.id, side=outcome.side, category=outcome.category, span=outcome.span,
                text=span_text(example.inputs, outcome.span), counterpart=outcome.counterpart,
                counterpart_text=span_text(example.inputs, outcome.counterpart) if outcome.counterpart else "",
                context=_context(example.inputs, outcome.span),
            ))
    return NerAnalysis(task=task, counts=dict(counts), examples={k: tuple(v) for k, v in found.items()})

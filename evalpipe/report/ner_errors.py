"""NER error analysis: what kind of mistake each gold and each predicted entity is.

Works on sample records as ``samples.jsonl`` holds them (no task is imported): it applies to any
task whose gold is a list of spans (``{"start", "end", "label"}``) or an object with such a
``spans`` list, and whose predictions are lists of spans (NCBI, CMeEE, a user's span task …); a
prediction given as IOB2 tags with one tag per gold tag (a compatibility mode) is decoded into
spans first. Spans are
half-open; two spans *overlap* when they share at least one position (token or character, as
the task defines them). Within a sample both sides are sets (duplicates collapse), as in the
strict metrics.

Every entity gets exactly one category; the first rule that applies wins. An entity on the other
side that is itself exactly matched (``correct``) never explains another entity's error: in nested
NER a missed inner entity under a correctly found outer one is ``missed``, not a boundary or type
error of the outer one.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evalpipe.metrics.spans import bio_to_spans
from evalpipe.records import Span
from evalpipe.rundir.kinds import SPAN_NER

__all__ = [
    "CATEGORIES",
    "EntityOutcome",
    "ErrorExample",
    "NerAnalysis",
    "analyse",
    "classify",
    "gold_spans",
    "is_span_kind",
    "is_span_task",
    "prediction_spans",
    "record_spans",
    "sample_outcomes",
    "SampleOutcomes",
    "span_text",
]

Side = Literal["gold", "pred"]
GOLD_CATEGORIES = ("correct", "type", "boundary", "boundary+type", "missed")
PRED_CATEGORIES = ("correct", "type", "boundary", "boundary+type", "spurious")
#: every category, in table order
CATEGORIES = ("correct", "type", "boundary", "boundary+type", "missed", "spurious")


@dataclass(frozen=True, slots=True)
class EntityOutcome:
    """One entity's category (see the module table). Slotted: the report holds one per entity of
    every sample of a span task (:meth:`evalpipe.report.runs.ReportRun.span_outcomes`), and a
    slotted object is half the size of one with a dictionary."""

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
    matched = set(gold_set) & set(pred_set)
    # an exactly matched entity explains only its own match, never another entity's error
    free_pred = [p for p in pred_set if p not in matched]
    free_gold = [g for g in gold_set if g not in matched]
    return ([_categorise("gold", g, pred_set if g in matched else free_pred) for g in gold_set],
            [_categorise("pred", p, gold_set if p in matched else free_gold) for p in pred_set])


def _span(value: Any) -> Span | None:
    if isinstance(value, Span):
        return value
    if isinstance(value, Mapping) and "start" in value and "end" in value and "label" in value:
        try:
            return Span(int(value["start"]), int(value["end"]), str(value["label"]))
        except (TypeError, ValueError):
            return None
    return None


def _span_list(value: Any) -> tuple[Span, ...] | None:
    if not isinstance(value, (list, tuple)):
        return None
    spans = [_span(v) for v in value]
    return tuple(s for s in spans if s is not None) if all(s is not None for s in spans) else None


def gold_spans(gold: Any) -> tuple[Span, ...] | None:
    """The gold entities: a list of spans, or an object's ``spans`` (NCBI keeps tags beside them);
    None for any other gold."""
    if isinstance(gold, Mapping) and "spans" in gold:
        return _span_list(gold["spans"])
    spans = getattr(gold, "spans", gold)
    return _span_list(spans)


def _gold_tags(gold: Any) -> Sequence[Any] | None:
    tags = gold.get("tags") if isinstance(gold, Mapping) else getattr(gold, "tags", None)
    return tags if isinstance(tags, (list, tuple)) else None


def prediction_spans(value: Any, gold: Any) -> tuple[Span, ...] | None:
    """A prediction as spans: a list of spans as it is, IOB2 tags (one per gold tag) decoded; else None."""
    spans = _span_list(value)
    if spans is not None and (spans or not _looks_like_tags(value, gold)):
        return spans
    tags = _gold_tags(gold)
    if tags is not None and _looks_like_tags(value, gold):
        try:
            return tuple(bio_to_spans(list(value)))
        except ValueError:
            return None
    return None


def _looks_like_tags(value: Any, gold: Any) -> bool:
    tags = _gold_tags(gold)
    return (isinstance(value, (list, tuple)) and tags is not None and len(value) == len(tags)
            and all(isinstance(v, str) for v in value) and bool(value))


def is_span_kind(kind: str | None) -> bool | None:
    """Whether a task of this recorded kind (config.json ``tasks.<name>.kind``) is a span task; None
    when no kind was recorded (a run written before kinds were): then :func:`is_span_task`'s shape
    test decides, as it did before."""
    return None if kind is None else kind == SPAN_NER


def record_spans(record: Mapping[str, Any]) -> tuple[tuple[Span, ...], tuple[Span, ...]] | None:
    """One sample record's gold entities (:func:`gold_spans`) and predicted entities
    (:func:`prediction_spans`); None where either does not read as spans."""
    gold = record.get("gold")
    gold_entities = gold_spans(gold)
    if gold_entities is None:
        return None
    predicted = prediction_spans(record.get("prediction"), gold)
    return None if predicted is None else (gold_entities, predicted)


def is_span_task(records: Sequence[Mapping[str, Any]], kind: str | None = None) -> bool:
    """True when the task is a span task: its recorded ``kind`` is ``span_ner`` (or, with no kind
    recorded — an older run — by shape) and every sample's gold reads as spans and every prediction
    as spans (or tags). A recorded kind other than ``span_ner`` is never one, whatever its records look like."""
    if not records or is_span_kind(kind) is False:
        return False
    return all(record_spans(r) is not None for r in records)


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


#: one sample's classified gold entities and predicted entities
SampleOutcomes = tuple[Sequence[EntityOutcome], Sequence[EntityOutcome]]


def sample_outcomes(record: Mapping[str, Any]) -> SampleOutcomes:
    """The classified gold and predicted entities of one sample record."""
    gold = record.get("gold")
    return classify(gold_spans(gold) or (), prediction_spans(record.get("prediction"), gold) or ())


def analyse(task: str, records: Iterable[Mapping[str, Any]], *, per_category: int = 3,
            outcomes: Sequence[SampleOutcomes] | None = None,
            whole: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None) -> NerAnalysis:
    """Counts per (side, type, category) over a task's sample records, and the first few examples
    of each error (at most one per sample and category, in sample order; call :func:`is_span_task`
    first). ``outcomes``: each record's :func:`sample_outcomes`, when the caller has them already;
    ``whole``: gives a record with its ``inputs`` where ``records`` are slim ones (the report's,
    :data:`~evalpipe.report.runs.ON_DEMAND_FIELDS`) — called only for a record an example quotes.

    A sample without an answer (its ``error`` is set) is left out, as it is of every metric
    (evalpipe.coverage): its gold entities are no "missed" ones, so the counts add up to tp/fp/fn."""
    counts: Counter[tuple[str, str, str]] = Counter()
    found: dict[str, list[ErrorExample]] = {c: [] for c in CATEGORIES if c != "correct"}
    shown: set[tuple[str, str]] = set()  # (category, sample): one example per sample, for variety
    for i, record in enumerate(records):
        if record.get("error") is not None:
            continue
        sample_id = str(record.get("id"))
        inputs: Mapping[str, Any] | None = None  # read for the record's first example
        gold_out, pred_out = outcomes[i] if outcomes is not None else sample_outcomes(record)
        for outcome in (*gold_out, *pred_out):
            counts[(outcome.side, outcome.span.label, outcome.category)] += 1
            bucket = found.get(outcome.category)
            # a type/boundary error shows up on both sides: show it once, from the prediction
            if bucket is None or len(bucket) >= per_category:
                continue
            if outcome.side == "gold" and outcome.category != "missed":
                continue
            if (outcome.category, sample_id) in shown:
                continue
            shown.add((outcome.category, sample_id))
            if inputs is None:
                given = (whole(record) if whole is not None else record).get("inputs")
                inputs = given if isinstance(given, Mapping) else {}
            bucket.append(ErrorExample(
                sample_id=sample_id, side=outcome.side, category=outcome.category, span=outcome.span,
                text=span_text(inputs, outcome.span), counterpart=outcome.counterpart,
                counterpart_text=span_text(inputs, outcome.counterpart) if outcome.counterpart else "",
                context=_context(inputs, outcome.span),
            ))
    return NerAnalysis(task=task, counts=dict(counts), examples={k: tuple(v) for k, v in found.items()})

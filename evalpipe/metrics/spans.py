"""Entity-level NER metrics over token spans.

Everything here is a pure function over :class:`~evalpipe.records.Span` values whose ``start``
and ``end`` are **token indices, half-open** (``[start, end)``): a one-token entity at token 4 is
``Span(4, 5, label)``.

Conventions shared by every function in this module:

* **Unit.** The counted unit is the *entity* (one span), not the token, except in
  :func:`token_accuracy`, whose unit is the token.
* **Micro averaging.** Corpus scores are micro averages: true positives, false positives and
  false negatives are summed over all samples first, and precision, recall and F1 are computed
  once from the sums. No function here macro-averages (per-sample or per-label means).
* **Sets.** Within one sample the gold and the predicted spans are sets: a span listed twice
  counts once.
* **Zero division.** ``precision = tp / (tp + fp)`` and ``recall = tp / (tp + fn)``; a ratio with
  a zero denominator is ``0.0``. ``F1 = 2 * P * R / (P + R)`` (the harmonic mean of the two
  floats) and is ``0.0`` when ``P + R == 0``, i.e. whenever ``tp == 0``. So an empty prediction
  against non-empty gold scores P = R = F1 = 0, and an empty prediction against empty gold also
  scores 0 (there is nothing to get right; it is *not* scored as a perfect 1.0). This is what
  seqeval reports in its default ``zero_division="warn"`` mode (which additionally warns), and
  computing F1 from P and R rather than from counts keeps the floats bit-identical to seqeval.

The counting and P/R/F1 arithmetic are :mod:`evalpipe.metrics.prf`'s, shared with the other
set-based metrics; this module adds what is particular to spans (partial overlap, BIO, tokens).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from evalpipe.metrics.aggregation import MicroPRF, Ratio, Total
from evalpipe.metrics.prf import PRF, check_parallel, micro_prf, prf_from_counts, set_counts
from evalpipe.records import ScoreSheet, Span

__all__ = [
    "PRF",
    "bio_to_spans",
    "partial_counts",
    "partial_micro_prf",
    "per_label_prf",
    "prf_from_counts",
    "span_score_sheet",
    "spans_to_bio",
    "strict_counts",
    "strict_micro_prf",
    "token_accuracy",
    "token_counts",
    "SPAN_AGGREGATIONS",
    "TOKEN_ACCURACY",
]


#: how each corpus metric of :func:`span_score_sheet` is made from the summed per-sample counts
SPAN_AGGREGATIONS = {
    **{stat: MicroPRF(stat) for stat in ("precision", "recall", "f1")},
    **{f"partial_{stat}": MicroPRF(stat, prefix="partial_") for stat in ("precision", "recall", "f1")},
    **{count: Total(count) for count in ("tp", "fp", "fn")},
}
#: per-sample parts of token accuracy (:func:`token_counts`)
TOKENS, CORRECT_TOKENS = "tokens", "correct_tokens"
TOKEN_ACCURACY = Ratio(CORRECT_TOKENS, TOKENS)


# --------------------------------------------------------------------------- strict matching


def strict_counts(gold: Iterable[Span], pred: Iterable[Span]) -> tuple[int, int, int]:
    """``(tp, fp, fn)`` for one sample under exact matching.

    A predicted span is a true positive iff a gold span has the same ``start``, ``end`` and
    ``label``. Both sides are sets (duplicates collapse). ``tp = |G ∩ P|``, ``fp = |P \\ G|``,
    ``fn = |G \\ P|``; empty gold and empty prediction give ``(0, 0, 0)``.
    """
    return set_counts(gold, pred)


def strict_micro_prf(golds: Sequence[Iterable[Span]], preds: Sequence[Iterable[Span]]) -> PRF:
    """Corpus-level exact-match P/R/F1, micro-averaged over entities.

    ``golds[i]`` and ``preds[i]`` are the spans of sample ``i``. Per-sample
    :func:`strict_counts` are summed over the corpus, then P/R/F1 are computed once from the sums
    (zero denominators give ``0.0``). An empty corpus, or one with no gold and no predicted
    spans, scores P = R = F1 = 0.
    """
    return micro_prf(golds, preds, strict_counts)


def per_label_prf(
    golds: Sequence[Iterable[Span]], preds: Sequence[Iterable[Span]]
) -> dict[str, PRF]:
    """Exact-match P/R/F1 for each label, each micro-averaged over the corpus.

    For label ``L`` only spans labelled ``L`` are considered, on both sides; counts are summed
    over samples and turned into a :class:`PRF` (zero denominators give ``0.0``). Keys are every
    label that occurs in gold or in predictions, in sorted order. A span predicted with the wrong
    label is a false positive for the predicted label and a false negative for the gold one.
    """
    check_parallel(golds, preds)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for gold, pred in zip(golds, preds):
        gold_set, pred_set = set(gold), set(pred)
        for span in gold_set | pred_set:
            c = counts[span.label]
            if span in gold_set and span in pred_set:
                c[0] += 1
            elif span in pred_set:
                c[1] += 1
            else:
                c[2] += 1
    return {label: PRF.from_counts(*counts[label]) for label in sorted(counts)}


# --------------------------------------------------------------------------- partial matching


def _overlap(a: Span, b: Span) -> int:
    """Number of tokens shared by two half-open spans (0 when disjoint)."""
    return max(0, min(a.end, b.end) - max(a.start, b.start))


def partial_counts(gold: Iterable[Span], pred: Iterable[Span]) -> tuple[int, int, int]:
    """``(tp, fp, fn)`` for one sample under one-to-one partial-overlap matching.

    A gold span and a predicted span are *compatible* iff they have the same label and share at
    least one token (``min(ends) - max(starts) >= 1``; zero-length spans are never compatible).
    Matching is greedy and one-to-one: all compatible pairs are sorted by shared-token count,
    largest first (ties: gold span order, then predicted span order, each by
    ``(start, end, label)``), and a pair is accepted when neither of its spans is matched yet.
    ``tp`` = accepted pairs, ``fp = |P| - tp``, ``fn = |G| - tp``. Both sides are sets.

    Greedy best-overlap-first matching is deterministic but not always a maximum matching; it
    never matches one gold span to two predictions, so splitting an entity in two cannot earn two
    true positives.
    """
    gold_set, pred_set = sorted(set(gold)), sorted(set(pred))
    candidates = [
        (-_overlap(g, p), gi, pi)
        for gi, g in enumerate(gold_set)
        for pi, p in enumerate(pred_set)
        if g.label == p.label and _overlap(g, p) > 0
    ]
    candidates.sort()
    used_gold: set[int] = set()
    used_pred: set[int] = set()
    for _, gi, pi in candidates:
        if gi not in used_gold and pi not in used_pred:
            used_gold.add(gi)
            used_pred.add(pi)
    tp = len(used_gold)
    return tp, len(pred_set) - tp, len(gold_set) - tp


def partial_micro_prf(golds: Sequence[Iterable[Span]], preds: Sequence[Iterable[Span]]) -> PRF:
    """Corpus-level partial-overlap P/R/F1, micro-averaged over entities.

    Per-sample :func:`partial_counts` (same label, >= 1 shared token, greedy one-to-one matching
    best overlap first) are summed over the corpus and P/R/F1 computed once from the sums; zero
    denominators give ``0.0``, so empty gold with empty prediction scores 0.
    """
    return micro_prf(golds, preds, partial_counts)


def span_score_sheet(
    golds: Sequence[Iterable[Span]], preds: Sequence[Iterable[Span]]
) -> ScoreSheet:
    """The span metrics of a corpus as a :class:`ScoreSheet`.

    ``corpus``: ``precision``/``recall``/``f1`` (strict, micro), ``tp``/``fp``/``fn`` (strict
    sums) and ``partial_precision``/``partial_recall``/``partial_f1`` (partial, micro).
    ``per_sample[i]``: that sample's strict ``tp``/``fp``/``fn``, its own strict ``f1``
    (``0.0`` when the sample has no true positive; **None** when it has neither a gold nor a
    predicted entity — there is nothing to score, so a per-sample mean skips it instead of counting
    a 0), and its partial-overlap ``partial_tp``/``partial_fp``/``partial_fn``
    (:func:`partial_counts`). Every corpus value is a function of the per-sample counts summed
    over the samples (:data:`SPAN_AGGREGATIONS`), so a report recomputes it on any resample from
    the run directory alone.
    """
    check_parallel(golds, preds)
    per_sample = []
    strict_sums = [0, 0, 0]
    partial_sums = [0, 0, 0]
    for gold, pred in zip(golds, preds):
        gold_t, pred_t = tuple(gold), tuple(pred)
        strict_c = strict_counts(gold_t, pred_t)
        partial_c = partial_counts(gold_t, pred_t)
        for sums, counts in ((strict_sums, strict_c), (partial_sums, partial_c)):
            for k in range(3):
                sums[k] += counts[k]
        s = PRF.from_counts(*strict_c)
        per_sample.append({
            "tp": s.tp, "fp": s.fp, "fn": s.fn, "f1": s.f1 if s.tp + s.fp + s.fn else None,
            "partial_tp": partial_c[0], "partial_fp": partial_c[1], "partial_fn": partial_c[2],
        })
    strict = PRF.from_counts(*strict_sums)
    partial = PRF.from_counts(*partial_sums)
    corpus = {
        "precision": strict.precision,
        "recall": strict.recall,
        "f1": strict.f1,
        "tp": strict.tp,
        "fp": strict.fp,
        "fn": strict.fn,
        "partial_precision": partial.precision,
        "partial_recall": partial.recall,
        "partial_f1": partial.f1,
    }
    return ScoreSheet(corpus=corpus, per_sample=per_sample, aggregations=SPAN_AGGREGATIONS)


# --------------------------------------------------------------------------- BIO conversion


def spans_to_bio(spans: Iterable[Span], n_tokens: int) -> list[str]:
    """IOB2 tags (``B-<label>``, ``I-<label>``, ``O``) for ``n_tokens`` tokens.

    Every span must satisfy ``0 <= start < end <= n_tokens`` (else ``ValueError``).
    Overlapping spans cannot all be written as BIO, so the **longest span wins**: spans are
    placed longest first (ties: smaller ``start``, then label order), and a span any of whose
    tokens is already taken is dropped as a whole (it is never truncated into a fragment).
    Duplicates collapse. Adjacent spans stay separate because each starts with ``B-``.
    """
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
    tags = ["O"] * n_tokens
    for span in sorted(set(spans), key=lambda s: (s.start - s.end, s.start, s.label)):
        if not 0 <= span.start < span.end <= n_tokens:
            raise ValueError(f"{span} is not a non-empty span within {n_tokens} tokens")
        if all(t == "O" for t in tags[span.start : span.end]):
            tags[span.start] = f"B-{span.label}"
            for i in range(span.start + 1, span.end):
                tags[i] = f"I-{span.label}"
    return tags


def _parse_iob2(tag: str) -> tuple[str, str]:
    """Split an IOB2 tag into ``(prefix, label)``; ``("O", "")`` for ``O``."""
    if tag == "O":
        return "O", ""
    if len(tag) > 2 and tag[0] in "BI" and tag[1] == "-":
        return tag[0], tag[2:]
    raise ValueError(f"not an IOB2 tag: {tag!r} (expected 'O', 'B-<label>' or 'I-<label>')")


def bio_to_spans(tags: Sequence[str]) -> tuple[Span, ...]:
    """Decode IOB2 tags into half-open token spans, in order of ``start``.

    Only ``O``, ``B-<label>`` and ``I-<label>`` (non-empty label) are accepted; any other string
    raises ``ValueError``. An entity starts at ``B-X`` and continues over each following ``I-X``
    of the *same* label; it ends at ``O``, at any ``B-``, or at an ``I-`` of another label.
    An ``I-X`` that does not continue an ``X`` entity (first token, after ``O``, or after a
    different label) is ill-formed IOB2; it is decoded as the start of a new ``X`` entity, so no
    predicted token is silently discarded. Valid IOB2 (such as NCBI gold) never contains one, and
    on the O/B-/I- vocabulary this decoding agrees with seqeval's default (conlleval) chunking.
    """
    spans: list[Span] = []
    open_label: str | None = None
    open_start = 0
    for i, tag in enumerate(tags):
        prefix, label = _parse_iob2(tag)
        if prefix == "I" and open_label == label:
            continue
        if open_label is not None:
            spans.append(Span(open_start, i, open_label))
            open_label = None
        if prefix != "O":
            open_label, open_start = label, i
    if open_label is not None:
        spans.append(Span(open_start, len(tags), open_label))
    return tuple(spans)


# --------------------------------------------------------------------------- token accuracy


def token_counts(gold: Sequence[str], pred: Sequence[str]) -> dict[str, int]:
    """One sentence's token-accuracy parts: ``tokens`` and ``correct_tokens`` (whole tag strings
    equal, ``O`` included); :func:`token_accuracy` is ``Σ correct_tokens / Σ tokens``."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold tags but {len(pred)} predicted")
    return {TOKENS: len(gold), CORRECT_TOKENS: sum(g == p for g, p in zip(gold, pred))}


def token_accuracy(
    golds_tags: Sequence[Sequence[str]], preds_tags: Sequence[Sequence[str]]
) -> float:
    """Fraction of tokens whose predicted tag string equals the gold tag string.

    The unit is the token; ``O`` tokens count, and tags are compared as whole strings
    (``B-X`` vs ``I-X`` is a miss). All tokens of all sentences are pooled (micro over tokens),
    which is exactly ``seqeval.metrics.accuracy_score`` on a list of sentences. Sentences must
    pair up with equal lengths (``ValueError`` otherwise; seqeval would silently misalign), each
    sentence must be a sequence of tag strings, not a string (``TypeError``), and a corpus with
    no tokens raises ``ValueError`` (seqeval raises ``ZeroDivisionError``).
    """
    check_parallel(golds_tags, preds_tags)
    correct = total = 0
    for i, (gold, pred) in enumerate(zip(golds_tags, preds_tags)):
        if isinstance(gold, str) or isinstance(pred, str):
            raise TypeError("expected a sequence of sentences, each a sequence of tags")
        if len(gold) != len(pred):
            raise ValueError(f"sentence {i}: {len(gold)} gold tags but {len(pred)} predicted")
        correct += sum(g == p for g, p in zip(gold, pred))
        total += len(gold)
    if total == 0:
        raise ValueError("token accuracy is undefined for a corpus without tokens")
    return correct / total

import random
import warnings

import pytest

from evalpipe.metrics.spans import (
    PRF,
    bio_to_spans,
    partial_counts,
    partial_micro_prf,
    per_label_prf,
    prf_from_counts,
    span_score_sheet,
    spans_to_bio,
    strict_counts,
    strict_micro_prf,
    token_accuracy,
)
from evalpipe.records import ScoreSheet, Span

D = "Disease"


# ----------------------------------------------------------------------------- PRF


def test_prf_from_counts_arithmetic():
    # tp=1 fp=1 fn=2: P = 1/2, R = 1/3, F1 = 2*(1/2)*(1/3) / (1/2 + 1/3) = (1/3)/(5/6) = 0.4
    prf = prf_from_counts(1, 1, 2)
    assert prf == PRF.from_counts(1, 1, 2)
    assert (prf.tp, prf.fp, prf.fn) == (1, 1, 2)
    assert prf.precision == pytest.approx(1 / 2)
    assert prf.recall == pytest.approx(1 / 3)
    assert prf.f1 == pytest.approx(0.4)


def test_prf_zero_division_is_zero():
    # 0/0 precision and recall are 0.0; F1 is 0.0 whenever tp == 0
    assert prf_from_counts(0, 0, 0) == PRF(0, 0, 0, 0.0, 0.0, 0.0)
    assert prf_from_counts(0, 3, 0) == PRF(0, 3, 0, 0.0, 0.0, 0.0)
    assert prf_from_counts(0, 0, 3) == PRF(0, 0, 3, 0.0, 0.0, 0.0)


def test_prf_rejects_negative_counts():
    with pytest.raises(ValueError):
        prf_from_counts(-1, 0, 0)


# ----------------------------------------------------------------------------- strict


def test_strict_one_boundary_error():
    gold = [Span(0, 2, D), Span(5, 6, D), Span(8, 11, D)]
    pred = [Span(0, 2, D), Span(8, 10, D)]  # second prediction has the wrong end
    # tp = 1 (0-2), fp = 1 (8-10), fn = 2 (5-6, 8-11)
    assert strict_counts(gold, pred) == (1, 1, 2)
    prf = strict_micro_prf([gold], [pred])
    # P = 1/2, R = 1/3, F1 = 0.4
    assert (prf.precision, prf.recall) == pytest.approx((1 / 2, 1 / 3))
    assert prf.f1 == pytest.approx(0.4)


def test_strict_label_must_match():
    assert strict_counts([Span(0, 2, D)], [Span(0, 2, "Chemical")]) == (0, 1, 1)


def test_strict_empty_gold_and_empty_pred():
    assert strict_counts([], []) == (0, 0, 0)
    assert strict_micro_prf([[]], [[]]) == PRF(0, 0, 0, 0.0, 0.0, 0.0)
    assert strict_micro_prf([], []) == PRF(0, 0, 0, 0.0, 0.0, 0.0)
    # empty prediction against 2 gold spans: tp=0 fp=0 fn=2 -> all zero
    two_gold = [[Span(0, 1, D), Span(2, 3, D)]]
    assert strict_micro_prf(two_gold, [[]]) == PRF(0, 0, 2, 0.0, 0.0, 0.0)


def test_strict_duplicates_collapse():
    # pred lists the same span twice: a set, so tp=1 fp=0 fn=0
    assert strict_counts([Span(1, 2, D)], [Span(1, 2, D), Span(1, 2, D)]) == (1, 0, 0)


def test_micro_sums_counts_over_samples():
    golds = [
        [Span(0, 1, D), Span(3, 5, D), Span(7, 8, D)],  # sample 1
        [],  # sample 2
    ]
    preds = [
        [Span(0, 1, D), Span(3, 5, D)],  # tp=2 fp=0 fn=1
        [Span(0, 2, D), Span(4, 5, D)],  # tp=0 fp=2 fn=0
    ]
    prf = strict_micro_prf(golds, preds)
    # sums: tp=2 fp=2 fn=1 -> P = 2/4 = 1/2, R = 2/3,
    # F1 = 2*(1/2)*(2/3)/(1/2+2/3) = (2/3)/(7/6) = 4/7
    assert (prf.tp, prf.fp, prf.fn) == (2, 2, 1)
    assert prf.precision == pytest.approx(1 / 2)
    assert prf.recall == pytest.approx(2 / 3)
    assert prf.f1 == pytest.approx(4 / 7)
    # not the macro mean of per-sample F1s, which would be (0.8 + 0.0) / 2 = 0.4
    assert prf.f1 != pytest.approx(0.4)


def test_micro_needs_parallel_samples():
    with pytest.raises(ValueError):
        strict_micro_prf([[]], [])


def test_per_label_prf():
    golds = [[Span(0, 1, D), Span(2, 3, "Chemical")], [Span(0, 2, D)]]
    preds = [[Span(0, 1, D), Span(2, 3, D)], [Span(0, 2, D)]]
    table = per_label_prf(golds, preds)
    assert list(table) == ["Chemical", D]
    # Chemical: tp=0 fp=0 fn=1 -> all zero
    assert table["Chemical"] == PRF(0, 0, 1, 0.0, 0.0, 0.0)
    # Disease: tp=2 (0-1, 0-2) fp=1 (2-3 predicted as Disease) fn=0
    # -> P=2/3 R=1 F1=2*(2/3)/(5/3)=0.8
    d = table[D]
    assert (d.tp, d.fp, d.fn) == (2, 1, 0)
    assert (d.precision, d.recall, d.f1) == pytest.approx((2 / 3, 1.0, 0.8))


# ----------------------------------------------------------------------------- partial


def test_partial_overlap_one_to_one():
    gold = [Span(0, 3, D)]
    pred = [Span(1, 2, D), Span(2, 4, D)]
    # both predictions share one token with the gold span, but only one may match it:
    # tp=1 fp=1 fn=0
    assert partial_counts(gold, pred) == (1, 1, 0)
    prf = partial_micro_prf([gold], [pred])
    assert (prf.precision, prf.recall) == pytest.approx((1 / 2, 1.0))
    # F1 = 2*(1/2)*1 / (3/2) = 2/3
    assert prf.f1 == pytest.approx(2 / 3)


def test_partial_best_overlap_first():
    gold = [Span(0, 2, D), Span(2, 5, D)]
    pred = [Span(1, 4, D), Span(0, 1, D)]
    # (1,4) shares 1 token with (0,2) and 2 tokens with (2,5): matched to (2,5) first;
    # (0,1) then matches (0,2). tp=2 fp=0 fn=0. Gold-order greedy would have found only 1.
    assert partial_counts(gold, pred) == (2, 0, 0)


def test_partial_needs_same_label_and_a_shared_token():
    # half-open spans (0,2) and (2,4) touch but share no token
    assert partial_counts([Span(0, 2, D)], [Span(2, 4, D)]) == (0, 1, 1)
    assert partial_counts([Span(0, 2, D)], [Span(0, 2, "Chemical")]) == (0, 1, 1)


def test_partial_micro_sums_samples_and_empty_is_zero():
    golds = [[Span(0, 3, D)], [Span(1, 2, D)], []]
    preds = [[Span(2, 5, D)], [], []]
    # sample 1: tp=1; sample 2: fn=1; sample 3: nothing -> tp=1 fp=0 fn=1, P=1, R=1/2, F1=2/3
    prf = partial_micro_prf(golds, preds)
    assert (prf.tp, prf.fp, prf.fn) == (1, 0, 1)
    assert prf.f1 == pytest.approx(2 / 3)
    assert partial_micro_prf([[]], [[]]) == PRF(0, 0, 0, 0.0, 0.0, 0.0)


def test_span_score_sheet():
    golds = [[Span(0, 2, D)], [Span(1, 2, D)]]
    preds = [[Span(0, 2, D)], [Span(0, 2, D)]]
    sheet = span_score_sheet(golds, preds)
    assert isinstance(sheet, ScoreSheet)
    # strict: tp=1 fp=1 fn=1 -> P=R=F1=1/2; partial: (0,2)~(1,2) overlap -> tp=2 -> all 1.0
    assert sheet.corpus["f1"] == pytest.approx(0.5)
    assert (sheet.corpus["tp"], sheet.corpus["fp"], sheet.corpus["fn"]) == (1, 1, 1)
    assert sheet.corpus["partial_f1"] == pytest.approx(1.0)
    # sample 2 is a strict miss (fp 1, fn 1) but a partial hit ((0,2) overlaps (1,2)): partial tp 1
    assert sheet.per_sample == [
        {"tp": 1, "fp": 0, "fn": 0, "f1": 1.0, "partial_tp": 1, "partial_fp": 0, "partial_fn": 0},
        {"tp": 0, "fp": 1, "fn": 1, "f1": 0.0, "partial_tp": 1, "partial_fp": 0, "partial_fn": 0},
    ]


def test_span_score_sheet_corpus_is_the_sum_of_per_sample_counts():
    # sample 1: gold (0,3) split into predictions (0,1) and (2,3): partial tp 1 fp 1 fn 0,
    #           strict tp 0 fp 2 fn 1;
    # sample 2: gold (1,2) and (4,6), prediction (5,7): partial tp 1 fn 1, strict fp 1 fn 2;
    # sample 3: nothing at all: every count 0.
    golds = [[Span(0, 3, D)], [Span(1, 2, D), Span(4, 6, D)], []]
    preds = [[Span(0, 1, D), Span(2, 3, D)], [Span(5, 7, D)], []]
    sheet = span_score_sheet(golds, preds)
    partial = [(s["partial_tp"], s["partial_fp"], s["partial_fn"]) for s in sheet.per_sample]
    assert partial == [(1, 1, 0), (1, 0, 1), (0, 0, 0)]
    assert [(s["tp"], s["fp"], s["fn"]) for s in sheet.per_sample] == [(0, 2, 1), (0, 1, 2), (0, 0, 0)]
    # partial sums tp 2 fp 1 fn 1: P = R = 2/3, F1 = 2/3
    assert sheet.corpus["partial_precision"] == pytest.approx(2 / 3)
    assert sheet.corpus["partial_f1"] == partial_micro_prf(golds, preds).f1 == pytest.approx(2 / 3)
    # strict: tp 0 → every ratio 0
    assert (sheet.corpus["tp"], sheet.corpus["fp"], sheet.corpus["fn"], sheet.corpus["f1"]) == (0, 3, 3, 0.0)


# ----------------------------------------------------------------------------- BIO


def test_spans_to_bio_basic_and_adjacent():
    tags = spans_to_bio([Span(3, 4, D), Span(0, 2, D), Span(2, 3, "Chem")], 5)
    assert tags == [f"B-{D}", f"I-{D}", "B-Chem", f"B-{D}", "O"]


def test_spans_to_bio_longest_wins():
    # (1,4) is longest; (0,2) and (3,5) overlap it and are dropped whole, (5,6) survives
    tags = spans_to_bio([Span(0, 2, "A"), Span(1, 4, "B"), Span(3, 5, "C"), Span(5, 6, "D")], 6)
    assert tags == ["O", "B-B", "I-B", "I-B", "O", "B-D"]
    # equal lengths: smaller start wins
    assert spans_to_bio([Span(1, 3, "X"), Span(0, 2, "Y")], 3) == ["B-Y", "I-Y", "O"]


def test_spans_to_bio_rejects_bad_spans():
    with pytest.raises(ValueError):
        spans_to_bio([Span(2, 6, D)], 5)
    with pytest.raises(ValueError):
        spans_to_bio([Span(2, 2, D)], 5)


def test_bio_to_spans_basic():
    tags = ["O", "B-Disease", "I-Disease", "B-Disease", "O", "B-Chem", "I-Chem"]
    assert bio_to_spans(tags) == (Span(1, 3, D), Span(3, 4, D), Span(5, 7, "Chem"))
    assert bio_to_spans([]) == ()
    assert bio_to_spans(["O", "O"]) == ()


def test_bio_to_spans_ill_formed_i_starts_a_new_entity():
    # I- after O, at the start, or after another type begins a new entity
    assert bio_to_spans(["I-X", "I-X", "O", "I-X"]) == (Span(0, 2, "X"), Span(3, 4, "X"))
    assert bio_to_spans(["B-X", "I-Y", "I-Y"]) == (Span(0, 1, "X"), Span(1, 3, "Y"))


@pytest.mark.parametrize("bad", ["B", "B-", "E-X", "S-X", "X", "", "b-X"])
def test_bio_to_spans_rejects_non_iob2_tags(bad):
    with pytest.raises(ValueError):
        bio_to_spans(["O", bad])


def _random_spans(rng: random.Random, n_tokens: int) -> list[Span]:
    spans, i = [], 0
    while i < n_tokens:
        if rng.random() < 0.3:
            length = rng.randint(1, 3)
            end = min(n_tokens, i + length)
            spans.append(Span(i, end, rng.choice(["Disease", "Chem"])))
            i = end
        else:
            i += 1
    return spans


def test_bio_round_trip():
    rng = random.Random(1234)
    for _ in range(300):
        n = rng.randint(0, 15)
        spans = _random_spans(rng, n)
        tags = spans_to_bio(spans, n)
        assert len(tags) == n
        assert bio_to_spans(tags) == tuple(sorted(spans, key=lambda s: s.start))
        assert spans_to_bio(bio_to_spans(tags), n) == tags


def test_bio_to_spans_matches_seqeval_chunking_on_iob_vocabulary():
    sequence_labeling = pytest.importorskip("seqeval.metrics.sequence_labeling")
    rng = random.Random(99)
    vocab = ["O", "O", "B-X", "I-X", "B-Y", "I-Y"]
    for _ in range(300):
        tags = [rng.choice(vocab) for _ in range(rng.randint(0, 12))]
        expected = {
            Span(start, end + 1, label)
            for label, start, end in sequence_labeling.get_entities(tags)
        }
        assert set(bio_to_spans(tags)) == expected


# ----------------------------------------------------------------------------- token accuracy


def test_token_accuracy_hand_computed():
    golds = [["O", "B-X", "I-X"], ["B-X", "O"]]
    preds = [["O", "B-X", "B-X"], ["B-X", "B-X"]]
    # correct: O, B-X (sentence 1) + B-X (sentence 2) = 3 of 5 tokens
    assert token_accuracy(golds, preds) == pytest.approx(3 / 5)


def test_token_accuracy_errors():
    with pytest.raises(ValueError):
        token_accuracy([["O"]], [["O", "O"]])
    with pytest.raises(ValueError):
        token_accuracy([[]], [[]])
    with pytest.raises(TypeError):
        token_accuracy(["O"], ["O"])


def test_token_accuracy_matches_seqeval():
    metrics = pytest.importorskip("seqeval.metrics")
    rng = random.Random(7)
    vocab = ["O", "O", "O", "B-Disease", "I-Disease", "B-Chem", "I-Chem"]
    for _ in range(200):
        lengths = [rng.randint(0, 10) for _ in range(rng.randint(1, 5))]
        if not sum(lengths):
            lengths[0] = 1
        golds = [[rng.choice(vocab) for _ in range(n)] for n in lengths]
        preds = [[rng.choice(vocab) for _ in range(n)] for n in lengths]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = metrics.accuracy_score(golds, preds)
        assert abs(token_accuracy(golds, preds) - expected) <= 1e-12

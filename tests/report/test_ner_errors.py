"""NER error categories on hand-made spans: each category, the precedence rules, the corpus counts."""

from evalpipe.records import Example, Prediction, Span, to_jsonable
from evalpipe.report.ner_errors import analyse, classify, is_span_task, prediction_spans, span_text
from evalpipe.tasks.ncbi.disease import NerGold


def record(example, prediction):
    """A sample as samples.jsonl holds it (what the analysis reads)."""
    return {"id": example.id, "inputs": to_jsonable(example.inputs), "gold": to_jsonable(example.gold),
            "prediction": to_jsonable(prediction.value)}


def categories(outcomes):
    return [(o.span, o.category, o.counterpart) for o in outcomes]


def test_each_category():
    gold = [Span(0, 2, "Dis"), Span(3, 4, "Dis"), Span(5, 7, "Dis"), Span(8, 10, "Chem"), Span(12, 13, "Dis")]
    pred = [
        Span(0, 2, "Dis"),    # correct
        Span(3, 4, "Chem"),   # type: same span as gold (3, 4, Dis)
        Span(5, 8, "Dis"),    # boundary: overlaps gold (5, 7) of the same type
        Span(9, 11, "Dis"),   # boundary+type: overlaps gold (8, 10, Chem)
        Span(14, 15, "Dis"),  # spurious: overlaps nothing
    ]                         # gold (12, 13) has no overlapping prediction: missed
    gold_out, pred_out = classify(gold, pred)
    assert categories(gold_out) == [
        (Span(0, 2, "Dis"), "correct", None),
        (Span(3, 4, "Dis"), "type", Span(3, 4, "Chem")),
        (Span(5, 7, "Dis"), "boundary", Span(5, 8, "Dis")),
        (Span(8, 10, "Chem"), "boundary+type", Span(9, 11, "Dis")),
        (Span(12, 13, "Dis"), "missed", None),
    ]
    assert categories(pred_out) == [
        (Span(0, 2, "Dis"), "correct", None),
        (Span(3, 4, "Chem"), "type", Span(3, 4, "Dis")),
        (Span(5, 8, "Dis"), "boundary", Span(5, 7, "Dis")),
        (Span(9, 11, "Dis"), "boundary+type", Span(8, 10, "Chem")),
        (Span(14, 15, "Dis"), "spurious", None),
    ]


def test_precedence_and_split_entities():
    # the prediction has gold (0, 3, Chem)'s exact boundaries and overlaps gold (1, 2, Dis) of its
    # own type: exact boundaries win → type error, not boundary error
    _, pred_out = classify([Span(0, 3, "Chem"), Span(1, 2, "Dis")], [Span(0, 3, "Dis")])
    assert [(o.category, o.counterpart) for o in pred_out] == [("type", Span(0, 3, "Chem"))]
    # a gold entity split into two predictions: one gold boundary error, two predicted ones;
    # same-type overlap beats other-type overlap even when the other is larger
    gold_out, pred_out = classify([Span(0, 4, "Dis")], [Span(0, 2, "Dis"), Span(2, 4, "Dis")])
    assert [o.category for o in gold_out] == ["boundary"]
    assert [o.category for o in pred_out] == ["boundary", "boundary"]
    gold_out, _ = classify([Span(0, 4, "Dis")], [Span(0, 1, "Dis"), Span(1, 4, "Chem")])
    assert [(o.category, o.counterpart) for o in gold_out] == [("boundary", Span(0, 1, "Dis"))]
    # duplicates collapse, as in the strict metrics
    gold_out, pred_out = classify([Span(0, 1, "D")] * 2, [Span(0, 1, "D")] * 3)
    assert len(gold_out) == len(pred_out) == 1


def ner_example(i, tokens, gold):
    return Example(id=f"s{i}", inputs={"tokens": tokens, "text": " ".join(tokens)},
                   gold=NerGold(tags=("O",) * len(tokens), spans=tuple(gold)))


def test_analyse_counts_per_side_and_type_with_examples():
    tokens = "a b c d e f".split()
    examples = [ner_example(0, tokens, [Span(0, 1, "D"), Span(2, 4, "D")]),
                ner_example(1, tokens, [Span(1, 2, "D")])]
    predictions = [Prediction((Span(0, 1, "D"), Span(2, 3, "D"), Span(5, 6, "D"))), Prediction(())]
    analysis = analyse("t", [record(e, p) for e, p in zip(examples, predictions)])
    # gold: correct 1, boundary 1 (2..4 vs 2..3), missed 1 (s1) → 3 gold; pred: correct, boundary, spurious
    assert analysis.counts == {
        ("gold", "D", "correct"): 1, ("gold", "D", "boundary"): 1, ("gold", "D", "missed"): 1,
        ("pred", "D", "correct"): 1, ("pred", "D", "boundary"): 1, ("pred", "D", "spurious"): 1,
    }
    assert analysis.total("gold", "correct") == analysis.total("pred", "correct") == 1
    boundary = analysis.examples["boundary"][0]
    assert (boundary.side, boundary.text, boundary.counterpart_text) == ("pred", "c", "c d")
    assert "⟦ c ⟧" in boundary.context
    assert analysis.examples["missed"][0].sample_id == "s1"
    assert analysis.examples["spurious"][0].text == "f"
    assert analysis.examples["type"] == ()


def test_span_task_detection_and_iob_predictions():
    tokens = ["x", "y"]
    ex = Example(id="0", inputs={"tokens": tokens}, gold=NerGold(tags=("B-D", "O"), spans=(Span(0, 1, "D"),)))
    assert is_span_task([record(ex, Prediction((Span(0, 1, "D"),)))])
    assert is_span_task([record(ex, Prediction(("B-D", "I-D")))])  # IOB2 tags (a compatibility mode)
    assert prediction_spans(["B-D", "I-D"], to_jsonable(ex.gold)) == (Span(0, 2, "D"),)
    assert not is_span_task([record(ex, Prediction("a label"))])
    plain = Example(id="1", inputs={"text": "t"}, gold="yes")
    assert not is_span_task([record(plain, Prediction(()))])
    # character spans over text when there are no tokens
    assert span_text({"text": "肺癌患者"}, Span(0, 2, "dis")) == "肺癌"


def test_cmeee_gold_a_bare_tuple_of_spans_is_a_span_task():
    """CMeEE's gold is the spans themselves (no ``.spans`` attribute): the analysis applies."""
    from evalpipe.records import Example, Prediction, Span
    from evalpipe.report.ner_errors import gold_spans, is_span_task

    gold = (Span(0, 2, "dis"), Span(3, 5, "sym"))
    example = Example(id="1", inputs={"text": "糖尿病，头痛"}, gold=gold)
    assert gold_spans(gold) == gold and gold_spans(to_jsonable(gold)) == gold
    assert is_span_task([record(example, Prediction(value=(Span(0, 2, "dis"),), failed=False))])
    assert gold_spans(("a term",)) is None


def test_nested_entities_a_missed_inner_entity_under_a_found_outer_one_is_missed():
    """CMeEE nests entities: the outer symptom found exactly must not turn the missed inner body
    part into a boundary+type error (it was simply not found)."""
    outer, inner = Span(0, 4, "sym"), Span(0, 2, "bod")
    gold_out, pred_out = classify([outer, inner], [outer])
    assert {o.span: o.category for o in gold_out} == {outer: "correct", inner: "missed"}
    assert [(o.span, o.category) for o in pred_out] == [(outer, "correct")]
    example = Example(id="n", inputs={"text": "腹部疼痛"}, gold=(outer, inner))
    analysis = analyse("cmeee", [record(example, Prediction((outer,)))])
    assert analysis.examples["missed"][0].text == "腹部"

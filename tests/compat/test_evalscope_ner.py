import random
import warnings

import pytest

from evalpipe.compat.evalscope_ner import (
    EVALSCOPE_NCBI_TAG_MAP,
    NCBI_TAG_MAP,
    evalscope_clean_answer,
    evalscope_predicted_tags,
    evalscope_score_sheet,
    evalscope_scores,
    evalscope_tagged_entities,
    seqeval_default_entities,
)
from evalpipe.metrics.spans import bio_to_spans, strict_micro_prf
from evalpipe.records import ScoreSheet, Span

B, I, O = "B-Disease", "I-Disease", "O"  # noqa: E741 (the BIO scheme's own letters)


def tags(answer: str, sentence: str) -> list[str]:
    return evalscope_predicted_tags(answer, sentence.split(), NCBI_TAG_MAP)


# ----------------------------------------------------------------------------- clean-up


def test_clean_keeps_first_response_body_across_newlines():
    answer = "Sure!\n<response>a\n<disease>b</disease></response> <response>other</response>"
    assert evalscope_clean_answer(answer) == "a\n<disease>b</disease>"
    unwrapped = "no wrapper <disease>x</disease>"
    assert evalscope_clean_answer(unwrapped) == unwrapped


def test_mismatched_closing_tag_is_fixed_by_regex():
    fixed = evalscope_clean_answer("<disease>colon cancer</Disease>")
    assert fixed == "<disease>colon cancer</disease>"
    assert evalscope_clean_answer("<disease>x</chemical>") == "<disease>x</disease>"
    # so the mismatched pair is still an entity
    assert tags("<response>risk of <disease>colon cancer</DISEASE> .</response>",
                "risk of colon cancer .") == [O, O, B, I, O]


def test_simple_answer():
    assert tags("<response>risk of <disease>colon cancer</disease> in FAP</response>",
                "risk of colon cancer in FAP") == [O, O, B, I, O, O]


def test_tag_names_are_lower_cased_and_type_names_are_parameters():
    answer = "<DISEASE>pain</DISEASE> <chemical>aspirin</chemical>"
    # evalscope's own map gives its own gold type; an unmapped tag keeps its lower-cased name
    assert evalscope_predicted_tags(answer, ["pain", "aspirin"], EVALSCOPE_NCBI_TAG_MAP) == [
        "B-DISEASE", "B-chemical"]
    assert evalscope_predicted_tags(answer, ["pain", "aspirin"], {"Disease": "Disease"}) == [
        B, "B-chemical"]


def test_unclosed_fallback_only_for_mapped_tags():
    # no closing tag: the entity runs to the end of the text (or the next '<')
    assert tags("risk of <disease>colon cancer", "risk of colon cancer") == [O, O, B, I]
    assert tags("risk of <chemical>colon cancer", "risk of colon cancer") == [O, O, O, O]
    entities = evalscope_tagged_entities("a <disease>b</disease> <disease>c", NCBI_TAG_MAP)
    assert [(e.type, e.text) for e in entities] == [("Disease", "b"), ("Disease", "c")]


def test_nested_open_tag_swallows_both_entities():
    # '<disease>colon cancer <disease>polyps</disease>' is one well-formed match whose text
    # contains a tag; that text is not in the sentence, so it is dropped, and the fallback
    # skips both opening tags because they start inside it.
    assert tags("<disease>colon cancer <disease>polyps</disease>",
                "colon cancer polyps") == [O, O, O]


# ----------------------------------------------------------------------------- quirks


def test_adjacent_same_type_entities_are_merged():
    sentence = "risk of colon cancer polyposis in FAP"
    answer = ("risk of <disease>colon cancer</disease> <disease>polyposis</disease> "
              "in <disease>FAP</disease>")
    pred = tags(answer, sentence)
    assert pred == [O, O, B, I, I, O, B]  # 'polyposis' continues 'colon cancer'
    gold = [O, O, B, I, B, O, B]

    # compat: gold chunks (2,3) (4,4) (6,6); predicted (2,4) (6,6) -> 1 correct
    # P = 1/2, R = 1/3, F1 = 2*(1/2)*(1/3)/(5/6) = 0.4; accuracy 6/7 (token 4 is I not B)
    scores = evalscope_scores([gold], [pred])
    assert scores["precision"] == pytest.approx(1 / 2)
    assert scores["recall"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx(0.4)
    assert scores["accuracy"] == pytest.approx(6 / 7)

    # evalpipe's default mode keeps the three entities the answer wrote: F1 = 1
    default_pred = [Span(2, 4, "Disease"), Span(4, 5, "Disease"), Span(6, 7, "Disease")]
    assert strict_micro_prf([bio_to_spans(gold)], [default_pred]).f1 == 1.0


def test_type_that_is_a_suffix_of_the_previous_type_continues_it():
    # the continuation test is "previous tag ends with the type": 'B-Disease' ends with 'sease'
    assert evalscope_predicted_tags("<disease>a</disease> <sease>b</sease>", ["a", "b"],
                                    NCBI_TAG_MAP) == [B, "I-sease"]


def test_entity_text_not_in_sentence_is_silently_dropped():
    sentence = "risk of colon cancer and polyps"
    answer = "risk of <disease>colon cancers</disease> and <disease>polyps</disease>"
    assert tags(answer, sentence) == [O, O, O, O, O, B]
    # spacing differences count as "not found" too
    assert tags("<disease>colon  cancer</disease>", "colon cancer") == [O, O]


def test_repeated_entity_resolved_by_context():
    # "cancer" occurs at characters 0 and 16 of "cancer risk and cancer death".
    # Occurrence 0: context before "cancer risk and " is not in '' and " death" is not in
    # " risk " -> rejected; occurrence 16: context before matches -> token 3.
    sentence = "cancer risk and cancer death"
    assert tags("cancer risk and <disease>cancer</disease> death", sentence) == [O, O, O, B, O]


def test_repeated_entity_last_in_answer_goes_to_first_occurrence():
    # the context after the entity is empty and '' is "in" every window, so occurrence 0 wins
    assert tags("pain a <disease>pain</disease>", "pain a pain") == [B, O, O]


def test_repeated_entity_without_matching_context_falls_back_to_first_occurrence():
    # the answer changed the case of its context, so no occurrence matches; the search ends
    # before passing half the sentence (len 13 // 2 = 6), then falls back to the first one
    assert tags("PAIN A <disease>pain</disease> B", "pain a pain b") == [B, O, O, O]


def test_repeated_entity_search_gives_up_past_half_the_sentence():
    sentence = "w1 w2 w3 w4 w5 pain a pain b pain c pain d"  # 42 chars, half = 21
    answer = "W1 W2 W3 W4 W5 PAIN A PAIN B PAIN C <disease>pain</disease> D"
    # 'pain' starts at 15, 22, 29, 36; no context matches. Searches from 0 and 16 reject 15 and
    # 22; the search from 23 > 21 accepts 29, the third 'pain' (token 9), not the tagged 4th.
    expected = [O] * 13
    expected[9] = B
    assert tags(answer, sentence) == expected


def test_inclusive_overlap_grabs_a_neighbouring_token():
    # "colon cancer " ends at character 13, where "polyposis" starts: 13 <= 13 grabs it
    assert tags("<disease>colon cancer </disease>polyposis", "colon cancer polyposis") == [B, I, I]
    # a leading space grabs the previous token the same way
    assert tags("in<disease> colon</disease> x", "in colon x") == [B, I, O]
    # an empty entity is found at character 0 and tags the first token
    assert tags("a <disease></disease> b", "a b") == [B, O]


def test_first_entity_keeps_a_token():
    # the second entity's first token is already tagged and is not overwritten
    answer = "<chemical>a b</chemical> <disease>b c</disease>"
    assert evalscope_predicted_tags(answer, ["a", "b", "c"], NCBI_TAG_MAP) == [
        "B-chemical", "I-chemical", B]


# ----------------------------------------------------------------------------- scoring


def test_seqeval_default_chunking_examples():
    assert seqeval_default_entities(["O", "I-X", "I-X", "O"]) == [("X", 1, 2)]
    assert seqeval_default_entities(["B-X", "I-Y", "B-X", "B-X"]) == [
        ("X", 0, 0), ("Y", 1, 1), ("X", 2, 2), ("X", 3, 3)]
    assert seqeval_default_entities([]) == []


def test_scores_are_micro_over_the_corpus():
    golds = [[B, I, O], [B, O], [O]]
    preds = [[B, I, O], [O, B], [B]]
    # gold chunks 2, predicted 3, correct 1 -> P=1/3 R=1/2 F1=2*(1/3)*(1/2)/(5/6)=0.4
    # accuracy: 3 + 0 + 0 correct of 6 tokens = 1/2
    scores = evalscope_scores(golds, preds)
    assert scores == pytest.approx({"precision": 1 / 3, "recall": 1 / 2, "f1": 0.4, "accuracy": 0.5})


def test_scores_with_no_entities_are_zero_and_no_tokens_is_an_error():
    assert evalscope_scores([[O, O]], [[O, O]]) == {
        "precision": 0.0, "recall": 0.0, "f1": 0.0, "accuracy": 1.0}
    with pytest.raises(ValueError):
        evalscope_scores([[]], [[]])
    with pytest.raises(ValueError):
        evalscope_scores([[O]], [[O, O]])


def test_score_sheet():
    sheet = evalscope_score_sheet([[B, O], [], [B]], [[B, O], [], [O]])
    assert isinstance(sheet, ScoreSheet)
    assert sheet.per_sample[0] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "accuracy": 1.0}
    assert sheet.per_sample[1] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "accuracy": 0.0}
    # corpus: 1 correct of 1 predicted and 2 gold -> P=1 R=1/2 F1=2/3; accuracy 2/3 tokens
    assert sheet.corpus == pytest.approx(
        {"precision": 1.0, "recall": 0.5, "f1": 2 / 3, "accuracy": 2 / 3})


# ----------------------------------------------------------------------------- equivalence


# valid IOB2, ill-formed IOB2, IOBES and malformed tags: all reach seqeval's chunker
_VOCAB = ["O", "O", "O", "B-Disease", "I-Disease", "B-Chem", "I-Chem",
          "E-Disease", "S-Chem", "I-", "B", "X", ".", "B-A-B"]


def _random_corpus(
    rng: random.Random, vocab: list[str]
) -> tuple[list[list[str]], list[list[str]]]:
    lengths = [rng.randint(0, 12) for _ in range(rng.randint(1, 6))]
    if not sum(lengths):
        lengths[0] = 1
    gold = [[rng.choice(vocab) for _ in range(n)] for n in lengths]
    pred = [[rng.choice(vocab) for _ in range(n)] for n in lengths]
    return gold, pred


def test_equivalent_to_installed_seqeval_default_mode():
    seqeval_metrics = pytest.importorskip("seqeval.metrics")
    from seqeval.metrics.sequence_labeling import get_entities

    rng = random.Random(20240607)
    for round_ in range(400):
        vocab = _VOCAB if round_ % 2 else _VOCAB[:5]  # half of the rounds: Disease IOB only
        gold, pred = _random_corpus(rng, vocab)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # seqeval warns on undefined metrics and odd tags
            expected = {
                "precision": seqeval_metrics.precision_score(gold, pred),
                "recall": seqeval_metrics.recall_score(gold, pred),
                "f1": seqeval_metrics.f1_score(gold, pred),
                "accuracy": seqeval_metrics.accuracy_score(gold, pred),
            }
            for sentence in gold + pred:
                assert seqeval_default_entities(sentence) == get_entities(sentence)
        got = evalscope_scores(gold, pred)
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            assert abs(got[key] - float(value)) <= 1e-12, (key, gold, pred)


def test_production_modules_import_neither_seqeval_nor_evalscope():
    import ast
    import inspect

    import evalpipe.compat.evalscope_ner as compat
    import evalpipe.metrics.spans as spans

    for module in (compat, spans):
        tree = ast.parse(inspect.getsource(module))
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree)
                      if isinstance(node, ast.ImportFrom)}
        assert not {name for name in imported if name.split(".")[0] in {"seqeval", "evalscope"}}

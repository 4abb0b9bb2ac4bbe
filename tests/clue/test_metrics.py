"""Hand-computed cases for ROUGE, ICD-10, concept F1, the level score and its suite wiring."""

import pytest

from evalpipe.compat.clue import icd_document_scores
from evalpipe.metrics import concepts
from evalpipe.metrics.aggregate import level_score, pooled_accuracy
from evalpipe.metrics.icd10 import icd_score_sheet, is_valid_icd10cm
from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.rouge import rouge_f
from evalpipe.tasks.base import IncompleteSuite
from evalpipe.tasks.clue.suites import LEVEL_1, LEVEL_2, PartialSuite, clue_aggregate, level_aggregate
from tests.clue.conftest import FakeExtractor

# ---- ROUGE -----------------------------------------------------------------------------------


def test_rouge_by_hand():
    # ref: the cat sat on the mat / pred: the cat lay on the mat (6 tokens each)
    # unigrams: the×2, cat, on, mat overlap = 5 → P = R = F = 5/6
    # bigrams: ref {the cat, cat sat, sat on, on the, the mat}, pred shares the cat, on the, the mat → 3/5
    # LCS: the cat on the mat = 5 → 5/6
    scores = rouge_f("the cat lay on the mat", "the cat sat on the mat")
    assert scores["rouge1"] == pytest.approx(5 / 6)
    assert scores["rouge2"] == pytest.approx(3 / 5)
    assert scores["rougeL"] == pytest.approx(5 / 6)


def test_rouge_tokenisation_stemming_and_empty():
    # punctuation and case vanish in rouge-score's tokenizer
    assert rouge_f("The CAT, sat!", "the cat sat")["rouge1"] == 1.0
    # no stemming by default (as in the reference); stemming makes cats/running match cat/run
    assert rouge_f("cats running", "cat run")["rouge1"] == 0.0
    assert rouge_f("cats running", "cat run", stemmer=True)["rouge1"] == 1.0
    assert rouge_f("", "the cat") == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}


# ---- ICD-10 ----------------------------------------------------------------------------------

def test_icd_per_document_vs_micro_by_hand():
    golds = [("I5023", "E1165"), ("N179",), ("I10",)]
    preds = [("I509", "E1165"), ("N179", "A998", "E1165"), ()]
    sheet = icd_score_sheet(golds, preds)
    c = sheet.corpus
    # exact per doc: F1 0.5 (tp1 fp1 fn1), 0.5 (P 1/3, R 1), 0 (nothing predicted) → mean 1/3
    assert c["exact_f1"] == pytest.approx(1 / 3)
    assert c["exact_precision"] == pytest.approx((0.5 + 1 / 3 + 0) / 3)
    assert c["exact_recall"] == pytest.approx((0.5 + 1 + 0) / 3)
    # exact micro: tp 2, fp 1+2, fn 1+0+1 → P 2/5, R 2/4, F1 4/9
    assert (c["exact_micro_precision"], c["exact_micro_recall"]) == (pytest.approx(0.4), pytest.approx(0.5))
    assert c["exact_micro_f1"] == pytest.approx(4 / 9)
    # categories: doc1 {I50,E11} = gold → F1 1; doc2 {N17,A99,E11} vs {N17} → P 1/3, R 1, F1 0.5; doc3 0
    assert c["category_f1"] == pytest.approx(0.5)
    # category micro: tp 2+1, fp 0+2, fn 0+0+1 → P 3/5, R 3/4, F1 2/3
    assert c["category_micro_f1"] == pytest.approx(2 / 3)
    # valid: doc1 2/2, doc2 2/3 (A99.8 does not exist), doc3 no prediction → 0; micro 4/5
    assert c["valid_ratio"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert c["valid_micro_ratio"] == pytest.approx(4 / 5)
    assert sheet.per_sample[2]["exact_f1"] == 0.0 and sheet.per_sample[1]["valid_codes"] == 2


def test_icd_validity_is_category_or_subcategory():
    assert is_valid_icd10cm("I509") and is_valid_icd10cm("I50.9") and is_valid_icd10cm("I50")
    assert is_valid_icd10cm("U071") and is_valid_icd10cm("C4A0") and is_valid_icd10cm("Z3A01")
    assert not is_valid_icd10cm("A998")  # well-formed, not in the code set
    assert not is_valid_icd10cm("1")  # a chapter
    assert not is_valid_icd10cm("i509")  # normalise first


def test_icd_no_prediction_anywhere_and_empty_gold():
    sheet = icd_score_sheet([("I10",)], [()])
    assert sheet.corpus["valid_micro_ratio"] == 0.0 and sheet.corpus["exact_f1"] == 0.0
    with pytest.raises(ValueError, match="no gold code"):
        icd_score_sheet([()], [("I10",)])


def test_compat_icd_document_scores_count_duplicates():
    # pred list I509, I509, E1165 vs gold I509, N179: P = 2 found items / 3 = 2/3, R = 1/2
    scores = icd_document_scores(["I509", "I509", "E1165"], ["I509", "N179"])
    assert scores["exact_precision"] == pytest.approx(2 / 3)
    assert scores["exact_recall"] == pytest.approx(1 / 2)
    assert scores["exact_f1"] == pytest.approx(4 / 7)  # 2·(2/3)(1/2) / (7/6)
    assert scores["valid_ratio"] == 1.0
    assert icd_document_scores([], ["I10"])["valid_ratio"] == 0.0


# ---- UMLS-concept F1 -------------------------------------------------------------------------

def test_concept_prf_by_hand():
    a, b = frozenset({"x", "y", "z"}), frozenset({"y", "z", "w"})
    assert concepts.concept_prf(a, b) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    assert concepts.concept_prf(frozenset(), b) == (0.0, 0.0, 0.0)
    assert concepts.concept_prf(frozenset(), frozenset()) == (0.0, 0.0, 0.0)  # silence earns nothing
    assert concepts.concept_prf(a, frozenset()) == (0.0, 0.0, 0.0)


def test_concepts_through_a_pluggable_extractor(fake_extractor):
    extractor = concepts.resolve_extractor(MetricOptions(umls_extractor=fake_extractor))
    rows = concepts.concept_per_sample(
        ["heart failure and pneumonia", "", "kidney"],
        ["congestive heart failure", "pneumonia", "kidney injury"],
        extractor,
    )
    # 1: {heart, failure, pneumonia} vs {congestive, heart, failure} → P 2/3 R 2/3; 2: empty answer → 0
    # 3: {kidney} vs {kidney, injury} → P 1, R 1/2, F1 2/3
    assert rows[0]["umls[fake]_f1"] == pytest.approx(2 / 3)
    assert rows[1] == {"umls[fake]_precision": 0.0, "umls[fake]_recall": 0.0, "umls[fake]_f1": 0.0}
    assert rows[2]["umls[fake]_recall"] == 0.5 and rows[2]["umls[fake]_f1"] == pytest.approx(2 / 3)


def test_concepts_not_computed_is_a_reason_not_a_zero():
    off = concepts.resolve_extractor(MetricOptions(umls_extractor="none"))
    assert isinstance(off, concepts.NotComputed) and "turned off" in off.reason
    auto = concepts.resolve_extractor(MetricOptions())
    if concepts.scispacy_missing():  # this environment: scispacy is not installed
        assert isinstance(auto, concepts.NotComputed) and "scispacy" in auto.reason
    with pytest.raises(concepts.ConceptExtractorUnavailable, match="unknown concept extractor"):
        concepts.resolve_extractor(MetricOptions(umls_extractor="nope"))


# ---- level score -----------------------------------------------------------------------------

def test_level_score_reproduces_the_paper_rows():
    # Mixtral-8x7B-Instruct, percent: per dataset the mean of its non-ROUGE metrics, then the mean
    level1 = {"MedNLI": [76.48], "problem summaries": [68.56, 19.51], "MeQSum": [72.80]}
    assert round(level_score(level1), 2) == 64.44  # (76.48 + 44.035 + 72.80) / 3 = 64.438
    level2 = {"LongHealth": [43.82, 31.23], "MeDiSumQA": [69.57, 24.47], "MeDiSumCode": [10.49, 28.99, 82.87]}
    assert round(level_score(level2), 2) == 41.78  # (37.525 + 47.02 + 40.7833) / 3 = 41.776
    flat = [v for values in level1.values() for v in values]
    assert round(sum(flat) / len(flat), 2) != 64.44  # a flat mean over metrics is not the rule


def _paper_metrics(bert="enc@L9", umls="ext"):
    """The paper's Mixtral rows as task metrics (fractions), LongHealth 2&3 split into equal halves."""
    return {
        "clue_mednli": {"accuracy": 0.7648},
        "clue_problem_summaries": {f"bertscore[{bert}]_f1": 0.6856, f"bertscore[{bert}]_precision": 0.9,
                                   f"umls[{umls}]_f1": 0.1951, "rougeL": 0.3},
        "clue_meqsum": {f"bertscore[{bert}]_f1": 0.7280, "rouge1": 0.4},
        "clue_longhealth_task1": {"accuracy": 0.4382, "n": 2000},
        "clue_longhealth_task2": {"accuracy": 0.5246, "n": 2000},
        "clue_longhealth_task3": {"accuracy": 0.1000, "n": 2000},  # pooled (0.5246 + 0.1) / 2 = 0.3123
        "clue_medisumqa": {f"bertscore[{bert}]_f1": 0.6957, f"umls[{umls}]_f1": 0.2447},
        "clue_medisumcode": {"exact_f1": 0.1049, "category_f1": 0.2899, "valid_ratio": 0.8287, "exact_micro_f1": 0.5},
    }


def test_suite_aggregates_on_the_paper_rows():
    metrics = _paper_metrics()
    one = level_aggregate(LEVEL_1, metrics)
    assert one == {"level1_score[bertscore=enc@L9,umls=ext]": pytest.approx(0.64438, abs=1e-5)}
    two = level_aggregate(LEVEL_2, metrics)
    assert two["longhealth_task2and3_accuracy"] == pytest.approx(0.3123)
    assert two["level2_score[bertscore=enc@L9,umls=ext]"] == pytest.approx(0.41776, abs=1e-5)
    assert clue_aggregate(metrics) == {**one, **two}


def test_pooled_accuracy_weights_by_n():
    assert pooled_accuracy([(1.0, 30), (0.0, 10)]) == 0.75


def test_incomplete_levels_name_what_is_missing():
    metrics = _paper_metrics()
    del metrics["clue_medisumcode"]
    with pytest.raises(IncompleteSuite, match="clue_medisumcode"):
        level_aggregate(LEVEL_2, metrics)
    with pytest.raises(PartialSuite) as partial:
        clue_aggregate(metrics)
    assert "clue_medisumcode" in str(partial.value)
    assert set(partial.value.partial) == {"level1_score[bertscore=enc@L9,umls=ext]"}
    no_umls = _paper_metrics()
    del no_umls["clue_problem_summaries"]["umls[ext]_f1"]
    with pytest.raises(IncompleteSuite, match="UMLS-concept F1 not computed"):
        level_aggregate(LEVEL_1, no_umls)


def test_level_refuses_to_mix_encoders():
    metrics = _paper_metrics()
    metrics["clue_meqsum"] = {"bertscore[other@L6]_f1": 0.7}
    with pytest.raises(IncompleteSuite, match="different settings"):
        level_aggregate(LEVEL_1, metrics)


def test_fake_extractor_is_deterministic():
    assert FakeExtractor().extract(["Heart failure"]) == [frozenset({"heart", "failure"})]

"""NCBI task end to end through parse + score, default and evalscope modes, on hand-made answers."""

import pytest

from evalpipe.scoring import score_task
from evalpipe.records import Completion
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task

SPEC = get_task("ncbi_disease")


@pytest.fixture()
def adjacent(tmp_path):
    # gold: [Breast] [ovarian cancer] — two adjacent entities of one type
    path = tmp_path / "adjacent.tsv"
    path.write_text("Breast\tB-Disease\novarian\tB-Disease\ncancer\tI-Disease\nrisk\tO\n")
    return SPEC.load(LoadOptions(paths={"eval": path})).materialized().examples


def _score(examples, answers, compat=None):
    completions = [None if a is None else Completion(text=a) for a in answers]
    prompts = ["{}"] * len(examples)
    return score_task(SPEC, examples, prompts, completions, compat)


def test_adjacent_entities_default_keeps_two_evalscope_merges(adjacent):
    answer = "<response><disease>Breast</disease> <disease>ovarian cancer</disease> risk</response>"
    default = _score(adjacent, [answer]).metrics
    assert (default["precision"], default["recall"], default["f1"]) == (1.0, 1.0, 1.0)
    compat = _score(adjacent, [answer], "evalscope").metrics
    # evalscope tags B I I O → one entity (0..2) vs gold two: tp 0 → all zero
    assert (compat["precision"], compat["recall"], compat["f1"]) == (0.0, 0.0, 0.0)
    assert compat["accuracy"] == 0.75  # 3 of 4 tags equal (token 1 is I- instead of B-)


def test_unparseable_answers_count_as_false_negatives_and_missing_ones_are_left_out(adjacent):
    examples = adjacent * 3
    answers = [
        "<response><disease>Breast</disease> ovarian cancer risk</response>",  # 1 tp, 1 fn
        "I am sorry, I cannot help with that request about something else entirely.",  # parse failure
        None,  # request failed for good
    ]
    m = _score(examples, answers).metrics
    # tp 1, fp 0, fn 1 + 2 = 3 (the failed request's 2 gold entities are left out: evalpipe.coverage)
    # → P 1, R 1/4, F1 = 2 · 1/4 / (5/4) = 2/5
    assert m["precision"] == 1.0
    assert m["recall"] == pytest.approx(1 / 4)
    assert m["f1"] == pytest.approx(2 / 5)
    assert m["errors"] == 1 and m["n"] == 3 and m["answered"] == 2
    assert m["parse_failure_rate"] == 0.5  # 1 of 2 answered samples


def test_spacing_differences_align_to_tokens():
    data = SPEC.load(LoadOptions()).materialized()
    first = data.examples[0]  # "... ataxia - telangiectasia gene in a sporadic T - cell leukaemia ."
    answer = ("Here you go:\n```xml\n<response>Clustering of missense mutations in the <Disease>ataxia-telangiectasia"
              "</Disease> gene in a <disease>sporadic T-cell leukaemia</disease>.</response>\n```")
    outcome = _score([first], [answer])
    assert outcome.metrics["f1"] == 1.0
    record = outcome.records[0]
    assert record["prediction"] == [{"start": 6, "end": 9, "label": "Disease"}, {"start": 12, "end": 17, "label": "Disease"}]
    # only whitespace differs, so the text does not count as altered; the fence is noted
    assert record["diagnostics"]["text_altered"] is False
    assert outcome.summary.diagnostics["code_fence"] == 1


def test_shot_target_round_trips_through_the_parser():
    data = SPEC.load(LoadOptions()).materialized()
    examples = data.shot_pool[:200]
    outcome = _score(examples, [SPEC.shot_target(ex) for ex in examples])
    assert outcome.metrics["f1"] == 1.0 and outcome.metrics["accuracy"] == 1.0
    assert outcome.metrics["parse_failure_rate"] == 0.0

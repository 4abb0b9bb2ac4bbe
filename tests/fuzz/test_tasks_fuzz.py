"""Fuzz the parse → score path of every task whose answers go through a parser, both scorings.

Each drawn case answers a few examples of one task (its shipped or synthetic test data) with
hostile answers, parses them with the task's own ``parse`` and scores them with its ``score``.
Properties: nothing raises; every parse is a :class:`Prediction`; every sample is scored — a
failed parse is a counted sample, not a dropped one; corpus metrics are finite numbers.
(Summarisation tasks are left out: their answers are free text with no parser, and their
BERTScore needs a model.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Prediction, ScoreSheet
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task
from tests.cblue import synthetic as syn
from tests.clue.conftest import FIXTURES
from tests.fuzz.strategies import answers, fuzz_settings, short_answers

CBLUE_TASKS = ("chip_cdn", "chip_ctc", "chip_sts", "kuake_qic", "kuake_qqr", "kuake_qtr", "cmeee", "cmeie")
CLUE_TASKS = ("clue_longhealth_task1", "clue_medisumcode", "clue_mednli")
#: scorings whose metric is quadratic in the answer by definition (ROUGE-L's LCS): short answers
QUADRATIC = {("promptcblue", "promptcblue"), ("promptcblue", "default")}


@pytest.fixture(scope="module")
def task_examples(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-data")
    cblue = syn.write_cblue(root / "CBLUEDatasets")
    options = {
        **{name: LoadOptions(data_dir=cblue) for name in CBLUE_TASKS},
        **{name: LoadOptions(data_dir=FIXTURES, seed=0) for name in CLUE_TASKS},
        "ncbi_disease": LoadOptions(),
        "promptcblue": LoadOptions(paths={"eval": syn.write_promptcblue(root / "dev.json")}),
    }
    loaded = {}
    for name, option in options.items():
        spec = get_task(name)
        examples = spec.load(option).materialized().examples[: 12 if name == "promptcblue" else 3]
        for scoring in spec.scorings:
            loaded[(name, scoring)] = (spec.scorings[scoring], examples)
    return loaded


CASES = sorted([(t, "default") for t in CBLUE_TASKS] + [(t, s) for t in CLUE_TASKS for s in ("default", "clue")]
               + [("ncbi_disease", "default"), ("ncbi_disease", "evalscope"), ("promptcblue", "default"),
                  ("promptcblue", "promptcblue")])


def test_every_parsing_task_is_fuzzed(task_examples):
    assert set(task_examples) == set(CASES)
    assert all(examples for _, examples in task_examples.values())


@fuzz_settings(40)
@given(case=st.sampled_from(CASES), data=st.data())
def test_parse_and_score_never_raise_and_count_every_sample(task_examples, case, data):
    scoring, examples = task_examples[case]
    strategy = short_answers if case in QUADRATIC else answers
    drawn = data.draw(st.lists(strategy, min_size=len(examples), max_size=len(examples)))
    predictions = [scoring.parse(answer, example) for answer, example in zip(drawn, examples)]
    for prediction in predictions:
        assert isinstance(prediction, Prediction) and isinstance(prediction.failed, bool)
        assert isinstance(prediction.diagnostics, Mapping)
    sheet = scoring.score(examples, predictions, MetricOptions())
    assert isinstance(sheet, ScoreSheet)
    assert len(sheet.per_sample) == len(examples)  # failed parses are scored samples too
    for metric, value in sheet.corpus.items():
        assert isinstance(value, (int, float)) and math.isfinite(value), (metric, value)

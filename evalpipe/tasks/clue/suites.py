"""The CLUE suites ``clue-level1``, ``clue-level2`` and ``clue``, with the paper's level scores.

Level score (rule and its check on the paper's rows: :mod:`evalpipe.metrics.aggregate`): per
dataset the mean of its non-ROUGE metrics, then the mean over the level's datasets.

=================  ========================================================================
Level 1 dataset    metrics entering its dataset score
=================  ========================================================================
MedNLI             ``clue_mednli.accuracy``
problem summaries  ``clue_problem_summaries.bertscore[…]_f1``, ``….umls[…]_f1``
MeQSum             ``clue_meqsum.bertscore[…]_f1``
=================  ========================================================================

=================  ========================================================================
Level 2 dataset    metrics entering its dataset score
=================  ========================================================================
LongHealth         ``clue_longhealth_task1.accuracy``; task 2&3 accuracy = accuracy over the
                   samples of tasks 2 and 3 together (``n``-weighted, reported as
                   ``longhealth_task2and3_accuracy``)
MeDiSumQA          ``clue_medisumqa.bertscore[…]_f1``, ``….umls[…]_f1``
MeDiSumCode        ``clue_medisumcode.exact_f1``, ``.category_f1``, ``.valid_ratio``
=================  ========================================================================

The score's key names the BERTScore encoder and UMLS extractor that produced it, e.g.
``level1_score[bertscore=all-MiniLM-L6-v2@L6,umls=scispacy:en_core_sci_sm]`` — a level score is
only comparable with one computed with the same settings (the paper's used BERTScore on
Bio_ClinicalBERT; the reference code uses SciBERT). Values are fractions, like the task metrics.

A level score is computed only over a complete level: a missing task, or a metric that was not
computed (UMLS-concept F1 without scispacy), raises :class:`IncompleteSuite` naming what is
missing. ``clue`` reports every complete level; with one level incomplete it raises
:class:`PartialSuite`, which carries the complete level's scores in ``partial``.

Each level is a declaration (an :class:`~evalpipe.rundir.suite_aggregates.OutputGroup`: datasets as
nested means, in the order above, task 2&3 accuracy as a weighted mean), so a run records it in
``config.json`` and the report recomputes the level scores on bootstrap replicates from there.
"""

from __future__ import annotations

from collections.abc import Mapping

from evalpipe.rundir.suite_aggregates import (
    Expression,
    IncompleteSuite,
    Mean,
    Metric,
    Output,
    OutputGroup,
    PartialSuite,
    SuiteAggregate,
    WeightedMean,
)
from evalpipe.tasks.base import SuiteSpec
from evalpipe.tasks.clue.common import ALL, LEVEL1, LEVEL2
from evalpipe.tasks.registry import register_suite

__all__ = ["CLUE", "LEVEL_1", "LEVEL_2", "LONGHEALTH_23", "IncompleteSuite", "PartialSuite", "clue_aggregate",
           "level_aggregate"]

Metrics = Mapping[str, Mapping[str, float]]

LONGHEALTH_23 = "longhealth_task2and3_accuracy"
#: every level asks for all of its tasks and metrics
_REQUIRES = "every task and metric of the level (no level score without them)"


def _bert(task: str) -> Metric:
    return Metric(task, "bertscore[*]_f1")


def _umls(task: str) -> Metric:
    return Metric(task, "umls[*]_f1", absent="UMLS-concept F1 not computed; the reason is in the task's notes")


def _dataset(*metrics: Expression) -> Mean:
    """A dataset's score: the mean of its non-ROUGE metrics."""
    return Mean(metrics)


def _level_score(number: int, *datasets: Mean) -> Output:
    """The mean over the level's datasets, named with the settings of its tagged metrics."""
    return Output(f"level{number}_score[{{settings}}]", Mean(datasets))


#: accuracy over the samples of tasks 2 and 3 together, weighted by the samples each accuracy is
#: measured on: its answered samples (``answered``, evalpipe.coverage; ``n`` in a run written before it)
_TASK23 = ("clue_longhealth_task2", "clue_longhealth_task3")
LONGHEALTH_23_VALUE = WeightedMean(tuple(Metric(t, "accuracy") for t in _TASK23),
                                   tuple(Metric(t, "answered", otherwise=("n",)) for t in _TASK23))

LEVEL_1 = OutputGroup(LEVEL1, _REQUIRES, (
    _level_score(1,
                 _dataset(Metric("clue_mednli", "accuracy")),  # MedNLI
                 _dataset(_bert("clue_problem_summaries"), _umls("clue_problem_summaries")),  # problem summaries
                 _dataset(_bert("clue_meqsum"))),  # MeQSum
))
LEVEL_2 = OutputGroup(LEVEL2, _REQUIRES, (
    Output(LONGHEALTH_23, LONGHEALTH_23_VALUE),
    _level_score(2,
                 _dataset(Metric("clue_longhealth_task1", "accuracy"), LONGHEALTH_23_VALUE),  # LongHealth
                 _dataset(_bert("clue_medisumqa"), _umls("clue_medisumqa")),  # MeDiSumQA
                 _dataset(Metric("clue_medisumcode", "exact_f1"), Metric("clue_medisumcode", "category_f1"),
                          Metric("clue_medisumcode", "valid_ratio"))),  # MeDiSumCode
))
#: the member tasks of each level, in display order
LEVEL_1_TASKS = ("clue_mednli", "clue_meqsum", "clue_problem_summaries")
LEVEL_2_TASKS = ("clue_longhealth_task1", "clue_longhealth_task2", "clue_longhealth_task3", "clue_medisumqa",
                 "clue_medisumcode")

#: ``clue``: both levels; the complete one is reported when the other is not (PartialSuite)
CLUE = SuiteAggregate((LEVEL_1, LEVEL_2))


def level_aggregate(level: OutputGroup, metrics: Metrics) -> dict[str, float]:
    """``level<N>_score[<settings>]`` (plus task 2&3 accuracy for level 2); IncompleteSuite if not complete."""
    return SuiteAggregate((level,))(metrics)


#: both levels' aggregates; PartialSuite (with the complete one) or IncompleteSuite otherwise
clue_aggregate = CLUE

SUITES = (
    register_suite(SuiteSpec(LEVEL1, LEVEL_1_TASKS, "CLUE level 1: MedNLI, MeQSum, problem summaries (+ level score)",
                             SuiteAggregate((LEVEL_1,)))),
    register_suite(SuiteSpec(LEVEL2, LEVEL_2_TASKS,
                             "CLUE level 2: LongHealth 1-3, MeDiSumQA, MeDiSumCode (+ level score)",
                             SuiteAggregate((LEVEL_2,)))),
    register_suite(SuiteSpec(ALL, LEVEL_1_TASKS + LEVEL_2_TASKS, "CLUE levels 1 and 2 (+ both level scores)", CLUE)),
)

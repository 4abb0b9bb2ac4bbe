"""The ``mmlu_medical`` suite: MMLU's six medical subjects and their average accuracy.

Two averages, because papers report both and they differ when subjects differ in size:

* ``accuracy_macro`` — the unweighted mean of the six subjects' accuracies (each subject counts once;
  MMLU's own per-category averages);
* ``accuracy_micro`` — correct answers over all questions of the six subjects (each question counts
  once): Σ accuracy·n / Σ n, from each subject's ``accuracy`` and ``n``.

Defined only when all six subjects were run: an average over a subset is not comparable with
anything, so a partial run raises :class:`~evalpipe.tasks.base.IncompleteSuite` naming what is missing.

The aggregate is a declaration (:mod:`evalpipe.rundir.suite_aggregates`), so a run records it in
``config.json`` and the report recomputes it on bootstrap replicates without this module.
"""

from __future__ import annotations

from evalpipe.rundir.suite_aggregates import Mean, Metric, Output, OutputGroup, SuiteAggregate, WeightedMean
from evalpipe.tasks.base import SuiteSpec
from evalpipe.tasks.registry import register_suite

SUBJECTS = ("anatomy", "clinical_knowledge", "college_biology", "college_medicine", "medical_genetics",
            "professional_medicine")
TASKS = tuple(f"mmlu_{subject}" for subject in SUBJECTS)

_ACCURACY = tuple(Metric(t, "accuracy") for t in TASKS)
#: the samples each accuracy is measured on: the answered ones (evalpipe.coverage; ``n`` in runs before it)
_ANSWERED = tuple(Metric(t, "answered", otherwise=("n",), default=0.0) for t in TASKS)

#: the suite's aggregate, as data (config.json records it; the report recomputes it from there)
AGGREGATE = SuiteAggregate((OutputGroup(
    name="the mmlu_medical average", requires="all six subjects", outputs=(
        Output("accuracy_macro", Mean(_ACCURACY)),
        Output("accuracy_micro", WeightedMean(_ACCURACY, _ANSWERED, if_no_weight=0.0)),
    )),))
#: called like the Python function it replaced: task → metrics → {accuracy_macro, accuracy_micro}
aggregate = AGGREGATE

SUITE = register_suite(SuiteSpec(
    name="mmlu_medical",
    tasks=TASKS,
    description="MMLU's six medical subjects (anatomy, clinical knowledge, college biology, college medicine, "
    "medical genetics, professional medicine); macro and micro average accuracy.",
    aggregate=AGGREGATE,
))

"""The ``mmlu_medical`` suite: MMLU's six medical subjects and their average accuracy.

Two averages, because papers report both and they differ when subjects differ in size:

* ``accuracy_macro`` — the unweighted mean of the six subjects' accuracies (each subject counts once;
  MMLU's own per-category averages);
* ``accuracy_micro`` — correct answers over all questions of the six subjects (each question counts
  once): Σ accuracy·n / Σ n, from each subject's ``accuracy`` and ``n``.

Defined only when all six subjects were run: an average over a subset is not comparable with
anything, so a partial run raises :class:`~evalpipe.tasks.base.IncompleteSuite` naming what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping

from evalpipe.tasks.base import IncompleteSuite, SuiteSpec
from evalpipe.tasks.registry import register_suite

SUBJECTS = ("anatomy", "clinical_knowledge", "college_biology", "college_medicine", "medical_genetics",
            "professional_medicine")
TASKS = tuple(f"mmlu_{subject}" for subject in SUBJECTS)


def aggregate(metrics_by_task: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    missing = [t for t in TASKS if "accuracy" not in metrics_by_task.get(t, {})]
    if missing:
        raise IncompleteSuite(f"the mmlu_medical average needs all six subjects; missing: {', '.join(missing)}")
    accuracies = [float(metrics_by_task[t]["accuracy"]) for t in TASKS]
    # weighted by the samples each accuracy is measured on: the answered ones (evalpipe.coverage; n before)
    sizes = [float(metrics_by_task[t].get("answered", metrics_by_task[t].get("n", 0))) for t in TASKS]
    total = sum(sizes)
    return {
        "accuracy_macro": sum(accuracies) / len(accuracies),
        "accuracy_micro": sum(a * n for a, n in zip(accuracies, sizes)) / total if total else 0.0,
    }


SUITE = register_suite(SuiteSpec(
    name="mmlu_medical",
    tasks=TASKS,
    description="MMLU's six medical subjects (anatomy, clinical knowledge, college biology, college medicine, "
    "medical genetics, professional medicine); macro and micro average accuracy.",
    aggregate=aggregate,
))

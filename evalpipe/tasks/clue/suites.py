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
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evalpipe.metrics.aggregate import level_score, pooled_accuracy
from evalpipe.tasks.base import IncompleteSuite, PartialSuite, SuiteSpec
from evalpipe.tasks.clue.common import ALL, LEVEL1, LEVEL2
from evalpipe.tasks.registry import register_suite

Metrics = Mapping[str, Mapping[str, float]]

LONGHEALTH_23 = "longhealth_task2and3_accuracy"


@dataclass(frozen=True)
class MetricRef:
    task: str
    #: a metric key, or a pattern with ``[*]`` for keys that carry a settings tag
    key: str


@dataclass(frozen=True)
class Level:
    name: str
    number: int
    #: the member tasks, in display order
    tasks: tuple[str, ...]
    #: dataset → the metrics averaged into its dataset score
    datasets: Mapping[str, Sequence[MetricRef]]


def _bert(task: str) -> MetricRef:
    return MetricRef(task, "bertscore[*]_f1")


def _umls(task: str) -> MetricRef:
    return MetricRef(task, "umls[*]_f1")


LEVEL_1 = Level(LEVEL1, 1, ("clue_mednli", "clue_meqsum", "clue_problem_summaries"), {
    "MedNLI": (MetricRef("clue_mednli", "accuracy"),),
    "problem summaries": (_bert("clue_problem_summaries"), _umls("clue_problem_summaries")),
    "MeQSum": (_bert("clue_meqsum"),),
})
LEVEL_2 = Level(LEVEL2, 2, (
    "clue_longhealth_task1", "clue_longhealth_task2", "clue_longhealth_task3", "clue_medisumqa", "clue_medisumcode",
), {
    "LongHealth": (MetricRef("clue_longhealth_task1", "accuracy"), MetricRef("<suite>", LONGHEALTH_23)),
    "MeDiSumQA": (_bert("clue_medisumqa"), _umls("clue_medisumqa")),
    "MeDiSumCode": (MetricRef("clue_medisumcode", "exact_f1"), MetricRef("clue_medisumcode", "category_f1"),
                    MetricRef("clue_medisumcode", "valid_ratio")),
})

_TAGGED = re.compile(r"^(?P<family>[a-z0-9_]+)\[(?P<tag>.*)\]_(?P<part>[a-z0-9_]+)$")


def _lookup(ref: MetricRef, metrics: Metrics) -> tuple[float, tuple[str, str] | None]:
    """The value of ``ref`` and, for a tagged key, its (family, tag)."""
    values = metrics[ref.task]
    if "[*]" not in ref.key:
        if ref.key not in values:
            raise IncompleteSuite(f"{ref.task} has no metric {ref.key!r}")
        return float(values[ref.key]), None
    family, part = ref.key.split("[*]_")
    tagged = {k: m for k in values if (m := _TAGGED.match(k))}
    hits = [k for k, m in tagged.items() if m["family"] == family and m["part"] == part]
    if not hits:
        why = " (UMLS-concept F1 not computed; the reason is in the task's notes)" if family == "umls" else ""
        raise IncompleteSuite(f"{ref.task} has no {family} {part} metric{why}")
    if len(hits) > 1:
        raise IncompleteSuite(f"{ref.task} has several {family} {part} metrics ({', '.join(hits)}); cannot choose")
    return float(values[hits[0]]), (family, tagged[hits[0]]["tag"])


def longhealth_task23(metrics: Metrics) -> float:
    """Accuracy over tasks 2 and 3 together, weighted by the samples each accuracy is measured on:
    its answered samples (``answered``, evalpipe.coverage; ``n`` in a run written before it)."""
    parts = []
    for task in ("clue_longhealth_task2", "clue_longhealth_task3"):
        values = metrics[task]
        size = values.get("answered", values.get("n"))
        if "accuracy" not in values or size is None:
            raise IncompleteSuite(f"{task} lacks accuracy or n")
        parts.append((float(values["accuracy"]), float(size)))
    return pooled_accuracy(parts)


def level_aggregate(level: Level, metrics: Metrics) -> dict[str, float]:
    """``level<N>_score[<settings>]`` (plus task 2&3 accuracy for level 2); IncompleteSuite if not complete."""
    missing = [t for t in level.tasks if t not in metrics]
    if missing:
        raise IncompleteSuite(f"{level.name}: task(s) not run: {', '.join(missing)} (no level score without them)")
    out: dict[str, float] = {}
    if level.number == 2:
        out[LONGHEALTH_23] = longhealth_task23(metrics)
    tags: dict[str, set[str]] = {}
    datasets: dict[str, list[float]] = {}
    for dataset, refs in level.datasets.items():
        for ref in refs:
            if ref.task == "<suite>":
                datasets.setdefault(dataset, []).append(out[ref.key])
                continue
            try:
                value, tag = _lookup(ref, metrics)
            except IncompleteSuite as exc:
                raise IncompleteSuite(f"{level.name}: {exc}") from None
            datasets.setdefault(dataset, []).append(value)
            if tag:
                tags.setdefault(tag[0], set()).add(tag[1])
    mixed = {family: sorted(found) for family, found in tags.items() if len(found) > 1}
    if mixed:
        raise IncompleteSuite(f"{level.name}: tasks were scored with different settings {mixed}; not averaging them")
    label = ",".join(f"{family}={next(iter(found))}" for family, found in sorted(tags.items()))
    out[f"level{level.number}_score[{label}]"] = level_score(datasets)
    return out


def clue_aggregate(metrics: Metrics) -> dict[str, float]:
    """Both levels' aggregates; PartialSuite (with the complete one) or IncompleteSuite otherwise."""
    out: dict[str, float] = {}
    problems = []
    for level in (LEVEL_1, LEVEL_2):
        try:
            out.update(level_aggregate(level, metrics))
        except IncompleteSuite as exc:
            problems.append(str(exc))
    if problems and out:
        raise PartialSuite("; ".join(problems), out)
    if problems:
        raise IncompleteSuite("; ".join(problems))
    return out


SUITES = (
    register_suite(SuiteSpec(LEVEL1, LEVEL_1.tasks, "CLUE level 1: MedNLI, MeQSum, problem summaries (+ level score)",
                             lambda m: level_aggregate(LEVEL_1, m))),
    register_suite(SuiteSpec(LEVEL2, LEVEL_2.tasks,
                             "CLUE level 2: LongHealth 1-3, MeDiSumQA, MeDiSumCode (+ level score)",
                             lambda m: level_aggregate(LEVEL_2, m))),
    register_suite(SuiteSpec(ALL, LEVEL_1.tasks + LEVEL_2.tasks, "CLUE levels 1 and 2 (+ both level scores)",
                             clue_aggregate)),
)

"""Judges checked against human ratings: ``evalpipe judge RUN --judge … --human-ratings FILE``.

(The file is read and checked by :mod:`evalpipe.judging.human_file`; this module holds the ratings,
stores them in the run directory and computes the metrics.)

**The file** is a CSV with a header and the columns ``sample_id, rater, criterion, rating`` (and an
optional ``task`` column, needed only when a sample id belongs to more than one judged task of the
run): one row per (sample, rater, criterion), the rating a whole number on the rubric's scale. It is
checked whole before any judge request, and the first problem is one error
``FILE:LINE: FIELD: what is wrong`` — a missing column, an empty rater, a sample id that is not a
judged (answered) sample of the run, a criterion the task's rubric does not have, a rating that is
not a whole number or lies outside the scale, a (sample, rater, criterion) given twice. A rater
named like a judge is refused (it would be one coder counted twice). The ratings are then stored in
the run directory (``human_ratings.json``; its source file and sha256 in ``config.json``
``judging.human_ratings``), so a report and ``evalpipe score`` read them without the file, and a
later ``judge`` without ``--human-ratings`` keeps them.

**Metrics** (under the task in ``metrics.json``, for each criterion ``c``; the samples are the units,
and only samples the humans rated enter — and only while their answer is the one the humans rated: a
sample answered anew since, e.g. by a resumed run, is left out and counted in ``summary.json``):

* ``human_alpha_<c>`` — Krippendorff's alpha (ordinal), coders = the human raters: how well the
  humans agree with each other (the ceiling a judge can be held to);
* ``judge_human_alpha_<c>`` — alpha with coders = every human rater and every judge;
* ``judge[<j>]_human_alpha_<c>`` — alpha with coders = the human raters and judge ``j``;
* ``judge_human_bias_<c>`` — mean, over the samples with a human and a judge rating, of the judges'
  mean rating minus the humans' mean rating (> 0: the jury is more lenient than the humans);
  ``judge[<j>]_human_bias_<c>`` the same for one judge.

Alpha values come from the ``krippendorff`` package; each is also declared as the
``krippendorff_alpha`` aggregation of per-sample coincidences and each bias as a ratio of summed
per-sample differences to the count of samples — so every one gets a bootstrap interval over
samples, and the report compares ``judge_human_alpha`` with ``human_alpha`` on the same resamples.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from evalpipe.judging.agreement import KrippendorffAlpha, krippendorff_alpha, unit_coincidences
from evalpipe.judging.judge_metrics import JudgeSheet, RatingMean
from evalpipe.judging.items import TaskToJudge
from evalpipe.metrics.aggregation import check_reproduces

__all__ = ["COLUMNS", "FILE_NAME", "HumanRatings", "MeanDifference", "Table", "add_human_metrics", "human_record",
           "load_human_ratings", "store_human_ratings"]

#: where the checked ratings live in the run directory
FILE_NAME = "human_ratings.json"
COLUMNS = ("sample_id", "rater", "criterion", "rating")

#: task → sample id → criterion → rater → rating
Table = dict[str, dict[str, dict[str, dict[str, int]]]]


@dataclass(frozen=True)
class MeanDifference(RatingMean):
    """``Σ differences / Σ samples``: a mean difference of ratings (judges − humans); NaN without a sample."""

    kind: ClassVar[str] = "mean_difference"

    def describe(self) -> str:
        return f"mean difference of ratings: summed {self.numerator} over summed {self.denominator}"

    def with_prefix(self, prefix: str) -> MeanDifference:
        return MeanDifference(prefix + self.numerator, prefix + self.denominator)


@dataclass(frozen=True)
class HumanRatings:
    """Checked human ratings of a run's judged samples."""

    ratings: Table
    source: str = ""
    sha256: str = ""
    raters: tuple[str, ...] = field(default=())
    #: task → sample id → sha256 of the judged answer the humans rated (a changed answer is not theirs)
    answers: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "sha256": self.sha256, "raters": list(self.raters), "ratings": self.ratings,
                "answers": {t: dict(a) for t, a in self.answers.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HumanRatings:
        ratings = {str(t): {str(s): {str(c): {str(r): int(v) for r, v in by_rater.items()}
                                     for c, by_rater in by_criterion.items()}
                            for s, by_criterion in samples.items()}
                   for t, samples in (data.get("ratings") or {}).items()}
        answers = {str(t): {str(k): str(v) for k, v in a.items()} for t, a in (data.get("answers") or {}).items()}
        return cls(ratings, str(data.get("source") or ""), str(data.get("sha256") or ""),
                   tuple(str(r) for r in data.get("raters") or ()), answers)


def store_human_ratings(run_path: Path, ratings: HumanRatings) -> None:
    """Write the checked ratings into the run directory (atomically; the caller holds the run's lock)."""
    from evalpipe.results import RunDir

    RunDir(run_path).write_json(Path(run_path) / FILE_NAME, ratings.to_json())


def load_human_ratings(run_path: Path, config: Mapping[str, Any]) -> HumanRatings | None:
    """The stored ratings when ``config.json`` records them (None otherwise, or when the file is gone)."""
    judging = config.get("judging") or {}
    if not isinstance(judging, Mapping) or not judging.get("human_ratings"):
        return None
    path = Path(run_path) / FILE_NAME
    if not path.is_file():
        return None
    return HumanRatings.from_json(json.loads(path.read_text(encoding="utf-8")))


def human_record(ratings: HumanRatings) -> dict[str, Any]:
    """What ``config.json`` says about the ratings (not the ratings: they are in ``human_ratings.json``)."""
    count = sum(len(by_rater) for samples in ratings.ratings.values() for crit in samples.values()
                for by_rater in crit.values())
    return {"file": FILE_NAME, "source": ratings.source, "sha256": ratings.sha256, "raters": list(ratings.raters),
            "ratings": count}


def _alpha_parts(prefix: str, ratings: Sequence[int]) -> dict[str, float]:
    return {f"{prefix}{low}:{high}": value for (low, high), value in unit_coincidences(list(ratings)).items()}


def add_human_metrics(sheet: JudgeSheet, task: TaskToJudge, judges: Sequence[str], criteria: Sequence[str],
                      scale: tuple[int, int], humans: HumanRatings, strict: bool = False) -> JudgeSheet:
    """Add the human-anchored metrics, parts and notes of one task to its judge sheet (module docstring)."""
    rated_answers = humans.answers.get(task.name) or {}
    current = {item.sample_id: item.answer_sha256 for item in task.items}
    table = {sid: by_criterion for sid, by_criterion in (humans.ratings.get(task.name) or {}).items()
             if sid in current and rated_answers.get(sid, current[sid]) == current[sid]}
    stale = len(humans.ratings.get(task.name) or {}) - len(table)
    if not table:
        if stale:
            sheet.notes["human_ratings"] = {"left_out": stale, "why": "the answers the humans rated have changed"}
        return sheet
    values = tuple(range(scale[0], scale[1] + 1))
    humans_of_task = sorted({r for s in table.values() for c in s.values() for r in c})
    judge_ratings = {sid: (record.get("ratings") or {}) for sid, record in sheet.per_sample.items()}
    computed: dict[str, float] = {}
    aggregations: dict[str, Any] = {}
    for c in criteria:
        # unit → coder → rating, for the three coder sets
        human_units: dict[str, dict[str, int]] = {}
        for sid, by_criterion in table.items():
            if by_criterion.get(c):
                human_units[sid] = dict(by_criterion[c])
        judged = {sid: {j: r[c] for j, r in judge_ratings.get(sid, {}).items()} for sid in human_units}
        sets = {"human": (list(humans_of_task), {s: dict(h) for s, h in human_units.items()}),
                "judge_human": ([*humans_of_task, *judges], {s: {**h, **judged[s]} for s, h in human_units.items()})}
        for j in judges:
            sets[f"judge[{j}]_human"] = ([*humans_of_task, j], {
                s: {**h, **({j: judged[s][j]} if j in judged[s] else {})} for s, h in human_units.items()})
        for name, (coders, units) in sets.items():
            metric, prefix = f"{name}_alpha_{c}", f"judge.{name}.alpha.{c}."
            for sid, unit in units.items():
                sheet.parts.setdefault(sid, {}).update(_alpha_parts(prefix, list(unit.values())))
            alpha, why = krippendorff_alpha(units, coders, values)
            if alpha is None:
                sheet.not_computed[metric] = f"Krippendorff's alpha {why}".replace("two judges", "two coders")
            else:
                computed[metric] = alpha
                aggregations[metric] = KrippendorffAlpha(prefix, values)
        # bias: judges' mean − humans' mean, over samples with both
        for who, coders in (("judge", list(judges)), *((f"judge[{j}]", [j]) for j in judges)):
            metric = f"{who}_human_bias_{c}"
            num, den = f"judge.{who}.human_bias.{c}", f"judge.{who}.human_both.{c}"
            diffs = []
            for sid, h in human_units.items():
                mine = [judged[sid][j] for j in coders if j in judged[sid]]
                if mine:
                    diff = statistics.fmean(mine) - statistics.fmean(h.values())
                    diffs.append(diff)
                    parts = sheet.parts.setdefault(sid, {})
                    parts[num], parts[den] = diff, 1.0
            if diffs:
                computed[metric] = statistics.fmean(diffs)
                aggregations[metric] = MeanDifference(num, den)
            else:
                sheet.not_computed[metric] = "no sample has both a human and a judge rating"
    for sid in list(sheet.parts):
        sheet.parts[sid] = {k: v for k, v in sheet.parts[sid].items() if v}
    all_parts = [sheet.parts.get(item.sample_id, {}) for item in task.items]
    problems = check_reproduces(computed, aggregations, all_parts)
    if problems and strict:
        raise AssertionError(f"task {task.name}: human-anchored metrics: {problems}")
    for metric, why in problems.items():
        aggregations.pop(metric)
        sheet.fixed[metric] = f"its declared aggregation does not reproduce it: {why}"
    sheet.metrics.update(computed)
    sheet.aggregations.update(aggregations)
    sheet.notes["human_ratings"] = {"raters": humans_of_task, "samples": len(table), "sha256": humans.sha256,
                                    "left_out": stale}
    for sid, by_criterion in table.items():
        if sid in sheet.per_sample:
            sheet.per_sample[sid]["human"] = by_criterion
    return sheet

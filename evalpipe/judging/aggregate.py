"""Judges' verdicts → the task's judge metrics, per-sample records and declared aggregations.

Definitions, for a task with judges ``J`` and rubric criteria ``C`` (on the samples that have an
answer; a sample whose request failed has nothing to judge and is left out):

* a **verdict** is what one judge finally said about one sample: its ratings (the first usable of
  its stored replies — the reply, then the one retry), or no rating: ``unusable`` (both replies
  unusable) or ``missing`` (no usable reply stored: the request failed for good, or judging was
  interrupted — ``evalpipe judge`` asks again);
* ``judge_<c>`` = mean over the samples rated by at least one judge of the mean rating of ``c`` by
  the judges that rated the sample (a sample counts once, however many judges rated it);
  declared as ``ratio(Σ judge.<c>, Σ judge.rated)`` of per-sample parts;
* ``judge[<j>]_<c>`` = mean rating of ``c`` by judge ``j`` over the samples it rated
  (``ratio(Σ judge[<j>].<c>, Σ judge[<j>].rated)``);
* ``judge_alpha_<c>`` = Krippendorff's alpha, ordinal, judges as coders, samples as units
  (:mod:`evalpipe.judging.agreement`; declared as ``krippendorff_alpha`` of per-sample coincidences);
  not computed with one judge, or when it is undefined;
* ``judge_failures`` = (sample, judge) pairs without a rating (``total(judge.failed)``), and
  ``judge[<j>]_failures`` one judge's; a failure is never a rating;
* ``judge_n`` = samples rated by at least one judge (fixed by the run: no interval).

A criterion no sample was rated on gets no ``judge_<c>`` (*not computed*, with the reason), never a 0.
The metric values are computed here directly from the ratings (means; alpha with the ``krippendorff``
package) and the declared aggregations are checked to reproduce them, as for every task metric.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from evalpipe.store.judgements import StoredJudgement
from evalpipe.judging.agreement import KrippendorffAlpha, krippendorff_alpha, unit_coincidences
from evalpipe.judging.items import TaskToJudge
from evalpipe.judging.parse import parse_judgement
from evalpipe.metrics.aggregation import Aggregation, Ratio, Total, check_reproduces

__all__ = ["JudgeSheet", "RatingMean", "Verdict", "judge_sheet", "verdict"]

RATED, FAILED = "judge.rated", "judge.failed"


@dataclass(frozen=True)
class RatingMean(Ratio):
    """``Σ ratings / Σ rated samples``: a mean rating. A resample without a rated sample has no mean
    rating (NaN, left out of the interval) — not 0, which is no rating on any scale. Serialised
    without ``empty`` (kind ``rating_mean``), so summary.json stays strict JSON."""

    empty: float = math.nan
    kind: ClassVar[str] = "rating_mean"

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out.pop("empty", None)
        return out

    def describe(self) -> str:
        return f"mean rating: summed {self.numerator} over summed {self.denominator}"

    def with_prefix(self, prefix: str) -> RatingMean:
        return RatingMean(prefix + self.numerator, prefix + self.denominator)


def judge_part(judge: str, what: str) -> str:
    return f"judge[{judge}].{what}"


@dataclass(frozen=True)
class Verdict:
    """One judge's final word on one sample (see the module docstring)."""

    #: ``rated``, ``unusable`` or ``missing``
    state: str
    ratings: Mapping[str, int] | None = None
    problem: str | None = None
    rationale: str | None = None
    #: the first reply was unusable and the judge was asked again
    retried: bool = False


def verdict(replies: Mapping[int, StoredJudgement], criteria: Sequence[str], scale: tuple[int, int]) -> Verdict:
    """The verdict from a judge's stored replies to one sample (attempt → reply), re-read with the
    parser (so a parser fix applies on ``evalpipe score``, as for answers)."""
    first = replies.get(1)
    if first is None:
        return Verdict("missing", problem="no reply stored (the request failed, or judging was interrupted)")
    read = parse_judgement(first.text, criteria, scale)
    if read.usable:
        return Verdict("rated", read.ratings, rationale=read.rationale)
    second = replies.get(2)
    if second is None:
        return Verdict("missing", problem=f"reply unusable ({read.problem}) and its retry has no stored reply",
                       retried=True)
    again = parse_judgement(second.text, criteria, scale)
    if again.usable:
        return Verdict("rated", again.ratings, rationale=again.rationale, retried=True)
    return Verdict("unusable", problem=f"unusable after a retry: {read.problem}; then {again.problem}", retried=True)


@dataclass
class JudgeSheet:
    """A task's judge results, ready to be merged into its run-directory records."""

    metrics: dict[str, float]
    aggregations: dict[str, Aggregation]
    #: metric → why it has no interval
    fixed: dict[str, str]
    #: metric → why it was not computed
    not_computed: dict[str, str]
    #: sample id → the record's ``judge`` field
    per_sample: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: sample id → the sample's judge parts (sparse)
    parts: dict[str, dict[str, float]] = field(default_factory=dict)
    #: what summary.json says about the judging of the task
    notes: dict[str, Any] = field(default_factory=dict)


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values)


def judge_sheet(task: TaskToJudge, judges: Sequence[str], criteria: Sequence[str], scale: tuple[int, int],
                verdicts: Mapping[str, Mapping[str, Verdict]], notes: Mapping[str, Any] | None = None) -> JudgeSheet:
    """Metrics, parts, per-sample records and declarations of one task (see the module docstring).

    ``verdicts``: sample id → judge → verdict, for every judged item of ``task``.
    """
    values = tuple(range(scale[0], scale[1] + 1))
    sheet = JudgeSheet(metrics={}, aggregations={}, fixed={}, not_computed={})
    rated_samples: dict[str, dict[str, Mapping[str, int]]] = {}  # sample → judge → ratings
    by_judge = {j: {"rated": 0, "unusable": 0, "missing": 0, "retried": 0} for j in judges}
    for item in task.items:
        said = verdicts.get(item.sample_id, {})
        ratings = {j: r for j in judges if j in said and (r := said[j].ratings) is not None}
        record: dict[str, Any] = {"ratings": ratings, "answer_chars": len(item.answer)}
        parts: dict[str, float] = {}
        failures = {}
        for j in judges:
            v = said.get(j) or Verdict("missing", problem="no reply stored")
            by_judge[j]["rated" if v.state == "rated" else v.state] += 1
            by_judge[j]["retried"] += int(v.retried)
            if v.ratings is None:
                failures[j] = v.problem or v.state
                parts[judge_part(j, "failed")] = 1.0
            else:
                parts[judge_part(j, "rated")] = 1.0
                for c in criteria:
                    parts[judge_part(j, c)] = float(v.ratings[c])
        if failures:
            record["failures"] = failures
            parts[FAILED] = float(len(failures))
        rationales = {j: said[j].rationale for j in judges if j in said and said[j].rationale}
        if rationales:
            record["rationales"] = rationales
        retried = [j for j in judges if j in said and said[j].retried]
        if retried:
            record["retried"] = retried
        if ratings:
            rated_samples[item.sample_id] = ratings
            mean = {c: _mean([r[c] for r in ratings.values()]) for c in criteria}
            record["mean"] = mean
            parts[RATED] = 1.0
            for c in criteria:
                parts[f"judge.{c}"] = mean[c]
                for (low, high), value in unit_coincidences([r[c] for r in ratings.values()]).items():
                    parts[f"judge.alpha.{c}.{low}:{high}"] = value
        sheet.per_sample[item.sample_id] = record
        sheet.parts[item.sample_id] = {k: v for k, v in parts.items() if v}

    metrics, aggregations = sheet.metrics, sheet.aggregations
    for c in criteria:
        name = f"judge_{c}"
        if rated_samples:
            metrics[name] = _mean([_mean([r[c] for r in ratings.values()]) for ratings in rated_samples.values()])
            aggregations[name] = RatingMean(f"judge.{c}", RATED)
        else:
            sheet.not_computed[name] = "no sample has a usable rating"
    for c in criteria:
        name = f"judge_alpha_{c}"
        alpha, why = krippendorff_alpha({s: {j: r[c] for j, r in ratings.items()} for s, ratings in rated_samples.items()},
                                        list(judges), values)
        if alpha is None:
            sheet.not_computed[name] = f"Krippendorff's alpha {why}"
        else:
            metrics[name] = alpha
            aggregations[name] = KrippendorffAlpha(f"judge.alpha.{c}.", values)
    metrics["judge_failures"] = sum(len(r.get("failures", {})) for r in sheet.per_sample.values())
    aggregations["judge_failures"] = Total(FAILED)
    metrics["judge_n"] = len(rated_samples)
    sheet.fixed["judge_n"] = "the number of samples with a usable rating, fixed by the judging (not an estimate)"
    for j in judges:
        for c in criteria:
            name = f"judge[{j}]_{c}"
            mine = [ratings[j][c] for ratings in rated_samples.values() if j in ratings]
            if mine:
                metrics[name] = _mean(mine)
                aggregations[name] = RatingMean(judge_part(j, c), judge_part(j, "rated"))
            else:
                sheet.not_computed[name] = f"judge {j} rated no sample"
        metrics[f"judge[{j}]_failures"] = by_judge[j]["unusable"] + by_judge[j]["missing"]
        aggregations[f"judge[{j}]_failures"] = Total(judge_part(j, "failed"))

    all_parts = [sheet.parts.get(item.sample_id, {}) for item in task.items]
    problems = check_reproduces(metrics, aggregations, all_parts)
    if problems and os.environ.get("EVALPIPE_STRICT_AGGREGATIONS"):
        raise AssertionError(f"task {task.name}: judge metrics: {problems}")
    for metric, why in problems.items():
        aggregations.pop(metric)
        sheet.fixed[metric] = f"its declared aggregation does not reproduce it: {why}"
    sheet.notes = {
        **dict(notes or {}),
        "judges": list(judges),
        "criteria": list(criteria),
        "scale": list(scale),
        "judged_samples": len(task.items),
        "rated_samples": len(rated_samples),
        "unanswered_samples": len(task.unanswered),
        "by_judge": by_judge,
    }
    return sheet

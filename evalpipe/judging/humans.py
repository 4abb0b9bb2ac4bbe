"""Judges checked against human ratings: ``evalpipe judge RUN --judge … --human-ratings FILE``.

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
and only samples the humans rated enter):

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

import csv
import hashlib
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from evalpipe.judging.agreement import KrippendorffAlpha, krippendorff_alpha, unit_coincidences
from evalpipe.judging.aggregate import JudgeSheet, RatingMean
from evalpipe.judging.items import TaskToJudge
from evalpipe.metrics.aggregation import check_reproduces

if TYPE_CHECKING:
    from evalpipe.outcome import RunError

__all__ = ["FILE_NAME", "HumanRatings", "MeanDifference", "add_human_metrics", "human_record", "load_human_ratings",
           "read_human_ratings", "store_human_ratings"]

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

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "sha256": self.sha256, "raters": list(self.raters), "ratings": self.ratings}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HumanRatings:
        ratings = {str(t): {str(s): {str(c): {str(r): int(v) for r, v in by_rater.items()}
                                     for c, by_rater in by_criterion.items()}
                            for s, by_criterion in samples.items()}
                   for t, samples in (data.get("ratings") or {}).items()}
        return cls(ratings, str(data.get("source") or ""), str(data.get("sha256") or ""),
                   tuple(str(r) for r in data.get("raters") or ()))


def _error(message: str) -> RunError:
    # imported here: evalpipe.outcome imports the judging's attach step, which imports this module
    from evalpipe.outcome import RunError

    return RunError(message)


def _fail(path: Path, line: int, field_name: str, problem: str) -> RunError:
    return _error(f"{path}:{line}: {field_name}: {problem}")


def read_human_ratings(path: Path, tasks: Sequence[TaskToJudge], criteria: Mapping[str, Sequence[str]],
                       scales: Mapping[str, tuple[int, int]], judges: Sequence[str] = ()) -> HumanRatings:
    """The file checked against the run's judged samples and the tasks' rubrics (module docstring);
    ``criteria`` and ``scales`` are per task. The first problem raises :class:`RunError`."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise _error(f"{path}: cannot read the human ratings: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _error(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    rows = csv.reader(text.splitlines())
    try:
        header = [h.strip() for h in next(rows)]
    except StopIteration:
        raise _error(f"{path}: empty file; expected a header {','.join(COLUMNS)}") from None
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise _fail(path, 1, missing[0], f"missing column (the header must name {', '.join(COLUMNS)}; "
                                         f"optionally task); got {', '.join(header) or 'nothing'}")
    where = {name: header.index(name) for name in (*COLUMNS, "task") if name in header}
    owners: dict[str, list[str]] = {}
    for task in tasks:
        for item in task.items:
            owners.setdefault(item.sample_id, []).append(task.name)
    unanswered = {sid: t.name for t in tasks for sid in t.unanswered}
    judged_names = {t.name for t in tasks}
    table: Table = {}
    raters: list[str] = []
    for line, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise _fail(path, line, "row", f"{len(row)} fields, the header has {len(header)}")
        value = {name: row[i].strip() for name, i in where.items()}
        sample, rater, criterion = value["sample_id"], value["rater"], value["criterion"]
        if not sample:
            raise _fail(path, line, "sample_id", "empty")
        if not rater:
            raise _fail(path, line, "rater", "empty")
        if rater in judges:
            raise _fail(path, line, "rater", f"{rater!r} is also the name of a judge; name human raters apart")
        task_name = value.get("task") or ""
        if task_name:
            if task_name not in judged_names:
                raise _fail(path, line, "task", f"{task_name!r} is not a judged task of the run "
                                                f"(judged: {', '.join(sorted(judged_names))})")
            if task_name not in owners.get(sample, []):
                raise _fail(path, line, "sample_id", f"{sample!r} is not a judged sample of task {task_name}")
        else:
            found = owners.get(sample, [])
            if not found:
                why = (f"its answer is missing in the run (request failed), so it is not judged"
                       if sample in unanswered else "not a judged sample of the run")
                raise _fail(path, line, "sample_id", f"{sample!r}: {why}")
            if len(found) > 1:
                raise _fail(path, line, "sample_id", f"{sample!r} is a sample of several judged tasks "
                                                     f"({', '.join(found)}): add a task column")
            task_name = found[0]
        if criterion not in criteria[task_name]:
            raise _fail(path, line, "criterion", f"{criterion!r} is not a criterion of the rubric of {task_name} "
                                                 f"({', '.join(criteria[task_name])})")
        low, high = scales[task_name]
        text_rating = value["rating"]
        try:
            number = float(text_rating)
        except ValueError:
            raise _fail(path, line, "rating", f"{text_rating!r} is not a number") from None
        if not math.isfinite(number) or not number.is_integer():
            raise _fail(path, line, "rating", f"{text_rating!r} is not a whole number (the scale is {low}–{high})")
        if not low <= number <= high:
            raise _fail(path, line, "rating", f"{text_rating} is outside the rubric's scale {low}–{high}")
        by_rater = table.setdefault(task_name, {}).setdefault(sample, {}).setdefault(criterion, {})
        if rater in by_rater:
            raise _fail(path, line, "rating", f"rater {rater!r} rated {criterion} of {sample!r} twice")
        by_rater[rater] = int(number)
        if rater not in raters:
            raters.append(rater)
    if not table:
        raise _error(f"{path}: no ratings (only a header)")
    return HumanRatings(table, str(path), hashlib.sha256(raw).hexdigest(), tuple(raters))


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
    table = humans.ratings.get(task.name) or {}
    if not table:
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
    sheet.notes["human_ratings"] = {"raters": humans_of_task, "samples": len(table), "sha256": humans.sha256}
    for sid, by_criterion in table.items():
        if sid in sheet.per_sample:
            sheet.per_sample[sid]["human"] = by_criterion
    return sheet

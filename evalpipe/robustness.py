"""One task's results across its prompt conditions: the reference's numbers, each condition's, the
spread along each axis, and how consistent each sample's answers are.

A run with prompt conditions (:mod:`evalpipe.variants.conditions`) scores every condition of a task on its
own, exactly as a run without them scores the task (:func:`evalpipe.scoring.score_task`: same
parser, metrics, declared aggregations). :func:`combine` then makes them one task again:

**metrics.json** keeps its shape, task → metric → number. The task's entry is its *reference*
condition's metrics (variant ``default``, the run's shot count, order 0 — the canonical prompt, so
the number is the one a run without conditions gives), plus, for each *axis* the run varies —
``variant``, ``order`` (shot orders), ``shots`` (shot counts) — flat numbers:

* ``<metric>_<axis>_mean``, ``_std`` (population), ``_min``, ``_max``, ``_spread`` (max − min) over
  the axis' levels (:func:`evalpipe.metrics.spread.spread_stats`), for the metrics a leaderboard
  shows for the task (:func:`displayed_metrics`) and ``parse_failure_rate``;
* ``<axis>_agreement``: per sample, the share of the axis' levels whose prediction equals the most
  frequent one, averaged over samples (1.0 = every sample answered alike under every level);
* ``<axis>_unanimous``: the share of samples predicted identically under every level;
* ``<axis>_flip_rate`` (tasks with a 0/1 per-sample correctness): the share of samples that are
  correct under some levels and wrong under others.

A level's value is the mean over the conditions at that level (with one axis varied, each level is
exactly one condition; with several — e.g. variants × shot orders — a variant's value is its mean
over the shot orders, and a sample's agreement across variants is taken within each shot order and
averaged). Predictions compare as their JSON value; an unparsable answer is the value "unparsed";
a condition whose request failed for good is left out of that sample's agreement and correctness.
The 0/1 correctness is the per-sample score named like the task's primary metric, or
``accuracy``, ``correct``, ``exact_match``, when the task declares that metric as the mean of the
per-sample value and it is 0 or 1 for every sample under every condition (NER's F1 is a micro F1
and its accuracy a token ratio, so NER gets agreement only).

**variants.json** (``variants.COMPAT.json`` for a compatibility scoring) holds the nested view,
per task: the reference, each axis' levels, every condition's metrics (with its tokens and parse
failures), ``by_variant`` / ``by_order`` / ``by_shots`` (level → metric → value), each displayed
metric's spread along each axis with the level holding its min and max, the consistency numbers,
and each sample's agreement and correct share per axis. Keeping the nested view out of
metrics.json keeps every reader of metrics.json (leaderboards, ``show``, notebooks) reading
numbers. **samples.jsonl** holds every condition's records (the reference's first), each with
``condition``, ``variant``, ``shots`` and ``shot_order``, so per-condition bootstrap intervals need
only the run directory.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evalpipe.variants.conditions import Condition
from evalpipe.metrics.spread import agreement, correct_share, flipped, spread_stats
from evalpipe.scoring import TaskOutcome
from evalpipe.tasks.base import TaskSpec, metric_matches

__all__ = ["AXES", "AXIS_LABELS", "displayed_metrics", "headline_metric", "level_label", "ConditionOutcome", "combine", "combine_tasks", "is_spread_metric",
           "plain_metrics"]

#: the axes a run can vary: name → how a condition's level on it is read
AXES: Mapping[str, Callable[[Condition, int], str]] = {
    "variant": lambda c, shots: c.variant,
    "order": lambda c, shots: str(c.order),
    "shots": lambda c, shots: str(shots),
}
#: how an axis is named for readers
AXIS_LABELS: Mapping[str, str] = {"variant": "prompt variants", "order": "shot orders", "shots": "shot counts"}
STATS = ("mean", "std", "min", "max", "spread")
CONSISTENCY = ("agreement", "unanimous", "flip_rate")
#: per-sample scores that may be a 0/1 correctness, after the task's primary metric
CORRECTNESS_KEYS = ("accuracy", "correct", "exact_match")
UNPARSED = "unparsed"
_SPREAD_KEY = re.compile(rf"(.+_({'|'.join(AXES)})_({'|'.join(STATS)})|({'|'.join(AXES)})_({'|'.join(CONSISTENCY)}))")


def level_label(axis: str, level: str) -> str:
    """A level as readers see it: ``terse``, ``order 2``, ``3-shot``."""
    return {"order": f"order {level}", "shots": f"{level}-shot"}.get(axis, level)


def is_spread_metric(name: str) -> bool:
    """Whether a metrics.json key is one of the flat spread or consistency numbers added here."""
    return _SPREAD_KEY.fullmatch(name) is not None


def plain_metrics(values: Mapping[str, Any]) -> dict[str, Any]:
    """A task's metrics without the spread and consistency numbers (what one condition scored)."""
    return {k: v for k, v in values.items() if not is_spread_metric(k)}


@dataclass(frozen=True)
class ConditionOutcome:
    """One task scored under one prompt condition (``condition`` None: the run asked for none)."""

    spec: TaskSpec
    condition: Condition | None
    #: the number of shots its prompts showed
    shots: int
    outcome: TaskOutcome


def combine_tasks(items: Sequence[ConditionOutcome]) -> list[TaskOutcome]:
    """Each task's outcome, in order: as scored when it ran without conditions, else :func:`combine`."""
    groups: dict[str, list[ConditionOutcome]] = {}
    for item in items:
        groups.setdefault(item.spec.name, []).append(item)
    return [group[0].outcome if len(group) == 1 and group[0].condition is None else combine(group)
            for group in groups.values()]


def _numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def _levels(items: Sequence[ConditionOutcome]) -> dict[str, list[str]]:
    levels: dict[str, list[str]] = {}
    for item in items:
        assert item.condition is not None
        for axis, level in AXES.items():
            value = level(item.condition, item.shots)
            if value not in levels.setdefault(axis, []):
                levels[axis].append(value)
    return levels


_TAGGED_F1 = re.compile(r".+\[.*\]_f1")


def displayed_metrics(spec: TaskSpec, metrics: Sequence[str]) -> list[str]:
    """The metrics a leaderboard shows for the task (the same rule as
    ``evalpipe.report.leaderboard.shown_metrics``): its declared metrics in their order, then any
    ``family[settings]_f1`` (BERTScore, UMLS F1); all but the runner's counts if none is declared."""
    shown: list[str] = []
    for declared in spec.metrics:
        shown.extend(m for m in metrics if metric_matches(declared, m) and m not in shown)
    if not shown:
        return [m for m in metrics if m not in ("n", "errors", "parse_failure_rate", "answered", "coverage")]
    return [*shown, *(m for m in metrics if _TAGGED_F1.fullmatch(m) and m not in shown)]


def headline_metric(spec: TaskSpec, shown: Sequence[str]) -> str | None:
    """The task's headline metric (the rule of ``evalpipe.report.leaderboard.primary_metric``): its
    primary metric, else ``f1``, else the first F1-like metric, else the first shown."""
    if spec.primary_metric in shown:
        return spec.primary_metric
    if "f1" in shown:
        return "f1"
    return next((m for m in shown if "f1" in m), shown[0] if shown else None)


def _shown(spec: TaskSpec, metrics: Sequence[str]) -> list[str]:
    """The metrics that get spread numbers: the displayed ones, and the parse-failure rate."""
    shown = displayed_metrics(spec, metrics)
    return [*shown, *(["parse_failure_rate"] if "parse_failure_rate" in metrics else [])]


def _prediction_value(record: Mapping[str, Any]) -> Hashable | None:
    """What a sample's answer under one condition predicts, comparably; None = no answer."""
    if record.get("error"):
        return None
    if record.get("parse_failed"):
        return UNPARSED
    return json.dumps(record.get("prediction"), sort_keys=True, ensure_ascii=False)


def _correctness_key(spec: TaskSpec, items: Sequence[ConditionOutcome]) -> str | None:
    """The per-sample 0/1 correctness: a candidate key whose metric is declared as the mean of that
    per-sample value (so a metric like token accuracy, a ratio, never is) and is 0 or 1 everywhere."""
    means = {a.get("key") for a in items[0].outcome.summary.aggregations.values() if a.get("kind") == "mean"}
    for key in dict.fromkeys([k for k in (spec.primary_metric, *CORRECTNESS_KEYS) if k and k in means]):
        values = [r.get("scores", {}).get(key) for item in items for r in item.outcome.records]
        if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v in (0, 1) for v in values):
            return key
    return None


def _axis_groups(items: Sequence[ConditionOutcome], axis: str) -> list[list[ConditionOutcome]]:
    """The conditions that differ only along ``axis``, each group in level order."""
    groups: dict[tuple[str, ...], list[ConditionOutcome]] = {}
    for item in items:
        assert item.condition is not None
        rest = tuple(level(item.condition, item.shots) for name, level in AXES.items() if name != axis)
        groups.setdefault(rest, []).append(item)
    return list(groups.values())


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return math.fsum(present) / len(present) if present else None


def _sample_consistency(items: Sequence[ConditionOutcome], axis: str, correctness: str | None,
                        ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """The axis' consistency numbers, and per sample its agreement (and correct share)."""
    per_group: dict[str, dict[str, list[float | None]]] = {}
    for group in _axis_groups(items, axis):
        by_id: dict[str, list[Mapping[str, Any]]] = {}
        for item in group:
            for record in item.outcome.records:
                by_id.setdefault(str(record.get("id")), []).append(record)
        for sample_id, records in by_id.items():
            answered = [r for r in records if _prediction_value(r) is not None]
            values = [_prediction_value(r) for r in answered]
            stats = per_group.setdefault(sample_id, {"agreement": [], "unanimous": [], "correct": [], "flip": []})
            share = agreement(values)
            stats["agreement"].append(share)
            stats["unanimous"].append(None if share is None else float(share == 1.0))
            if correctness is not None:
                correct = [float(r["scores"][correctness]) for r in answered]
                stats["correct"].append(correct_share(correct))
                flip = flipped(correct)
                stats["flip"].append(None if flip is None else float(flip))
    samples: dict[str, dict[str, float]] = {}
    for sample_id, stats in per_group.items():
        entry = {"agreement": _mean(stats["agreement"])}
        if correctness is not None:
            entry["correct"] = _mean(stats["correct"])
        samples[sample_id] = {k: v for k, v in entry.items() if v is not None}
    summary = {
        "agreement": _mean([_mean(s["agreement"]) for s in per_group.values()]),
        "unanimous": _mean([_mean(s["unanimous"]) for s in per_group.values()]),
    }
    if correctness is not None:
        summary["flip_rate"] = _mean([_mean(s["flip"]) for s in per_group.values()])
    return {k: v for k, v in summary.items() if v is not None}, samples


def combine(items: Sequence[ConditionOutcome]) -> TaskOutcome:
    """One task's outcome from its conditions' outcomes (reference first; see the module docstring)."""
    if not items or any(item.condition is None for item in items):
        raise ValueError("combine needs the outcomes of a task's conditions, reference first")
    spec = items[0].spec
    reference = items[0].outcome
    conditions = {item.condition.id: item for item in items}  # type: ignore[union-attr]
    metrics_of = {cid: _numbers(item.outcome.metrics) for cid, item in conditions.items()}
    common = [m for m in metrics_of[items[0].condition.id] if all(m in v for v in metrics_of.values())]  # type: ignore[union-attr]
    shown = _shown(spec, common)
    levels = _levels(items)
    varied = {axis: values for axis, values in levels.items() if len(values) > 1}
    correctness = _correctness_key(spec, items)

    metrics: dict[str, Any] = dict(reference.metrics)
    document: dict[str, Any] = {
        "reference": items[0].condition.id,  # type: ignore[union-attr]
        "axes": varied,
        "primary_metric": headline_metric(spec, [m for m in shown if m != "parse_failure_rate"]),
        "metrics": shown,
        "correctness": correctness,
        "conditions": {},
    }
    for cid, item in conditions.items():
        summary = item.outcome.summary
        entry = {**item.condition.to_json(), "shots": item.shots,  # type: ignore[union-attr]
                 "metrics": item.outcome.metrics, "parse_failures": summary.parse_failures,
                 "prompt_tokens": summary.prompt_tokens, "completion_tokens": summary.completion_tokens}
        if summary.aggregations != reference.summary.aggregations or summary.no_interval != reference.summary.no_interval:
            entry.update(aggregations=summary.aggregations, no_interval=summary.no_interval)
        document["conditions"][cid] = entry
    spread: dict[str, Any] = {}
    consistency: dict[str, Any] = {}
    samples: dict[str, dict[str, Any]] = {}
    for axis, values in varied.items():
        at_level: dict[str, dict[str, float]] = {}
        for level in values:
            members = [cid for cid, item in conditions.items() if AXES[axis](item.condition, item.shots) == level]  # type: ignore[arg-type]
            at_level[level] = {m: math.fsum(metrics_of[c][m] for c in members) / len(members) for m in common}
        document[f"by_{axis}"] = at_level
        spread[axis] = {}
        for metric in shown:
            stats = spread_stats({level: at_level[level][metric] for level in values})
            spread[axis][metric] = stats.to_json()
            for name in STATS:
                metrics[f"{metric}_{axis}_{name}"] = getattr(stats, name)
        consistency[axis], per_sample = _sample_consistency(items, axis, correctness)
        for name, value in consistency[axis].items():
            metrics[f"{axis}_{name}"] = value
        for sample_id, entry in per_sample.items():
            samples.setdefault(sample_id, {})[axis] = entry
    document.update(spread=spread, consistency=consistency, samples=samples)

    records = [_with_condition(record, item) for item in items for record in item.outcome.records]
    notes = {**reference.summary.notes, "conditions": {
        "reference": document["reference"], "count": len(items), "axes": list(varied), "file": "variants.json"}}
    return replace(reference, metrics=metrics, summary=replace(reference.summary, notes=notes), records=records,
                   robustness=document)


def _with_condition(record: Mapping[str, Any], item: ConditionOutcome) -> dict[str, Any]:
    """The sample record with its condition right after its id (task, id, condition, …)."""
    assert item.condition is not None
    head = {k: record[k] for k in ("task", "id") if k in record}
    return {**head, "condition": item.condition.id, "variant": item.condition.variant, "shots": item.shots,
            "shot_order": item.condition.order, **{k: v for k, v in record.items() if k not in head}}

"""A run as the report sees it: its files on disk plus, when the data is at hand, its parsed answers.

The numbers a report shows are the run's own: ``metrics.json`` for corpus metrics,
``samples.jsonl`` for per-sample scores. Re-scoring resamples, comparisons and the NER error
analysis also need the examples and parsed predictions, which are rebuilt without a model by
:func:`evalpipe.rescoring.load_stored` and parsed exactly as :func:`evalpipe.scoring.score_task`
does. When that is impossible (data files moved or changed),
the report still renders and says why those parts are partial.

A task's ``from_sums`` (corpus metrics from per-sample values summed over samples) is what the
report derives itself from the examples and predictions — token accuracy,
:mod:`evalpipe.report.token_counts`; tasks declare none — and the bootstrap only uses it where it
reproduces the recorded value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from evalpipe.frames import SCORE_PREFIX, load_samples, run_identity
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Completion, Example, Prediction, ScoreSheet
from evalpipe.report.bootstrap import ScoredTask
from evalpipe.report.token_counts import accuracy_from_sums, token_parts
from evalpipe.results import RunDir
from evalpipe.tasks.base import Scoring, TaskSpec

__all__ = ["RUNNER_METRICS", "ReportRun", "load_report_runs", "parse_answers", "scored_from_samples"]

#: metrics the runner adds to every task (not the scorer's, so never resampled)
RUNNER_METRICS = frozenset({"n", "errors", "parse_failure_rate"})


@dataclass
class ReportRun:
    """One run directory, read once for every part of the report."""

    path: Path
    #: unique display name (the model, or model [run directory] when two runs share a model)
    label: str
    model: str
    compat: str | None
    config: dict[str, Any]
    tasks: tuple[str, ...]
    metrics: dict[str, dict[str, float]]
    summary: dict[str, Any]
    samples: pd.DataFrame
    #: task → what bootstrap / compare / NER analysis need
    scored: dict[str, ScoredTask] = field(default_factory=dict)
    #: task → spec (only for tasks rebuilt from the store)
    specs: dict[str, TaskSpec] = field(default_factory=dict)
    #: why tasks could not be rebuilt from the store (empty when they were)
    unavailable: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def aggregates(self) -> dict[str, dict[str, float]]:
        """Suite aggregates in metrics.json (keys that are not evaluated tasks)."""
        return {k: v for k, v in self.metrics.items() if k not in self.tasks}


def parse_answers(scoring: Scoring, examples: Sequence[Example],
                  answers: Sequence[Completion | None]) -> list[Prediction]:
    """Parse stored answers the way ``score_task`` does: no answer → ``scoring.empty``."""
    return [
        scoring.empty(ex) if c is None or not c.ok else scoring.parse(c.text or "", ex)
        for ex, c in zip(examples, answers)
    ]


def _score(scorer: Any, options: MetricOptions, examples: Sequence[Example],
           predictions: Sequence[Prediction]) -> ScoreSheet:
    return scorer(examples, predictions, options)


def _metric_options(config: Mapping[str, Any], summary: Mapping[str, Any]) -> MetricOptions:
    """The options the metrics on disk were computed with (a re-score records its overrides)."""
    recorded = (summary.get("_run") or {}).get("metric_options")
    if isinstance(recorded, dict):
        return MetricOptions.from_json(recorded)
    return MetricOptions.from_json(config.get("config", {}).get("metric_options"))


def _recorded(run: ReportRun, task: str) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Per-sample scores by sample id (samples.jsonl) and corpus metrics (metrics.json) of a task."""
    rows = run.samples[run.samples["task"] == task]
    columns = [c for c in rows.columns if c.startswith(SCORE_PREFIX)]
    per_sample = {
        str(sample_id): {c[len(SCORE_PREFIX):]: float(v) for c, v in zip(columns, values) if pd.notna(v)}
        for sample_id, *values in rows[["id", *columns]].itertuples(index=False)
    }
    corpus = {k: float(v) for k, v in run.metrics.get(task, {}).items()
              if k not in RUNNER_METRICS and isinstance(v, (int, float))}
    return per_sample, corpus


def _rebuild(run: ReportRun) -> None:
    """Fill ``run.scored`` from the response store; record why not when that fails.

    Per-sample scores and corpus metrics are the run's own (samples.jsonl, metrics.json): nothing
    costly (BERTScore) is recomputed here. Only answers are re-parsed, for re-scoring resamples.
    """
    from evalpipe.rescoring import load_stored  # imports the runner: only reports need this

    try:
        _, stored = load_stored(run.path)
    except Exception as exc:  # missing or changed data, unknown task, no store
        run.unavailable = f"{type(exc).__name__}: {exc}"
        return
    options = _metric_options(run.config, run.summary)
    for task in stored:
        name = task.spec.name
        try:
            scoring = task.spec.scoring(run.compat)
        except ValueError as exc:
            run.notes.append(f"{name}: {exc}")
            continue
        per_sample, corpus = _recorded(run, name)
        ids = tuple(ex.id for ex in task.examples)
        missing = [i for i in ids if i not in per_sample]
        if missing:
            run.notes.append(f"{name}: {len(missing)} sample(s) of the stored plan are not in the samples file "
                             f"(e.g. {missing[0]}); run `evalpipe score {run.path}` to bring it up to date")
            continue
        run.specs[name] = task.spec
        examples = tuple(task.examples)
        predictions = tuple(parse_answers(scoring, task.examples, task.answers))
        parts = token_parts(examples, predictions)
        run.scored[name] = ScoredTask(
            name=name,
            ids=ids,
            examples=examples,
            predictions=predictions,
            corpus=corpus,
            per_sample=tuple(per_sample[i] for i in ids),
            # kept as given: a task may use a set type whose ``in`` matches patterns (MetricFamilies)
            mean_metrics=scoring.mean_metrics,
            score=partial(_score, scoring.score, options),
            # see evalpipe.report.bootstrap, method "sums"
            from_sums=accuracy_from_sums if parts is not None else None,
            parts=parts or (),
        )


def scored_from_samples(run: ReportRun, task: str) -> ScoredTask | None:
    """A scorer-less ScoredTask from samples.jsonl, so mean/count metrics still get intervals."""
    per_sample, corpus = _recorded(run, task)
    if not per_sample:
        return None
    ids = tuple(per_sample)
    return ScoredTask(name=task, ids=ids, examples=(), predictions=(), corpus=corpus,
                      per_sample=tuple(per_sample[i] for i in ids))


def _labels(models: Sequence[str], paths: Sequence[Path]) -> list[str]:
    counts = Counter(models)
    return [m if counts[m] == 1 else f"{m} [{p.name}]" for m, p in zip(models, paths)]


def load_report_runs(paths: Sequence[Path], compat: str | None = None, *, rebuild: bool = True) -> list[ReportRun]:
    """Read every run directory; raises FileNotFoundError naming the first missing file."""
    runs = []
    identities = [run_identity(p) for p in paths]
    labels = _labels([i["model"] for i in identities], [Path(p) for p in paths])
    for path, identity, label in zip(paths, identities, labels):
        run_dir = RunDir(path)
        summary_path = run_dir.summary_path(compat)
        run = ReportRun(
            path=Path(path), label=label, model=identity["model"], compat=compat,
            config=identity["config"],
            tasks=tuple(identity["config"].get("config", {}).get("tasks", [])),
            metrics=run_dir.read_metrics(compat),
            summary=run_dir.read_json(summary_path) if summary_path.is_file() else {},
            samples=load_samples(path, compat),
        )
        if rebuild:
            _rebuild(run)
        for task in run.tasks:
            if task not in run.scored:
                fallback = scored_from_samples(run, task)
                if fallback is not None:
                    run.scored[task] = fallback
        runs.append(run)
    return runs

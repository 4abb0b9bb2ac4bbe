"""Bootstrap confidence intervals over samples, and the paired bootstrap test between two runs.

**What is resampled.** The unit is the evaluated sample. A resample draws ``n`` sample positions
with replacement (numpy ``default_rng`` seeded by ``(seed, crc32(stream))``, so every task gets
its own reproducible stream and two runs compared on the same task get the *same* draws — that
is what makes the paired test paired).

**How a metric is recomputed on a resample** — always as the task defines it, never as a mean
of something it is not. For each corpus metric the first of these methods that applies is used:

* ``mean`` — the metric is listed in ``Scoring.mean_metrics`` (the plain mean of the same key in
  ``per_sample``; a member with ``*`` is a pattern, e.g. ``bertscore[*]_f1``) *and* the
  full-sample mean matches the corpus value (|Δ| ≤ 1e-9). The resampled value is the mean of the
  resampled per-sample values (vectorised; BERTScore is never recomputed).
* ``sums`` — the task has a ``from_sums`` (corpus metrics as a function of per-sample values
  summed over the samples, e.g. token accuracy = Σ correct tokens / Σ tokens, derived by the
  report from the examples and predictions, see :mod:`evalpipe.report.token_counts`) and it
  reproduces the corpus value on the full sample and
  on the first resamples re-scored by the scorer. The summed values are ``per_sample`` plus the
  task's ``parts``. Sums are vectorised; ``from_sums`` is called once per resample.
* ``counts`` — micro precision/recall/F1 (and the summed counts) of a family whose per-sample
  true-positive, false-positive and false-negative counts are in ``per_sample`` under
  ``<prefix>tp``/``<prefix>fp``/``<prefix>fn`` (prefix ``""`` or e.g. ``"partial_"``). The
  counts are summed over the resample (vectorised) and ``P = tp/(tp+fp)``, ``R = tp/(tp+fn)``,
  ``F1 = 2PR/(P+R)``, each 0 on a zero denominator (as :mod:`evalpipe.metrics.spans`). Used only
  when this formula reproduces the corpus value on the full sample and, when the scorer is at
  hand, on the first resamples re-scored by the scorer itself; otherwise the metric is
  re-scored.
* ``rescore`` — everything else (corpus metrics such as macro-F1, per-type F1, or token
  accuracy where the report cannot derive token counts): the task's own scorer is called on each
  resample's examples and predictions. One call yields every metric, so a single re-scored
  metric costs as much as all of them: NCBI at 940 samples takes ~8 ms a call, i.e. ~8 s per
  run at 1000 resamples, against ~0.1 s when every metric is vectorised. If one call
  takes so long that all resamples would exceed ``budget_s``, fewer resamples are used (the
  count is reported); under :data:`MIN_RESAMPLES` the metric gets no interval.

**Interval.** The percentile interval: the ``(1-level)/2`` and ``(1+level)/2`` quantiles of the
resampled values (numpy's linear interpolation). It is not centred on the point estimate and can
exclude it for badly skewed metrics; the point estimate is always the value on all samples.

**Paired test** (:func:`paired_bootstrap`). Both runs are restricted to their shared samples in
one order; each resample draws the same positions for both and records ``d* = m_A - m_B``. The
interval is the percentile interval of ``d*``. The two-sided p-value is the share of resampled
differences on the far side of 0, doubled, with the +1 correction::

    p = min(1, 2 * (min(#{d* <= 0}, #{d* >= 0}) + 1) / (B + 1))

i.e. (up to the correction) the smallest ``α`` for which the ``1-α`` percentile interval of the
difference excludes 0. Identical runs give every ``d* = 0`` and ``p = 1``; a difference seen in
every resample gives ``p = 2/(B+1)``, the smallest value ``B`` resamples can support.
"""

from __future__ import annotations

import math
import operator
import time
import zlib
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from evalpipe.records import ScoreSheet
from evalpipe.tasks.base import metric_matches

__all__ = [
    "MIN_RESAMPLES",
    "MetricInterval",
    "PairedDifference",
    "Replicates",
    "ScoredTask",
    "TaskBootstrap",
    "bootstrap_task",
    "is_mean_metric",
    "paired_bootstrap",
    "percentile_interval",
    "replicate",
    "resample_indices",
    "restrict",
    "two_sided_p",
]

#: fewer re-scored resamples than this give no interval at all
MIN_RESAMPLES = 100
#: re-scored resamples compared against the counts formula before trusting it
_VERIFY = 2
_TOL = 1e-9

Scorer = Callable[[Sequence[Any], Sequence[Any]], ScoreSheet]


@dataclass(frozen=True)
class ScoredTask:
    """One task of one run, ready to be resampled.

    ``score`` is the task's scorer with the run's metric options bound (``None`` when the data
    could not be reloaded, e.g. on another machine: then only ``mean`` and ``counts`` metrics get
    intervals). ``corpus`` and ``per_sample`` are that scorer's output on all samples.
    ``per_sample`` values must not depend on the other samples (true of every evalpipe scorer).
    """

    name: str
    ids: tuple[str, ...]
    examples: tuple[Any, ...]
    predictions: tuple[Any, ...]
    corpus: Mapping[str, float]
    per_sample: tuple[Mapping[str, float], ...]
    #: ``Scoring.mean_metrics`` as given (``in`` may match patterns)
    mean_metrics: Container[str] = frozenset()
    score: Scorer | None = None
    #: corpus metrics from per-sample values summed over the samples (the report's own, e.g.
    #: token accuracy): makes every metric it returns vectorisable
    from_sums: Callable[[Mapping[str, float]], Mapping[str, float]] | None = None
    #: further per-sample values for ``from_sums`` that are not the scorer's (e.g. token counts the
    #: report derived); empty, or one mapping per sample
    parts: tuple[Mapping[str, float], ...] = ()

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(k for k, v in self.corpus.items() if _is_number(v))


@dataclass(frozen=True)
class Replicates:
    """Resampled values of each metric; arrays can be shorter than asked (re-scoring budget)."""

    values: Mapping[str, np.ndarray]
    methods: Mapping[str, str]
    notes: tuple[str, ...] = ()
    seconds: float = 0.0


@dataclass(frozen=True)
class MetricInterval:
    metric: str
    point: float
    low: float | None
    high: float | None
    #: ``mean``, ``counts``, ``rescore``, or ``none`` (no interval)
    method: str
    resamples: int


@dataclass(frozen=True)
class TaskBootstrap:
    task: str
    n: int
    intervals: Mapping[str, MetricInterval]
    replicates: Replicates = field(repr=False)
    #: the draws were ``resample_indices(n, resamples, seed, task)``
    resamples: int = 0
    seed: int = 0

    @property
    def seconds(self) -> float:
        return self.replicates.seconds


@dataclass(frozen=True)
class PairedDifference:
    metric: str
    a: float
    b: float
    diff: float
    low: float | None
    high: float | None
    p_value: float | None
    resamples: int
    method: str


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def resample_indices(n: int, resamples: int, seed: int, stream: str = "") -> np.ndarray:
    """``(resamples, n)`` positions drawn with replacement; same arguments → same draws."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(stream.encode("utf-8"))]))
    return rng.integers(0, n, size=(resamples, n)) if n else np.zeros((resamples, 0), dtype=np.int64)


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
    """Percentile interval of resampled values (NaNs ignored); None when there are none."""
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return None
    low, high = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def two_sided_p(diffs: np.ndarray) -> float | None:
    """``min(1, 2 (min(#{d<=0}, #{d>=0}) + 1) / (B + 1))`` over resampled differences."""
    diffs = np.asarray(diffs, dtype=float)
    diffs = diffs[~np.isnan(diffs)]
    if diffs.size == 0:
        return None
    far = min(int(np.sum(diffs <= 0)), int(np.sum(diffs >= 0)))
    return min(1.0, 2.0 * (far + 1) / (diffs.size + 1))


# ---- per-sample columns ------------------------------------------------------------------------

def _column(task: ScoredTask, key: str, rows: Sequence[Mapping[str, float]] | None = None) -> np.ndarray | None:
    """The per-sample values of ``key`` (in ``rows``, default ``per_sample``) as floats, or None
    unless every sample has a number."""
    rows = task.per_sample if rows is None else rows
    out = np.empty(task.n, dtype=float)
    if len(rows) != task.n:
        return None
    for i, values in enumerate(rows):
        value = values.get(key)
        if not _is_number(value):
            return None
        out[i] = float(value)
    return out


def _close(a: float, b: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=_TOL, abs_tol=_TOL)


def _prf(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> dict[str, np.ndarray]:
    """Micro P/R/F1 from summed counts, 0 on a zero denominator (same arithmetic as PRF)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(tp + fp > 0, tp / np.where(tp + fp > 0, tp + fp, 1), 0.0)
        recall = np.where(tp + fn > 0, tp / np.where(tp + fn > 0, tp + fn, 1), 0.0)
        denom = precision + recall
        f1 = np.where(denom > 0, 2.0 * precision * recall / np.where(denom > 0, denom, 1), 0.0)
    return {"precision": precision, "recall": recall, "f1": f1, "tp": tp, "fp": fp, "fn": fn}


def _count_families(task: ScoredTask) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """prefix → per-sample (tp, fp, fn) for every ``<prefix>tp/fp/fn`` triple in per_sample."""
    families = {}
    for key in sorted(_keys(task)):
        if not key.endswith("tp"):
            continue
        prefix = key[:-2]
        columns = [_column(task, prefix + c) for c in ("tp", "fp", "fn")]
        if all(c is not None for c in columns):
            families[prefix] = (columns[0], columns[1], columns[2])  # type: ignore[assignment]
    return families


def _counts_values(family: tuple[np.ndarray, np.ndarray, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    tp, fp, fn = (c[idx].sum(axis=1) for c in family)
    return _prf(tp, fp, fn)


def is_mean_metric(mean_metrics: Container[str], metric: str) -> bool:
    """``metric in mean_metrics``, where a member with ``*`` is a pattern (``bertscore[*]_f1``).

    The container's own ``in`` decides first (CLUE's ``MetricFamilies`` matches patterns itself);
    a plain set that holds patterns is matched here too, so no caller has to keep the type.
    """
    if metric in mean_metrics:
        return True
    if isinstance(mean_metrics, Iterable) and not isinstance(mean_metrics, str):
        return any(isinstance(p, str) and "*" in p and metric_matches(p, metric) for p in mean_metrics)
    return False


def _keys(task: ScoredTask) -> set[str]:
    return set().union(*(set(s) for s in task.per_sample)) if task.per_sample else set()


def _summable(task: ScoredTask) -> dict[str, np.ndarray]:
    """Every numeric per-sample column ``from_sums`` may use: the scorer's, then the task's parts."""
    columns = {k: c for k in sorted(_keys(task)) if (c := _column(task, k)) is not None}
    if len(task.parts) == task.n:
        part_keys = sorted(set().union(*(set(p) for p in task.parts))) if task.parts else []
        for key in part_keys:
            column = _column(task, key, task.parts)
            if column is not None and key not in columns:
                columns[key] = column
    return columns


def _vectorised(task: ScoredTask, idx: np.ndarray) -> tuple[dict[str, str], dict[str, np.ndarray], list[str]]:
    """Metrics computable from per-sample values alone: method and values on each row of ``idx``.

    A formula is used for a metric only if it reproduces the scorer's corpus value on the full
    sample. Precedence: mean, sums, counts. The rows of ``idx`` may be of any width (a resample
    has ``n`` positions; :func:`restrict` passes one row of the kept positions).
    """
    methods: dict[str, str] = {}
    values: dict[str, np.ndarray] = {}
    notes: list[str] = []
    if not task.n:
        return methods, values, notes
    full = np.arange(task.n, dtype=np.int64)[None, :]
    for metric in task.metrics:
        if is_mean_metric(task.mean_metrics, metric):
            column = _column(task, metric)
            if column is None:
                notes.append(f"{metric}: listed as a per-sample mean but not every sample has a value; re-scored instead")
            elif _close(column.mean(), task.corpus[metric]):
                methods[metric] = "mean"
                values[metric] = column[idx].mean(axis=1)
            else:
                notes.append(f"{metric}: listed as a per-sample mean but the per-sample values do not average "
                             "to it; re-scored instead")
    if task.from_sums is not None:
        columns = _summable(task)
        try:
            whole = task.from_sums({k: float(c.sum()) for k, c in columns.items()})
            sums = {k: c[idx].sum(axis=1) for k, c in columns.items()}
            derived = [task.from_sums({k: float(v[b]) for k, v in sums.items()}) for b in range(len(idx))]
        except Exception as exc:  # a task's formula must not kill the report
            notes.append(f"from_sums failed ({type(exc).__name__}: {exc}); re-scored instead")
            whole, derived = {}, []
        for metric in task.metrics:
            if metric not in methods and metric in whole and _close(whole[metric], task.corpus[metric]):
                methods[metric] = "sums"
                values[metric] = np.array([float(d.get(metric, math.nan)) for d in derived])
    for prefix, family in _count_families(task).items():
        whole_prf = _counts_values(family, full)
        prf = _counts_values(family, idx)
        for metric in task.metrics:
            base = metric[len(prefix):] if metric.startswith(prefix) else None
            if metric not in methods and base in prf and _close(whole_prf[base][0], task.corpus[metric]):
                methods[metric] = "counts"
                values[metric] = prf[base]
    return methods, values, notes


def _take(items: tuple[Any, ...], row: list[int]) -> list[Any]:
    if len(row) == 1:
        return [items[row[0]]]
    return list(operator.itemgetter(*row)(items)) if row else []


def _rescore(task: ScoredTask, idx: np.ndarray, budget_s: float | None,
             ) -> tuple[list[Mapping[str, float]], list[str]]:
    """Corpus metrics of the scorer on resamples, as many as the time budget allows."""
    assert task.score is not None
    rows = idx.tolist()
    sheets: list[Mapping[str, float]] = []
    notes: list[str] = []
    start = time.perf_counter()
    allowed = len(rows)
    for b, row in enumerate(rows):
        if b >= allowed:
            break
        try:
            sheets.append(task.score(_take(task.examples, row), _take(task.predictions, row)).corpus)
        except Exception as exc:  # a scorer bug must not kill the whole report
            notes.append(f"scorer failed on a resample ({type(exc).__name__}: {exc}); re-scored metrics have no interval")
            return [], notes
        if b == 0 and budget_s is not None:
            per_call = time.perf_counter() - start
            if per_call * len(rows) > budget_s:
                allowed = max(1, int(budget_s / max(per_call, 1e-9)))
                notes.append(
                    f"one re-scoring takes {per_call:.2f} s: {min(allowed, len(rows))} of {len(rows)} "
                    f"resamples fit the {budget_s:.0f} s budget"
                )
    return sheets, notes


def replicate(task: ScoredTask, idx: np.ndarray, *, budget_s: float | None = 300.0) -> Replicates:
    """Every corpus metric of ``task`` on each resample ``idx[b]`` (see the module docstring)."""
    start = time.perf_counter()
    methods, values, notes = _vectorised(task, idx)
    rescore = [m for m in task.metrics if m not in methods]
    derived = [m for m, how in methods.items() if how in ("sums", "counts")]
    if task.score is None:
        if rescore:
            notes.append(f"data not available for re-scoring: no interval for {', '.join(rescore)}")
        methods.update({m: "none" for m in rescore})
        if derived:
            notes.append("formulas checked on the full sample only (scorer not available)")
        return Replicates(values, methods, tuple(dict.fromkeys(notes)), time.perf_counter() - start)

    full = bool(rescore)
    sheets: list[Mapping[str, float]] = []
    if (rescore or derived) and task.n:
        # row 0 = all samples: does the scorer still give what the run recorded?
        rows = np.vstack([np.arange(task.n, dtype=np.int64)[None, :], idx if full else idx[:_VERIFY]])
        sheets, more = _rescore(task, rows, budget_s if full else None)
        notes.extend(more)
        if sheets:
            whole, sheets = sheets[0], sheets[1:]
            changed = [m for m in task.metrics if _is_number(whole.get(m)) and not _close(whole[m], task.corpus[m])]
            if changed:
                notes.append(f"re-scoring all samples gives other values than the run recorded for "
                             f"{', '.join(changed)} (scorer or options changed since?)")
    # a formula must also agree with the scorer on the first resamples
    for metric in derived:
        if any(not _close(values[metric][b], s.get(metric, float("nan"))) for b, s in enumerate(sheets[:_VERIFY])):
            notes.append(f"{metric}: {methods[metric]} formula disagrees with the scorer on a resample; re-scored instead")
            del methods[metric], values[metric]
            rescore.append(metric)
            if not full:
                sheets, more = _rescore(task, idx, budget_s)
                notes.extend(more)
                full = True
    for metric in rescore:
        if len(sheets) < min(MIN_RESAMPLES, len(idx)):
            methods[metric] = "none"
            continue
        methods[metric] = "rescore"
        values[metric] = np.array([float(s[metric]) if _is_number(s.get(metric)) else np.nan for s in sheets])
    dropped = [m for m, how in methods.items() if how == "none"]
    if dropped and sheets:
        notes.append(f"fewer than {MIN_RESAMPLES} re-scored resamples: no interval for {', '.join(dropped)}")
    return Replicates(values, methods, tuple(dict.fromkeys(notes)), time.perf_counter() - start)


def bootstrap_task(task: ScoredTask, *, resamples: int = 1000, seed: int = 0, level: float = 0.95,
                   budget_s: float | None = 300.0) -> TaskBootstrap:
    """Percentile intervals for every corpus metric of one task of one run."""
    reps = replicate(task, resample_indices(task.n, resamples, seed, task.name), budget_s=budget_s)
    intervals = {}
    for metric in task.metrics:
        method = reps.methods.get(metric, "none")
        values = reps.values.get(metric)
        interval = percentile_interval(values, level) if values is not None and task.n else None
        intervals[metric] = MetricInterval(
            metric=metric, point=float(task.corpus[metric]),
            low=interval[0] if interval else None, high=interval[1] if interval else None,
            method=method if interval else "none", resamples=int(values.size) if values is not None else 0,
        )
    return TaskBootstrap(task=task.name, n=task.n, intervals=intervals, replicates=reps,
                         resamples=resamples, seed=seed)


def restrict(task: ScoredTask, positions: Sequence[int]) -> ScoredTask:
    """The same task on a subset of its samples (in the given order), corpus metrics recomputed.

    Metrics computable from per-sample values (``mean``, ``sums``, ``counts``) are recomputed
    from them; the scorer is called once on the subset only when some metric needs it (so a
    comparison on shared samples never recomputes BERTScore). Without a scorer the other metrics
    are dropped from the restricted task.
    """
    positions = list(positions)
    if positions == list(range(task.n)):
        return task
    rows = np.asarray(positions, dtype=np.int64)[None, :]
    sub = replace(
        task,
        ids=tuple(task.ids[i] for i in positions),
        examples=tuple(task.examples[i] for i in positions) if task.examples else (),
        predictions=tuple(task.predictions[i] for i in positions) if task.predictions else (),
        per_sample=tuple(task.per_sample[i] for i in positions) if task.per_sample else (),
        parts=tuple(task.parts[i] for i in positions) if task.parts else (),
    )
    methods, values, _ = _vectorised(task, rows)
    if task.score is not None and any(m not in methods for m in task.metrics):
        sheet = task.score(list(sub.examples), list(sub.predictions))
        return replace(sub, corpus=dict(sheet.corpus))
    corpus = {m: float(values[m][0]) for m in task.metrics if m in values and values[m].size}
    return replace(sub, corpus=corpus)


def paired_bootstrap(a: ScoredTask, b: ScoredTask, *, resamples: int = 1000, seed: int = 0,
                     level: float = 0.95, budget_s: float | None = 300.0,
                     known: Sequence[TaskBootstrap | None] = (None, None),
                     ) -> tuple[list[PairedDifference], list[str]]:
    """Metric differences ``a - b`` on aligned samples, with paired intervals and p-values.

    ``a`` and ``b`` must hold the same samples in the same order (see :func:`restrict`).
    ``known``: bootstraps already computed for ``a`` / ``b`` on exactly these samples; they are
    reused when they were drawn with the same ``resamples`` and ``seed`` (same draws).
    """
    if a.ids != b.ids:
        raise ValueError("paired bootstrap needs both runs on the same samples in the same order")
    idx = resample_indices(a.n, resamples, seed, a.name)

    def draws(task: ScoredTask, done: TaskBootstrap | None) -> Replicates:
        if done is not None and (done.task, done.n, done.resamples, done.seed) == (task.name, task.n, resamples, seed):
            return done.replicates
        return replicate(task, idx, budget_s=budget_s)

    reps_a = draws(a, known[0] if known else None)
    reps_b = draws(b, known[1] if len(known) > 1 else None)
    notes = [f"A: {n}" for n in reps_a.notes] + [f"B: {n}" for n in reps_b.notes]
    out = []
    for metric in a.metrics:
        if metric not in b.corpus or not _is_number(b.corpus[metric]):
            continue
        point_a, point_b = float(a.corpus[metric]), float(b.corpus[metric])
        va, vb = reps_a.values.get(metric), reps_b.values.get(metric)
        low = high = p = None
        count = 0
        if va is not None and vb is not None and a.n:
            count = min(va.size, vb.size)  # row b of both is the same draw
            diffs = va[:count] - vb[:count]
            interval = percentile_interval(diffs, level)
            if interval is not None:
                low, high = interval
                p = two_sided_p(diffs)
        methods = {reps_a.methods.get(metric, "none"), reps_b.methods.get(metric, "none")}
        out.append(PairedDifference(
            metric=metric, a=point_a, b=point_b, diff=point_a - point_b, low=low, high=high, p_value=p,
            resamples=count, method="/".join(sorted(methods)) if low is not None else "none",
        ))
    return out, notes

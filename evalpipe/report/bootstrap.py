"""Bootstrap confidence intervals over samples, and the paired bootstrap test between two runs.

Everything here works from the run directory alone: each sample's additive ``parts``
(``samples.jsonl``) and each metric's declared aggregation (``summary.json``; see
:mod:`evalpipe.metrics.aggregation`). Nothing is re-parsed or re-scored, no data file is read, and
no metric's formula is guessed.

**What is resampled.** The unit is the evaluated sample. A resample draws ``n`` sample positions
with replacement (numpy ``default_rng`` seeded by ``(seed, crc32(stream))``, so every task gets
its own reproducible stream and two runs compared on the same task get the *same* draws — that
is what makes the paired test paired).

**How a metric is recomputed on a resample** — exactly as the task declares it: the parts are
summed over the drawn samples (a sample drawn twice counts twice) and the metric's aggregation is
applied to the sums. Means, ratios, micro and macro F1, BLEU from n-gram statistics and
per-dataset averages are all computed this way, vectorised over resamples. A metric the task
declares no aggregation for (``n``, the sample count fixed by the run) has **no interval**, and the
reason is carried to the report — it is never drawn as a zero-width interval.

**Interval.** The percentile interval: the ``(1-level)/2`` and ``(1+level)/2`` quantiles of the
resampled values (numpy's linear interpolation). It is not centred on the point estimate and can
exclude it for badly skewed metrics; the point estimate is always the run's own value
(``metrics.json``).

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

import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from evalpipe.metrics.aggregation import Aggregation

__all__ = [
    "MetricInterval",
    "PairedDifference",
    "Replicates",
    "ResampleTask",
    "TaskBootstrap",
    "bootstrap_task",
    "exact_cells",
    "paired_bootstrap",
    "percentile_interval",
    "replicate",
    "replicate_each",
    "resample_blocks",
    "resample_counts",
    "resample_indices",
    "restrict",
    "two_sided_p",
]

#: resamples summed per matrix product (at most): bounds memory at ``CHUNK × n`` counts
CHUNK = 128
#: draws held at once (rows × samples): a chunk of a large task has fewer rows than CHUNK
CHUNK_CELLS = 2_000_000
#: draws held at once for tasks whose parts are all whole numbers (:func:`exact_cells`)
EXACT_CHUNK_CELLS = 500_000


@dataclass(frozen=True)
class ResampleTask:
    """One task of one run, ready to be resampled: per-sample parts and declared aggregations.

    ``parts[i, j]`` is sample ``i``'s value of part ``keys[j]`` (0 where the sample has none);
    ``corpus`` is the run's own metric values; ``no_interval`` says why a metric has none.
    """

    name: str
    ids: tuple[str, ...]
    keys: tuple[str, ...]
    parts: np.ndarray = field(repr=False)
    aggregations: Mapping[str, Aggregation]
    corpus: Mapping[str, float]
    no_interval: Mapping[str, str] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(k for k, v in self.corpus.items() if _is_number(v))

    def sums(self, counts: np.ndarray) -> dict[str, np.ndarray]:
        """Each part summed over each row of ``counts`` (``counts[b, i]``: how often sample ``i``
        is drawn in resample ``b``)."""
        summed = counts @ self.parts if self.parts.size else np.zeros((counts.shape[0], len(self.keys)))
        return {key: summed[:, j] for j, key in enumerate(self.keys)}

    def values(self, counts: np.ndarray) -> dict[str, np.ndarray]:
        """Every metric with an aggregation, on each row of ``counts``."""
        sums = self.sums(counts)
        n = counts.sum(axis=1).astype(float)
        for key in {k for a in self.aggregations.values() for k in a.keys()} - set(sums):
            sums[key] = np.zeros(counts.shape[0])  # a part no sample has
        return {m: np.asarray(a.compute(sums, n), dtype=float) for m, a in self.aggregations.items()
                if m in self.corpus}


@dataclass(frozen=True)
class Replicates:
    """Resampled values of each metric, the method that made them, and why others have none."""

    values: Mapping[str, np.ndarray]
    methods: Mapping[str, str]
    reasons: Mapping[str, str] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class MetricInterval:
    metric: str
    point: float
    low: float | None
    high: float | None
    #: the aggregation kind (``mean``, ``ratio``, ``micro_prf`` …), or ``none`` (no interval)
    method: str
    resamples: int
    #: why there is no interval (``method == "none"``)
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.low is not None and self.high is not None


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
    reason: str = ""


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def resample_indices(n: int, resamples: int, seed: int, stream: str = "") -> np.ndarray:
    """``(resamples, n)`` positions drawn with replacement; same arguments → same draws."""
    return np.concatenate(list(resample_blocks(n, resamples, seed, stream))) if resamples else \
        np.zeros((0, n), dtype=np.int64)


def exact_cells(tasks: Sequence[ResampleTask]) -> int:
    """The draws to hold at once for ``tasks`` resampled together: :data:`EXACT_CHUNK_CELLS` when
    every part of every task is a whole number whose sums over any resample stay exact in floats
    (below 2**53) — then a sum is the same whatever the block's shape (the matrix product's order
    of additions, which the block's rows may change, does not matter for exact sums), so smaller
    blocks change no number and hold a quarter of the memory (NER's tp/fp/fn and token counts:
    at 94,000 samples ~25 MB less at the report's peak, issue 28) — else :data:`CHUNK_CELLS`."""
    for task in tasks:
        parts = task.parts
        if parts.size and not (np.all(np.floor(parts) == parts)
                               and float(np.abs(parts).max()) * max(task.n, 1) < 2.0 ** 53):
            return CHUNK_CELLS
    return min(EXACT_CHUNK_CELLS, CHUNK_CELLS)


def resample_blocks(n: int, resamples: int, seed: int, stream: str = "", cells: int | None = None,
                    ) -> Iterator[np.ndarray]:
    """The rows of :func:`resample_indices`, a block of rows at a time (at most :data:`CHUNK` rows and
    about ``cells`` draws, :data:`CHUNK_CELLS` unless given: :func:`exact_cells`): 1,000 resamples of 47,000 samples are 376 MB of positions at
    once, a block a few MB. The blocks are the very same draws (numpy's generator fills row after
    row from one stream; ``tests/report/test_bootstrap.py`` checks it)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(stream.encode("utf-8"))]))
    rows = max(1, min(CHUNK, (CHUNK_CELLS if cells is None else cells) // max(n, 1)))
    for begin in range(0, resamples, rows):
        size = min(rows, resamples - begin)
        yield rng.integers(0, n, size=(size, n)) if n else np.zeros((size, 0), dtype=np.int64)


def resample_counts(idx: np.ndarray, n: int) -> np.ndarray:
    """``counts[b, i]`` = how often position ``i`` occurs in row ``b`` of ``idx`` (as floats, for the
    matrix product with the parts).

    Counted row by row, each row's counts written straight into the float matrix: one row's counts
    (``n`` of them) stay in the processor's cache where a block's (``rows × n``, counted as one long
    vector with offset positions) did not — half the time at 94,000 samples (issue 28), and none of
    the block-sized integer temporaries. The counts are the same integers either way."""
    rows = idx.shape[0]
    counts = np.zeros((rows, n))
    if n == 0:
        return counts
    for b in range(rows):
        counts[b] = np.bincount(idx[b], minlength=n)
    return counts


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


def _reason(task: ResampleTask, metric: str) -> str:
    return task.no_interval.get(metric) or "the run declares no aggregation for it"


def _blocks(idx: np.ndarray | Iterable[np.ndarray]) -> Iterator[np.ndarray]:
    if isinstance(idx, np.ndarray):
        for begin in range(0, idx.shape[0], CHUNK):
            yield idx[begin:begin + CHUNK]
    else:
        yield from idx


def replicate(task: ResampleTask, idx: np.ndarray | Iterable[np.ndarray]) -> Replicates:
    """Every metric of ``task`` on each resample ``idx[b]`` (see the module docstring); ``idx`` is
    the whole array of draws or its blocks (:func:`resample_blocks`)."""
    return replicate_each([task], idx)[0]


def replicate_each(tasks: Sequence[ResampleTask], idx: np.ndarray | Iterable[np.ndarray]) -> list[Replicates]:
    """:func:`replicate` for several tasks on the same draws (a paired comparison), one block at a time."""
    start = time.perf_counter()
    chunks: list[dict[str, list[np.ndarray]]] = [{} for _ in tasks]
    for block in _blocks(idx):
        for task, found in zip(tasks, chunks):
            counts = resample_counts(block, task.n)
            for metric, values in task.values(counts).items():
                found.setdefault(metric, []).append(values)
            del counts  # before the next task's: one block of counts at a time
        del block  # before the next is drawn: one block of draws at a time (at 94,000 samples 16 MB each)
    seconds = (time.perf_counter() - start) / max(len(tasks), 1)
    return [_replicates(task, found, seconds) for task, found in zip(tasks, chunks)]


def _replicates(task: ResampleTask, chunks: Mapping[str, list[np.ndarray]], seconds: float) -> Replicates:
    values = {m: np.concatenate(v) for m, v in chunks.items()}
    methods = {m: (task.aggregations[m].kind if m in values else "none") for m in task.metrics}
    reasons = {m: _reason(task, m) for m in task.metrics if m not in values}
    if not task.n:
        reasons = {m: "no samples" for m in task.metrics}
        methods = dict.fromkeys(task.metrics, "none")
        values = {}
    return Replicates(values, methods, reasons, seconds)


def bootstrap_task(task: ResampleTask, *, resamples: int = 1000, seed: int = 0,
                   level: float = 0.95) -> TaskBootstrap:
    """Percentile intervals for every metric of one task of one run."""
    reps = replicate(task, resample_blocks(task.n, resamples, seed, task.name, exact_cells([task])))
    intervals = {}
    for metric in task.metrics:
        values = reps.values.get(metric)
        interval = percentile_interval(values, level) if values is not None else None
        reason = reps.reasons.get(metric, "")
        if values is not None and interval is None:
            reason = "the metric is undefined on every resample"
        intervals[metric] = MetricInterval(
            metric=metric, point=float(task.corpus[metric]),
            low=interval[0] if interval else None, high=interval[1] if interval else None,
            method=reps.methods.get(metric, "none") if interval else "none",
            resamples=int(values.size) if values is not None else 0, reason=reason,
        )
    return TaskBootstrap(task=task.name, n=task.n, intervals=intervals, replicates=reps,
                         resamples=resamples, seed=seed)


def restrict(task: ResampleTask, positions: Sequence[int]) -> ResampleTask:
    """The same task on a subset of its samples (in the given order), its metrics recomputed from
    the parts by their aggregations; metrics without one are left out (they cannot be restricted)."""
    positions = list(positions)
    if positions == list(range(task.n)):
        return task
    rows = np.asarray(positions, dtype=np.int64)
    sub_parts = task.parts[rows] if task.parts.size else np.zeros((len(rows), len(task.keys)))
    sub = ResampleTask(name=task.name, ids=tuple(task.ids[i] for i in positions), keys=task.keys,
                       parts=sub_parts, aggregations=task.aggregations, corpus=task.corpus,
                       no_interval=task.no_interval)
    ones = np.ones((1, len(rows)))
    corpus = {m: float(v[0]) for m, v in sub.values(ones).items()} if len(rows) else {}
    return ResampleTask(name=task.name, ids=sub.ids, keys=task.keys, parts=sub_parts,
                        aggregations=task.aggregations, corpus=corpus, no_interval=task.no_interval)


def paired_bootstrap(a: ResampleTask, b: ResampleTask, *, resamples: int = 1000, seed: int = 0,
                     level: float = 0.95) -> list[PairedDifference]:
    """Metric differences ``a - b`` on aligned samples, with paired intervals and p-values.

    ``a`` and ``b`` must hold the same samples in the same order (see :func:`restrict`).
    """
    if a.ids != b.ids:
        raise ValueError("paired bootstrap needs both runs on the same samples in the same order")
    reps_a, reps_b = replicate_each([a, b], resample_blocks(a.n, resamples, seed, a.name, exact_cells([a, b])))
    out = []
    for metric in a.metrics:
        if metric not in b.corpus or not _is_number(b.corpus[metric]):
            continue
        if metric not in a.aggregations and metric not in b.aggregations:
            continue  # fixed by the runs (the sample count): nothing to compare statistically
        point_a, point_b = float(a.corpus[metric]), float(b.corpus[metric])
        va, vb = reps_a.values.get(metric), reps_b.values.get(metric)
        low = high = p = None
        count = 0
        reason = ""
        if va is not None and vb is not None and a.n:
            diffs = va - vb
            count = int(np.sum(~np.isnan(diffs)))
            interval = percentile_interval(diffs, level)
            if interval is not None:
                low, high = interval
                p = two_sided_p(diffs)
        else:
            reason = reps_a.reasons.get(metric) or reps_b.reasons.get(metric) or "no resamples"
        methods = {reps_a.methods.get(metric, "none"), reps_b.methods.get(metric, "none")}
        out.append(PairedDifference(
            metric=metric, a=point_a, b=point_b, diff=point_a - point_b, low=low, high=high, p_value=p,
            resamples=count, method="/".join(sorted(methods)) if low is not None else "none", reason=reason,
        ))
    return out


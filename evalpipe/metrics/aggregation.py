"""How a corpus metric is made from per-sample parts: the contract between scorers and intervals.

Every number evalpipe reports for a task is a function of **per-sample parts summed over the
samples**. A scorer says so explicitly: besides its corpus values it returns, for each sample, a
small mapping of additive statistics (its *parts*: ``tp``, ``fp``, ``fn``; ``tokens`` and
``correct_tokens``; BLEU's n-gram counts; a 0/1 ``accuracy``) and, for each metric, an
:class:`Aggregation` that turns the summed parts into the metric. That declaration is what lets

* the bootstrap resample samples and recompute every metric exactly as the task defines it, from
  the run directory alone (``samples.jsonl`` carries the parts, ``summary.json`` the
  declarations) — no data reload, no re-parse, no guessing the formula;
* a comparison restrict two runs to their shared samples and recompute their metrics there;
* a reader see, for every metric, what kind of average it is (:meth:`Aggregation.describe`).

The kinds, each a frozen dataclass serialised as ``{"kind": …, fields…}``:

=================  ==========================================================================
``mean``           ``Σ key / n`` — the plain mean of a per-sample value over the ``n`` samples
``ratio``          ``Σ numerator / Σ denominator`` (token accuracy, a weighted mean, a rate
                   over answered samples); ``empty`` when ``Σ denominator = 0``
``total``          ``Σ key`` (a corpus count such as ``tp``)
``micro_prf``      precision, recall or F1 from ``Σ tp``, ``Σ fp``, ``Σ fn`` (one definition:
                   :mod:`evalpipe.metrics.prf`; 0 on a zero denominator)
``macro_f1``       the unweighted mean over labels of each label's F1 from its summed
                   one-vs-rest counts; over a fixed label list, or over the labels with gold
                   support in the (re)sample
``bleu``           sacrebleu's corpus BLEU from summed per-sentence n-gram statistics
``mean_of``        the unweighted mean of several aggregations, each counted only where its
                   ``count`` part sums to more than 0 (a per-dataset average)
``count_present``  how many of those ``count`` parts sum to more than 0
=================  ==========================================================================

**Which samples.** The parts summed are those of the *answered* samples only (evalpipe.coverage):
a sample whose request failed is never scored, so ``n`` in ``mean`` is the number of answered
samples, and a micro F1 or token accuracy never counts a sentence that got no answer; intervals
and comparisons resample the answered samples (their records' ``error`` is null).

Parts are sparse: a key absent from a sample's parts is 0 for that sample. ``compute`` works on
arrays: ``sums[key]`` holds one sum per (re)sample, so one call evaluates a metric on every
bootstrap resample at once.

**Why corpus values are still computed by the scorers.** A scorer's own corpus arithmetic is the
reference (it reproduces papers and reference implementations bit for bit); the declared
aggregation must reproduce it on all samples, which :func:`check_reproduces` verifies for every
run (a mismatch is reported, and that metric gets no interval rather than a wrong one).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "Aggregation",
    "CountPresent",
    "CorpusBleu",
    "MacroF1",
    "Mean",
    "MeanOf",
    "MicroPRF",
    "Ratio",
    "Total",
    "aggregation_from_json",
    "check_reproduces",
    "evaluate",
    "evaluate_sums",
    "sum_parts",
]

Sums = Mapping[str, "np.ndarray"]

_KINDS: dict[str, type[Aggregation]] = {}


def _array(value: Any) -> np.ndarray:
    import numpy as np

    return np.atleast_1d(np.asarray(value, dtype=float))


class Aggregation(ABC):
    """A corpus metric as a function of summed per-sample parts (see the module docstring)."""

    kind: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            _KINDS[cls.kind] = cls

    @abstractmethod
    def keys(self) -> tuple[str, ...]:
        """The part keys this metric reads."""

    @abstractmethod
    def compute(self, sums: Sums, n: np.ndarray) -> np.ndarray:
        """The metric on each (re)sample: ``sums[key]`` and ``n`` hold one value per (re)sample."""

    @abstractmethod
    def describe(self) -> str:
        """One line for readers: what kind of average this is."""

    @abstractmethod
    def with_prefix(self, prefix: str) -> Aggregation:
        """The same aggregation over parts whose keys carry ``prefix`` (a group of a mixed file)."""

    def merge(self, other: Aggregation) -> Aggregation | None:
        """One declaration for a metric that a scorer declared as ``self`` on one part of a corpus and
        as ``other`` on another (a task scored a chunk at a time, :func:`evalpipe.scoring.score_chunks`),
        valid on both together; None when the two cannot be reconciled. Equal declarations merge to
        themselves, which is all most kinds need: their declaration does not depend on the samples."""
        return self if self == other else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, Aggregation):
                value = value.to_json()
            elif isinstance(value, tuple) and value and isinstance(value[0], Aggregation):
                value = [v.to_json() for v in value]
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out


def aggregation_from_json(data: Mapping[str, Any]) -> Aggregation:
    """Rebuild an aggregation written by :meth:`Aggregation.to_json` (``ValueError`` if unknown)."""
    kind = data.get("kind")
    cls = _KINDS.get(str(kind))
    if cls is None:
        raise ValueError(f"unknown aggregation kind {kind!r} (known: {', '.join(sorted(_KINDS))})")
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            continue
        value = data[f.name]
        if isinstance(value, Mapping) and "kind" in value:
            value = aggregation_from_json(value)
        elif isinstance(value, list) and value and isinstance(value[0], Mapping):
            value = tuple(aggregation_from_json(v) for v in value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def _divide(num: np.ndarray, den: np.ndarray, empty: float) -> np.ndarray:
    import numpy as np

    num, den = np.broadcast_arrays(_array(num), _array(den))
    out = np.full(num.shape, float(empty))
    np.divide(num, den, out=out, where=den != 0)
    return out


@dataclass(frozen=True)
class Mean(Aggregation):
    """``Σ key / n``: the plain mean over samples of a value every sample has (0 where absent)."""

    key: str
    kind: ClassVar[str] = "mean"

    def keys(self) -> tuple[str, ...]:
        return (self.key,)

    def compute(self, sums: Sums, n: np.ndarray) -> np.ndarray:
        return _divide(sums[self.key], n, math.nan)

    def describe(self) -> str:
        return f"mean over samples of per-sample {self.key}"

    def with_prefix(self, prefix: str) -> Mean:
        return Mean(prefix + self.key)


@dataclass(frozen=True)
class Ratio(Aggregation):
    """``Σ numerator / Σ denominator`` over samples; ``empty`` when the denominator sums to 0."""

    numerator: str
    denominator: str
    empty: float = 0.0
    kind: ClassVar[str] = "ratio"

    def keys(self) -> tuple[str, ...]:
        return (self.numerator, self.denominator)

    def compute(self, sums: Sums, n: np.ndarray) -> np.ndarray:
        return _divide(sums[self.numerator], sums[self.denominator], self.empty)

    def describe(self) -> str:
        return f"ratio of summed {self.numerator} to summed {self.denominator}"

    def with_prefix(self, prefix: str) -> Ratio:
        return Ratio(prefix + self.numerator, prefix + self.denominator, self.empty)


@dataclass(frozen=True)
class Total(Aggregation):
    """``Σ key``: a count over the corpus."""

    key: str
    kind: ClassVar[str] = "total"

    def keys(self) -> tuple[str, ...]:
        return (self.key,)

    def compute(self, sums: Sums, n: np.ndarray) -> np.ndarray:
        return _array(sums[self.key])

    def describe(self) -> str:
        return f"sum over samples of {self.key}"

    def with_prefix(self, prefix: str) -> Total:
        return Total(prefix + self.key)


def prf_arrays(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> dict[str, np.ndarray]:
    """Precision, recall, F1 from count arrays, with :mod:`evalpipe.metrics.prf`'s arithmetic."""
    precision = _divide(tp, _array(tp) + _array(fp), 0.0)
    recall = _divide(tp, _array(tp) + _array(fn), 0.0)
    f1 = _divide(2.0 * precision * recall, precision + recall, 0.0)
    return {"precision": precision, "recall": recall, "f1": f1}


@dataclass(frozen=True)
class MicroPRF(Aggregation):
    """Micro precision / recall / F1: per-sample ``<prefix>tp``, ``fp``, ``fn`` summed, then once."""

    stat: str
    prefix: str = ""
    kind: ClassVar[str] = "micro_prf"

    def __post_init__(self) -> None:
        if self.stat not in ("precision", "recall", "f1"):
            raise ValueError(f"micro_prf stat must be precision, recall or f1, got {self.stat!r}")

    def keys(self) -> tuple[str, ...]:
        return tuple(f"{self.prefix}{c}" for c in ("tp", "fp", "fn"))

    def compute(self, sums: Sums, n: np.ndarray) -> np.ndarray:
        tp, fp, fn = (sums[k] for k in self.keys())
        return prf_arrays(tp, fp, fn)[self.stat]

    def describe(self) -> str:
        what = f"{self.prefix}tp/fp/fn" if self.prefix else "tp/fp/fn"
        return f"micro {self.stat} from {what} summed over samples"

    def with_prefix(self, prefix: str) -> MicroPRF:
        return MicroPRF(self.stat, prefix + self.prefix)


@dataclass(frozen=True)
class MacroF1(Aggregation):
    """A mean over labels of per-label F1 (or precision, recall) from summed one-vs-rest counts.

    Parts per sample: ``<prefix>tp:<label>``, ``<prefix>fp:<label>``, ``<prefix>fn:<label>``.
    Which labels are averaged (``over``):

    * ``labels`` — every label in ``labels`` (a fixed label set: a label without gold or prediction
      scores 0 and still counts);
    * ``gold`` — the labels with gold support (``Σ tp + Σ fn > 0``) in the (re)sample: the gold
      label set;
    * ``present`` — the labels with gold support or predictions (``Σ tp + Σ fp + Σ fn > 0``), as
      scikit-learn's ``classification_report`` takes them.

    ``weighting="uniform"`` is the macro average; ``"support"`` weights each label by its gold
    support (scikit-learn's "weighted avg").
    """

    labels: tuple[str, ...]
    prefix: str = "cls."
    over: str = "labels"
    stat: str = "f1"
    weighting: str = "uniform"
    kind: ClassVar[str] = "macro_f1"

    def __post_init__(self) -> None:
        if self.over not in ("labels", "gold", "present"):
            raise ValueError(f"macro_f1 over must be labels, gold or present, got {self.over!r}")
        if self.weighting not in ("uniform", "support"):
            raise ValueError(f"macro_f1 weighting must be uniform or support, got {self.weighting!r}")

    def keys(self) -> tuple[str, ...]:
        return tuple(f"{self.prefix}{c}:{label}" for label in self.labels for c in ("tp", "fp", "fn"))

    def compute(self, sums: Sums, n: np.ndarray) -> np.ndarray:
        import numpy as np

        if not self.labels:
            undefined: np.ndarray = _array(math.nan) * np.ones_like(_array(n))
            return undefined
        values, weights = [], []
        for label in self.labels:
            tp, fp, fn = (_array(sums[f"{self.prefix}{c}:{label}"]) for c in ("tp", "fp", "fn"))
            values.append(prf_arrays(tp, fp, fn)[self.stat])
            if self.over == "gold":
                included = tp + fn > 0
            elif self.over == "present":
                included = tp + fp + fn > 0
            else:
                included = np.ones_like(tp, dtype=bool)
            weight = (tp + fn) if self.weighting == "support" else np.ones_like(tp)
            weights.append(np.where(included, weight, 0.0))
        # summed label by label, in label order, as the scorers' ``sum(f1s) / len(f1s)`` does (numpy's
        # ``sum(axis=0)`` adds 8 or more rows in another order, which moves the last bits of the value)
        total, weight = values[0] * weights[0], weights[0]
        for value, w in zip(values[1:], weights[1:]):
            total, weight = total + value * w, weight + w
        return _divide(total, weight, 0.0 if self.weighting == "support" else math.nan)

    def merge(self, other: Aggregation) -> Aggregation | None:
        """Over ``gold`` or ``present`` the labels are only candidates (a label without support in the
        summed counts is left out of the mean), so two declarations that differ only in their labels
        merge to the union of both. The union is sorted, the order scorers write a data-derived label
        set in (``sorted({gold labels})``): the order is that of the float sum of the mean, so a
        declaration whose labels are not sorted is not merged (its scorer's order is unknown)."""
        if self == other:
            return self
        if (not isinstance(other, MacroF1) or self.over == "labels"
                or (self.prefix, self.over, self.stat, self.weighting)
                != (other.prefix, other.over, other.stat, other.weighting)
                or list(self.labels) != sorted(self.labels) or list(other.labels) != sorted(other.labels)):
            return None
        return MacroF1(tuple(sorted(set(self.labels) | set(other.labels))), self.prefix, self.over, self.stat,
                       self.weighting)

    def describe(self) -> str:
        over = {"gold": "the gold label set", "present": "the labels in gold or predictions",
                "labels": f"{len(self.labels)} fixed labels"}[self.over]
        mean = "support-weighted mean" if self.weighting == "support" else "unweighted mean"
        return f"{mean} over {over} of per-label {self.stat} from summed one-vs-rest counts"

    def with_prefix(self, prefix: str) -> MacroF1:
        return MacroF1(self.labels, prefix + self.prefix, self.over, self.stat, self.weighting)


BLEU_ORDER = 4


@dataclass(frozen=True)
class CorpusBleu(Aggregation):
    """sacrebleu's corpus BLEU (0-1 scale) from summed per-sentence statistics.

    Parts per sample: ``<prefix>sys_len``, ``<prefix>ref_len``, ``<prefix>correct_<k>`` and
    ``<prefix>total_<k>`` for k = 1..4 — exactly the statistics sacrebleu sums over a corpus
    before its BLEU formula (uniform 1-4-gram weights, brevity penalty, ``smooth_method``).
    """

    prefix: str = "bleu."
    smooth_method: str = "exp"
    kind: ClassVar[str] = "bleu"

    def keys(self) -> tuple[str, ...]:
        grams = [f"{self.prefix}{c}_{k}" for c in ("correct", "total") for k in range(1, BLEU_ORDER + 1)]
        return (f"{self.prefix}sys_len", f"{self.prefix}ref_len", *grams)

    def compute(self, sums: Sums, n: np.ndarray) -> np.ndarray:
        import numpy as np

        from sacrebleu.metrics.bleu import BLEU

        sys_len, ref_len = _array(sums[f"{self.prefix}sys_len"]), _array(sums[f"{self.prefix}ref_len"])
        correct = np.vstack([_array(sums[f"{self.prefix}correct_{k}"]) for k in range(1, BLEU_ORDER + 1)])
        total = np.vstack([_array(sums[f"{self.prefix}total_{k}"]) for k in range(1, BLEU_ORDER + 1)])
        out = np.empty(sys_len.shape)
        for b in range(sys_len.size):
            out[b] = BLEU.compute_bleu(
                [int(round(c)) for c in correct[:, b]], [int(round(t)) for t in total[:, b]],
                int(round(sys_len[b])), int(round(ref_len[b])), smooth_method=self.smooth_method,
                max_ngram_order=BLEU_ORDER).score / 100.0
        return out

    def describe(self) -> str:
        return "corpus BLEU-4 from per-sentence n-gram statistics summed over samples (sacrebleu)"

    def with_prefix(self, prefix: str) -> CorpusBleu:
        return CorpusBleu(prefix + self.prefix, self.smooth_method)


@dataclass(frozen=True)
class MeanOf(Aggregation):
    """The unweighted mean of ``items``, each counted only where its ``counts`` part sums to > 0.

    ``items[i]`` is an aggregation over one group's parts (a dataset of a mixed file) and
    ``counts[i]`` that group's per-sample membership part (1 for its samples): a group absent from
    a resample is left out of the mean instead of entering as 0/0.
    """

    items: tuple[Aggregation, ...]
    counts: tuple[str, ...]
    kind: ClassVar[str] = "mean_of"

    def __post_init__(self) -> None:
        if len(self.items) != len(self.counts):
            raise ValueError("mean_of needs one count key per item")

    def keys(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.counts, *(k for item in self.items for k in item.keys())]))

    def compute(self, sums: Sums, n: np.ndarray) -> np.ndarray:
        import numpy as np

        if not self.items:
            undefined: np.ndarray = _array(math.nan) * np.ones_like(_array(n))
            return undefined
        values = np.vstack([_array(item.compute(sums, n)) for item in self.items])
        present = np.vstack([(_array(sums[c]) > 0).astype(float) for c in self.counts])
        values = np.where(present > 0, values, 0.0)
        return _divide(values.sum(axis=0), present.sum(axis=0), math.nan)

    def describe(self) -> str:
        return f"unweighted mean over {len(self.items)} groups of each group's own metric"

    def with_prefix(self, prefix: str) -> MeanOf:
        return MeanOf(tuple(i.with_prefix(prefix) for i in self.items), tuple(prefix + c for c in self.counts))


@dataclass(frozen=True)
class CountPresent(Aggregation):
    """How many of the ``counts`` parts sum to more than 0 (e.g. datasets present)."""

    counts: tuple[str, ...]
    kind: ClassVar[str] = "count_present"

    def keys(self) -> tuple[str, ...]:
        return tuple(self.counts)

    def compute(self, sums: Sums, n: np.ndarray) -> np.ndarray:
        import numpy as np

        if not self.counts:
            return np.zeros_like(_array(n))
        present: np.ndarray = np.vstack([(_array(sums[c]) > 0).astype(float) for c in self.counts]).sum(axis=0)
        return present

    def describe(self) -> str:
        return f"number of groups (of {len(self.counts)}) present"

    def with_prefix(self, prefix: str) -> CountPresent:
        return CountPresent(tuple(prefix + c for c in self.counts))


def sum_parts(parts: Iterable[Mapping[str, float | None]], keys: Sequence[str]) -> dict[str, np.ndarray]:
    """Each key summed over all samples (absent or None = 0), as one-element arrays."""
    import numpy as np

    totals = dict.fromkeys(keys, 0.0)
    for sample in parts:
        for key in keys:
            value = sample.get(key)
            if value:
                totals[key] += float(value)
    return {k: np.array([v]) for k, v in totals.items()}


def evaluate(aggregation: Aggregation, parts: Sequence[Mapping[str, float | None]]) -> float:
    """The metric on all samples (what the scorer's corpus value must equal)."""
    import numpy as np

    sums = sum_parts(parts, aggregation.keys())
    return float(_array(aggregation.compute(sums, np.array([float(len(parts))])))[0])


def evaluate_sums(aggregation: Aggregation, sums: Mapping[str, float], n: int) -> float:
    """The metric from parts already summed over ``n`` samples (absent key = 0): :func:`evaluate`
    without the samples. With sums added sample by sample in sample order, as :func:`sum_parts`
    adds them, it is :func:`evaluate`'s value bit for bit."""
    import numpy as np

    arrays = {key: np.array([float(sums.get(key, 0.0))]) for key in aggregation.keys()}
    return float(_array(aggregation.compute(arrays, np.array([float(n)])))[0])


def check_reproduces(corpus: Mapping[str, float], aggregations: Mapping[str, Aggregation],
                     parts: Sequence[Mapping[str, float | None]], tolerance: float = 1e-9) -> dict[str, str]:
    """Metric → why its declared aggregation does not give the scorer's value on all samples.

    Empty when every declaration holds; a metric listed here must get no interval (an interval
    around a formula that is not the metric's would be wrong, not just imprecise).
    """
    problems = {}
    for metric, aggregation in aggregations.items():
        if metric not in corpus:
            continue
        value = evaluate(aggregation, parts)
        expected = float(corpus[metric])
        same = (math.isnan(value) and math.isnan(expected)) or math.isclose(
            value, expected, rel_tol=tolerance, abs_tol=tolerance)
        if not same:
            problems[metric] = (f"declared aggregation ({aggregation.describe()}) gives {value!r} on all samples, "
                                f"the scorer {expected!r}")
    return problems

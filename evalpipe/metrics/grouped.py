"""One score sheet for a task that mixes datasets (PromptCBLUE): each dataset scored on its own.

``corpus`` holds every dataset's metrics as ``<dataset>.<metric>``, ``score`` — the **unweighted
mean over datasets** of each dataset's main metric (a large dataset does not outweigh a small
one) — and ``datasets``, how many were present. ``per_sample[i]`` is what sample ``i``'s dataset
scorer reported for it.

Parts and aggregations: each dataset's parts carry the prefix ``<dataset>.`` and a membership
part ``<dataset>.n`` (1 for each of its samples), so a dataset's mean is ``Σ <dataset>.x /
Σ <dataset>.n``; ``score`` is a :class:`~evalpipe.metrics.aggregation.MeanOf` over the datasets'
main aggregations, counting a dataset only where it is present (a resample may miss a small one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from evalpipe.metrics.aggregation import Aggregation, CountPresent, MeanOf
from evalpipe.records import ScoreSheet

#: membership part of a group's samples: a group's mean is Σ <group>.x / Σ <group>.n
COUNT = "n"


@dataclass(frozen=True)
class GroupScore:
    """One dataset's scores: its metrics, per-sample values, main metric, parts and aggregations.

    ``parts`` and ``aggregations`` are unprefixed; a mean over the group's samples is written as
    ``Ratio(key, "n")`` (``n`` is added to every sample's parts by :func:`grouped_score_sheet`).
    """

    metrics: dict[str, float]
    per_sample: Sequence[Mapping[str, float | None]]
    main: str
    parts: Sequence[Mapping[str, float | None]] = field(default_factory=list)
    aggregations: Mapping[str, Aggregation] = field(default_factory=dict)


#: a dataset's scorer: (dataset name, the sample indices of that dataset) → its GroupScore
DatasetScorer = Callable[[str, list[int]], GroupScore]


def grouped_score_sheet(datasets: Sequence[str], score_dataset: DatasetScorer) -> ScoreSheet:
    """Score each dataset named in ``datasets`` (one name per sample, first-seen order) and combine."""
    corpus: dict[str, float] = {}
    per_sample: list[Mapping[str, float | None]] = [{} for _ in datasets]
    parts: list[Mapping[str, float | None]] = [{} for _ in datasets]
    aggregations: dict[str, Aggregation] = {}
    mains: list[float] = []
    main_aggregations: list[Aggregation] = []
    counts: list[str] = []
    for dataset in dict.fromkeys(datasets):
        prefix = f"{dataset}."
        idx = [i for i, d in enumerate(datasets) if d == dataset]
        group = score_dataset(dataset, idx)
        mains.append(group.metrics[group.main])
        corpus.update({prefix + k: v for k, v in group.metrics.items()})
        aggregations.update({prefix + k: a.with_prefix(prefix) for k, a in group.aggregations.items()})
        for position, i in enumerate(idx):
            per_sample[i] = group.per_sample[position]
            own = group.parts[position] if group.parts else {}
            parts[i] = {**{prefix + k: v for k, v in own.items()}, prefix + COUNT: 1}
        counts.append(prefix + COUNT)
        if group.main in group.aggregations:
            main_aggregations.append(group.aggregations[group.main].with_prefix(prefix))
    if not mains:
        raise ValueError("no samples to score")
    corpus["score"] = sum(mains) / len(mains)
    corpus["datasets"] = float(len(mains))
    if len(main_aggregations) == len(counts):
        aggregations["score"] = MeanOf(tuple(main_aggregations), tuple(counts))
    aggregations["datasets"] = CountPresent(tuple(counts))
    return ScoreSheet(corpus=corpus, per_sample=per_sample, parts=parts, aggregations=aggregations)

"""One score sheet for a task that mixes datasets (PromptCBLUE): each dataset scored on its own.

``corpus`` holds every dataset's metrics as ``<dataset>.<metric>``, ``score`` — the **unweighted
mean over datasets** of each dataset's main metric (a large dataset does not outweigh a small
one) — and ``datasets``, how many were present. ``per_sample[i]`` is what sample ``i``'s dataset
scorer reported for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from evalpipe.records import ScoreSheet

#: a dataset's scorer: the sample indices of that dataset →
#: (its corpus metrics, one per-sample dict per index, its main metric's value)
DatasetScorer = Callable[[str, list[int]], tuple[dict[str, float], list[dict[str, float]], float]]


def grouped_score_sheet(datasets: Sequence[str], score_dataset: DatasetScorer) -> ScoreSheet:
    """Score each dataset named in ``datasets`` (one name per sample, first-seen order) and combine."""
    corpus: dict[str, float] = {}
    per_sample: list[dict[str, float]] = [{} for _ in datasets]
    mains: list[float] = []
    for dataset in dict.fromkeys(datasets):
        idx = [i for i, d in enumerate(datasets) if d == dataset]
        metrics, samples, main = score_dataset(dataset, idx)
        mains.append(main)
        corpus.update({f"{dataset}.{k}": v for k, v in metrics.items()})
        for i, s in zip(idx, samples):
            per_sample[i] = s
    if not mains:
        raise ValueError("no samples to score")
    corpus["score"] = sum(mains) / len(mains)
    corpus["datasets"] = float(len(mains))
    return ScoreSheet(corpus=corpus, per_sample=per_sample)

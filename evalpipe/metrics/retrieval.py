"""Ranking metrics for answer retrieval: Recall@k and MRR@k.

Input is, per query, the **1-based rank of the first relevant candidate** in the system's
ranking, or ``None`` when no relevant candidate was ranked within the depth that was computed
(a ranking is only ever computed to ``max(k)``; anything deeper counts as "not found").

* ``Recall@k`` = fraction of queries whose rank is ``<= k`` (a hit when a gold answer is among
  the first ``k``). With one gold answer per query this is also called hit rate / success@k.
* ``MRR@k`` = mean over queries of ``1 / rank`` when ``rank <= k``, else 0 (ranks beyond ``k``
  earn nothing, as in the Huatuo-26M and MS MARCO evaluations).

Both are plain means over queries, so a bootstrap can resample the per-query values
(:func:`per_query`). An empty list of queries raises ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["mrr_at_k", "per_query", "recall_at_k"]


def _check(ranks: Sequence[int | None], k: int) -> None:
    if not ranks:
        raise ValueError("no queries to score")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    for rank in ranks:
        if rank is not None and rank < 1:
            raise ValueError(f"ranks are 1-based, got {rank}")


def recall_at_k(ranks: Sequence[int | None], k: int) -> float:
    """Share of queries with a relevant candidate among the first ``k``."""
    _check(ranks, k)
    return sum(1 for r in ranks if r is not None and r <= k) / len(ranks)


def mrr_at_k(ranks: Sequence[int | None], k: int) -> float:
    """Mean reciprocal rank, counting only ranks ``<= k`` (others add 0)."""
    _check(ranks, k)
    return sum(1.0 / r for r in ranks if r is not None and r <= k) / len(ranks)


def per_query(rank: int | None, recall_ks: Sequence[int], mrr_k: int) -> dict[str, float]:
    """One query's values: ``recall@k`` (0/1) for each ``k`` and ``mrr@<mrr_k>``."""
    out = {f"recall@{k}": 1.0 if rank is not None and rank <= k else 0.0 for k in recall_ks}
    out[f"mrr@{mrr_k}"] = 1.0 / rank if rank is not None and rank <= mrr_k else 0.0
    return out

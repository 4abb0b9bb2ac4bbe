"""Huatuo-26M answer retrieval (Li et al., 2023): rank each question's answer among a pool of answers.

*Not* a generation task: an embedding model (``--embeddings-url URL --embeddings-model M``, or
``--embeddings-path DIR`` for a local sentence-transformers folder) embeds every question and every
candidate answer, the pool is ranked by cosine similarity (:mod:`evalpipe.backends.ranking`), and
Recall@5 and MRR@10 are computed (:mod:`evalpipe.metrics.retrieval`). It runs through ``evalpipe
run`` like any task: same run directory, resume and re-scoring.

**The pool** (:func:`plan`) is, by default, every distinct answer of the file — the evaluated
questions' answers always included, also under ``--limit``. ``--task-arg huatuo_retrieval:pool_size=N``
shrinks it to the gold answers of the evaluated questions plus a sample of the other answers,
seeded by ``--seed`` (default 0). A question's gold is the pool entry whose text equals its answer
(stripped), so two questions sharing an answer text share a gold entry. Ties in similarity rank
by pool order.

As the Huatuo-26M paper notes, recall falls as the pool grows — a large pool makes recall low by
construction — so retrieval numbers are comparable only at the same pool size and definition.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from evalpipe.metrics.aggregation import Mean
from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.retrieval import mrr_at_k, per_query, recall_at_k
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import EVAL, LoadOptions, RankingPlan, RankingSpec, Scoring, TaskArg, TaskData, TaskSpec
from evalpipe.tasks.huatuo.data import CITATION, load
from evalpipe.tasks.registry import register

POOL_NOTE = ("Recall@k and MRR@k depend on the candidate pool: the larger the pool, the lower the recall, by "
             "construction (the Huatuo-26M paper reports single-digit Recall@5 over its full answer pool). "
             "Compare retrieval numbers only at the same pool size and pool definition.")
RECALL_KS = (5,)
MRR_K = 10


@dataclass(frozen=True)
class RetrievalGold:
    """The reference answer and its position in the candidate pool."""

    answer: str
    index: int


def build_pool(examples: Sequence[Example], pool_examples: Sequence[Example], pool_size: int | None,
               seed: int) -> tuple[str, ...]:
    """Distinct answer texts: all of ``pool_examples``'s, or the evaluated golds + a seeded sample."""
    every = tuple(dict.fromkeys(str(ex.gold).strip() for ex in pool_examples))
    required = set(str(ex.gold).strip() for ex in examples)
    missing = required - set(every)
    every = every + tuple(t for t in dict.fromkeys(str(ex.gold).strip() for ex in examples) if t in missing)
    if pool_size is None:
        return every
    if pool_size < len(required):
        raise ValueError(f"pool size {pool_size} is smaller than the {len(required)} distinct gold answers evaluated")
    if pool_size > len(every):
        raise ValueError(f"pool size {pool_size} exceeds the {len(every)} distinct answers available")
    others = [t for t in every if t not in required]
    chosen = set(random.Random(seed).sample(others, pool_size - len(required))) | required
    return tuple(t for t in every if t in chosen)


def plan(data: TaskData, examples: tuple[Example, ...], options: LoadOptions) -> RankingPlan:
    """The pool for the evaluated questions, and each question's gold bound to its pool position."""
    pool = build_pool(examples, data.examples, options.args.get("pool_size"), options.seed or 0)
    index = {text: i for i, text in enumerate(pool)}
    bound = tuple(replace(ex, gold=RetrievalGold(str(ex.gold).strip(), index[str(ex.gold).strip()]))
                  for ex in examples)
    return RankingPlan(pool=pool, examples=bound)


def parse(answer: str, example: Example) -> Prediction:
    """``{"top": [pool positions, best first]}`` → the gold's 1-based rank, or None when it is not in
    the top ``MRR_K`` (shown as "not in top 10"); an answer that is not such JSON is a parse failure."""
    try:
        top = [int(i) for i in json.loads(answer)["top"]]
    except (ValueError, TypeError, KeyError):
        return Prediction({"rank": None, "top": [], "depth": MRR_K}, True, {"not_a_ranking": True})
    rank = top.index(example.gold.index) + 1 if example.gold.index in top else None
    return Prediction({"rank": rank, "top": top[:MRR_K], "depth": len(top)}, False, {})


def empty(example: Example) -> Prediction:
    return Prediction({"rank": None, "top": [], "depth": MRR_K}, True, {"no_answer": True})


def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    """Recall@5 and MRR@10 (means over questions, :mod:`evalpipe.metrics.retrieval`); ``pool_size``.

    A question without a ranking (failed request) has rank None: it counts 0 in both."""
    ranks = [p.value.get("rank") for p in predictions]
    per_sample = [per_query(rank, RECALL_KS, MRR_K) for rank in ranks]
    metrics = {f"recall@{k}": recall_at_k(ranks, k) for k in RECALL_KS}
    metrics[f"mrr@{MRR_K}"] = mrr_at_k(ranks, MRR_K)
    pool = {ex.gold.index for ex in examples}
    metrics["pool_size"] = float(examples[0].meta.get("pool_size", len(pool))) if examples else 0.0
    return ScoreSheet(corpus=metrics, per_sample=per_sample,
                      aggregations={key: Mean(key) for key in metrics if key != "pool_size"},
                      fixed={"pool_size": "the number of candidate answers, fixed by the run (" + POOL_NOTE + ")"})


def _plan_with_size(data: TaskData, examples: tuple[Example, ...], options: LoadOptions) -> RankingPlan:
    planned = plan(data, examples, options)
    size = len(planned.pool)
    return replace(planned, examples=tuple(replace(ex, meta={**ex.meta, "pool_size": size})
                                           for ex in planned.examples))


def _pool_size(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("pool_size must be at least 1")
    return value


SPEC = register(
    TaskSpec(
        name="huatuo_retrieval",
        data_roles=(EVAL,),
        description="Huatuo-26M test set: rank each question's answer among a pool of answers by embedding "
        "similarity; Recall@5 and MRR@10 (needs an embedding model: --embeddings-url/--embeddings-path).",
        template="",
        load=load,
        shot_target=lambda ex: str(ex.gold),
        scorings={"default": Scoring(parse=parse, score=score, empty=empty,
                                     description="rank of the gold answer among the pool by cosine similarity")},
        metrics=("recall@5", "mrr@10", "pool_size"),
        max_tokens=MRR_K,
        primary_metric="mrr@10",
        args=(TaskArg("pool_size", "candidate answers: the evaluated golds plus a seeded sample of the others "
                      "(default: every answer of the file)", _pool_size),),
        ranking=RankingSpec(plan=_plan_with_size, query=lambda ex: ex.inputs["question"], depth=MRR_K),
        citation=CITATION,
    )
)

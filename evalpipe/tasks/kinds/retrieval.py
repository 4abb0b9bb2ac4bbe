"""Kind ``retrieval``: rank each query's relevant text among a pool of candidates by embedding similarity.

*Not* answered by a generating model: an embedding model (``--embeddings-url URL --embeddings-model
M``, or ``--embeddings-path DIR``) embeds every query and every candidate, the pool is ranked by cosine
similarity (:mod:`evalpipe.backends.ranking`), and the rank of the relevant candidate is scored. It
runs through ``evalpipe run`` like any task (run directory, resume, re-scoring); no template.

* **Query**: the input named by ``query`` (default: the only input).
* **Gold**: the ``fields.answer`` text (stripped); a query's relevant candidate is the pool entry with
  that text, so two queries sharing an answer text share a gold entry.
* **Pool** (:func:`build_pool`): every distinct answer text of the evaluated file — the evaluated
  queries' answers always included, also under ``--limit`` — or, with ``--task-arg TASK:pool_size=N``,
  the evaluated golds plus a sample of the other answers seeded by ``--seed`` (default 0). Ties in
  similarity rank by pool order.
* **Metrics** (:mod:`evalpipe.metrics.retrieval`): ``recall@k`` for each of ``recall_at`` and
  ``mrr@<mrr_at>`` (means over queries: each gets an interval) and ``pool_size`` (fixed by the run, no
  interval). A larger pool makes recall lower by construction, so numbers compare only at the same
  pool size and definition.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from evalpipe.data.file_records import Record
from evalpipe.metrics.aggregation import Mean
from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.retrieval import mrr_at_k, per_query, recall_at_k
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import LoadOptions, RankingPlan, RankingSpec, Scoring, TaskArg, TaskData
from evalpipe.tasks.kinds.base import Drafted, Kind, KindParts, register_kind
from evalpipe.tasks.kinds.generation import reference_text
from evalpipe.tasks.taskfile.schema import TaskFile, Text
from evalpipe.errors import UsageError

POOL_NOTE = ("Recall@k and MRR@k depend on the candidate pool: the larger the pool, the lower the recall, by "
             "construction (the Huatuo-26M paper reports single-digit Recall@5 over its full answer pool). "
             "Compare retrieval numbers only at the same pool size and pool definition.")


@dataclass(frozen=True)
class RetrievalGold:
    """The relevant text and its position in the candidate pool."""

    answer: str
    index: int


class RetrievalTask(TaskFile):
    kind: Literal["retrieval"]
    query: Text | None = Field(None, description="The input embedded as the query (default: the only input).")
    recall_at: list[int] = Field(default_factory=lambda: [5], description="Cut-offs k of recall@k.")
    mrr_at: int = Field(10, ge=1, description="Cut-off of MRR (also the ranking depth stored per query).")

    @model_validator(mode="after")
    def _query(self) -> RetrievalTask:
        if self.fields.gold_field() is None:
            raise ValueError("fields.answer: name the field holding the relevant text")
        if self.query is None and len(self.fields.inputs) != 1:
            raise ValueError("query: name the input embedded as the query")
        if self.query is not None and self.query not in self.fields.inputs:
            raise ValueError(f"query {self.query!r} is not an input")
        if any(k < 1 or k > self.mrr_at for k in self.recall_at):
            raise ValueError(f"recall_at: each k between 1 and mrr_at ({self.mrr_at}), the ranking depth")
        return self

    def query_input(self) -> str:
        return self.query or next(iter(self.fields.inputs))

    #: no template: a retrieval task's "prompts" are its query texts
    template_needed: ClassVar[bool] = False


def read(task: RetrievalTask, records: Sequence[Record]) -> list[Drafted]:
    return [Drafted(gold=reference_text(task, record)) for record in records]


def build_pool(examples: Sequence[Example], pool_examples: Iterable[Example], pool_size: int | None,
               seed: int) -> tuple[str, ...]:
    """Distinct answer texts: all of ``pool_examples``'s, or the evaluated golds + a seeded sample."""
    every = tuple(dict.fromkeys(str(ex.gold).strip() for ex in pool_examples))
    required = set(str(ex.gold).strip() for ex in examples)
    missing = required - set(every)
    every = every + tuple(t for t in dict.fromkeys(str(ex.gold).strip() for ex in examples) if t in missing)
    if pool_size is None:
        return every
    if pool_size < len(required):
        raise UsageError(f"pool size {pool_size} is smaller than the {len(required)} distinct gold answers evaluated")
    if pool_size > len(every):
        raise UsageError(f"pool size {pool_size} exceeds the {len(every)} distinct answers available")
    others = [t for t in every if t not in required]
    chosen = set(random.Random(seed).sample(others, pool_size - len(required))) | required
    return tuple(t for t in every if t in chosen)


def plan(data: TaskData, examples: tuple[Example, ...], options: LoadOptions) -> RankingPlan:
    """The pool for the evaluated queries, and each query's gold bound to its pool position (and the
    pool's size in its meta)."""
    pool = build_pool(examples, data.examples, options.args.get("pool_size"), options.seed or 0)
    index = {text: i for i, text in enumerate(pool)}
    bound = tuple(replace(ex, gold=RetrievalGold(str(ex.gold).strip(), index[str(ex.gold).strip()]),
                          meta={**ex.meta, "pool_size": len(pool)})
                  for ex in examples)
    return RankingPlan(pool=pool, examples=bound)


def _pool_size(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("pool_size must be at least 1")
    return value


POOL_SIZE = TaskArg("pool_size", "candidate answers: the evaluated golds plus a seeded sample of the others "
                    "(default: every answer of the file)", _pool_size)


def scoring(task: RetrievalTask) -> Scoring:
    depth = task.mrr_at

    def parse(answer: str, example: Example) -> Prediction:
        """``{"top": [pool positions, best first]}`` → the gold's 1-based rank, or None when it is not in
        the top ``mrr_at``; an answer that is not such JSON is a parse failure."""
        try:
            top = [int(i) for i in json.loads(answer)["top"]]
        except (ValueError, TypeError, KeyError):
            return Prediction({"rank": None, "top": [], "depth": depth}, True, {"not_a_ranking": True})
        rank = top.index(example.gold.index) + 1 if example.gold.index in top else None
        return Prediction({"rank": rank, "top": top[:depth], "depth": len(top)}, False, {})

    def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
        """Recall@k and MRR@k (means over queries); ``pool_size``. A query without a ranking counts 0."""
        ranks = [p.value.get("rank") for p in predictions]
        per_sample = [per_query(rank, tuple(task.recall_at), depth) for rank in ranks]
        metrics = {f"recall@{k}": recall_at_k(ranks, k) for k in task.recall_at}
        metrics[f"mrr@{depth}"] = mrr_at_k(ranks, depth)
        pool = {ex.gold.index for ex in examples}
        metrics["pool_size"] = float(examples[0].meta.get("pool_size", len(pool))) if examples else 0.0
        return ScoreSheet(corpus=metrics, per_sample=per_sample,
                          aggregations={key: Mean(key) for key in metrics if key != "pool_size"},
                          fixed={"pool_size": "the number of candidate answers, fixed by the run (" + POOL_NOTE + ")"})

    return Scoring(parse=parse, score=score,
                   empty=lambda ex: Prediction({"rank": None, "top": [], "depth": depth}, True, {"no_answer": True}),
                   description="rank of the gold answer among the pool by cosine similarity",
                   # per query, once its gold is bound to the pool (RankingSpec.plan); pool_size is the same
                   # on every chunk
                   samplewise=True)


def parts(task: RetrievalTask) -> KindParts:
    query = task.query_input()
    metrics = (*(f"recall@{k}" for k in task.recall_at), f"mrr@{task.mrr_at}", "pool_size")
    return KindParts(scorings={"default": scoring(task)}, shot_target=lambda ex: str(ex.gold), metrics=metrics,
                     primary_metric=f"mrr@{task.mrr_at}", args=(POOL_SIZE,),
                     ranking=RankingSpec(plan=plan, query=lambda ex: ex.inputs[query], depth=task.mrr_at))


KIND = register_kind(Kind(
    name="retrieval",
    description="rank the relevant text among a pool by embedding similarity (Recall@k, MRR@k; an embedding model answers)",
    model=RetrievalTask,
    read=read,
    parts=parts,
))

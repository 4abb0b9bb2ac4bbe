"""Huatuo-26M (Li et al., 2023): Chinese medical QA, as answer generation and as answer retrieval.

Data: the paper's test set ``test_datasets.jsonl`` from the Hugging Face hub
(``FreedomIntelligence/huatuo26M-testdatasets``; hub-only, not shipped), one JSON object per line
with ``questions`` and ``answers`` (a string each; the list form of the other Huatuo releases is
accepted and its first non-empty element used). Found at ``--data huatuo_generation=FILE``, or as
``test_datasets.jsonl`` under ``--data-dir`` (or ``data/huatuo/`` in the checkout).

**Generation** (task ``huatuo_generation``, a chat task): the model answers the question;
scored with corpus BLEU-4 (sacrebleu, ``tokenize="zh"``) and mean character ROUGE-L, see
:mod:`evalpipe.metrics.chinese_text` (0-1 scale; the paper prints 0-100).

**Retrieval** (``huatuo_retrieval``, *not* a chat task: no LLM): every question and every answer of
a candidate pool are embedded (:mod:`evalpipe.backends.embeddings`), answers are ranked by cosine
similarity, and Recall@5 and MRR@10 are computed (:mod:`evalpipe.metrics.retrieval`).
:func:`evaluate_retrieval` is the metric, :func:`run_retrieval` the CLI entry point writing a run
directory (``config.json``, ``metrics.json``, ``samples.jsonl``, ``summary.json``).

The candidate pool is, by default, every distinct answer of the evaluated file — the evaluated
questions' answers always included, also under ``--limit``. ``pool_size`` shrinks it to the gold
answers of the evaluated questions plus a seeded random sample of the other answers. A question's
gold is the pool entry whose text equals its answer (stripped), so two questions sharing an answer
text share a gold entry. Ties in similarity rank by pool order.

As the Huatuo-26M paper notes, recall falls as the pool grows — a large pool makes recall low by
construction — so retrieval numbers are comparable only at the same pool size and definition.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalpipe import __version__
from evalpipe.backends.embeddings import Embedder
from evalpipe.data.digest import file_sha256
from evalpipe.data.errors import DataError
from evalpipe.data.jsonl import read_json_lines
from evalpipe.metrics.chinese_text import text_score_sheet
from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.retrieval import mrr_at_k, per_query, recall_at_k
from evalpipe.parsers.zh_labels import answer_body
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.results import RunDir, git_commit
from evalpipe.tasks.base import EVAL, LoadOptions, SHOTS, Scoring, TaskData, TaskSpec
from evalpipe.tasks.registry import register

from evalpipe.paths import REPO_ROOT
FILE_NAME = "test_datasets.jsonl"
SOURCE = ("Huatuo-26M's test set is published on the Hugging Face hub as FreedomIntelligence/huatuo26M-testdatasets "
          "(file test_datasets.jsonl; no credentialed access) and is not shipped with evalpipe")
CITATION = ("Li J, Wang X, Wu X, et al. Huatuo-26M, a Large-scale Chinese Medical QA Dataset. arXiv:2305.01526, "
            "2023. Data: Hugging Face hub, not shipped.")
POOL_NOTE = ("Recall@k and MRR@k depend on the candidate pool: the larger the pool, the lower the recall, by "
             "construction (the Huatuo-26M paper reports single-digit Recall@5 over its full answer pool). "
             "Compare retrieval numbers only at the same pool size and pool definition.")
RECALL_KS = (5,)
MRR_K = 10


# ---- data ------------------------------------------------------------------------------------

def _text(path: Path, line: int, record: dict[str, Any], name: str) -> str:
    if name not in record:
        raise DataError(path, line, name, f"missing (fields found: {', '.join(sorted(record)) or 'none'}; "
                        "expected questions and answers)")
    value = record[name]
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, str) and v.strip()), None)
    if not isinstance(value, str) or not value.strip():
        raise DataError(path, line, name, f"expected a non-empty string (or list of strings), got {str(record[name])[:60]!r}")
    return value.strip()


def read_huatuo(path: Path) -> list[tuple[int, str, str]]:
    """``(line, question, answer)`` for every record of a Huatuo JSON-lines file."""
    out = []
    for number, record in read_json_lines(
        path, f"file not found: expected {FILE_NAME} ({SOURCE}; see docs/cblue.md)"
    ):
        if not isinstance(record, dict):
            raise DataError(path, number, None, "expected a JSON object")
        out.append((number, _text(path, number, record, "questions"), _text(path, number, record, "answers")))
    if not out:
        raise DataError(path, None, None, "no record in the file")
    return out


def _path(options: LoadOptions) -> Path:
    if "eval" in options.paths:
        return Path(options.paths["eval"])
    root = Path(options.data_dir) if options.data_dir else REPO_ROOT / "data" / "huatuo"
    places = [root / FILE_NAME, root / "huatuo26M-testdatasets" / FILE_NAME]
    return next((p for p in places if p.is_file()), places[0])


def load(options: LoadOptions) -> TaskData:
    split = options.split or "test"
    if split != "test":
        raise DataError(_path(options), None, "split", f"unknown split {split!r}: Huatuo-26M publishes only its test set")
    path = _path(options)
    examples = tuple(
        Example(id=f"test-{i}", inputs={"question": q}, gold=a, meta={"file": str(path), "line": line})
        for i, (line, q, a) in enumerate(read_huatuo(path))
    )
    pool: tuple[Example, ...] = ()
    files: tuple[Path, ...] = (path,)
    if "shots" in options.paths:
        shot_path = Path(options.paths["shots"])
        pool = tuple(Example(id=f"shot-{i}", inputs={"question": q}, gold=a, meta={"file": str(shot_path), "line": line})
                     for i, (line, q, a) in enumerate(read_huatuo(shot_path)))
        files += (shot_path,)
    return TaskData(examples=examples, shot_pool=pool, files=files, split=split)


# ---- generation ------------------------------------------------------------------------------

def parse(answer: str, example: Example) -> Prediction:
    """The answer text itself (reasoning removed); an empty answer is a failure scored as ""."""
    body, reasoning = answer_body(answer)
    return Prediction(value=body, failed=not body, diagnostics={"empty": not body, "reasoning_stripped": reasoning})


def empty_prediction(example: Example) -> Prediction:
    return Prediction(value="", failed=True, diagnostics={"no_answer": True})


def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    """Corpus BLEU-4 (sacrebleu zh) and mean character ROUGE-L (see evalpipe.metrics.chinese_text)."""
    return text_score_sheet([p.value or "" for p in predictions], [ex.gold for ex in examples])


SPEC = register(
    TaskSpec(
        name="huatuo_generation",
        data_roles=(EVAL, SHOTS),
        description="Huatuo-26M test set: answer Chinese medical questions; BLEU-4 and character ROUGE-L.",
        template="huatuo/generation.j2",
        load=load,
        shot_target=lambda ex: ex.gold,
        scorings={"default": Scoring(parse=parse, score=score, empty=empty_prediction,
                                     description="sacrebleu zh corpus BLEU-4; rouge-score ROUGE-L, char tokens")},
        metrics=("bleu4", "rouge_l"),
        max_tokens=512,
        primary_metric="rouge_l",
        default_shots=0,
        completion_stop=("\n问题：",),
        citation=CITATION,
    )
)


# ---- retrieval -------------------------------------------------------------------------------

@dataclass(frozen=True)
class RetrievalResult:
    """Corpus metrics, one record per query, and the pool that was ranked."""

    metrics: dict[str, float]
    per_query: list[dict[str, Any]]
    pool: tuple[str, ...]


def build_pool(examples: Sequence[Example], pool_examples: Sequence[Example], pool_size: int | None,
               seed: int) -> tuple[str, ...]:
    """Distinct answer texts: all of ``pool_examples``'s, or the evaluated golds + a seeded sample."""
    every = tuple(dict.fromkeys(ex.gold.strip() for ex in pool_examples))
    required = set(ex.gold.strip() for ex in examples)
    missing = required - set(every)
    every = every + tuple(t for t in dict.fromkeys(ex.gold.strip() for ex in examples) if t in missing)
    if pool_size is None:
        return every
    if pool_size < len(required):
        raise ValueError(f"pool size {pool_size} is smaller than the {len(required)} distinct gold answers evaluated")
    if pool_size > len(every):
        raise ValueError(f"pool size {pool_size} exceeds the {len(every)} distinct answers available")
    others = [t for t in every if t not in required]
    chosen = set(random.Random(seed).sample(others, pool_size - len(required))) | required
    return tuple(t for t in every if t in chosen)


def _normalised(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


def rank_pool(queries: np.ndarray, pool: np.ndarray, depth: int, chunk: int = 1024) -> np.ndarray:
    """Indices of the ``depth`` most cosine-similar pool rows per query, best first (ties: pool order)."""
    q, p = _normalised(queries), _normalised(pool)
    depth = min(depth, len(p))
    out = np.empty((len(q), depth), dtype=np.int64)
    for start in range(0, len(q), chunk):
        sims = q[start:start + chunk] @ p.T
        for row, values in enumerate(sims):
            order = np.lexsort((np.arange(len(values)), -values))[:depth]
            out[start + row] = order
    return out


async def evaluate_retrieval(examples: Sequence[Example], embedder: Embedder, pool_size: int | None = None,
                             seed: int = 0, *, pool_examples: Sequence[Example] | None = None,
                             recall_ks: Sequence[int] = RECALL_KS, mrr_k: int = MRR_K) -> RetrievalResult:
    """Rank each question's gold answer among the pool; Recall@k (``recall@5``) and MRR@k (``mrr@10``).

    ``examples`` are the evaluated questions (``inputs["question"]``, ``gold`` = answer text);
    ``pool_examples`` (default: ``examples``) supply the pool's answers, see :func:`build_pool`.
    Metrics: ``recall@<k>`` for each k, ``mrr@<mrr_k>``, ``pool_size``, ``n``. Each per-query
    record has the question's ``rank`` (1-based, None when beyond the computed depth) and the
    top ``mrr_k`` pool indices.
    """
    if not examples:
        raise ValueError("no questions to evaluate")
    pool = build_pool(examples, pool_examples or examples, pool_size, seed)
    index = {text: i for i, text in enumerate(pool)}
    query_vectors = await embedder.embed([ex.inputs["question"] for ex in examples])
    pool_vectors = await embedder.embed(list(pool))
    depth = max([*recall_ks, mrr_k])
    top = rank_pool(query_vectors, pool_vectors, depth)
    ranks: list[int | None] = []
    records = []
    for ex, row in zip(examples, top):
        gold = index[ex.gold.strip()]
        hits = np.flatnonzero(row == gold)
        rank = int(hits[0]) + 1 if len(hits) else None
        ranks.append(rank)
        records.append({"id": ex.id, "gold_index": gold, "rank": rank, "top": [int(i) for i in row[:mrr_k]],
                        "scores": per_query(rank, recall_ks, mrr_k)})
    metrics = {f"recall@{k}": recall_at_k(ranks, k) for k in recall_ks}
    metrics[f"mrr@{mrr_k}"] = mrr_at_k(ranks, mrr_k)
    metrics["pool_size"] = float(len(pool))
    metrics["n"] = float(len(examples))
    return RetrievalResult(metrics=metrics, per_query=records, pool=pool)


@dataclass(frozen=True)
class RetrievalConfig:
    """What ``evalpipe retrieve`` was asked to do (recorded in ``config.json``)."""

    task: str = "huatuo_retrieval"
    split: str | None = None
    #: the evaluated file (``--data``); None = found under ``data_dir``
    data: str | None = None
    data_dir: str | None = None
    limit: int | None = None
    pool_size: int | None = None
    seed: int = 0
    run_name: str | None = None

    def default_run_name(self, model: str) -> str:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-") or "embedder"
        blob = json.dumps({k: v for k, v in asdict(self).items() if k != "run_name"}, sort_keys=True)
        return f"{self.task}__{slug}__{hashlib.sha256((blob + model).encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class RetrievalRun:
    run_dir: RunDir
    metrics: dict[str, float]


#: retrieval tasks by name → loader of their questions (``evalpipe retrieve --task NAME``)
RETRIEVAL_TASKS = {"huatuo_retrieval": load}


async def run_retrieval(config: RetrievalConfig, embedder: Embedder, results_root: Path) -> RetrievalRun:
    """Load, embed, rank, score, and write ``results_root/<run>/`` in the usual layout."""
    if config.task not in RETRIEVAL_TASKS:
        raise ValueError(f"unknown retrieval task {config.task!r}; known: {', '.join(RETRIEVAL_TASKS)}")
    options = LoadOptions(split=config.split, paths={"eval": Path(config.data)} if config.data else {},
                          data_dir=Path(config.data_dir) if config.data_dir else None, seed=config.seed)
    data = RETRIEVAL_TASKS[config.task](options)
    examples = data.examples[: config.limit] if config.limit is not None else data.examples
    started = time.monotonic()
    result = await evaluate_retrieval(examples, embedder, config.pool_size, config.seed, pool_examples=data.examples)
    elapsed = time.monotonic() - started
    run = RunDir(results_root / (config.run_name or config.default_run_name(embedder.model)))
    run.path.mkdir(parents=True, exist_ok=True)
    run.write_json(run.config_path, {
        "config": asdict(config),
        "evalpipe_version": __version__,
        "git_commit": git_commit(REPO_ROOT),
        "tasks": {config.task: {"data_files": {str(f): file_sha256(f) for f in data.files}, "split": data.split,
                                "n": len(examples), "pool_size": len(result.pool), "seed": config.seed}},
        "embedder": dict(embedder.describe()),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    })
    by_id = {ex.id: ex for ex in examples}
    run.write_samples({
        "task": config.task, "id": r["id"], "question": by_id[r["id"]].inputs["question"], "gold": by_id[r["id"]].gold,
        "rank": r["rank"], "top": [{"index": i, "answer": result.pool[i][:200]} for i in r["top"]],
        "scores": r["scores"], "meta": dict(by_id[r["id"]].meta),
    } for r in result.per_query)
    run.write_json(run.metrics_path(), {config.task: result.metrics})
    run.write_json(run.summary_path(), {config.task: {"note": POOL_NOTE, "pool_size": len(result.pool),
                                                      "seconds": round(elapsed, 3)}})
    return RetrievalRun(run_dir=run, metrics=result.metrics)

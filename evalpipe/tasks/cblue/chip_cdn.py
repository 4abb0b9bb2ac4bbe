"""CBLUE CHIP-CDN: map a clinical diagnosis to its ICD-10 Beijing clinical v601 standard terms.

Data: the user's ``CHIP-CDN_{train,dev,test}.json`` (records ``{text, normalized_result:
"term##term"}``). Answer form: the standard terms joined with ``##``, the gold's own form, parsed by
:mod:`evalpipe.parsers.term_list`.

**Candidates.** The standard vocabulary has ~40,000 terms, too many for a prompt. When the user
passes the term table that comes with the download (``国际疾病分类 ICD-10北京临床版v601.xlsx``) as
``LoadOptions.paths["cdn_terms"]`` (CLI: ``--data chip_cdn:cdn_terms=FILE``), the :data:`CANDIDATES` most similar
terms are retrieved for each text and listed in the prompt, and the model picks among them —
CBLUE's own baseline likewise recalls 200 candidates with n-gram similarity before ranking them.
Similarity is TF-IDF cosine over character unigrams and bigrams of match keys
(:func:`evalpipe.text.chinese.match_key`), computed for the whole text and for each of its
punctuation-separated parts (a text often names several diagnoses), merged rank by rank. Ties
break by table order, so candidates are deterministic. ``candidate_recall`` (gold terms found among
the candidates) is reported so a low score can be traced to retrieval rather than to the model.
Without a table the model generates terms freely.

Metric (CBLUE's): micro P/R/F1 over (text, standard term) pairs, i.e. over each sample's set of
terms; terms compare as match keys.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path


from evalpipe.tasks.cblue.files import TEST_HINT, CDNDoc, read_cdn, read_term_table, split_files
from evalpipe.metrics.aggregation import Ratio
from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.tuples import tuple_score_sheet
from evalpipe.parsers.term_list import format_term_list, parse_term_list
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import DataRole, EVAL, LoadOptions, SHOTS, Scoring, TaskData, TaskSpec
from evalpipe.tasks.registry import register
from evalpipe.text.chinese import match_key

FOLDERS = ("CHIP-CDN",)
#: candidate terms shown per text when a term table is given
CANDIDATES = 30
_PARTS = re.compile(r"[,，;；、/\\\s。.?？:：]+")


def _grams(key: str) -> set[str]:
    return set(key) | {key[i:i + 2] for i in range(len(key) - 1)}


class TermIndex:
    """TF-IDF (binary tf, smoothed idf) cosine over character 1-2-grams of term match keys."""

    def __init__(self, terms: Sequence[str]) -> None:
        import numpy as np  # here, not at import: the registry imports this module for every command

        self.terms = tuple(terms)
        vocab: dict[str, int] = {}
        rows: list[list[int]] = []
        for term in self.terms:
            rows.append([vocab.setdefault(g, len(vocab)) for g in sorted(_grams(match_key(term)))])
        self.vocab = vocab
        df = np.zeros(len(vocab))
        for row in rows:
            df[row] += 1
        self.idf = np.log((len(self.terms) + 1) / (df + 1)) + 1.0
        postings: list[list[int]] = [[] for _ in vocab]
        for term_id, row in enumerate(rows):
            for g in row:
                postings[g].append(term_id)
        self.postings = [np.asarray(p, dtype=np.int64) for p in postings]
        self.norms = np.array([math.sqrt(float(np.sum(self.idf[row] ** 2))) or 1.0 for row in rows])

    def search(self, text: str, k: int) -> list[int]:
        """Indices of the ``k`` best terms with a positive score, best first (ties: table order)."""
        import numpy as np

        ids = [self.vocab[g] for g in _grams(match_key(text)) if g in self.vocab]
        if not ids or k <= 0:
            return []
        weights = self.idf[ids]
        hits = np.concatenate([self.postings[g] for g in ids])
        contrib = np.concatenate([np.full(len(self.postings[g]), w * w) for g, w in zip(ids, weights)])
        scores = np.bincount(hits, weights=contrib, minlength=len(self.terms)) / self.norms
        top = np.flatnonzero(scores > 0)
        order = np.lexsort((top, -scores[top]))[:k]
        return [int(i) for i in top[order]]

    def candidates(self, text: str, k: int = CANDIDATES) -> list[str]:
        """Top ``k`` for the whole text and for each part, merged rank by rank without repeats."""
        parts = [p for p in _PARTS.split(text) if p]
        lists = [self.search(text, k)] + ([self.search(p, k) for p in parts] if len(parts) > 1 else [])
        out: list[int] = []
        for rank in range(k):
            for ranked in lists:
                if rank < len(ranked) and ranked[rank] not in out:
                    out.append(ranked[rank])
                if len(out) == k:
                    return [self.terms[i] for i in out]
        return [self.terms[i] for i in out]


@lru_cache(maxsize=2)
def _index(path: Path, mtime: float) -> TermIndex:
    return TermIndex(read_term_table(path))


def _examples(docs: Sequence[CDNDoc], split: str, path: Path, index: TermIndex | None) -> tuple[Example, ...]:
    return tuple(
        Example(id=f"{split}-{i}",
                inputs={"text": doc.text, "candidates": index.candidates(doc.text) if index else []},
                gold=doc.terms, meta={"file": str(path), "line": doc.line})
        for i, doc in enumerate(docs)
    )


def load(options: LoadOptions) -> TaskData:
    files = split_files(options, FOLDERS)
    table = Path(options.paths["cdn_terms"]) if "cdn_terms" in options.paths else None
    index = _index(table.resolve(), table.stat().st_mtime) if table is not None and table.is_file() else None
    if table is not None and index is None:
        read_term_table(table)  # raises the DataError naming the missing file
    hint = TEST_HINT if files.split == "test" else ""
    examples = _examples(read_cdn(files.eval_path, hint), files.split, files.eval_path, index)
    pool: tuple[Example, ...] = ()
    if files.shot_path is not None:
        pool = _examples(read_cdn(files.shot_path), files.shot_split, files.shot_path, index)
    used = (files.eval_path,) + ((files.shot_path,) if files.shot_path else ()) + ((table,) if table else ())
    return TaskData(examples=examples, shot_pool=pool, files=used, split=files.split)


def shot_target(example: Example) -> str:
    return format_term_list(example.gold)


@lru_cache(maxsize=1 << 16)
def _keys(terms: tuple[str, ...]) -> frozenset[str]:
    """Match keys of a term list, cached: the bootstrap re-scores the same candidates ~1000 times."""
    return frozenset(match_key(t) for t in terms)


def parse(answer: str, example: Example) -> Prediction:
    """``##`` list → terms; ``outside_candidates`` counts terms that were not offered."""
    candidates = example.inputs["candidates"]
    known = _keys(tuple(candidates)) if candidates else None
    prediction = parse_term_list(answer, known)
    diagnostics = dict(prediction.diagnostics)
    diagnostics["outside_candidates"] = diagnostics.pop("unknown_terms")
    return Prediction(value=prediction.value, failed=prediction.failed, diagnostics=diagnostics)


def empty_prediction(example: Example) -> Prediction:
    return Prediction(value=(), failed=True, diagnostics={"no_answer": True})


def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    """Micro P/R/F1 over each sample's set of standard terms (match keys); ``candidate_recall``.

    ``candidate_recall`` = gold terms that were among the prompt's candidates / all gold terms,
    over samples that had candidates (absent without a term table).
    """
    golds = [_keys(tuple(ex.gold)) for ex in examples]
    preds = [{match_key(t) for t in p.value} for p in predictions]
    sheet = tuple_score_sheet(golds, preds)
    corpus = dict(sheet.corpus)
    with_candidates = [(g, _keys(tuple(ex.inputs["candidates"])))
                       for g, ex in zip(golds, examples) if ex.inputs["candidates"]]
    aggregations = dict(sheet.aggregations)
    parts = [dict(s) for s in sheet.per_sample]
    if with_candidates:
        found = sum(len(g & c) for g, c in with_candidates)
        corpus["candidate_recall"] = found / sum(len(g) for g, _ in with_candidates)
        for row, g, ex in zip(parts, golds, examples):
            if ex.inputs["candidates"]:
                row["gold_terms"] = len(g)
                row["gold_in_candidates"] = len(g & _keys(tuple(ex.inputs["candidates"])))
        aggregations["candidate_recall"] = Ratio("gold_in_candidates", "gold_terms")
    return ScoreSheet(corpus=corpus, per_sample=sheet.per_sample, parts=parts, aggregations=aggregations)


SPEC = register(
    TaskSpec(
        name="chip_cdn",
        kind="term_normalisation",
        data_roles=(EVAL, SHOTS, DataRole("cdn_terms", "the ICD-10 term table; top-k candidate terms go into the prompt")),
        description="CBLUE CHIP-CDN: diagnosis → ICD-10 Beijing v601 standard terms, '##'-separated "
        "(candidates from --data chip_cdn:cdn_terms=FILE; dev, 3-shot).",
        template="cblue/chip_cdn.j2",
        load=load,
        shot_target=shot_target,
        scorings={
            "default": Scoring(parse=parse, score=score, empty=empty_prediction,
                               description="'##' term list, micro P/R/F1 over (text, term) pairs",
                               corpus_reason="candidate_recall is reported only when some sample had "
                                             "candidates: the metric set depends on the corpus"),
        },
        metrics=("precision", "recall", "f1", "candidate_recall"),
        max_tokens=256,
        primary_metric="f1",
        default_shots=3,
        completion_stop=("\n",),
        suites=("cblue",),
        citation="Zhang N, et al. CBLUE, ACL 2022 (CHIP-CDN, CHIP 2020). Data: Tianchi, Tianchi terms; not shipped.",
    )
)

"""Generation metrics for Chinese answers: corpus BLEU-4 and per-answer character ROUGE-L.

Tokenisation is decided in :mod:`evalpipe.text.chinese` (read its docstring); in short:

* **BLEU-4** is sacrebleu's corpus BLEU with ``tokenize="zh"`` (each CJK character a token),
  its defaults otherwise (uniform weights over 1-4-grams, brevity penalty, ``exp`` smoothing),
  one reference per answer. Reported on a **0-1 scale** (sacrebleu's number / 100) like every
  other evalpipe metric; papers (Huatuo-26M) print the 0-100 number.
* **ROUGE-L** is rouge-score's ``rougeL`` F-measure (LCS of token sequences, F1 of LCS precision
  and recall) with :class:`evalpipe.text.chinese.CharTokenizer`: one token per Han character,
  letter/digit runs as words, punctuation dropped, no stemming. The corpus value is the **mean
  of per-answer F-measures** (macro over answers), so it can be bootstrapped per sample.

Empty answers (a failed request, or a model that said nothing) are scored as the empty string:
ROUGE-L 0.0; in BLEU they add no n-grams but their references still count towards the
reference length, lowering the brevity penalty. A reference that tokenises to nothing scores
ROUGE-L 0.0 against anything (rouge-score's convention).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from evalpipe.metrics.aggregation import CorpusBleu, Mean
from evalpipe.records import ScoreSheet
from evalpipe.text.chinese import BLEU_TOKENIZE, CharTokenizer

__all__ = ["bleu4", "bleu_parts", "rouge_l", "rouge_l_scores", "text_score_sheet"]


@cache
def _scorer() -> Any:
    # imported on first use: rouge-score imports nltk (~2 s), which task registration should not pay
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False, tokenizer=CharTokenizer())


def _check(hyps: Sequence[str], refs: Sequence[str]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} answers but {len(refs)} references")
    if not hyps:
        raise ValueError("no answers to score")


def bleu4(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """Corpus BLEU-4 in [0, 1]: ``sacrebleu.corpus_bleu(hyps, [refs], tokenize="zh").score / 100``."""
    import sacrebleu

    _check(hyps, refs)
    result = sacrebleu.corpus_bleu([h or "" for h in hyps], [[r or "" for r in refs]], tokenize=BLEU_TOKENIZE)
    return result.score / 100.0


def rouge_l(hyp: str, ref: str) -> float:
    """ROUGE-L F-measure of one answer against one reference, character tokens (see module doc)."""
    fmeasure: float = _scorer().score(ref or "", hyp or "")["rougeL"].fmeasure  # (rouge-score is untyped)
    return fmeasure


def rouge_l_scores(hyps: Sequence[str], refs: Sequence[str]) -> list[float]:
    _check(hyps, refs)
    return [rouge_l(h, r) for h, r in zip(hyps, refs)]


def bleu_parts(hyps: Sequence[str], refs: Sequence[str], prefix: str = "bleu.") -> list[dict[str, int]]:
    """Each answer's BLEU statistics as sacrebleu counts them before its corpus formula: hypothesis
    and (closest) reference length and, for n = 1..4, matched and total n-grams — the parts of
    :class:`evalpipe.metrics.aggregation.CorpusBleu`, whose value on all answers is :func:`bleu4`.
    (Read through sacrebleu's per-segment statistics, the same ones ``corpus_bleu`` sums.)"""
    from sacrebleu.metrics.bleu import BLEU

    _check(hyps, refs)
    stats = BLEU(tokenize=BLEU_TOKENIZE)._extract_corpus_statistics([h or "" for h in hyps], [[r or "" for r in refs]])
    names = ["sys_len", "ref_len", *(f"correct_{k}" for k in range(1, 5)), *(f"total_{k}" for k in range(1, 5))]
    return [{f"{prefix}{name}": int(value) for name, value in zip(names, row)} for row in stats]


def text_score_sheet(hyps: Sequence[str], refs: Sequence[str]) -> ScoreSheet:
    """``corpus``: ``bleu4`` (corpus level) and ``rouge_l`` (mean); ``per_sample``: ``rouge_l``;
    parts: ``rouge_l`` and the BLEU statistics (:func:`bleu_parts`)."""
    scores = rouge_l_scores(hyps, refs)
    per_sample = [{"rouge_l": s} for s in scores]
    return ScoreSheet(
        corpus={"bleu4": bleu4(hyps, refs), "rouge_l": sum(scores) / len(scores)},
        per_sample=per_sample,
        parts=[{**row, **stats} for row, stats in zip(per_sample, bleu_parts(hyps, refs))],
        aggregations={"bleu4": CorpusBleu(), "rouge_l": Mean("rouge_l")},
    )

"""NCBI Disease NER (Doğan et al. 2014): the ``evalscope`` compatibility scoring of its task file.

The task is ``prompts/ncbi_disease.task.yaml`` (kind ``span_ner``: the CoNLL/BIO split shipped in
``data/ncbi_disease``, evalscope's ``ncbi`` prompt, the aligned XML parse and strict entity-level
micro P/R/F1 of :mod:`evalpipe.tasks.kinds.span_ner`). What the file cannot say is here, in its
``hook``: the ``evalscope`` scoring — :mod:`evalpipe.compat.evalscope_ner` reproduces evalscope's
scoring, quirks included, so numbers can be put next to evalscope's published ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from evalpipe.compat.evalscope_ner import (
    NCBI_TAG_MAP, evalscope_predicted_tags, evalscope_score_sheet, seqeval_default_entities,
)
from evalpipe.metrics.aggregation import MicroPRF
from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.spans import TOKEN_ACCURACY, token_counts
from evalpipe.paths import SHIPPED_DATA
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import Scoring, TaskSpec
from evalpipe.tasks.kinds.span_ner import NerGold
from evalpipe.tasks.taskfile.schema import TaskFile

__all__ = ["DATA_DIR", "NerGold", "TAG_MAP", "hook", "parse_evalscope", "score_evalscope"]

DATA_DIR = SHIPPED_DATA / "ncbi_disease"
#: tag name in answers → gold entity type (``{"disease": "Disease"}``, shared with the evalscope mode)
TAG_MAP = NCBI_TAG_MAP


# ---- evalscope compatibility -----------------------------------------------------------------

def parse_evalscope(answer: str, example: Example) -> Prediction:
    tags = evalscope_predicted_tags(answer, example.inputs["tokens"], TAG_MAP)
    return Prediction(value=tuple(tags), failed=not (answer or "").strip(), diagnostics={})


def empty_evalscope(example: Example) -> Prediction:
    return Prediction(value=("O",) * len(example.gold.tags), failed=True, diagnostics={"no_answer": True})


def score_evalscope(
    examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions
) -> ScoreSheet:
    """evalscope's numbers (:mod:`evalpipe.compat.evalscope_ner`), with per-sentence parts: its
    seqeval chunks never cross a sentence (each sentence is followed by an ``O``), so the corpus
    P/R/F1 are micro P/R/F1 of per-sentence chunk counts and accuracy a ratio of token counts."""
    golds = [list(ex.gold.tags) for ex in examples]
    preds = [list(p.value) for p in predictions]
    sheet = evalscope_score_sheet(golds, preds)
    return ScoreSheet(corpus=sheet.corpus, per_sample=sheet.per_sample,
                      parts=[_evalscope_parts(g, p) for g, p in zip(golds, preds)],
                      aggregations={**{stat: MicroPRF(stat) for stat in ("precision", "recall", "f1")},
                                    "accuracy": TOKEN_ACCURACY})


def _evalscope_parts(gold: Sequence[str], pred: Sequence[str]) -> dict[str, int]:
    """One sentence's chunk counts as evalscope's seqeval finds them, and its token counts."""
    gold_chunks = set(seqeval_default_entities([*gold, "O"]))
    pred_chunks = set(seqeval_default_entities([*pred, "O"]))
    hits = len(gold_chunks & pred_chunks)
    return {"tp": hits, "fp": len(pred_chunks) - hits, "fn": len(gold_chunks) - hits, **token_counts(gold, pred)}


def hook(spec: TaskSpec, task: TaskFile) -> TaskSpec:
    """Add the ``evalscope`` scoring to the task file's spec."""
    evalscope = Scoring(parse=parse_evalscope, score=score_evalscope, empty=empty_evalscope,
                        description="evalscope `ncbi` scoring reproduced, quirks included",
                        corpus_reason="evalscope's arithmetic reproduced as it computes it: seqeval over the "
                                      "whole corpus's tag sequence")
    return replace(spec, scorings={**spec.scorings, "evalscope": evalscope})

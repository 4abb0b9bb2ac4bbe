"""NCBI Disease NER (Doğan et al. 2014) with XML-tagged answers, evalscope's ``ncbi`` prompt.

Data: the CoNLL/BIO sentence split shipped in ``data/ncbi_disease`` (public domain, NLM).
Input text = tokens joined by single spaces; gold = IOB2 tags over those tokens.

Two scorings:

* ``default`` — the answer is parsed by :mod:`evalpipe.parsers.xml_tags` into character spans
  aligned to the input (whitespace-insensitive, by position), snapped to tokens, and scored with
  strict entity-level micro P/R/F1, partial-overlap F1 and seqeval-style token accuracy.
* ``evalscope`` — :mod:`evalpipe.compat.evalscope_ner` reproduces evalscope's scoring, quirks
  included, so numbers can be put next to evalscope's published ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evalpipe.compat.evalscope_ner import (
    NCBI_TAG_MAP, evalscope_predicted_tags, evalscope_score_sheet, seqeval_default_entities,
)
from evalpipe.data.conll import read_conll
from evalpipe.data.errors import DataError
from evalpipe.metrics.aggregation import MicroPRF
from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.spans import (
    TOKEN_ACCURACY, bio_to_spans, span_score_sheet, spans_to_bio, token_accuracy, token_counts,
)
from evalpipe.parsers.xml_tags import char_spans_to_token_spans, parse_tagged_answer, token_offsets
from evalpipe.records import Example, Prediction, ScoreSheet, Span
from evalpipe.tasks.base import EVAL, LoadOptions, QuickGeneration, SHOTS, Scoring, TaskData, TaskSpec
from evalpipe.tasks.registry import register
from evalpipe.paths import SHIPPED_DATA

DATA_DIR = SHIPPED_DATA / "ncbi_disease"
SPLITS = ("train", "devel", "test")
ENTITY_TYPE = "Disease"
#: tag name in answers → gold entity type (``{"disease": "Disease"}``, shared with the evalscope mode)
TAG_MAP = NCBI_TAG_MAP


@dataclass(frozen=True)
class NerGold:
    """Gold for one sentence: IOB2 tags and the token spans they encode."""

    tags: tuple[str, ...]
    spans: tuple[Span, ...]


def _split_path(options: LoadOptions, split: str) -> Path:
    """``--data-dir DIR`` may hold its own copy as ``DIR/ncbi_disease/<split>.tsv``; else the shipped one."""
    if options.data_dir is not None:
        candidate = Path(options.data_dir) / "ncbi_disease" / f"{split}.tsv"
        if candidate.is_file():
            return candidate
    return DATA_DIR / f"{split}.tsv"


def _examples(path: Path, split: str) -> tuple[Example, ...]:
    out = []
    for index, sentence in enumerate(read_conll(path, entity_types={ENTITY_TYPE})):
        out.append(
            Example(
                id=f"{split}-{index}",
                inputs={"text": " ".join(sentence.tokens), "tokens": sentence.tokens},
                gold=NerGold(tags=sentence.tags, spans=bio_to_spans(sentence.tags)),
                meta={"file": str(path), "line": sentence.line},
            )
        )
    return tuple(out)


def load(options: LoadOptions) -> TaskData:
    split = options.split or "test"
    if split not in SPLITS:
        raise DataError(DATA_DIR, None, "split", f"unknown split {split!r} (expected one of {', '.join(SPLITS)})")
    eval_path = Path(options.paths["eval"]) if "eval" in options.paths else _split_path(options, split)
    # shots always come from another split than the evaluated one
    pool_split = "train" if split != "train" else "devel"
    pool_path = Path(options.paths["shots"]) if "shots" in options.paths else _split_path(options, pool_split)
    return TaskData(
        examples=_examples(eval_path, split),
        shot_pool=_examples(pool_path, pool_split),
        files=(eval_path, pool_path),
        split=split,
    )


def shot_target(example: Example) -> str:
    """The answer a shot demonstrates: ``<response>`` + the text with ``<disease>`` tags."""
    tokens: Sequence[str] = example.inputs["tokens"]
    starts = {s.start: s for s in example.gold.spans}
    words: list[str] = []
    i = 0
    while i < len(tokens):
        span = starts.get(i)
        if span is None:
            words.append(tokens[i])
            i += 1
            continue
        words.append(f"<disease>{' '.join(tokens[span.start:span.end])}</disease>")
        i = span.end
    return f"<response>{' '.join(words)}</response>"


# ---- default scoring -------------------------------------------------------------------------

def parse(answer: str, example: Example) -> Prediction:
    """Answer → token spans, via character spans aligned to the input text."""
    tokens = example.inputs["tokens"]
    parsed = parse_tagged_answer(answer, example.inputs["text"], TAG_MAP)
    spans, cut = char_spans_to_token_spans(parsed.spans, token_offsets(tokens))
    diagnostics = {**parsed.diagnostics, "partial_token_spans": cut}
    return Prediction(value=spans, failed=parsed.failed, diagnostics=diagnostics)


def empty_prediction(example: Example) -> Prediction:
    return Prediction(value=(), failed=True, diagnostics={"no_answer": True})


def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    """Strict micro P/R/F1 over (start, end, type), partial-overlap F1, token accuracy.

    See :func:`evalpipe.metrics.spans.span_score_sheet` for the span metrics; ``accuracy`` is
    seqeval's token accuracy (O tokens included) of the predicted spans written as IOB2. A failed
    parse predicts no entity, so its gold entities are false negatives.
    """
    golds = [ex.gold.spans for ex in examples]
    preds = [tuple(p.value) for p in predictions]
    sheet = span_score_sheet(golds, preds)
    pred_tags = [spans_to_bio(p, len(ex.gold.tags)) for ex, p in zip(examples, preds)]
    accuracy = token_accuracy([ex.gold.tags for ex in examples], pred_tags)
    parts = [{**counts, **token_counts(ex.gold.tags, tags)}
             for counts, ex, tags in zip(sheet.per_sample, examples, pred_tags)]
    return ScoreSheet(corpus={**sheet.corpus, "accuracy": accuracy}, per_sample=sheet.per_sample, parts=parts,
                      aggregations={**sheet.aggregations, "accuracy": TOKEN_ACCURACY})


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


SPEC = register(
    TaskSpec(
        name="ncbi_disease",
        data_roles=(EVAL, SHOTS),
        description="NCBI Disease NER: tag disease mentions with <disease> XML tags (940 test sentences, 5-shot).",
        template="ncbi_disease.j2",
        load=load,
        shot_target=shot_target,
        scorings={
            "default": Scoring(parse=parse, score=score, empty=empty_prediction,
                               description="aligned XML parse, strict entity-level micro P/R/F1"),
            "evalscope": Scoring(parse=parse_evalscope, score=score_evalscope, empty=empty_evalscope,
                                 description="evalscope `ncbi` scoring reproduced, quirks included"),
        },
        metrics=("precision", "recall", "f1", "partial_f1", "accuracy"),
        max_tokens=512,
        default_shots=5,
        primary_metric="f1",
        metric_definitions={
            "precision": "share of predicted disease mentions that match a gold mention exactly (start, end, "
                         "type), micro over the corpus",
            "recall": "share of gold disease mentions found exactly (start, end, type), micro over the corpus; "
                      "the gold mentions of a failed or unparseable answer count as missed",
            "f1": "harmonic mean of strict precision and recall (micro: entity counts summed over all sentences)",
            "partial_f1": "F1 where a predicted mention counts as found when it overlaps a gold mention of the "
                          "same type (one-to-one matching), micro over the corpus",
            "accuracy": "share of tokens whose predicted IOB2 tag equals the gold tag, O tokens included (seqeval)",
            "tp": "predicted mentions that match a gold mention exactly, summed over sentences",
            "fp": "predicted mentions without an exact gold match, summed over sentences",
            "fn": "gold mentions without an exact predicted match, summed over sentences",
            "partial_precision": "share of predicted mentions overlapping a gold mention of the same type "
                                 "(one-to-one), micro over the corpus",
            "partial_recall": "share of gold mentions overlapped by a predicted mention of the same type "
                              "(one-to-one), micro over the corpus",
        },
        template_vars={
            "entities": "disease (Names of diseases, disorders, syndromes, and related pathological conditions)",
            "entity_list": "<disease>",
        },
        completion_stop=("\n\nInput:",),
        # the longest tagged test sentence is 586 characters (~190 tokens); the parser needs no closing tag
        quick=QuickGeneration(max_tokens=192, stop=("</response>",)),
        suites=("demo", "english-ner"),
        citation="Doğan RI, Leaman R, Lu Z. NCBI disease corpus: a resource for disease name recognition "
        "and concept normalization. J Biomed Inform 2014. Public domain (NLM).",
    )
)

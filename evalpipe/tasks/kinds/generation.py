"""Kind ``generation``: free text scored against a reference text (summaries, answers, explanations).

Gold: the ``fields.answer`` text (non-empty). Shots demonstrate the reference text.

Parsing (``parser``): ``answer_body`` (default) — :func:`evalpipe.parsers.zh_labels.answer_body`:
reasoning up to ``</think>``, code fences and markdown emphasis removed, stripped; ``text`` — the
answer stripped, nothing else removed (CLUE's summaries). An empty answer is a counted parse
failure and scores as the empty text.

Metrics by ``language``:

* ``en`` — per sample ROUGE-1/2/L F-measures (:mod:`evalpipe.metrics.rouge`), BERTScore P/R/F1
  (:mod:`evalpipe.metrics.bertscore`; ``bertscore: false`` leaves it out) and, with ``concepts: true``,
  UMLS-concept P/R/F1 (:mod:`evalpipe.metrics.concepts`; reported as not computed, never 0, without
  scispacy); each corpus value is the mean over samples (declared ``mean``: every one gets an interval);
* ``zh`` — corpus BLEU-4 with sacrebleu's ``zh`` tokenizer (declared from per-sentence n-gram
  statistics) and the mean of character-level ROUGE-L (:mod:`evalpipe.metrics.chinese_text`: the
  default rouge-score tokenizer drops every Chinese character).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from evalpipe.data.file_records import Record
from evalpipe.metrics.aggregation import Mean
from evalpipe.metrics.bertscore import bertscore_per_sample, resolve_settings
from evalpipe.metrics.chinese_text import text_score_sheet
from evalpipe.metrics.concepts import NotComputed, concept_per_sample, resolve_extractor
from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.rouge import rouge_per_sample
from evalpipe.parsers.zh_labels import answer_body
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import Scoring
from evalpipe.tasks.kinds.base import Drafted, Kind, KindParts, register_kind
from evalpipe.tasks.taskfile.schema import TaskFile

log = logging.getLogger("evalpipe.generation")

ENGLISH_METRICS = ("rouge1", "rouge2", "rougeL", "bertscore[*]_f1", "bertscore[*]_precision",
                   "bertscore[*]_recall", "umls[*]_f1", "umls[*]_precision", "umls[*]_recall")
CHINESE_METRICS = ("bleu4", "rouge_l")


class GenerationTask(TaskFile):
    kind: Literal["generation"]
    answer_kind: Literal["free_text"] | None = Field("free_text", description="free_text (default): LLM "
                                                     "judges may rate the answers; null: never judged.")
    language: Literal["en", "zh"] = Field("en", description="en: ROUGE, BERTScore (and UMLS concepts); zh: "
                                          "BLEU-4 (sacrebleu zh) and character ROUGE-L.")
    parser: Literal["answer_body", "text"] = Field("answer_body", description="answer_body: reasoning, code "
                                                   "fences and emphasis removed; text: the answer stripped.")
    bertscore: bool = Field(True, description="en: compute BERTScore (its encoder: --bertscore-model).")
    concepts: bool = Field(False, description="en: compute UMLS-concept P/R/F1 (needs scispacy).")

    @model_validator(mode="after")
    def _reference_field(self) -> GenerationTask:
        if self.fields.gold_field() is None:
            raise ValueError("fields.answer: name the field holding the reference text")
        if self.language == "zh" and self.concepts:
            raise ValueError("concepts (UMLS) are English-only")
        return self


def reference_text(task: TaskFile, record: Record) -> str:
    field = task.fields.gold_field()
    assert field is not None, "the kind's validator requires a gold field"
    names = field if isinstance(field, list) else [field]
    return record.text(next((n for n in names if n in record.fields), names[0]))


def read(task: GenerationTask, records: Sequence[Record]) -> list[Drafted]:
    return [Drafted(gold=reference_text(task, record)) for record in records]


def summary_score_sheet(predictions: Sequence[str], references: Sequence[str], options: MetricOptions,
                        concepts: bool, bertscore: bool = True) -> ScoreSheet:
    """ROUGE-1/2/L, BERTScore P/R/F1 and (if ``concepts``) UMLS-concept P/R/F1 per sample, means.

    Definitions: :mod:`evalpipe.metrics.rouge`, :mod:`evalpipe.metrics.bertscore`,
    :mod:`evalpipe.metrics.concepts`. A UMLS metric that cannot be computed is left out and its
    reason put in ``notes`` (and logged) — never reported as 0.
    """
    rouge = rouge_per_sample(predictions, references, options.rouge_stemmer)
    per_sample: list[dict[str, float]] = [dict(r) for r in rouge]
    if bertscore:
        for row, scores in zip(per_sample, bertscore_per_sample(predictions, references, resolve_settings(options))):
            row.update(scores)
    notes: dict[str, str] = {}
    if concepts:
        extractor = resolve_extractor(options)
        if isinstance(extractor, NotComputed):
            notes[extractor.metric] = extractor.reason
            log.warning(extractor.reason)
        else:
            for row, scores in zip(per_sample, concept_per_sample(predictions, references, extractor)):
                row.update(scores)
    corpus = {k: sum(s[k] for s in per_sample) / len(per_sample) for k in per_sample[0]} if per_sample else {}
    return ScoreSheet(corpus=corpus, per_sample=per_sample, notes=notes,
                      aggregations={key: Mean(key) for key in corpus})


def parse_body(answer: str, example: Example | None = None) -> Prediction:
    """The answer without reasoning, fences or emphasis; empty is a failure scored as ""."""
    body, reasoning = answer_body(answer)
    return Prediction(value=body, failed=not body, diagnostics={"empty": not body, "reasoning_stripped": reasoning})


def parse_text(answer: str, example: Example | None = None) -> Prediction:
    """The answer stripped, nothing else removed; empty is a failure."""
    text = (answer or "").strip()
    return Prediction(text, not text, {"empty_answer": not text})


def no_text(example: Example) -> Prediction:
    return Prediction("", True, {"no_answer": True})


def scoring(task: GenerationTask) -> Scoring:
    def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
        answers = [p.value or "" for p in predictions]
        references = [str(ex.gold) for ex in examples]
        if task.language == "zh":
            return text_score_sheet(answers, references)
        return summary_score_sheet(answers, references, options, task.concepts, task.bertscore)

    metrics = ("sacrebleu zh corpus BLEU-4; rouge-score ROUGE-L, char tokens" if task.language == "zh" else
               "ROUGE-1/2/L" + (", BERTScore P/R/F1" if task.bertscore else "")
               + (", UMLS-concept P/R/F1" if task.concepts else "") + "; per-sample means")
    # ROUGE, UMLS concepts and BLEU's n-gram statistics are per answer (means summed in answer order);
    # BERTScore is not: bert-score embeds 16 answers per call (padding moves the last bits) and its idf
    # is computed over the scored corpus
    samplewise = task.language == "zh" or not task.bertscore
    return Scoring(parse=parse_body if task.parser == "answer_body" else parse_text, score=score, empty=no_text,
                   description=metrics, samplewise=samplewise, corpus_reason="" if samplewise else BERTSCORE_CORPUS)


#: why a scoring with BERTScore is valued on the whole corpus (not from summed per-sample parts)
BERTSCORE_CORPUS = ("BERTScore: bert-score embeds 16 answers per call (padding moves the last bits of a "
                    "score) and its idf weights, when used, are computed over the scored corpus")


#: what each metric measures, for the report's glossary
DEFINITIONS = {
    "rouge1": "unigram overlap F-measure with the reference (rouge-score: lower-cased ASCII words, no "
              "stemming), mean over samples; an empty answer scores 0",
    "rouge2": "bigram overlap F-measure with the reference (as rouge1), mean over samples",
    "rougeL": "longest-common-subsequence F-measure over the whole text (not rougeLsum), mean over samples",
    "bertscore[*]_precision": "BERTScore precision: mean best cosine similarity of each answer token to a "
                              "reference token (encoder and layer in the name), mean over samples; empty answer 0",
    "bertscore[*]_recall": "BERTScore recall: the same from the reference tokens' side, mean over samples",
    "bertscore[*]_f1": "BERTScore F1: harmonic mean of its precision and recall, mean over samples",
    "umls[*]_precision": "share of the UMLS concepts named in the answer that the reference also names (extractor "
                         "in the name), mean over samples; an answer without concepts scores 0",
    "umls[*]_recall": "share of the reference's UMLS concepts the answer also names, mean over samples",
    "umls[*]_f1": "harmonic mean of the UMLS-concept precision and recall, mean over samples",
    "bleu4": "corpus BLEU-4 (sacrebleu, zh tokenizer: one token per Han character) on a 0-1 scale: n-gram "
             "statistics summed over answers, then brevity penalty and geometric mean",
    "rouge_l": "character-level ROUGE-L F-measure (one token per Han character), mean over answers",
}


def parts(task: GenerationTask) -> KindParts:
    metrics: tuple[str, ...]
    if task.language == "zh":
        metrics, primary = CHINESE_METRICS, "rouge_l"
    else:
        metrics = tuple(m for m in ENGLISH_METRICS
                        if (task.bertscore or not m.startswith("bertscore")) and (task.concepts or not m.startswith("umls")))
        primary = "rougeL"
    return KindParts(scorings={"default": scoring(task)}, shot_target=lambda ex: str(ex.gold),
                     metrics=metrics, primary_metric=primary,
                     definitions={m: d for m, d in DEFINITIONS.items() if m in metrics})


KIND = register_kind(Kind(
    name="generation",
    description="free text against a reference (en: ROUGE, BERTScore, UMLS concepts; zh: BLEU-4, character ROUGE-L)",
    model=GenerationTask,
    read=read,
    parts=parts,
))

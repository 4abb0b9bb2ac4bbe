"""What the CLUE tasks share: held-out shots, free-text scoring, notes on metrics not computed.

(Imported by the registry like every module here; it registers nothing.)

**Shots without a train split.** MeQSum, problem summaries, MeDiSumQA and MeDiSumCode ship
no train split. CLUE's reference shuffles the file with ``random.seed(1)`` and uses the first k
rows as shots. evalpipe makes the *same* choice (so the shots equal the reference's), keeps those
rows **out of the scored set** (as the reference also does), and puts them in the shot pool in
the reference's order: ``--fewshot-seed`` unset takes exactly them. The scored set is therefore
fixed by the task (it does not depend on ``--shots``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.compat.clue import reference_positions
from evalpipe.tasks.clue.files import DataFile, locate, problem_locating
from evalpipe.data.errors import DataError
from evalpipe.metrics.aggregation import Mean
from evalpipe.metrics.bertscore import bertscore_per_sample, resolve_settings
from evalpipe.metrics.concepts import NotComputed, concept_per_sample, resolve_extractor
from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.rouge import rouge_per_sample
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import LoadOptions, Scoring, TaskData

log = logging.getLogger("evalpipe.clue")

LEVEL1 = "clue-level1"
LEVEL2 = "clue-level2"
ALL = "clue"
CITATION = (
    "Dada A, Bauer M, Butler Contreras A, Koraş OA, Seibold CM, Smith KE, Kleesiek J. CLUE: A Clinical "
    "Language Understanding Evaluation for LLMs. arXiv:2404.04067, 2024."
)


# ---- data ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HeldOut:
    """File rows split into scored rows (file order) and shot rows (reference order)."""

    scored: tuple[int, ...]
    shots: tuple[int, ...]
    #: row → position after the reference's shuffle (provenance; the compat scorer uses it)
    positions: tuple[int, ...]


def held_out_data(examples: Sequence[Example], held: HeldOut, path: Path) -> TaskData:
    """TaskData of a test-only file: scored rows are evaluated, the held-out rows are the shots."""
    return TaskData(
        examples=tuple(examples[r] for r in held.scored),
        shot_pool=tuple(examples[r] for r in held.shots),
        files=(path,),
        split="test",
    )


def locate_test_file(file: DataFile, options: LoadOptions, shipped: Path | None = None) -> Path:
    """The evaluated file of a task whose data set is a single test file (no other split):
    ``--data TASK=PATH``, else ``--data-dir``, else the copy that ships with evalpipe, if any."""
    if (options.split or "test") != "test":
        raise DataError(file.name, None, "split", f"unknown split {options.split!r} (only test is scored)")
    return locate(file, options.paths.get("eval"), options.data_dir, shipped)


def single_file_problem(file: DataFile, shipped: Path | None = None) -> Callable[[LoadOptions], str | None]:
    """``data_problem`` for a task that reads one file (``--data TASK=PATH``, ``--data-dir`` or shipped)."""

    def data_problem(options: LoadOptions) -> str | None:
        return problem_locating(file, options.paths.get("eval"), options.data_dir, shipped)

    return data_problem


def hold_out_reference_shots(n_rows: int, k: int, path: Any) -> HeldOut:
    """The reference's k shot rows (positions 0..k-1 after its seeded shuffle) and the rest."""
    if n_rows <= k:
        raise DataError(path, None, None, f"{n_rows} record(s): need more than the {k} held out as few-shot examples")
    positions = reference_positions(n_rows)
    shots = tuple(sorted((r for r in range(n_rows) if positions[r] < k), key=lambda r: positions[r]))
    scored = tuple(r for r in range(n_rows) if positions[r] >= k)
    return HeldOut(scored, shots, tuple(positions))


def mean_over(per_sample: Sequence[Mapping[str, float]], keys: Iterable[str]) -> dict[str, float]:
    return {k: sum(s[k] for s in per_sample) / len(per_sample) for k in keys}


# ---- free-text scoring (MeQSum, problem summaries, MeDiSumQA) --------------------------------

SUMMARY_METRICS = ("rouge1", "rouge2", "rougeL")
#: what each summary metric measures, for the report's glossary (TaskSpec.metric_definitions)
SUMMARY_DEFINITIONS = {
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
}


def summary_score_sheet(
    predictions: Sequence[str], references: Sequence[str], options: MetricOptions, concepts: bool
) -> ScoreSheet:
    """ROUGE-1/2/L, BERTScore P/R/F1 and (if ``concepts``) UMLS-concept P/R/F1 per sample, means.

    Definitions: :mod:`evalpipe.metrics.rouge`, :mod:`evalpipe.metrics.bertscore`,
    :mod:`evalpipe.metrics.concepts`. A UMLS metric that cannot be computed is left out and its
    reason put in ``notes`` (and logged) — never reported as 0.
    """
    rouge = rouge_per_sample(predictions, references, options.rouge_stemmer)
    per_sample: list[dict[str, float]] = [dict(r) for r in rouge]
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
    corpus = mean_over(per_sample, per_sample[0].keys()) if per_sample else {}
    return ScoreSheet(corpus=corpus, per_sample=per_sample, notes=notes,
                      aggregations={key: Mean(key) for key in corpus})


def free_text(answer: str) -> Prediction:
    """Default parse of a free-text answer: the text, stripped; empty is a failure."""
    text = (answer or "").strip()
    return Prediction(text, not text, {"empty_answer": not text})


def raw_text(answer: str) -> Prediction:
    """Compat parse: the answer as the model returned it (the reference strips nothing)."""
    return Prediction(answer or "", not (answer or "").strip(), {"empty_answer": not (answer or "").strip()})


def no_text(example: Example) -> Prediction:
    return Prediction("", True, {"no_answer": True})


def summary_scorings(
    reference: Callable[[Example], str],
    clue_reference: Callable[[Example], str],
    concepts: bool,
) -> dict[str, Scoring]:
    """``default`` and ``clue`` scorings of a free-text task; only the gold text and parse differ."""

    def scorer(ref: Callable[[Example], str]) -> Callable[..., ScoreSheet]:
        def score(examples: Sequence[Example], predictions: Sequence[Prediction],
                  options: MetricOptions) -> ScoreSheet:
            answers = [p.value for p in predictions]
            return summary_score_sheet(answers, [ref(ex) for ex in examples], options, concepts)

        return score

    metrics = "ROUGE-1/2/L, BERTScore P/R/F1" + (", UMLS-concept P/R/F1" if concepts else "")
    return {
        "default": Scoring(parse=lambda answer, ex: free_text(answer), score=scorer(reference), empty=no_text,
                           description=f"{metrics}; per-sample means"),
        "clue": Scoring(parse=lambda answer, ex: raw_text(answer), score=scorer(clue_reference), empty=no_text,
                        description=f"CLUE reference: {metrics} on raw answers and the reference's gold text"),
    }


def gold_text(example: Example) -> str:
    """The reference text of a task whose gold is a plain string."""
    return str(example.gold)


def provenance(path: Any, line: int | None, position: int) -> dict[str, Any]:
    return {"file": str(path), "line": line, "reference_position": position}

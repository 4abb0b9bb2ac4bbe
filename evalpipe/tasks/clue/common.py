"""What the CLUE tasks share: suite names, citation, locating single-file data, free-text scorings.

(Imported by the registry like every module here; it registers nothing.) Most CLUE tasks are task
files (``prompts/clue/*.task.yaml``) with hooks in :mod:`evalpipe.tasks.clue.hooks`; LongHealth,
whose document assembly no task file expresses, is Python (:mod:`evalpipe.tasks.clue.longhealth`).

**Shots without a train split.** MeQSum, problem summaries, MeDiSumQA and MeDiSumCode ship no train
split. CLUE's reference shuffles the file with ``random.seed(1)`` and uses the first k rows as shots.
Their task files make the *same* choice (``shots: {source: held_out, seed: 1}``, see
:mod:`evalpipe.tasks.taskfile.load`), so the shots equal the reference's, are kept **out of the
scored set** (as the reference also does), and are in the shot pool in the reference's order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from evalpipe.tasks.clue.files import DataFile, locate, problem_locating
from evalpipe.data.errors import DataError
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import LoadOptions, Scoring
from evalpipe.tasks.kinds.generation import BERTSCORE_CORPUS, summary_score_sheet

log = logging.getLogger("evalpipe.clue")

LEVEL1 = "clue-level1"
LEVEL2 = "clue-level2"
ALL = "clue"
CITATION = (
    "Dada A, Bauer M, Butler Contreras A, Koraş OA, Seibold CM, Smith KE, Kleesiek J. CLUE: A Clinical "
    "Language Understanding Evaluation for LLMs. arXiv:2404.04067, 2024."
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


# ---- free-text scoring (MeQSum, problem summaries, MeDiSumQA) --------------------------------

SUMMARY_METRICS = ("rouge1", "rouge2", "rougeL")
__all__ = ["ALL", "CITATION", "LEVEL1", "LEVEL2", "SUMMARY_METRICS", "free_text", "gold_text", "locate_test_file",
           "no_text", "raw_text", "single_file_problem", "summary_score_sheet", "summary_scorings"]


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
                           description=f"{metrics}; per-sample means", corpus_reason=BERTSCORE_CORPUS),
        "clue": Scoring(parse=lambda answer, ex: raw_text(answer), score=scorer(clue_reference), empty=no_text,
                        description=f"CLUE reference: {metrics} on raw answers and the reference's gold text",
                        corpus_reason=BERTSCORE_CORPUS),
    }


def gold_text(example: Example) -> str:
    """The reference text of a task whose gold is a plain string."""
    return str(example.gold)



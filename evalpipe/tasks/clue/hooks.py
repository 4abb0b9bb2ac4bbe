"""What CLUE's task files (``prompts/clue/*.task.yaml``) cannot say: the reference's scoring and one gold.

Each function is a task-file ``hook`` (``hook: evalpipe.tasks.clue.hooks:mednli``): it receives the
TaskSpec built from the file and returns it with

* the ``clue`` compatibility scoring (:mod:`evalpipe.compat.clue`: the reference's parse, its scored
  set and its means, quirks included), which needs each example's ``reference_position`` — where
  its row lands after the reference's ``random.seed(1)`` shuffle of the evaluated file — added to
  the example's meta by :func:`with_reference_positions`;
* for problem summaries, the gold :class:`ProblemList` (the ``;``-separated problems, and the cell
  as written, from which the reference builds its own gold text).

Everything else — files, fields, held-out shots (the reference's own: ``source: held_out``,
``seed: 1``), template, generation settings, default scoring — is in the task files.
"""

from __future__ import annotations

from typing import cast

from collections.abc import Sequence
from dataclasses import dataclass, replace

from evalpipe.compat.clue import (
    first_doubled_mean, icd_codes, icd_document_scores, nli_credited, problem_list_reference, reference_positions,
    reference_weights, weighted_mean_aggregations, weighted_parts,
)
from evalpipe.data.errors import DataError
from evalpipe.data.stream import map_examples
from evalpipe.metrics.icd10 import PER_DOCUMENT_KEYS
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import LoadOptions, Scoring, TaskData, TaskSpec
from evalpipe.tasks.clue.common import raw_text, summary_scorings
from evalpipe.tasks.kinds.generation import BERTSCORE_CORPUS, summary_score_sheet
from evalpipe.tasks.taskfile.schema import TaskFile

#: the reference takes this many MedNLI shots from the *test* file (quirk reproduced in ``clue`` scoring)
MEDNLI_REFERENCE_SHOTS = 3


def with_reference_positions(spec: TaskSpec) -> TaskSpec:
    """The spec whose loader adds ``meta["reference_position"]`` to every example of the evaluated file
    (scored rows and held-out shot rows): its position after the reference's seeded shuffle of all
    the file's rows (:func:`evalpipe.compat.clue.reference_positions`)."""
    load = spec.load

    def positioned(options: LoadOptions) -> TaskData:
        data = load(options).materialized()  # positions need the file's row count
        evaluated = str(data.files[0])
        rows = [ex for ex in (*data.examples, *data.shot_pool) if ex.meta.get("file") == evaluated]
        positions = reference_positions(len(rows))

        def place(example: Example) -> Example:
            if example.meta.get("file") != evaluated:
                return example
            return replace(example, meta={**example.meta, "reference_position": positions[example.meta["row"]]})

        return replace(data, examples=tuple(map(place, data.examples)), shot_pool=tuple(map(place, data.shot_pool)))

    return replace(spec, load=positioned)


# ---- MeQSum, MeDiSumQA: the kind's default scoring, plus the reference's -----------------------

def summary(spec: TaskSpec, task: TaskFile) -> TaskSpec:
    """``clue`` scoring of a free-text task: the raw answer (the reference strips nothing) against the
    same gold text, with the metrics of the default scoring (quirk 10)."""
    concepts = bool(getattr(task, "concepts", False))

    def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
        return summary_score_sheet([p.value for p in predictions], [str(ex.gold) for ex in examples], options, concepts)

    clue = Scoring(parse=lambda answer, ex: raw_text(answer), score=score, empty=spec.scoring(None).empty,
                   description="CLUE reference: " + spec.scoring(None).description + " on raw answers",
                   corpus_reason=BERTSCORE_CORPUS)
    return with_reference_positions(replace(spec, scorings={**spec.scorings, "clue": clue}))


# ---- problem summaries: the problem-list gold ------------------------------------------------

@dataclass(frozen=True)
class ProblemList:
    """Gold: the problems, and the Summary cell exactly as in the file."""

    problems: tuple[str, ...]
    summary: str

    @property
    def text(self) -> str:
        return ", ".join(self.problems)


def split_problems(summary_cell: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in summary_cell.split(";") if p.strip())


def _problem_list(example: Example) -> Example:
    problems = split_problems(str(example.gold))
    if not problems:
        raise DataError(example.meta.get("file", "?"), example.meta.get("line"), "Summary",
                        "no problem between the ';' separators")
    return replace(example, gold=ProblemList(problems, str(example.gold)))


def problem_summaries(spec: TaskSpec, task: TaskFile) -> TaskSpec:
    """Gold text (default): the ``;``-separated problems, each stripped, empty ones dropped, joined with
    ``, ``; the ``clue`` scoring uses the reference's text instead (quirk 9)."""
    load = spec.load

    def listed(options: LoadOptions) -> TaskData:
        data = load(options)
        return replace(data, examples=map_examples(_problem_list, data.examples),
                       shot_pool=tuple(map(_problem_list, data.shot_pool)))

    def reference(example: Example) -> str:
        return cast("str", example.gold.text)

    def clue_reference(example: Example) -> str:
        return problem_list_reference(example.gold.summary)

    return with_reference_positions(replace(spec, load=listed, shot_target=reference,
                                            scorings=summary_scorings(reference, clue_reference, concepts=True)))


# ---- MedNLI ----------------------------------------------------------------------------------

def parse_mednli_clue(answer: str, example: Example) -> Prediction:
    """Quirk 2 of :mod:`evalpipe.compat.clue`; the value is the gold label when credited, else None."""
    credited = nli_credited(answer, example.gold)
    return Prediction(example.gold if credited else None, not (answer or "").strip(),
                      {"gold_mentions_not_one": not credited})


def score_mednli_clue(examples: Sequence[Example], predictions: Sequence[Prediction],
                      options: MetricOptions) -> ScoreSheet:
    """Accuracy over the reference's scored set (its shot rows left out), first item counted twice.

    Per sample: ``accuracy`` and ``reference_weight`` (0 = a reference shot, not scored; 2 = the
    first scored item; 1 otherwise).
    """
    positions = [int(ex.meta["reference_position"]) for ex in examples]
    correct = [float(p.value is not None and p.value == ex.gold) for ex, p in zip(examples, predictions)]
    kept = [i for i, pos in enumerate(positions) if pos >= MEDNLI_REFERENCE_SHOTS]
    weights = reference_weights(positions, [pos >= MEDNLI_REFERENCE_SHOTS for pos in positions])
    per_sample = [{"accuracy": c, "reference_weight": w} for c, w in zip(correct, weights)]
    if not kept:  # only reference shots were evaluated (--ids): the reference scores none of them
        return ScoreSheet(corpus={}, per_sample=per_sample)
    value = first_doubled_mean([correct[i] for i in kept], [positions[i] for i in kept])
    return ScoreSheet(corpus={"accuracy": value}, per_sample=per_sample,
                      parts=[weighted_parts({"accuracy": c}, w) for c, w in zip(correct, weights)],
                      aggregations=weighted_mean_aggregations(["accuracy"]))


def mednli(spec: TaskSpec, task: TaskFile) -> TaskSpec:
    """``clue``: the gold label occurs once in the answer; the reference's scored set; first item doubled."""
    clue = Scoring(parse=parse_mednli_clue, score=score_mednli_clue, empty=spec.scoring(None).empty,
                   description="CLUE reference: gold label occurs once; reference scored set; first item doubled",
                   corpus_reason="the reference's arithmetic: its scored set and its first item counted twice "
                                 "are properties of the corpus, not of a sample")
    return with_reference_positions(replace(spec, scorings={**spec.scorings, "clue": clue}))


# ---- MeDiSumCode -----------------------------------------------------------------------------

def parse_medisumcode_clue(answer: str, example: Example) -> Prediction:
    codes = icd_codes(answer)
    return Prediction(tuple(codes), not codes, {"no_codes": not codes})


def score_medisumcode_clue(examples: Sequence[Example], predictions: Sequence[Prediction],
                           options: MetricOptions) -> ScoreSheet:
    per_sample = [icd_document_scores(list(p.value), list(ex.gold.raw)) for ex, p in zip(examples, predictions)]
    positions = [int(ex.meta["reference_position"]) for ex in examples]
    corpus = {key: first_doubled_mean([s[key] for s in per_sample], positions) for key in PER_DOCUMENT_KEYS}
    parts = [weighted_parts({k: s[k] for k in PER_DOCUMENT_KEYS}, w)
             for s, w in zip(per_sample, reference_weights(positions))]
    return ScoreSheet(corpus=corpus, per_sample=per_sample, parts=parts,
                      aggregations=weighted_mean_aggregations(PER_DOCUMENT_KEYS))


def medisumcode(spec: TaskSpec, task: TaskFile) -> TaskSpec:
    """``clue``: the reference's regex, list-based P/R, first item counted twice (quirks 3, 6, 7, 8)."""
    clue = Scoring(parse=parse_medisumcode_clue, score=score_medisumcode_clue, empty=spec.scoring(None).empty,
                   description="CLUE reference: its regex, list-based P/R, first item counted twice",
                   corpus_reason="the reference's arithmetic: its first item is counted twice, a property of "
                                 "the corpus, not of a sample")
    return with_reference_positions(replace(spec, scorings={**spec.scorings, "clue": clue}))

"""CLUE level 1 · problem-list summaries (BioNLP 2023 shared task 1A, Gao et al. 2023).

Data (credentialed, PhysioNet): ``BioNLP2023-1A-Test.csv`` with columns ``Subjectives`` (also
accepted: ``Subjective Sections``), ``Assessment`` and ``Summary`` (the gold problem list, problems
separated by ``;``); ``File ID`` is the sample id when present (else ``row-N``).

Gold text (default): the ``;``-separated problems, each stripped, empty ones dropped, joined with
``, ``. The ``clue`` scoring uses the reference's text instead (``;`` → ``, `` with the trailing
separator kept, quirk 9 of :mod:`evalpipe.compat.clue`).

Context: ``subjective`` is the ``long_field`` (cut from the end when context budgeting is on).

Shots: no train split is used; the reference's 3 shot rows are held out of the scored set and form
the shot pool (:mod:`evalpipe.tasks.clue.common`). 512 new tokens.

Metrics: ROUGE-1/2/L, BERTScore P/R/F1 and UMLS-concept P/R/F1 per sample, averaged.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalpipe.compat.clue import problem_list_reference
from evalpipe.data.records import check_unique_ids
from evalpipe.tasks.clue.files import DataFile, read_csv
from evalpipe.records import Example
from evalpipe.tasks.base import LoadOptions, TaskData, TaskSpec
from evalpipe.tasks.clue.common import (
    locate_test_file,
    ALL, CITATION, LEVEL1, SUMMARY_DEFINITIONS, SUMMARY_METRICS, held_out_data, hold_out_reference_shots, provenance,
    single_file_problem, summary_scorings,
)
from evalpipe.tasks.registry import register

NAME = "clue_problem_summaries"
REFERENCE_SHOTS = 3
FILE = DataFile(
    name="BioNLP2023-1A-Test.csv", dataset="BioNLP 2023 task 1A (problem list summarization)",
    published="https://physionet.org/content/bionlp-workshop-2023-task-1a/2.0.0/", credentialed=True,
    subdir="ProblemSummary",
)
COLUMNS = (("Subjectives", "Subjective Sections"), ("Assessment",), ("Summary",))


@dataclass(frozen=True)
class ProblemList:
    """Gold: the problems, and the Summary cell exactly as in the file."""

    problems: tuple[str, ...]
    summary: str

    @property
    def text(self) -> str:
        return ", ".join(self.problems)


def split_problems(summary: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in summary.split(";") if p.strip())


def load(options: LoadOptions) -> TaskData:
    path = locate_test_file(FILE, options)
    records, columns = read_csv(path, COLUMNS)
    held = hold_out_reference_shots(len(records), REFERENCE_SHOTS, path)
    examples = []
    for row, record in enumerate(records):
        summary = record.text("Summary")
        problems = split_problems(summary)
        if not problems:
            raise record.error("Summary", "no problem between the ';' separators")
        file_id = str(record.fields.get("File ID") or "").strip()
        examples.append(Example(
            id=file_id or f"row-{row}",
            inputs={"subjective": record.text(columns["Subjectives"], allow_empty=True),
                    "assessment": record.text("Assessment", allow_empty=True)},
            gold=ProblemList(problems, summary),
            meta=provenance(path, record.line, held.positions[row]),
        ))
    check_unique_ids(records, [ex.id for ex in examples], "File ID")
    return held_out_data(examples, held, path)


data_problem = single_file_problem(FILE)


def reference(example: Example) -> str:
    return example.gold.text


def clue_reference(example: Example) -> str:
    return problem_list_reference(example.gold.summary)


SPEC = register(
    TaskSpec(
        name=NAME,
        data_problem=data_problem,
        description="CLUE L1 · problem summaries (BioNLP 2023 1A): list the diagnoses/problems of a "
        "progress note (3-shot).",
        template="clue/problem_summaries.j2",
        load=load,
        shot_target=reference,
        scorings=summary_scorings(reference, clue_reference, concepts=True),
        metrics=SUMMARY_METRICS,
        metric_definitions=SUMMARY_DEFINITIONS,
        max_tokens=512,
        long_field="subjective",
        default_shots=3,
        completion_stop=("\n--------------BEGIN DISCHARGE LETTER",),
        suites=(LEVEL1, ALL),
        credentialed=True,
        citation="Gao Y, Dligach D, Miller T, et al. Overview of the Problem List Summarization (ProbSum) 2023 "
        "Shared Task on Summarizing Patients' Active Diagnoses and Problems from Electronic Health Record "
        "Progress Notes. BioNLP 2023. PhysioNet (credentialed). " + CITATION,
    )
)

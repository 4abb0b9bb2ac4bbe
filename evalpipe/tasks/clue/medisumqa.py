"""CLUE level 2 · MeDiSumQA (Dada et al. 2025): answer a patient's question about a discharge letter.

Data (credentialed, PhysioNet): ``MeDiSumQA.json`` — a JSON array (or JSON lines) of objects
with ``discharge_summary``, ``Question`` and ``Answer`` (other fields such as ``note_id`` are kept
as provenance). The sample id is the row index.

Context: ``discharge_summary`` is the ``long_field`` (cut from the end when context budgeting
is on).

Shots: no train split; the reference's 1 shot row (``random.seed(1)`` shuffle) is held out of the
scored set and forms the shot pool (:mod:`evalpipe.tasks.clue.common`). 512 new tokens.

Metrics: ROUGE-1/2/L, BERTScore P/R/F1 and UMLS-concept P/R/F1 per sample, averaged. ``clue``
scoring differs only in scoring the raw (unstripped) answer.
"""

from __future__ import annotations

from evalpipe.data.records import read_records
from evalpipe.tasks.clue.files import DataFile
from evalpipe.records import Example
from evalpipe.tasks.base import LoadOptions, TaskData, TaskSpec
from evalpipe.tasks.clue.common import (
    ALL, CITATION, LEVEL2, SUMMARY_DEFINITIONS, SUMMARY_METRICS, gold_text,
    held_out_data, hold_out_reference_shots, locate_test_file,
    provenance, single_file_problem, summary_scorings,
)
from evalpipe.tasks.registry import register

NAME = "clue_medisumqa"
REFERENCE_SHOTS = 1
FILE = DataFile(
    name="MeDiSumQA.json", also=("MeDiSumQA.jsonl",), dataset="MeDiSumQA",
    published="https://physionet.org/content/medisumqa/1.0.0/", credentialed=True, subdir="MeDiSumQA",
)


def load(options: LoadOptions) -> TaskData:
    path = locate_test_file(FILE, options)
    records = read_records(path)
    held = hold_out_reference_shots(len(records), REFERENCE_SHOTS, path)
    examples = []
    for row, record in enumerate(records):
        note_id = record.fields.get("note_id")
        examples.append(Example(
            id=str(row),
            inputs={"discharge_summary": record.text("discharge_summary"), "question": record.text("Question")},
            gold=record.text("Answer"),
            meta={**provenance(path, record.line, held.positions[row]), "note_id": note_id},
        ))
    return held_out_data(examples, held, path)


data_problem = single_file_problem(FILE)


SPEC = register(
    TaskSpec(
        name=NAME,
        data_problem=data_problem,
        description="CLUE L2 · MeDiSumQA: answer a patient-oriented question about a discharge letter (1-shot).",
        template="clue/medisumqa.j2",
        load=load,
        shot_target=gold_text,
        scorings=summary_scorings(gold_text, gold_text, concepts=True),
        metrics=SUMMARY_METRICS,
        metric_definitions=SUMMARY_DEFINITIONS,
        max_tokens=512,
        long_field="discharge_summary",
        default_shots=1,
        completion_stop=("\n--------------BEGIN DISCHARGE LETTER",),
        suites=(LEVEL2, ALL),
        credentialed=True,
        citation="Dada A, Koraş OA, Bauer M, et al. MeDiSumQA: Patient-Oriented Question-Answer Generation from "
        "Discharge Letters. arXiv:2502.03298; PhysioNet (credentialed), doi:10.13026/f566-h049. " + CITATION,
    )
)

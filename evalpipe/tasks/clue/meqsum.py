"""CLUE level 1 · MeQSum (Ben Abacha & Demner-Fushman 2019): summarise a patient's question.

Data: ships with evalpipe (``data/meqsum/meqsum.jsonl``, CC BY 4.0, see ``data/meqsum/SOURCE.md``);
``--data clue_meqsum=PATH`` or a ``meqsum.jsonl`` in ``--data-dir`` replaces it. JSON lines with
``CHQ`` (the consumer health question) and ``Summary`` (the reference question); ``id`` is the
sample id (the row index when absent).

Shots: no train split exists; the reference's 3 shot rows (``random.seed(1)`` shuffle) are held
out of the scored set and form the shot pool (:mod:`evalpipe.tasks.clue.common`). 512 new tokens.

Metrics: ROUGE-1/2/L and BERTScore P/R/F1 per sample, averaged. ``clue`` scoring differs only in
scoring the raw (unstripped) answer.
"""

from __future__ import annotations

from pathlib import Path

from evalpipe.data.records import check_unique_ids, read_records
from evalpipe.tasks.clue.files import DataFile
from evalpipe.records import Example
from evalpipe.tasks.base import LoadOptions, QuickGeneration, TaskData, TaskSpec
from evalpipe.tasks.clue.common import (
    ALL, CITATION, LEVEL1, SUMMARY_DEFINITIONS, SUMMARY_METRICS, gold_text,
    held_out_data, hold_out_reference_shots, locate_test_file,
    provenance, single_file_problem, summary_scorings,
)
from evalpipe.tasks.registry import register
from evalpipe.paths import SHIPPED_DATA

NAME = "clue_meqsum"
REFERENCE_SHOTS = 3
SHIPPED = SHIPPED_DATA / "meqsum" / "meqsum.jsonl"
FILE = DataFile(name="meqsum.jsonl", dataset="MeQSum", published="https://github.com/abachaa/MeQSum (CC BY 4.0)",
                credentialed=False, subdir="MeQSum")


def load(options: LoadOptions) -> TaskData:
    path = locate_test_file(FILE, options, SHIPPED)
    records = read_records(path)
    held = hold_out_reference_shots(len(records), REFERENCE_SHOTS, path)
    examples = []
    for row, record in enumerate(records):
        raw_id = record.fields.get("id")
        examples.append(Example(
            id=str(raw_id) if raw_id is not None else str(row),
            inputs={"question": record.text("CHQ")},
            gold=record.text("Summary"),
            meta={**provenance(path, record.line, held.positions[row]), "source_file": record.fields.get("File")},
        ))
    check_unique_ids(records, [ex.id for ex in examples], "id")
    return held_out_data(examples, held, path)


data_problem = single_file_problem(FILE, SHIPPED)


SPEC = register(
    TaskSpec(
        name=NAME,
        data_problem=data_problem,
        description="CLUE L1 · MeQSum: rewrite a consumer health question as one concise question "
        "(3-shot, 997 scored).",
        template="clue/meqsum.j2",
        load=load,
        shot_target=gold_text,
        scorings=summary_scorings(gold_text, gold_text, concepts=False),
        metrics=SUMMARY_METRICS,
        metric_definitions=SUMMARY_DEFINITIONS,
        max_tokens=512,
        default_shots=3,
        completion_stop=("\n--------------PATIENT INQUIRY",),
        # one question: the longest reference summary is 168 characters (~55 tokens)
        quick=QuickGeneration(max_tokens=64, stop=("\n\n", "--------------")),
        suites=(LEVEL1, ALL, "demo"),
        credentialed=False,
        citation="Ben Abacha A, Demner-Fushman D. On the Summarization of Consumer Health Questions. ACL 2019. "
        "CC BY 4.0. " + CITATION,
    )
)

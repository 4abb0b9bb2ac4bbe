"""CLUE level 2 · MeDiSumCode: list the ICD-10 codes of a MIMIC-IV discharge letter.

Data (credentialed: derived from MIMIC-IV v2.2 and MIMIC-IV-Note, generated locally with CLUE's
``data/MeDiSumCode/generate_code_dataset.py``): ``MeDiSumCode.json`` — JSON lines (what that
script writes) or a JSON array, objects ``{hadm_id, text, icd_codes: [{code, description}]}``.
``hadm_id`` is the sample id; a document must have at least one code (it could not be scored).

Context: ``text`` is the ``long_field`` (cut from the end when context budgeting is on).

Shots: the reference's 1 shot row (``random.seed(1)`` shuffle) is held out of the scored set and
forms the shot pool. The shot answer is the reference's: ``ICD-10 Codes: <code>, <code>, …``, codes
as in the file. 512 new tokens.

Scorings:

* ``default`` — :func:`evalpipe.parsers.icd10.parse_icd10_codes` (any case, dotted or not, C4A/U07.1
  shapes, duplicates dropped) and :func:`evalpipe.metrics.icd10.icd_score_sheet` (per-document and
  micro exact / 3-character P/R/F1, valid-code ratio against ICD-10-CM).
* ``clue`` — the reference's regex, list-based P/R, and mean with the first item counted twice
  (quirks 3, 6, 7, 8 of :mod:`evalpipe.compat.clue`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evalpipe.compat.clue import first_doubled_mean, icd_codes, icd_document_scores, reference_weights, weighted_mean_aggregations, weighted_parts
from evalpipe.data.records import Record, check_unique_ids, read_records
from evalpipe.tasks.clue.files import DataFile
from evalpipe.metrics.icd10 import PER_DOCUMENT_KEYS, icd_score_sheet
from evalpipe.metrics.options import MetricOptions
from evalpipe.parsers.icd10 import normalise_code, parse_icd10_codes
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import LoadOptions, Scoring, TaskData, TaskSpec
from evalpipe.tasks.clue.common import (
    locate_test_file,
    ALL, CITATION, LEVEL2, held_out_data, hold_out_reference_shots, provenance, single_file_problem,
)
from evalpipe.tasks.registry import register

NAME = "clue_medisumcode"
REFERENCE_SHOTS = 1
SHOT_PREFIX = "ICD-10 Codes: "
FILE = DataFile(
    name="MeDiSumCode.json", also=("MeDiSumCode.jsonl",), dataset="MeDiSumCode", subdir="MeDiSumCode",
    published="https://github.com/TIO-IKIM/CLUE (generated from MIMIC-IV v2.2 hosp/diagnoses_icd and "
    "MIMIC-IV-Note v2.2 on PhysioNet)",
    credentialed=True,
    how="generate it with CLUE's data/MeDiSumCode/generate_code_dataset.py --max_examples 500",
)


@dataclass(frozen=True)
class CodeGold:
    """Gold codes normalised and de-duplicated (``codes``) and exactly as in the file (``raw``)."""

    codes: tuple[str, ...]
    raw: tuple[str, ...]


def _gold(record: Record) -> CodeGold:
    items = record.fields.get("icd_codes")
    if not isinstance(items, list) or not items:
        raise record.error("icd_codes", "missing or empty (a document without codes cannot be scored)")
    raw = []
    for i, item in enumerate(items):
        code = item.get("code") if isinstance(item, dict) else None
        if not isinstance(code, str) or not code.strip():
            raise record.error(f"icd_codes[{i}].code", "missing or not a non-empty string")
        raw.append(code.strip())
    return CodeGold(codes=tuple(dict.fromkeys(normalise_code(c) for c in raw)), raw=tuple(raw))


def load(options: LoadOptions) -> TaskData:
    path = locate_test_file(FILE, options)
    records = read_records(path)
    held = hold_out_reference_shots(len(records), REFERENCE_SHOTS, path)
    examples = []
    for row, record in enumerate(records):
        hadm = record.fields.get("hadm_id")
        if hadm is None or not str(hadm).strip():
            raise record.error("hadm_id", "missing")
        examples.append(Example(
            id=str(hadm).strip(),
            inputs={"text": record.text("text")},
            gold=_gold(record),
            meta=provenance(path, record.line, held.positions[row]),
        ))
    check_unique_ids(records, [ex.id for ex in examples], "hadm_id")
    return held_out_data(examples, held, path)


data_problem = single_file_problem(FILE)


def shot_target(example: Example) -> str:
    return SHOT_PREFIX + ", ".join(example.gold.raw)


# ---- default ---------------------------------------------------------------------------------

def parse(answer: str, example: Example) -> Prediction:
    return parse_icd10_codes(answer)


def empty(example: Example) -> Prediction:
    return Prediction((), True, {"no_answer": True})


def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    return icd_score_sheet([ex.gold.codes for ex in examples], [tuple(p.value) for p in predictions])


# ---- clue compatibility ----------------------------------------------------------------------

def parse_clue(answer: str, example: Example) -> Prediction:
    codes = icd_codes(answer)
    return Prediction(tuple(codes), not codes, {"no_codes": not codes})


def score_clue(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    per_sample = [icd_document_scores(list(p.value), list(ex.gold.raw)) for ex, p in zip(examples, predictions)]
    positions = [int(ex.meta["reference_position"]) for ex in examples]
    corpus = {key: first_doubled_mean([s[key] for s in per_sample], positions) for key in PER_DOCUMENT_KEYS}
    parts = [weighted_parts({k: s[k] for k in PER_DOCUMENT_KEYS}, w)
             for s, w in zip(per_sample, reference_weights(positions))]
    return ScoreSheet(corpus=corpus, per_sample=per_sample, parts=parts,
                      aggregations=weighted_mean_aggregations(PER_DOCUMENT_KEYS))


SPEC = register(
    TaskSpec(
        name=NAME,
        data_problem=data_problem,
        description="CLUE L2 · MeDiSumCode: list the ICD-10 codes of a MIMIC-IV discharge letter (1-shot).",
        template="clue/medisumcode.j2",
        load=load,
        shot_target=shot_target,
        scorings={
            "default": Scoring(parse=parse, score=score, empty=empty,
                               description="ICD-10 exact and 3-character P/R/F1 (per document and micro), "
                               "valid-code ratio"),
            "clue": Scoring(parse=parse_clue, score=score_clue, empty=empty,
                            description="CLUE reference: its regex, list-based P/R, first item counted twice"),
        },
        metrics=("exact_f1", "category_f1", "valid_ratio", "exact_precision", "exact_recall",
                 "exact_micro_f1", "category_micro_f1", "valid_micro_ratio"),
        max_tokens=512,
        primary_metric="exact_f1",
        long_field="text",
        default_shots=1,
        completion_stop=("\n--------------BEGIN DISCHARGE LETTER", "\n\n"),
        suites=(LEVEL2, ALL),
        credentialed=True,
        citation="Derived from MIMIC-IV v2.2 (Johnson et al. 2023) and MIMIC-IV-Note v2.2, PhysioNet (credentialed). "
        + CITATION,
    )
)

"""Kind ``code_list``: the set of codes a document should get (ICD-10 diagnosis coding).

Gold (``fields.answer``): a list of codes, a list of objects holding the code under ``code_key``
(MeDiSumCode's ``icd_codes: [{code, description}]``), or a text of codes split at ``separator``. A
document must have at least one code (it could not be scored otherwise). Codes are kept as written
(``raw``, what a shot demonstrates) and normalised and de-duplicated for scoring (``codes``).

Parsing and metrics by ``code_system`` (``icd10``, the one system so far):
:func:`evalpipe.parsers.icd10.parse_icd10_codes` (any case, dotted or not, duplicates dropped; no code
found is a parse failure) and :func:`evalpipe.metrics.icd10.icd_score_sheet` — per-document and micro
exact and 3-character-category P/R/F1, and the share of predicted codes that are valid ICD-10-CM codes,
each with its declared aggregation. A shot's answer is ``shot_prefix`` + the codes joined by ``, ``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from evalpipe.data.file_records import Record
from evalpipe.metrics.icd10 import icd_score_sheet
from evalpipe.metrics.options import MetricOptions
from evalpipe.parsers.icd10 import normalise_code, parse_icd10_codes
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import StructuredOutput, Scoring
from evalpipe.tasks.kinds.base import Drafted, Kind, KindParts, register_kind
from evalpipe.tasks.taskfile.schema import TaskFile, Text

ICD10_METRICS = ("exact_f1", "category_f1", "valid_ratio", "exact_precision", "exact_recall",
                 "exact_micro_f1", "category_micro_f1", "valid_micro_ratio", "category_precision",
                 "category_recall", "exact_micro_precision", "exact_micro_recall", "category_micro_precision",
                 "category_micro_recall")


@dataclass(frozen=True)
class CodeGold:
    """Gold codes normalised and de-duplicated (``codes``) and exactly as in the file (``raw``)."""

    codes: tuple[str, ...]
    raw: tuple[str, ...]


class CodeListTask(TaskFile):
    kind: Literal["code_list"]
    code_system: Literal["icd10"] = Field("icd10", description="The code system: how codes are parsed, "
                                          "normalised, compared by category and checked for validity.")
    code_key: Text | None = Field(None, description="When the answer field is a list of objects: the key "
                                  "holding the code (e.g. code).")
    separator: Text = Field(",", description="When the answer field is text: what separates its codes.")
    shot_prefix: Text = Field("", description="Text before the codes in a shot's answer (e.g. 'ICD-10 Codes: ').")

    @model_validator(mode="after")
    def _codes_field(self) -> CodeListTask:
        if self.fields.gold_field() is None:
            raise ValueError("fields.answer: name the field holding the gold codes")
        return self


def read(task: CodeListTask, records: Sequence[Record]) -> list[Drafted]:
    field = task.fields.gold_field()
    assert field is not None, "the kind's validator requires a gold field"
    names = field if isinstance(field, list) else [field]
    out = []
    for record in records:
        name = next((n for n in names if n in record.fields), names[0])
        value = record.fields.get(name)
        if isinstance(value, str):
            items: list[object] = [c for c in value.split(task.separator) if c.strip()]
        elif isinstance(value, list):
            items = value
        else:
            items = []
        if not items:
            raise record.error(name, "missing or empty (a document without codes cannot be scored)")
        raw = []
        for i, item in enumerate(items):
            code = item.get(task.code_key) if isinstance(item, dict) and task.code_key else item
            where = f"{name}[{i}]" + (f".{task.code_key}" if task.code_key else "")
            if not isinstance(code, str) or not code.strip():
                raise record.error(where, "missing or not a non-empty string")
            raw.append(code.strip())
        out.append(Drafted(gold=CodeGold(codes=tuple(dict.fromkeys(normalise_code(c) for c in raw)), raw=tuple(raw))))
    return out


def parse(answer: str, example: Example) -> Prediction:
    return parse_icd10_codes(answer)


def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    return icd_score_sheet([ex.gold.codes for ex in examples], [tuple(p.value) for p in predictions])


SCORING = Scoring(parse=parse, score=score, empty=lambda ex: Prediction((), True, {"no_answer": True}),
                  description="ICD-10 exact and 3-character P/R/F1 (per document and micro), valid-code ratio",
                  # per-document values summed in document order, integer counts for the micro values
                  samplewise=True)


def parts(task: CodeListTask) -> KindParts:
    prefix = task.shot_prefix
    return KindParts(scorings={"default": SCORING}, shot_target=lambda ex: prefix + ", ".join(ex.gold.raw),
                     metrics=ICD10_METRICS, primary_metric="exact_f1", structured=STRUCTURED)


#: ``--structured``: ``{"codes": ["E11.9", …]}``, read as the comma-separated list the default parser reads
STRUCTURED = StructuredOutput(
    schema={"type": "object", "additionalProperties": False, "required": ["codes"],
            "properties": {"codes": {"type": "array", "items": {"type": "string"}}}},
    to_text=lambda value, example: ", ".join(value["codes"]))


KIND = register_kind(Kind(
    name="code_list",
    description="a set of codes per document (ICD-10: exact and category P/R/F1, valid-code ratio)",
    model=CodeListTask,
    read=read,
    parts=parts,
))

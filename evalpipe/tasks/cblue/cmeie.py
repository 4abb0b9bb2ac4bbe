"""CBLUE CMeIE: Chinese medical relation extraction, answered one triple per line.

Data: the user's ``CMeIE_{train,dev,test}.json`` (JSON lines) plus the schema file
``53_schemas.json`` (53 ``(subject_type, predicate, object_type)`` rows over 44 predicates) from the
same Tianchi folder; the schema file can also be given as ``LoadOptions.paths["schema"]``. Every
relation of the schema is listed in the prompt; gold predicates outside it fail the load.

Answer form (asked for in the prompt, written by :func:`evalpipe.parsers.triples.format_triples`
for shots): ``头实体 | 关系 | 尾实体`` per line, ``无`` for none. Parsed by
:mod:`evalpipe.parsers.triples`.

Metric (CBLUE's): micro P/R/F1 over ``(subject, predicate, object)`` triples, each field compared
as a :func:`evalpipe.text.chinese.match_key` (width-folded, case-folded, whitespace-free) — the
official scorer compares exact strings, so a full-width/half-width or spacing difference that the
official scorer would count as wrong is counted as right here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evalpipe.tasks.cblue.files import (
    TEST_HINT,
    CMeIEDoc,
    CMeIESchema,
    read_cmeie,
    read_cmeie_schemas,
    sibling_file,
    split_files,
)
from evalpipe.data.errors import DataError
from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.tuples import tuple_score_sheet
from evalpipe.parsers.triples import format_triples, parse_triples, triple_key
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import DataRole, EVAL, LoadOptions, SHOTS, Scoring, TaskData, TaskSpec
from evalpipe.tasks.registry import register

FOLDERS = ("CMeIE", "CMeIE-V2")
SCHEMA_FILE = "53_schemas.json"


def _schema_path(options: LoadOptions, eval_path: Path) -> Path:
    if "schema" in options.paths:
        return Path(options.paths["schema"])
    found = sibling_file(options, eval_path, FOLDERS, (SCHEMA_FILE, "schemas.json"))
    if found is None:
        raise DataError(eval_path.parent / SCHEMA_FILE, None, None,
                        f"schema file not found: expected {SCHEMA_FILE} next to {eval_path.name} or in the "
                        "CMeIE folder of --data-dir (it is part of the CMeIE download from Tianchi)")
    return found


def _examples(docs: Sequence[CMeIEDoc], split: str, path: Path, schemas: Sequence[CMeIESchema]) -> tuple[Example, ...]:
    relations = [{"subject_type": s.subject_type, "predicate": s.predicate, "object_type": s.object_type}
                 for s in schemas]
    return tuple(
        Example(id=f"{split}-{i}", inputs={"text": doc.text, "relations": relations},
                gold=doc.triples, meta={"file": str(path), "line": doc.line})
        for i, doc in enumerate(docs)
    )


def load(options: LoadOptions) -> TaskData:
    files = split_files(options, FOLDERS)
    schema_path = _schema_path(options, files.eval_path)
    schemas = read_cmeie_schemas(schema_path)
    predicates = tuple(dict.fromkeys(s.predicate for s in schemas))
    hint = TEST_HINT if files.split == "test" else ""
    examples = _examples(read_cmeie(files.eval_path, predicates, hint), files.split, files.eval_path, schemas)
    pool: tuple[Example, ...] = ()
    if files.shot_path is not None:
        pool = _examples(read_cmeie(files.shot_path, predicates), files.shot_split, files.shot_path, schemas)
    used = (files.eval_path, schema_path) + ((files.shot_path,) if files.shot_path else ())
    return TaskData(examples=examples, shot_pool=pool, files=used, split=files.split)


def shot_target(example: Example) -> str:
    return format_triples(example.gold)


def parse(answer: str, example: Example) -> Prediction:
    predicates = [r["predicate"] for r in example.inputs["relations"]]
    return parse_triples(answer, predicates)


def empty_prediction(example: Example) -> Prediction:
    return Prediction(value=(), failed=True, diagnostics={"no_answer": True})


def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    """Micro P/R/F1 over (subject, predicate, object) match-key triples (see evalpipe.metrics.tuples)."""
    golds = [{triple_key(t) for t in ex.gold} for ex in examples]
    preds = [{triple_key(t) for t in p.value} for p in predictions]
    return tuple_score_sheet(golds, preds)


SPEC = register(
    TaskSpec(
        name="cmeie",
        kind="relation_extraction",
        data_roles=(EVAL, SHOTS, DataRole("schema", "CMeIE's relation schema (53_schemas.json)")),
        description="CBLUE CMeIE: Chinese medical relation extraction over the 53-row schema; one triple per line (dev, 3-shot).",
        template="cblue/cmeie.j2",
        load=load,
        shot_target=shot_target,
        scorings={
            "default": Scoring(parse=parse, score=score, empty=empty_prediction,
                               description="triple lines, micro P/R/F1 over (subject, predicate, object)",
                               samplewise=True),
        },
        metrics=("precision", "recall", "f1"),
        max_tokens=512,
        primary_metric="f1",
        default_shots=3,
        completion_stop=("\n\n文本：",),
        suites=("cblue",),
        citation="Guan T, et al. CMeIE: Construction and Evaluation of Chinese Medical Information Extraction "
        "Dataset. NLPCC 2020; Zhang N, et al. CBLUE, ACL 2022. Data: Tianchi, Tianchi terms; not shipped.",
    )
)

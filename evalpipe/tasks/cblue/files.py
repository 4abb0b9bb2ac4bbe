"""Read and validate the user's CBLUE and PromptCBLUE files (none of them is shipped).

CBLUE (Zhang et al., ACL 2022) is distributed by Alibaba Tianchi under Tianchi's terms; PromptCBLUE
(Zhu et al., CCKS 2023) through its Tianchi competitions. evalpipe ships neither: users download
them and point ``--data-dir`` (or ``--data TASK=FILE``) at them. Everything here fails early with
a :class:`~evalpipe.data.errors.DataError` naming the file, the line and the field.

Layout of the Tianchi download (``CBLUEDatasets/``), which :func:`split_files` looks for::

    <data-dir>/CMeEE/CMeEE_{train,dev,test}.json         JSON array
    <data-dir>/CMeIE/CMeIE_{train,dev,test}.json         JSON lines; + 53_schemas.json
    <data-dir>/CHIP-CDN/CHIP-CDN_{train,dev,test}.json   JSON array; + the ICD-10 term table .xlsx
    <data-dir>/CHIP-CTC/CHIP-CTC_{...}.json              JSON array; + category.xlsx (not needed)
    <data-dir>/CHIP-STS/ ... KUAKE-QIC/ ... KUAKE-QTR/ ... KUAKE-QQR/   JSON arrays

``<data-dir>/<TASK>_<split>.json`` (no task folder) is accepted too, and so are the ``-V2``
folder names (``CMeEE-V2``). Either container format (a JSON array, or one JSON object per line)
is accepted for every file, with correct line numbers in errors for both.
"""

from __future__ import annotations

import csv
import re
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from evalpipe.data.errors import DataError
from evalpipe.data.file_records import Record, read_values
from evalpipe.parsers.triples import Triple
from evalpipe.records import Span
from evalpipe.tasks.base import LoadOptions
from evalpipe.paths import SHIPPED_DATA

__all__ = [
    "CBLUE_SOURCE",
    "CDNDoc",
    "CMeEEDoc",
    "CMeIEDoc",
    "CMeIESchema",
    "LabelledDoc",
    "PROMPTCBLUE_SOURCE",
    "PromptCBLUERecord",
    "SplitFiles",
    "TEST_HINT",
    "read_cdn",
    "read_cmeee",
    "read_cmeie",
    "read_cmeie_schemas",
    "read_json_records",
    "read_labelled",
    "read_promptcblue",
    "read_term_table",
    "sibling_file",
    "split_files",
]

REPO_DATA = SHIPPED_DATA
CBLUE_SOURCE = ("CBLUE is published by Alibaba Tianchi at https://tianchi.aliyun.com/dataset/95414 under "
                "Tianchi's terms (free account login, no credentialed access) and is not shipped with evalpipe")
PROMPTCBLUE_SOURCE = ("PromptCBLUE is published through its Tianchi competitions "
                      "(https://tianchi.aliyun.com/competition/entrance/532084/introduction; free account, "
                      "competition sign-up, no credentialed access) and is not shipped with evalpipe")
TEST_HINT = "CBLUE test labels are hidden (scored only on Tianchi); evaluate the dev split (the default)"
SPLITS = ("train", "dev", "test")


# ---- containers ------------------------------------------------------------------------------

def read_json_records(path: Path, source: str = CBLUE_SOURCE) -> list[tuple[int, Any]]:
    """Records of ``path`` with 1-based line numbers: a top-level JSON array or JSON lines."""
    return read_values(path, f"file not found ({source}; see docs/cblue.md)")


def _object(path: Path, line: int, record: Any) -> Mapping[str, Any]:
    if not isinstance(record, dict):
        raise DataError(path, line, None, f"expected a JSON object, got {type(record).__name__}")
    return record


# ---- where the files are ---------------------------------------------------------------------

@dataclass(frozen=True)
class SplitFiles:
    """The evaluated file and the file few-shot examples come from (None: no shot pool)."""

    split: str
    eval_path: Path
    shot_split: str
    shot_path: Path | None


def _candidates(root: Path, folders: Sequence[str], split: str) -> list[Path]:
    out = []
    for folder in folders:
        out += [root / folder / f"{folder}_{split}.json", root / f"{folder}_{split}.json"]
    return out


def _data_root(options: LoadOptions) -> Path:
    """``--data-dir``, else ``data/cblue/`` in the checkout."""
    return Path(options.data_dir) if options.data_dir else REPO_DATA / "cblue"


def split_files(options: LoadOptions, folders: Sequence[str]) -> SplitFiles:
    """Resolve ``--split``, ``--data``/``--data-dir`` into files (default split: dev).

    The eval file is ``options.paths["eval"]`` if given, else the first existing candidate under
    the data directory (default ``data/cblue/`` in the checkout). Shots come from
    ``paths["shots"]``, else the train file (the dev file when train is evaluated) found under the
    data directory or next to the eval file; if there is none, the shot pool is empty.
    """
    split = options.split or "dev"
    if split not in SPLITS:
        raise DataError(folders[0], None, "split", f"unknown split {split!r} (expected one of {', '.join(SPLITS)})")
    root = _data_root(options)
    if "eval" in options.paths:
        eval_path = Path(options.paths["eval"])
    else:
        found = [p for p in _candidates(root, folders, split) if p.is_file()]
        if not found:
            expected = root / folders[0] / f"{folders[0]}_{split}.json"
            raise DataError(expected, None, None, f"file not found: expected {expected.name} under {root} "
                            f"(or pass --data-dir DIR / --data TASK=FILE); {CBLUE_SOURCE}; see docs/cblue.md")
        eval_path = found[0]
    shot_split = "train" if split != "train" else "dev"
    if "shots" in options.paths:
        return SplitFiles(split, eval_path, shot_split, Path(options.paths["shots"]))
    places = _candidates(root, folders, shot_split) + _candidates(eval_path.parent, folders, shot_split)
    shot_path = next((p for p in places if p.is_file() and p.resolve() != eval_path.resolve()), None)
    return SplitFiles(split, eval_path, shot_split, shot_path)


def sibling_file(options: LoadOptions, eval_path: Path, folders: Sequence[str], names: Sequence[str]) -> Path | None:
    """An auxiliary file (schema, term table) next to the eval file or in the task folder."""
    root = _data_root(options)
    places = [eval_path.parent / n for n in names]
    for folder in folders:
        places += [root / folder / n for n in names] + [root / n for n in names]
    return next((p for p in places if p.is_file()), None)


# ---- CMeEE -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CMeEEDoc:
    """One CMeEE sentence; ``entities`` are character spans, **end exclusive** (``end_idx + 1``)."""

    line: int
    text: str
    entities: tuple[Span, ...]


def read_cmeee(path: Path, types: Sequence[str], hint: str = "") -> list[CMeEEDoc]:
    """CMeEE records ``{text, entities: [{start_idx, end_idx, type, entity}]}``.

    ``end_idx`` in the file is **inclusive**; spans here are half-open, so
    ``Span(start_idx, end_idx + 1, type)``. Every entity must satisfy
    ``text[start_idx:end_idx + 1] == entity`` and have a known type, or loading fails naming the
    record and field. Identical (start, end, type) entities collapse into one.
    """
    docs = []
    for line, raw in read_json_records(path):
        record = Record(_object(path, line, raw), line, path)
        text = record.get("text", str)
        entities = record.get("entities", list, hint)
        spans: set[Span] = set()
        for i, ent in enumerate(entities):
            field = f"entities[{i}]"
            ent = Record(_object(path, line, ent), line, path)
            start = ent.get("start_idx", int)
            end = ent.get("end_idx", int)
            kind = ent.get("type", str)
            mention = ent.get("entity", str)
            if kind not in types:
                raise DataError(path, line, f"{field}.type", f"unknown type {kind!r} (expected one of {', '.join(types)})")
            if not 0 <= start <= end < len(text):
                raise DataError(path, line, field, f"start_idx {start} / end_idx {end} outside the text ({len(text)} characters)")
            if text[start:end + 1] != mention:
                raise DataError(path, line, f"{field}.entity", f"{mention!r} != text[{start}:{end}+1] = "
                                f"{text[start:end + 1]!r} (end_idx is inclusive)")
            spans.add(Span(start, end + 1, kind))
        docs.append(CMeEEDoc(line, text, tuple(sorted(spans))))
    return docs


# ---- CMeIE -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CMeIESchema:
    subject_type: str
    predicate: str
    object_type: str


@dataclass(frozen=True)
class CMeIEDoc:
    line: int
    text: str
    triples: tuple[Triple, ...]


def read_cmeie_schemas(path: Path) -> tuple[CMeIESchema, ...]:
    """``53_schemas.json``: one ``{subject_type, predicate, object_type}`` object per line."""
    out = []
    for line, raw in read_json_records(path):
        record = Record(_object(path, line, raw), line, path)
        out.append(CMeIESchema(*(record.get(k, str) for k in ("subject_type", "predicate", "object_type"))))
    if not out:
        raise DataError(path, None, None, "no schema in the file")
    return tuple(dict.fromkeys(out))


def read_cmeie(path: Path, predicates: Sequence[str], hint: str = "") -> list[CMeIEDoc]:
    """CMeIE records ``{text, spo_list: [{subject, predicate, object: {"@value": …}, …}]}``.

    The triple is ``(subject, predicate, object["@value"])``; other keys of ``object`` and the
    type fields are not part of the answer. Predicates must be in the schema file.
    """
    docs = []
    for line, raw in read_json_records(path):
        record = Record(_object(path, line, raw), line, path)
        text = record.get("text", str)
        spo_list = record.get("spo_list", list, hint)
        triples = set()
        for i, raw_spo in enumerate(spo_list):
            spo = Record(_object(path, line, raw_spo), line, path)
            subject = spo.get("subject", str)
            predicate = spo.get("predicate", str)
            obj = Record(spo.get("object", dict), line, path)
            value = obj.get("@value", str)
            if predicate not in predicates:
                raise DataError(path, line, f"spo_list[{i}].predicate",
                                f"{predicate!r} is not a predicate of the schema file")
            triples.add(Triple(subject, predicate, value))
        docs.append(CMeIEDoc(line, text, tuple(sorted(triples))))
    return docs


# ---- CHIP-CDN --------------------------------------------------------------------------------

@dataclass(frozen=True)
class CDNDoc:
    line: int
    text: str
    terms: tuple[str, ...]


def read_cdn(path: Path, hint: str = "") -> list[CDNDoc]:
    """CHIP-CDN records ``{text, normalized_result: "term##term"}`` (terms unique, in order)."""
    docs = []
    for line, raw in read_json_records(path):
        record = Record(_object(path, line, raw), line, path)
        text = record.get("text", str)
        result = record.get("normalized_result", str, hint)
        terms = tuple(dict.fromkeys(t.strip() for t in result.split("##") if t.strip()))
        if not terms:
            raise DataError(path, line, "normalized_result", "no term (expected term##term…)")
        docs.append(CDNDoc(line, text, terms))
    return docs


def read_term_table(path: Path) -> tuple[str, ...]:
    """Standard terms: the ICD-10 Beijing clinical v601 ``.xlsx`` (column B), or ``.txt``/``.tsv``/``.csv``.

    ``.xlsx``: first worksheet, second column (the first holds ICD codes), as CBLUE's baseline
    reads it; ``.txt``: one term per line; ``.tsv``/``.csv``: second column if there are two or
    more, else the first. Blank cells are skipped; duplicates keep their first position.
    """
    if not path.is_file():
        raise DataError(path, None, None, "term table not found (the ICD-10 Beijing clinical v601 table is part "
                        f"of the CHIP-CDN download; {CBLUE_SOURCE})")
    suffix = path.suffix.lower()
    if suffix == ".xlsx":
        rows = _xlsx_rows(path)
    elif suffix in (".tsv", ".csv"):
        with path.open(encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.reader(handle, delimiter="\t" if suffix == ".tsv" else ","))
    else:
        rows = [[line] for line in path.read_text(encoding="utf-8-sig").splitlines()]
    terms = [(row[1] if len(row) > 1 else row[0]).strip() for row in rows if row]
    out = tuple(dict.fromkeys(t for t in terms if t))
    if not out:
        raise DataError(path, None, None, "no term found (expected terms in the second column)")
    return out


_NS = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_CELL_COLUMN = re.compile(r"^([A-Z]+)")


def _xlsx_rows(path: Path) -> list[list[str]]:
    """Cell text of the first worksheet of an ``.xlsx`` file (standard library only)."""
    try:
        with zipfile.ZipFile(path) as book:
            names = book.namelist()
            shared: list[str] = []
            if "xl/sharedStrings.xml" in names:
                root = ElementTree.fromstring(book.read("xl/sharedStrings.xml"))
                shared = ["".join(t.text or "" for t in si.iter(f"{_NS}t")) for si in root.iter(f"{_NS}si")]
            sheets = sorted((n for n in names if re.fullmatch(r"xl/worksheets/sheet\d+\.xml", n)),
                            key=lambda n: int(re.sub(r"\D", "", n)))
            if not sheets:
                raise DataError(path, None, None, "no worksheet in the workbook")
            sheet = ElementTree.fromstring(book.read(sheets[0]))
    except (zipfile.BadZipFile, ElementTree.ParseError, KeyError) as exc:
        raise DataError(path, None, None, f"not a readable .xlsx workbook: {exc}") from None
    return [list(_row_cells(row, shared)) for row in sheet.iter(f"{_NS}row")]


def _row_cells(row: ElementTree.Element, shared: list[str]) -> Iterator[str]:
    column = 0
    for cell in row.iter(f"{_NS}c"):
        match = _CELL_COLUMN.match(cell.get("r", ""))
        if match:
            index = 0
            for letter in match.group(1):
                index = index * 26 + ord(letter) - 64
            while column < index - 1:  # empty cells are omitted from the XML
                yield ""
                column += 1
        kind, value = cell.get("t"), cell.find(f"{_NS}v")
        if kind == "s" and value is not None and value.text is not None:
            text = shared[int(value.text)]
        elif kind == "inlineStr":
            text = "".join(t.text or "" for t in cell.iter(f"{_NS}t"))
        else:
            text = value.text if value is not None and value.text is not None else ""
        yield text
        column += 1


# ---- label tasks (CHIP-CTC, CHIP-STS, KUAKE-QIC/QTR/QQR) ------------------------------------

@dataclass(frozen=True)
class LabelledDoc:
    line: int
    id: str
    fields: Mapping[str, str]
    label: str


def read_labelled(path: Path, text_fields: Sequence[str], labels: Sequence[str],
                  label_aliases: Mapping[str, str] | None = None, extra_fields: Sequence[str] = (),
                  hint: str = "") -> list[LabelledDoc]:
    """Records ``{id, <text_fields>, label}``; labels outside ``labels`` fail the load.

    ``label_aliases`` maps a label spelling in the file to the canonical one (KUAKE-QQR's ``"NA"``
    → ``"0"``, as CBLUE's own data processor does). ``extra_fields`` are copied when present.
    Ids must be unique within the file.
    """
    docs: list[LabelledDoc] = []
    seen: dict[str, int] = {}
    for line, raw in read_json_records(path):
        record = Record(_object(path, line, raw), line, path)
        record_id = record.get("id", (str, int))
        record_id = str(record_id)
        if record_id in seen:
            raise DataError(path, line, "id", f"duplicate id {record_id!r} (first on line {seen[record_id]})")
        seen[record_id] = line
        fields = {name: record.get(name, str) for name in text_fields}
        fields.update({name: str(record.fields[name]) for name in extra_fields if name in record.fields})
        label = record.get("label", (str, int), hint)
        label = str(label)
        label = (label_aliases or {}).get(label, label)
        if label not in labels:
            raise DataError(path, line, "label", f"unknown label {label!r} (expected one of {', '.join(labels)})")
        docs.append(LabelledDoc(line, record_id, fields, label))
    return docs


# ---- PromptCBLUE -----------------------------------------------------------------------------

@dataclass(frozen=True)
class PromptCBLUERecord:
    line: int
    sample_id: str
    input: str
    target: str
    answer_choices: tuple[str, ...] | None
    task_type: str
    task_dataset: str


def read_promptcblue(path: Path) -> list[PromptCBLUERecord]:
    """PromptCBLUE JSON lines ``{input, target, answer_choices, task_type, task_dataset, sample_id}``.

    ``target`` is required (the test file's targets are hidden: score dev, or a labelled file);
    ``answer_choices`` is a list of strings or null; ``sample_id`` must be unique.
    """
    out: list[PromptCBLUERecord] = []
    seen: dict[str, int] = {}
    hint = "PromptCBLUE test targets are hidden; evaluate the dev file"
    for line, raw in read_json_records(path, PROMPTCBLUE_SOURCE):
        record = Record(_object(path, line, raw), line, path)
        sample_id = str(record.get("sample_id", (str, int)))
        if sample_id in seen:
            raise DataError(path, line, "sample_id", f"duplicate {sample_id!r} (first on line {seen[sample_id]})")
        seen[sample_id] = line
        choices = record.fields.get("answer_choices")
        if choices is not None and not (isinstance(choices, list) and all(isinstance(c, str) for c in choices)):
            raise DataError(path, line, "answer_choices", f"expected a list of strings or null, got {str(choices)[:60]!r}")
        out.append(PromptCBLUERecord(
            line=line,
            sample_id=sample_id,
            input=record.get("input", str),
            target=record.get("target", str, hint),
            answer_choices=tuple(choices) if choices is not None else None,
            task_type=record.get("task_type", str),
            task_dataset=record.get("task_dataset", str),
        ))
    return out

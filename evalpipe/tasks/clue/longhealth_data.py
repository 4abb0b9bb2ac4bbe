"""LongHealth's ``benchmark_v5.json`` (Adams et al. 2024): fictional patients, their letters, questions.

Structure (one JSON object)::

    {"patient_01": {"name": …, "birthday": …, "diagnosis": …,
                    "texts": {"text_0": "…letter…", "text_1": …},
                    "questions": [{"No": 1, "question": "…",
                                   "answer_a": "…", …, "answer_e": "…",
                                   "correct": "<text of the right option>",
                                   "answer_location": {"text_0": {"start": [0.1], "end": [0.12]}}},
                                  …]},
     "patient_02": …}

Validation: every patient has non-empty ``texts`` and a ``questions`` list; every question has a
non-empty ``question``, the five options, ``correct``, and an ``answer_location`` naming at least
one of the patient's own texts (tasks 1 and 2 put those letters in the prompt).

The gold letter is the option whose text *equals* ``correct`` (surrounding whitespace and runs of
whitespace ignored) — not the first option that merely *contains* it, which is how the reference
picks it and which goes wrong when one option is a substring of another. A question where no
option or more than one option equals ``correct`` is a DataError, because its gold is unknown.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.data.file_records import read_json_object
from evalpipe.data.errors import DataError

OPTION_LETTERS = ("A", "B", "C", "D", "E")


@dataclass(frozen=True)
class Question:
    patient: str
    number: str
    question: str
    #: letter → option text, A–E
    options: Mapping[str, str]
    correct: str
    #: ids of the patient's texts that hold the answer, in file order
    answer_texts: tuple[str, ...]
    gold: str


@dataclass(frozen=True)
class Patient:
    id: str
    texts: Mapping[str, str]
    questions: tuple[Question, ...]


def normalise_space(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def gold_letter(options: Mapping[str, str], correct: str) -> str | None:
    """The one option whose text equals ``correct`` (whitespace-normalised), else None."""
    target = normalise_space(correct)
    hits = [letter for letter, text in options.items() if normalise_space(text) == target]
    return hits[0] if len(hits) == 1 else None


def _text(path: Path, where: str, obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DataError(path, None, f"{where}.{key}", "missing or empty (expected a non-empty string)")
    return value


def _question(path: Path, pid: str, index: int, raw: Any, texts: Mapping[str, str]) -> Question:
    where = f"{pid}.questions[{index}]"
    if not isinstance(raw, dict):
        raise DataError(path, None, where, "expected an object")
    options = {letter: _text(path, where, raw, f"answer_{letter.lower()}") for letter in OPTION_LETTERS}
    correct = _text(path, where, raw, "correct")
    location = raw.get("answer_location")
    if not isinstance(location, dict) or not location:
        raise DataError(path, None, f"{where}.answer_location", "missing or empty (expected text ids)")
    unknown = [tid for tid in location if tid not in texts]
    if unknown:
        raise DataError(path, None, f"{where}.answer_location",
                        f"names text(s) {unknown} that patient {pid} does not have")
    gold = gold_letter(options, correct)
    if gold is None:
        matches = sum(1 for text in options.values() if normalise_space(text) == normalise_space(correct))
        problem = "no option equals it" if matches == 0 else f"{matches} options equal it"
        raise DataError(path, None, f"{where}.correct", f"{correct!r}: {problem}, so the gold letter is unknown")
    return Question(
        patient=pid,
        number=str(raw.get("No", index + 1)),
        question=_text(path, where, raw, "question"),
        options=options,
        correct=correct,
        answer_texts=tuple(location),
        gold=gold,
    )


def read_longhealth(path: str | Path) -> tuple[Patient, ...]:
    """Read and validate the whole benchmark; patients and texts keep file order.

    Cached per file version (path, size, modification time): the three LongHealth tasks — and the
    reload once the context budget is known — read the same file.
    """
    path = Path(path)
    stat = path.stat() if path.is_file() else None
    if stat is None:
        return _read_longhealth(path)
    return _read_cached(path.resolve(), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _read_cached(path: Path, size: int, mtime_ns: int) -> tuple[Patient, ...]:
    return _read_longhealth(path)


def _read_longhealth(path: Path) -> tuple[Patient, ...]:
    data = read_json_object(path)
    patients = []
    for pid, raw in data.items():
        if not isinstance(raw, dict):
            raise DataError(path, None, pid, "expected a patient object")
        texts = raw.get("texts")
        if not isinstance(texts, dict) or not texts:
            raise DataError(path, None, f"{pid}.texts", "missing or empty (expected text id → letter)")
        for tid, text in texts.items():
            if not isinstance(text, str) or not text.strip():
                raise DataError(path, None, f"{pid}.texts.{tid}", "empty or not a string")
        questions = raw.get("questions")
        if not isinstance(questions, list) or not questions:
            raise DataError(path, None, f"{pid}.questions", "missing or empty (expected a list)")
        parsed = tuple(_question(path, pid, i, q, texts) for i, q in enumerate(questions))
        numbers = [q.number for q in parsed]
        if len(set(numbers)) != len(numbers):
            raise DataError(path, None, f"{pid}.questions", f"question numbers repeat: {numbers}")
        patients.append(Patient(id=pid, texts=dict(texts), questions=parsed))
    if not patients:
        raise DataError(path, None, None, "no patients")
    if len(patients) < 2:
        raise DataError(path, None, None, "one patient only: tasks 2 and 3 need other patients' letters")
    return tuple(patients)

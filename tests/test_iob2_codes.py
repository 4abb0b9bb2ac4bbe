"""Span NER gold read a sentence at a time (:mod:`evalpipe.data.iob2_codes`) against the tag-by-tag
reading it replaced, kept here as the reference: the same drafts (tags, spans, text, tokens) and
the same first error for any records, valid or not; and :func:`gold_spans` equal to
:func:`~evalpipe.metrics.spans.bio_to_spans` wherever it answers."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evalpipe.data.conll import read_conll
from evalpipe.data.errors import DataError
from evalpipe.data.file_records import Record
from evalpipe.data.iob2_codes import gold_spans, tag_codes
from evalpipe.metrics.spans import bio_to_spans
from evalpipe.tasks.kinds import span_ner
from evalpipe.tasks.kinds.span_ner import NerGold
from evalpipe.tasks.ncbi.disease import DATA_DIR


@dataclass(frozen=True)
class Fields:
    def gold_field(self) -> str:
        return "tags"


@dataclass(frozen=True)
class Task:
    """What :func:`span_ner.read` asks of its task."""

    entities: dict[str, str]
    tokens_field: str = "tokens"
    fields: Fields = Fields()


def reference_read(task: Any, records: list[Record]) -> list[Any]:
    """The reader before the sentence-at-a-time path."""
    types = set(task.entities.values())
    out = []
    for record in records:
        tokens = record.get(task.tokens_field, (list, tuple))
        tags = record.get("tags", (list, tuple))
        if len(tokens) != len(tags) or not tokens:
            raise record.error("tags", f"{len(tags)} tags for {len(tokens)} tokens")
        previous = "O"
        for i, tag in enumerate(tags):
            prefix, _, kind = str(tag).partition("-")
            if tag != "O" and (prefix not in ("B", "I") or kind not in types):
                raise record.error(f"tags[{i}]", f"{tag!r} is not O, B-<type> or I-<type> with a type "
                                   f"of entities ({', '.join(sorted(types))})")
            if prefix == "I" and previous not in (f"B-{kind}", f"I-{kind}"):
                raise record.error(f"tags[{i}]", f"{tag!r} follows {previous!r}: bad BIO sequence")
            previous = str(tag)
        tokens, tags = tuple(map(str, tokens)), tuple(map(str, tags))
        out.append((NerGold(tags=tags, spans=bio_to_spans(tags)), {"text": " ".join(tokens), "tokens": tokens}))
    return out


def outcome(read: Any, task: Task, records: list[Record]) -> Any:
    try:
        drafts = read(task, records)
    except (DataError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return [(d.gold, d.inputs) if hasattr(d, "gold") else d for d in drafts]


class Odd(str):
    """A str that is not a plain str (the fast path leaves it to the rules)."""


TYPES = ["Disease", "Gene", "A-B", "Chem"]
ODD_TAGS = ["X-Disease", "B-", "I-", "B-Nope", "O ", "o", "B-Disease-x", 3, None, Odd("O"), Odd("B-Disease"), "I-A-B"]


def random_tags(rng: random.Random, types: list[str]) -> list[Any]:
    tags: list[Any] = []
    for _ in range(rng.randint(0, 9)):
        last = tags[-1] if tags else "O"
        options = ["O", "O", *(f"B-{t}" for t in types)]
        if isinstance(last, str) and last[:2] in ("B-", "I-") and rng.random() < 0.7:
            options = [f"I-{last[2:]}"]
        if rng.random() < 0.05:
            options = [rng.choice(ODD_TAGS), f"I-{rng.choice(TYPES)}"]
        tags.append(rng.choice(options))
    return tags


@pytest.mark.parametrize("seed", range(30))
def test_random_records_read_as_the_reference_reads_them(seed):
    rng = random.Random(seed)
    for _ in range(40):
        types = rng.sample(TYPES, rng.randint(1, 3))
        task = Task({t.lower(): t for t in types})
        records = []
        for line in range(rng.randint(1, 6)):
            tags = random_tags(rng, types)
            tokens = [f"w{i}" for i in range(len(tags) + (rng.random() < 0.03))]
            records.append(Record({"tokens": tokens, "tags": tags if rng.random() < 0.5 else tuple(tags)},
                                  line + 1, Path("r.jsonl")))
        assert outcome(span_ner.read, task, records) == outcome(reference_read, task, records)


def test_gold_spans_decodes_as_bio_to_spans_where_it_answers():
    codes = tag_codes({"Disease", "Gene"})
    assert codes is not None and tag_codes({"", "Disease"}) is None
    rng = random.Random(7)
    answered = 0
    for _ in range(3000):
        tags = random_tags(rng, ["Disease", "Gene"])
        spans = gold_spans(codes, tags)
        if spans is not None:
            answered += 1
            assert spans == bio_to_spans(tags), tags
    assert answered > 2000
    assert gold_spans(codes, ["O", "I-Disease"]) is None  # an I- after O: the rules name it
    assert gold_spans(codes, ["B-Gene", "I-Disease"]) is None


def test_the_shipped_ncbi_splits_read_as_the_reference_reads_them():
    task = Task({"disease": "Disease"})
    for split in ("train", "devel", "test"):
        records = [Record({"tokens": s.tokens, "tags": s.tags}, s.line, DATA_DIR / f"{split}.tsv")
                   for s in read_conll(DATA_DIR / f"{split}.tsv")]
        assert outcome(span_ner.read, task, records) == outcome(reference_read, task, records)

"""The CoNLL reader against the per-line reading it replaced (kept here as the reference).

:func:`evalpipe.data.conll._sentences` skips work on the common line (no tag check for ``O``, the
document-separator test only when the token holds ``-DOCSTART-``, blocks split in place); it must
yield the same sentences (tokens, tags, first line) and raise the same first error (file, line,
field, message) as the reference, for any file and any block size."""

from __future__ import annotations

import random
import sys
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

from evalpipe.data import conll
from evalpipe.data.conll import DOCSTART, TaggedSentence, _check_tag
from evalpipe.data.errors import DataError
from evalpipe.data.file_records import iter_lines
from evalpipe.tasks.ncbi.disease import DATA_DIR


def reference_sentences(path: Path, types: Collection[str] | None) -> Iterator[TaggedSentence]:
    """The reader as it was (every check on every line, lines from ``iter_lines``)."""
    tokens: list[str] = []
    tags: list[str] = []
    start = 0
    for line_no, raw in iter_lines(path):
        line = raw.rstrip("\r")
        if not line.strip():
            if tokens:
                yield TaggedSentence(tuple(tokens), tuple(tags), start)
                tokens, tags = [], []
            continue
        columns = line.split("\t")
        if columns[0].split(" ")[0].strip() == DOCSTART:
            if tokens:
                yield TaggedSentence(tuple(tokens), tuple(tags), start)
                tokens, tags = [], []
            continue
        if len(columns) != 2:
            raise DataError(path, line_no, "columns",
                            f"found {len(columns)} tab-separated column(s), expected 2 (token<TAB>tag)")
        token, tag = columns
        if not token.strip():
            raise DataError(path, line_no, "token", "empty token")
        _check_tag(path, line_no, tag, tags[-1] if tags else "O", types)
        if not tokens:
            start = line_no
        tokens.append(sys.intern(token))
        tags.append(sys.intern(tag))
    if tokens:
        yield TaggedSentence(tuple(tokens), tuple(tags), start)


def outcome(sentences: Iterator[TaggedSentence]) -> tuple[list[TaggedSentence], str | None]:
    """The sentences read, and the error that ended the reading (as its message names it)."""
    read: list[TaggedSentence] = []
    try:
        for sentence in sentences:
            read.append(sentence)
    except DataError as exc:
        return read, f"{exc} | {exc.line} | {exc.field}"
    return read, None


TOKENS = ["Cancer", "of", "the", "BRCA1", "-", "gene", "a b", "x\u00a0", "\u2028", "é", " ", "", "-DOCSTART-"]
TAGS = ["O", "O", "O", "B-Disease", "I-Disease", "I-Disease", "B-Gene", "I-Gene", "X-Disease", "B-", "O ", "I-"]
BLANKS = ["", "", "", " ", "\t", "\r", "  \r"]


def random_file(rng: random.Random) -> str:
    """Mostly well-formed sentences, with every kind of oddity now and then."""
    lines: list[str] = []
    for _ in range(rng.randint(0, 12)):
        tag = "O"
        for _ in range(rng.randint(1, 6)):
            odd = rng.random() < 0.01
            token = rng.choice(TOKENS) if odd else rng.choice(TOKENS[:10])
            follows = ["I-Disease"] if tag in ("B-Disease", "I-Disease") else []
            tag = rng.choice(TAGS) if odd else rng.choice(["O", "O", "B-Disease", *follows])
            line = f"{token}\t{tag}"
            if rng.random() < 0.005:
                line = rng.choice([token, f"{line}\textra", f"{line}\r", f"{DOCSTART}\tO"])
            lines.append(line)
        lines.extend(rng.choice(BLANKS) if rng.random() < 0.1 else "" for _ in range(rng.randint(1, 3)))
    text = "\n".join(lines)
    return text if rng.random() < 0.3 else text + "\n"


@pytest.mark.parametrize("seed", range(40))
def test_random_files_read_as_the_reference_reads_them(tmp_path, seed):
    rng = random.Random(seed)
    for case in range(50):
        path = tmp_path / f"f{case}.tsv"
        path.write_text(random_file(rng), encoding="utf-8", newline="")
        types = rng.choice([None, {"Disease"}, {"Disease", "Gene"}])
        expected = outcome(reference_sentences(path, types))
        for block in (1, 7, 30, 64 * 1024):
            assert outcome(conll._sentences(path, types, block_bytes=block)) == expected, (path.read_text(), block)


@pytest.mark.parametrize("split", ["train", "devel", "test"])
def test_the_shipped_ncbi_splits_read_as_the_reference_reads_them(split):
    path = DATA_DIR / f"{split}.tsv"
    expected = outcome(reference_sentences(path, {"Disease"}))
    assert expected[1] is None and expected[0]
    for block in (100, 4096, None):
        assert outcome(conll._sentences(path, {"Disease"}, block_bytes=block)) == expected

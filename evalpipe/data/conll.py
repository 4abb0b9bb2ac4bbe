"""CoNLL/BIO loader: one ``token<TAB>tag`` per line, a blank line between sentences.

Validation is strict because a silently mis-read gold file makes every number wrong: a line
without exactly two tab-separated columns, an empty token, a tag outside ``O``/``B-X``/``I-X``,
an ``I-X`` that does not continue a ``B-X``/``I-X`` of the same type (invalid IOB2), an unknown
entity type, or a file with no sentence raises :class:`DataError` naming file and line. A
``-DOCSTART-`` line (CoNLL-2003's document separator) ends a sentence and is skipped: it is not a
sentence to score.

:func:`iter_conll` yields the sentences one at a time, reading the file a block at a time (a
loader that streams holds one sentence, not 47,000); :func:`read_conll` is its list.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from evalpipe.data.errors import DataError
from evalpipe.data.file_records import text_blocks


@dataclass(frozen=True)
class TaggedSentence:
    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    #: 1-based line number of the sentence's first token, for error messages and provenance
    line: int


def _check_tag(path: Path, line_no: int, tag: str, previous: str, types: Collection[str] | None) -> None:
    if tag == "O":
        return
    prefix, _, etype = tag.partition("-")
    if prefix not in ("B", "I") or not etype:
        raise DataError(path, line_no, "tag", f"{tag!r} is not a BIO tag (expected O, B-<type> or I-<type>)")
    if types is not None and etype not in types:
        raise DataError(path, line_no, "tag", f"unknown entity type {etype!r} (expected one of {sorted(types)})")
    if prefix == "I" and previous not in (f"B-{etype}", f"I-{etype}"):
        raise DataError(
            path, line_no, "tag",
            f"{tag!r} follows {previous!r}: bad BIO sequence (an I- tag must continue B-/I- of the same type)",
        )


#: the token of CoNLL-2003's document separator line (``-DOCSTART-<TAB>O``): skipped, never a sentence
DOCSTART = "-DOCSTART-"


def _sentences(path: Path, types: Collection[str] | None,
               block_bytes: int | None = None) -> Iterator[TaggedSentence]:
    """The file's sentences, line by line (a block of :func:`text_blocks` at a time). The common
    line is cheap (issue 28: this runs for every token, again when a streamed task is scored): an
    ``O`` tag needs no check (:func:`_check_tag` accepts it after anything), and a token can only be
    a document separator if it holds ``-DOCSTART-`` at all."""
    tokens: list[str] = []
    tags: list[str] = []
    start = 0
    # text_blocks names the line of a byte that is not UTF-8 (a bare codec error names neither)
    for first, text in text_blocks(path, block_bytes=block_bytes):
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        for line_no, raw in enumerate(lines, start=first):
            line = raw.rstrip("\r")
            if not line.strip():
                if tokens:
                    yield TaggedSentence(tuple(tokens), tuple(tags), start)
                    tokens, tags = [], []
                continue
            columns = line.split("\t")
            if DOCSTART in columns[0] and columns[0].split(" ")[0].strip() == DOCSTART:  # a document separator
                if tokens:
                    yield TaggedSentence(tuple(tokens), tuple(tags), start)
                    tokens, tags = [], []
                continue
            if len(columns) != 2:
                raise DataError(
                    path, line_no, "columns",
                    f"found {len(columns)} tab-separated column(s), expected 2 (token<TAB>tag)",
                )
            token, tag = columns
            if not token.strip():
                raise DataError(path, line_no, "token", "empty token")
            if tag != "O":
                _check_tag(path, line_no, tag, tags[-1] if tags else "O", types)
            if not tokens:
                start = line_no
            # interned: a corpus repeats a small vocabulary and a handful of tags (47,000 sentences hold
            # ~1.2 million token strings but ~30,000 distinct ones)
            tokens.append(sys.intern(token))
            tags.append(sys.intern(tag))
    if tokens:
        yield TaggedSentence(tuple(tokens), tuple(tags), start)


def read_conll(path: str | Path, entity_types: Collection[str] | None = None) -> list[TaggedSentence]:
    """Read and validate a whole CoNLL file; raise DataError on the first problem."""
    return list(iter_conll(path, entity_types))


def iter_conll(path: str | Path, entity_types: Collection[str] | None = None) -> Iterator[TaggedSentence]:
    """The sentences of a CoNLL file one at a time, each validated before it is yielded; a file
    without a sentence is an error once its end is reached."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, None, "file not found")
    empty = True
    for sentence in _sentences(path, entity_types):
        empty = False
        yield sentence
    if empty:
        raise DataError(path, None, None, "no sentences (empty file?)")

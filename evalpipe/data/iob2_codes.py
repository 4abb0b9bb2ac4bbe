"""Gold IOB2 tags checked and decoded a sentence at a time, not a tag at a time (issue 28).

A span NER loader checks every tag of every sentence (``O``, ``B-X``, ``I-X`` continuing ``X``)
and decodes the tags into spans; both were a Python step per token, run again when a streamed
task is read for scoring. Here each tag of the task's vocabulary is one character (``O`` itself,
a private-use character for each ``B-X`` and ``I-X``), a sentence's tags are one string joined in
C, and its entities are the matches of ``B-X I-X*``: the tags are valid exactly when those
matches and the ``O`` characters cover the whole string (an ``I-X`` left over follows the wrong
tag). Where anything is off — a tag outside the vocabulary, a tag that is not a plain ``str``,
an uncovered ``I-X`` — :func:`gold_spans` answers None and the caller's per-tag rules decide
(and name the error), so the result is always theirs.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalpipe.records import Span

#: the first private-use character: B-X of the k-th type is _BASE + 2k, I-X the next one
_BASE = 0xE000


@dataclass(frozen=True)
class TagCodes:
    """One character per tag of a task's vocabulary, and the pattern of an entity."""

    codes: Mapping[str, str]
    #: a B-X character -> X
    labels: Mapping[str, str]
    entity: re.Pattern[str]


def tag_codes(types: Collection[str]) -> TagCodes | None:
    """The codes of ``types``' tags; None for an empty type name (``B-`` is no IOB2 tag to decode)."""
    if not types or "" in types:
        return None
    codes = {"O": "O"}
    labels: dict[str, str] = {}
    patterns = []
    for k, kind in enumerate(sorted(types)):
        begin, inside = chr(_BASE + 2 * k), chr(_BASE + 2 * k + 1)
        codes[f"B-{kind}"], codes[f"I-{kind}"] = begin, inside
        labels[begin] = kind
        patterns.append(f"{begin}{inside}*")
    return TagCodes(codes, labels, re.compile("|".join(patterns)))


def gold_spans(codes: TagCodes, tags: Sequence[Any]) -> tuple[Span, ...] | None:
    """The spans of valid IOB2 ``tags`` (those :func:`~evalpipe.metrics.spans.bio_to_spans` decodes),
    or None where the per-tag rules must look (see the module docstring)."""
    if set(map(type, tags)) != {str}:
        return None
    try:
        text = "".join(map(codes.codes.__getitem__, tags))
    except KeyError:
        return None
    spans = []
    covered = text.count("O")
    for match in codes.entity.finditer(text):
        start, end = match.span()
        spans.append(Span(start, end, codes.labels[text[start]]))
        covered += end - start
    return tuple(spans) if covered == len(text) else None

"""A plain, slow transcription of evalscope's NER answer → BIO rules, for differential tests only.

Each step is the regex or loop the rule names, applied literally, with no attempt at speed: the
first ``<response>…</response>`` body by a lazy DOTALL search; the wrong-closing-tag fix as one
``re.sub``; closed entities by a back-referencing ``finditer``; the unclosed fallback checked
against every entity found so far; the context search walking every occurrence; and every
token tested against every entity. Several steps are quadratic on hostile answers, which is why
:mod:`evalpipe.compat.evalscope_ner` computes the same results another way. Keep this file
obviously right rather than fast.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

CONTEXT = 20


def clean(answer: str) -> str:
    body = re.search(r"<response>(.*?)</response>", answer, re.DOTALL)
    text = body.group(1) if body else answer
    return re.sub(r"<(\w+)>(.*?)</\w+>", r"<\1>\2</\1>", text)


def entities(cleaned: str, tag_map: Mapping[str, str]) -> list[tuple[str, str, int, int]]:
    """(type, text, start, end) in evalscope's order: closed tags, then the unclosed fallback."""
    types = {tag.lower(): kind for tag, kind in tag_map.items()}
    found: list[tuple[str, str, int, int]] = []
    for m in re.finditer(r"<(\w+)>(.*?)</\1>", cleaned):
        tag = m.group(1).lower()
        found.append((types.get(tag, tag), m.group(2), m.start(), m.end()))
    for m in re.finditer(r"<(\w+)>(.*?)(?=<|$)", cleaned):
        if any(start <= m.start() < end for _, _, start, end in found):
            continue
        tag = m.group(1).lower()
        if tag in types:
            found.append((types[tag], m.group(2), m.start(), m.end()))
    return found


def locate(text: str, start: int, end: int, cleaned: str, sentence: str) -> int:
    before = re.sub(r"<[^>]+>", "", cleaned[max(0, start - CONTEXT):start])
    after = re.sub(r"<[^>]+>", "", cleaned[end:end + CONTEXT])
    search = 0
    while search < len(sentence):
        hit = sentence.find(text, search)
        if hit == -1:
            break
        if (before.strip() in sentence[max(0, hit - len(before)):hit].strip()
                or after.strip() in sentence[hit + len(text):hit + len(text) + len(after)].strip()
                or search > len(sentence) // 2):
            return hit
        search = hit + 1
    return sentence.find(text)


def predicted_tags(answer: str, tokens: Sequence[str], tag_map: Mapping[str, str]) -> list[str]:
    cleaned = clean(answer)
    sentence = " ".join(tokens)
    offsets = []
    cursor = 0
    for token in tokens:
        at = sentence.find(token, cursor)
        if at == -1:
            at = cursor
        else:
            cursor = at + len(token)
        offsets.append((at, at + len(token)))
    tags = ["O"] * len(tokens)
    for kind, text, start, end in entities(cleaned, tag_map):
        begin = locate(text, start, end, cleaned, sentence)
        if begin == -1:
            continue
        finish = begin + len(text)
        for i, (tok_start, tok_end) in enumerate(offsets):
            if tags[i] == "O" and tok_start <= finish and tok_end >= begin:
                previous = tags[i - 1] if i else "O"
                tags[i] = ("I-" if previous != "O" and previous.endswith(kind) else "B-") + kind
    return tags

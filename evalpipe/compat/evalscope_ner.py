"""Compatibility mode: score NER answers the way evalscope's ``ncbi`` benchmark does.

Use this mode only to compare with published evalscope numbers. It re-implements, from a
reading of evalscope's behaviour (``evalscope/utils/ner.py``, the NER adapter, seqeval 1.2.2's
default mode), how an XML-tagged answer becomes BIO tags and how those tags are scored. It
imports neither evalscope nor seqeval.

Quirks reproduced, one per line:

1. Clean-up keeps the first ``<response>(.*?)</response>`` body (DOTALL), else the whole answer.
2. ``<a>X</b>`` is rewritten ``<a>X</a>`` (non-greedy, no newlines): wrong closing tags are fixed.
3. ``<t>X</t>`` is an entity typed ``tag_map[t.lower()]``; an unmapped tag keeps ``t.lower()``.
4. Fallback: ``<t>X`` up to the next ``<``/end, mapped tags only, unless inside a found entity.
5. Token offsets come from ``str.find`` in ``" ".join(tokens)``; the answer is never aligned.
6. Entity text is searched with ±20 answer chars of context (tags removed), before *or* after.
7. Once the search start passes half the sentence, the next occurrence is taken regardless.
8. With no context match the first occurrence is used; text not in the sentence is dropped.
9. Overlap is inclusive (``tok_start <= ent_end and tok_end >= ent_start``): can grab a neighbour.
10. Entities are written in extraction order; an already tagged token is never overwritten.
11. ``I-T`` iff the previous tag *ends with* ``T``: adjacent same-type entities merge into one.
12. Scores: seqeval default mode (conlleval chunks), micro over all sentences, ``O``-joined.
13. Accuracy: seqeval token accuracy over all tokens, ``O`` included.

Same results, not the same cost: evalscope pairs tags with lazy regexes and checks each unclosed
tag against every entity found, which is quadratic in the answer (8,000 unclosed tags on one line
took 18 s). Here the same matches are found by binary search over tag positions, O(A log A) for an
answer of A characters; ``tests/compat/test_evalscope_differential.py`` checks every step against
a literal transcription of the rules on generated answers.

How evalpipe's default mode differs: the answer is aligned to the source text
(:mod:`evalpipe.parsers.xml_tags`), so a repeated entity maps to the occurrence at its place in
the answer instead of a first-occurrence/context search; entities that cannot be placed are
counted in the diagnostics (``unaligned_entities``) instead of vanishing silently; adjacent
same-type entities stay separate; spans are not widened by inclusive overlap; and scoring is
exact matching of strict IOB2 token spans (:mod:`evalpipe.metrics.spans`) instead of seqeval's
non-strict chunking.

Entity-type names are parameters. evalscope's NCBI data labels gold ``DISEASE`` and maps the XML
tag ``disease`` to ``DISEASE``; evalpipe's NCBI gold uses ``Disease``, so pass
``tag_map={"disease": "Disease"}`` (:data:`NCBI_TAG_MAP`) or every prediction would be scored as
a different type from the gold.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evalpipe.records import ScoreSheet

__all__ = [
    "EVALSCOPE_NCBI_TAG_MAP",
    "NCBI_TAG_MAP",
    "TaggedEntity",
    "evalscope_clean_answer",
    "evalscope_predicted_tags",
    "evalscope_score_sheet",
    "evalscope_scores",
    "evalscope_tagged_entities",
    "seqeval_default_entities",
]

#: XML tag -> BIO type for evalpipe's NCBI data (gold type ``Disease``).
NCBI_TAG_MAP: Mapping[str, str] = {"disease": "Disease"}
#: XML tag -> BIO type as evalscope itself uses it (its gold type is ``DISEASE``).
EVALSCOPE_NCBI_TAG_MAP: Mapping[str, str] = {"disease": "DISEASE"}

_RESPONSE_OPEN, _RESPONSE_CLOSE = "<response>", "</response>"
#: ``<t>`` and ``</t>`` as the reference's patterns read them: ``\w+`` then ``>`` (so the name is
#: always the whole run of word characters after ``<`` or ``</``)
_OPEN_TAG = re.compile(r"<(\w+)>")
_CLOSE_TAG = re.compile(r"</(\w+)>")
_UNCLOSED_ENTITY = re.compile(r"<(\w+)>(.*?)(?=<|$)")
_ANY_TAG = re.compile(r"<[^>]+>")
_CONTEXT_CHARS = 20


@dataclass(frozen=True)
class TaggedEntity:
    """An entity found in a cleaned answer.

    ``type`` is the BIO type (mapped, or the lower-cased tag name when unmapped); ``text`` is
    the tag's content; ``start``/``end`` are character offsets of the whole ``<t>…</t>`` match
    (tags included) in the cleaned answer, half-open.
    """

    type: str
    text: str
    start: int
    end: int


def _normalise_tag_map(tag_map: Mapping[str, str]) -> dict[str, str]:
    """Lower-case the keys (evalscope builds its reverse map from lower-cased tag names)."""
    out: dict[str, str] = {}
    for tag, bio_type in tag_map.items():
        if not bio_type:
            raise ValueError(f"tag {tag!r} maps to an empty type")
        key = tag.lower()
        if key in out and out[key] != bio_type:
            raise ValueError(f"tags differing only in case map to different types: {tag!r}")
        out[key] = bio_type
    return out


# ---------------------------------------------------------------------- linear-time tag pairing
#
# evalscope pairs tags with lazy regexes (``<(\w+)>(.*?)</\w+>`` and ``<(\w+)>(.*?)</\1>``). Tried
# at every opening tag, each scans to the end of the line when no closing tag follows, so an
# answer of n unclosed tags on one line costs O(n²) (8,000 tags: 18 s). The functions below find
# exactly the same matches from sorted lists of tag and newline positions, by binary search:
# O(n log n). tests/compat/test_evalscope_differential.py checks them against the literal regexes.


class _Lines:
    """Where the newlines are, so "no newline between a and b" is one bisect (``.`` stops at one)."""

    def __init__(self, text: str) -> None:
        self.breaks = [i for i, ch in enumerate(text) if ch == "\n"] if "\n" in text else []

    def clear(self, start: int, end: int) -> bool:
        """True when ``text[start:end]`` holds no newline."""
        k = bisect_left(self.breaks, start)
        return k == len(self.breaks) or self.breaks[k] >= end


def _pair_tags(text: str, same_name: bool) -> list[tuple[re.Match[str], int, int]]:
    r"""The matches of ``<(\w+)>(.*?)</\w+>`` (or ``…</\1>`` when ``same_name``) in ``text``.

    Returns ``(opening tag match, closing tag start, closing tag end)`` for each match, left to
    right and non-overlapping, as ``re.finditer`` would find them: a match starts at the first
    opening tag at or after the previous match's end whose body reaches a (same-named) closing
    tag before any newline, and ends at the first such closing tag.
    """
    closes: dict[str | None, tuple[list[int], list[int]]] = {}
    for m in _CLOSE_TAG.finditer(text):
        starts, ends = closes.setdefault(m.group(1) if same_name else None, ([], []))
        starts.append(m.start())
        ends.append(m.end())
    if not closes:
        return []
    lines = _Lines(text)
    pairs: list[tuple[re.Match[str], int, int]] = []
    cursor = 0
    for opening in _OPEN_TAG.finditer(text):
        if opening.start() < cursor:
            continue
        found = closes.get(opening.group(1) if same_name else None)
        if found is None:
            continue
        starts, ends = found
        k = bisect_left(starts, opening.end())
        if k == len(starts) or not lines.clear(opening.end(), starts[k]):
            continue
        pairs.append((opening, starts[k], ends[k]))
        cursor = ends[k]
    return pairs


def evalscope_clean_answer(answer: str) -> str:
    """The answer after evalscope's clean-up (quirks 1 and 2).

    The body of the first ``<response>(.*?)</response>`` match (DOTALL) if any, else the whole
    answer; then every ``<a>X</b>`` match is rewritten ``<a>X</a>``. Linear time: the first
    ``<response>`` is the match's start iff any ``</response>`` follows it, and the body ends at
    the first one that does.
    """
    text = answer
    opened = answer.find(_RESPONSE_OPEN)
    if opened != -1:
        closed = answer.find(_RESPONSE_CLOSE, opened + len(_RESPONSE_OPEN))
        if closed != -1:
            text = answer[opened + len(_RESPONSE_OPEN):closed]
    pieces: list[str] = []
    last = 0
    for opening, close_start, close_end in _pair_tags(text, same_name=False):
        name = opening.group(1)
        pieces += [text[last:opening.start()], f"<{name}>", text[opening.end():close_start], f"</{name}>"]
        last = close_end
    pieces.append(text[last:])
    return "".join(pieces)


def evalscope_tagged_entities(cleaned: str, tag_map: Mapping[str, str]) -> list[TaggedEntity]:
    """Entities of a cleaned answer, in evalscope's order (quirks 3 and 4).

    First every non-overlapping ``<t>text</t>`` match left to right, typed
    ``tag_map[t.lower()]`` or ``t.lower()`` when unmapped. Then every ``<t>text`` match that
    runs up to the next ``<`` or the end, kept only when ``t.lower()`` is mapped and its start
    does not fall inside (``start <= pos < end``) an entity found so far. (Only the closed
    entities can contain a later fallback match, and they are sorted and disjoint, so that test
    is one bisect instead of a scan of every entity.)
    """
    types = _normalise_tag_map(tag_map)
    entities: list[TaggedEntity] = []
    for opening, close_start, close_end in _pair_tags(cleaned, same_name=True):
        tag = opening.group(1).lower()
        entities.append(TaggedEntity(types.get(tag, tag), cleaned[opening.end():close_start],
                                     opening.start(), close_end))
    closed_starts = [e.start for e in entities]
    closed_ends = [e.end for e in entities]
    for m in _UNCLOSED_ENTITY.finditer(cleaned):
        k = bisect_right(closed_starts, m.start()) - 1
        if k >= 0 and m.start() < closed_ends[k]:
            continue
        tag = m.group(1).lower()
        if tag in types:
            entities.append(TaggedEntity(types[tag], m.group(2), m.start(), m.end()))
    return entities


def _token_offsets(tokens: Sequence[str], sentence: str) -> list[tuple[int, int]]:
    """Character ``(start, end)`` of each token in ``sentence``, found left to right by find."""
    offsets: list[tuple[int, int]] = []
    cursor = 0
    for token in tokens:
        at = sentence.find(token, cursor)
        if at == -1:
            at = cursor
        else:
            cursor = at + len(token)
        offsets.append((at, at + len(token)))
    return offsets


class _Locator:
    """Quirks 6 to 8, with the work shared between entities of one answer.

    evalscope walks the occurrences of the entity text until one has the answer's context next
    to it, or the walk has passed half the sentence. When neither context occurs anywhere in the
    sentence no occurrence can match, so the walk's outcome follows from two ``find`` calls; and
    equal (text, context) triples give equal results, so each is worked out once. The walk
    itself remains for contexts that do occur: at most the occurrences in the first half of the
    sentence, per distinct entity and context.
    """

    def __init__(self, cleaned: str, sentence: str) -> None:
        self.cleaned = cleaned
        self.sentence = sentence
        self.memo: dict[tuple[str, str, str], int] = {}

    def __call__(self, entity: TaggedEntity) -> int:
        """Character start of ``entity.text`` in the sentence; -1 when absent."""
        cleaned = self.cleaned
        before = _ANY_TAG.sub("", cleaned[max(0, entity.start - _CONTEXT_CHARS): entity.start])
        after = _ANY_TAG.sub("", cleaned[entity.end: entity.end + _CONTEXT_CHARS])
        key = (entity.text, before, after)
        if key not in self.memo:
            self.memo[key] = self._locate(entity.text, before, after)
        return self.memo[key]

    def _locate(self, needle: str, before: str, after: str) -> int:
        sentence = self.sentence
        half = len(sentence) // 2
        first = sentence.find(needle)
        if first == -1 or not before.strip() or not after.strip():
            return first  # absent; or an empty context, which is "in" every window: the first hit
        if before.strip() not in sentence and after.strip() not in sentence:
            # no context can match: the walk takes the first hit after the first one at or past
            # the middle, if the search position is still inside the sentence; else the first hit
            middle = sentence.find(needle, half)
            if middle == -1 or middle + 1 >= len(sentence):
                return first
            later = sentence.find(needle, middle + 1)
            return first if later == -1 else later
        pos = 0
        while pos < len(sentence):
            hit = sentence.find(needle, pos)
            if hit == -1:
                break
            window_before = sentence[max(0, hit - len(before)): hit]
            window_after = sentence[hit + len(needle): hit + len(needle) + len(after)]
            if before.strip() in window_before.strip() or after.strip() in window_after.strip() or pos > half:
                return hit
            pos = hit + 1
        return first


class _Untagged:
    """The untagged tokens in order, so an entity visits only tokens it can still tag."""

    def __init__(self, n: int) -> None:
        self.next = list(range(n + 1))  # next[i]: smallest untagged index >= i (n: none)

    def find(self, i: int) -> int:
        root = i
        while self.next[root] != root:
            root = self.next[root]
        while self.next[i] != root:  # path compression
            self.next[i], i = root, self.next[i]
        return root

    def take(self, i: int) -> None:
        self.next[i] = i + 1


def evalscope_predicted_tags(
    answer: str, tokens: Sequence[str], tag_map: Mapping[str, str]
) -> list[str]:
    """The BIO tags evalscope derives from ``answer`` for a sentence of ``tokens``.

    ``tag_map`` maps XML tag names (compared lower-cased) to BIO types, e.g.
    :data:`NCBI_TAG_MAP`. Steps: :func:`evalscope_clean_answer`, then
    :func:`evalscope_tagged_entities`, then each entity is located in ``" ".join(tokens)``
    (context search, first-occurrence fallback, dropped if absent) and written onto every token
    it overlaps inclusively, never overwriting a tagged token; a token becomes ``I-T`` when the
    previous token's tag ends with ``T`` and ``B-T`` otherwise. Quirks 1-11 of the module
    docstring. The result has one tag per token and may be invalid IOB2.

    Cost: O(A log A + S) for an answer of A characters and a sentence of S, plus, for each
    distinct (entity text, context) whose context occurs in the sentence, a walk over the
    entity text's occurrences in the first half of the sentence (evalscope's own search).
    """
    cleaned = evalscope_clean_answer(answer)
    sentence = " ".join(tokens)
    offsets = _token_offsets(tokens, sentence)
    starts = [start for start, _ in offsets]
    ends = [end for _, end in offsets]
    # tokens found left to right in their own join have non-decreasing starts and ends, so the
    # tokens an entity overlaps are one contiguous run, found by bisect
    sorted_offsets = all(a <= b for a, b in zip(starts, starts[1:])) and all(a <= b for a, b in zip(ends, ends[1:]))
    tags = ["O"] * len(tokens)
    untagged = _Untagged(len(tokens))
    locate = _Locator(cleaned, sentence)
    for entity in evalscope_tagged_entities(cleaned, tag_map):
        start = locate(entity)
        if start == -1:
            continue
        end = start + len(entity.text)
        if sorted_offsets:  # overlap is tok_start <= end and tok_end >= start
            lo, hi = bisect_left(ends, start), bisect_right(starts, end)
        else:
            lo, hi = 0, len(tokens)
        i = untagged.find(lo)
        while i < hi:
            if starts[i] <= end and ends[i] >= start:
                continues = i > 0 and tags[i - 1] != "O" and tags[i - 1].endswith(entity.type)
                tags[i] = f"{'I' if continues else 'B'}-{entity.type}"
                untagged.take(i)
            i = untagged.find(i + 1)
    return tags


# --------------------------------------------------------------------------- seqeval default mode


def _split_tag(tag: str) -> tuple[str, str]:
    """seqeval's prefix reading: first character, and the text after the first ``-`` of the rest
    (the whole rest if it has no ``-``), ``"_"`` when that is empty."""
    if not isinstance(tag, str) or not tag:
        raise ValueError(f"tags must be non-empty strings, got {tag!r}")
    head, dash, tail = tag[1:].partition("-")
    return tag[0], (tail if dash else head) or "_"


def _chunk_ends(prev: str, prev_type: str, cur: str, cur_type: str) -> bool:
    if prev in "ES":
        return True
    if prev in "BI" and cur in "BSO":
        return True
    return prev not in "O." and prev_type != cur_type


def _chunk_starts(prev: str, prev_type: str, cur: str, cur_type: str) -> bool:
    if cur in "BS":
        return True
    if cur in "EI" and prev in "ESO":
        return True
    return cur not in "O." and prev_type != cur_type


def seqeval_default_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Chunks of one tag sequence as seqeval 1.2.2's default (non-strict, conlleval) mode reads
    them: ``(type, start, end_inclusive)`` in order.

    A tag is read as prefix = its first character and type = what follows the first ``-`` after
    it (``"_"`` if empty). Walking the tags with a final ``O`` appended, starting from prefix
    ``O`` and an empty type: a chunk ends before the current tag when the previous prefix is
    ``E`` or ``S``, when ``B``/``I`` is followed by ``B``/``S``/``O``, or when the previous
    prefix is not ``O``/``.`` and the type changes; a chunk starts at the current tag when it is
    ``B``/``S``, when ``E``/``I`` follows ``E``/``S``/``O``, or when it is not ``O``/``.`` and the
    type changes. So ``O I-X`` starts a chunk and ``B-X I-Y`` is two chunks. Unlike seqeval, no
    warning is issued for non-BIO tags, and an empty tag raises ``ValueError``.
    """
    if isinstance(tags, str):
        raise TypeError("expected a sequence of tags, not a string")
    chunks: list[tuple[str, int, int]] = []
    prev, prev_type, begin = "O", "", 0
    for i, tag in enumerate([*tags, "O"]):
        cur, cur_type = _split_tag(tag)
        if _chunk_ends(prev, prev_type, cur, cur_type):
            chunks.append((prev_type, begin, i - 1))
        if _chunk_starts(prev, prev_type, cur, cur_type):
            begin = i
        prev, prev_type = cur, cur_type
    return chunks


def _check_corpus(gold_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]]) -> None:
    if len(gold_tags) != len(pred_tags):
        raise ValueError(f"{len(gold_tags)} gold sentences but {len(pred_tags)} predicted")
    for i, (gold, pred) in enumerate(zip(gold_tags, pred_tags)):
        if isinstance(gold, str) or isinstance(pred, str):
            raise TypeError("expected a sequence of sentences, each a sequence of tags")
        if len(gold) != len(pred):
            raise ValueError(f"sentence {i}: {len(gold)} gold tags but {len(pred)} predicted")


def evalscope_scores(
    gold_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]]
) -> dict[str, float]:
    """``{"precision", "recall", "f1", "accuracy"}`` as evalscope aggregates an NER benchmark.

    seqeval 1.2.2 default mode, micro over the whole corpus at once (quirks 12 and 13): the
    sentences of each side are concatenated with one ``O`` after each, chunked by
    :func:`seqeval_default_entities`, and a predicted chunk is correct iff the same
    ``(type, start, end)`` is a gold chunk. ``precision = correct / predicted chunks``,
    ``recall = correct / gold chunks`` (``0.0`` on a zero denominator), ``f1 = 2PR / (P + R)``
    (``0.0`` when ``P + R == 0``). ``accuracy`` = equal tags / all tokens, ``O`` included.
    Sentences must pair up with equal lengths (``ValueError``); a corpus with no tokens raises
    ``ValueError`` (seqeval's accuracy would divide by zero).
    """
    _check_corpus(gold_tags, pred_tags)
    gold_flat: list[str] = []
    pred_flat: list[str] = []
    correct = total = 0
    for gold, pred in zip(gold_tags, pred_tags):
        gold_flat += [*gold, "O"]
        pred_flat += [*pred, "O"]
        correct += sum(g == p for g, p in zip(gold, pred))
        total += len(gold)
    if total == 0:
        raise ValueError("evalscope scores are undefined for a corpus without tokens")
    gold_chunks = set(seqeval_default_entities(gold_flat))
    pred_chunks = set(seqeval_default_entities(pred_flat))
    hits = len(gold_chunks & pred_chunks)
    precision = hits / len(pred_chunks) if pred_chunks else 0.0
    recall = hits / len(gold_chunks) if gold_chunks else 0.0
    f1 = 2.0 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "accuracy": correct / total}


_ZERO_SCORES = {"precision": 0.0, "recall": 0.0, "f1": 0.0, "accuracy": 0.0}


def evalscope_score_sheet(
    gold_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]]
) -> ScoreSheet:
    """A :class:`ScoreSheet` as evalscope reports it.

    ``per_sample[i]`` is :func:`evalscope_scores` of sentence ``i`` alone (what evalscope shows
    per sample); a sentence without tokens scores all zeros there, as evalscope's error path
    does, and contributes nothing to the corpus. ``corpus`` is :func:`evalscope_scores` over all
    sentences, or all zeros when the corpus has no token at all.
    """
    _check_corpus(gold_tags, pred_tags)
    per_sample = [
        evalscope_scores([gold], [pred]) if len(gold) else dict(_ZERO_SCORES)
        for gold, pred in zip(gold_tags, pred_tags)
    ]
    has_tokens = any(len(gold) for gold in gold_tags)
    corpus = evalscope_scores(gold_tags, pred_tags) if has_tokens else dict(_ZERO_SCORES)
    return ScoreSheet(corpus=corpus, per_sample=per_sample)

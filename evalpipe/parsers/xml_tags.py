"""Parse an LLM's XML-tagged answer into entity spans over the *original* source text.

The model is shown a source text and asked to answer ``<response>`` + the same text with each
entity wrapped in a tag (``<disease>…</disease>``; CMeEE nests them: ``<sym><bod>腹部</bod>疼痛</sym>``)
+ ``</response>``. Models rarely copy the text exactly, so spans are never read off the answer's
own offsets: the answer's tag-stripped text is *aligned* to the source and each entity is
carried over through that alignment. Everything is in characters (no tokenisation, so it works
for Chinese); :func:`char_spans_to_token_spans` snaps the result onto a task's tokens.

:func:`parse_tagged_answer` is pure and never raises for any ``str``/``None`` answer. The rules:

1. **Reasoning.** Everything up to the last ``</think>`` is dropped. An unclosed ``<think>``
   (truncated reasoning) drops the text after it up to the next wrapper tag, or to the end.
2. **Wrapper.** The content is the text between the first ``<response>`` (any case, attributes
   allowed) and the next ``</response>``, or the end of the answer when it was truncated. Chatter
   outside is ignored. With no opening wrapper the content is the first fenced code block if
   there is one, else the text before a stray ``</response>``, else the whole answer, and
   ``wrapper_missing`` is set. Code-fence markers (```` ```xml ````, ```` ``` ````) are then
   removed (``code_fence``).
3. **Tags.** ``<name attr…>``, ``</name>`` and ``<name/>`` with ASCII names, matched
   case-insensitively; a tag whose name is in ``tag_map`` may have blanks after ``<``
   (``< disease >``). Names not in ``tag_map`` (``<gene>``, ``<b>``) delimit nothing but their
   text is kept; each opening, self-closing or unmatched closing one counts in ``unknown_tags``.
   Tags nest; a closing tag closes the innermost open element of the same name. Full-width
   brackets around a known name (``＜dis＞…＜／dis＞``, as Chinese input methods type them) are read
   as tags and counted in ``fullwidth_tags``; a lone ``＜`` in the text (``血压＜90``) stays text.
4. **Broken tags** (each counts once in ``tags_unbalanced``): a closing tag whose name matches
   no open element closes the innermost open entity if the names are near-misses
   (``</diseases>`` for ``<disease>``: one is a prefix of the other, or similarity ≥ 0.8);
   otherwise it is ignored. An entity tag still open when its enclosing element closes, or at
   the end, is **dropped**: guessing where it was meant to end would invent a boundary, and a
   dropped entity is scored as the false negative it is. Empty entities yield nothing.
5. **Entity references** (``&amp;``, ``&lt;``, ``&#233;``) are unescaped when the source contains
   the character and not the reference itself.
6. **Alignment.** Both texts are reduced to *keys*: whitespace removed, each character NFKC-
   normalised and lower-cased (``，``≡``,``, ``Ａ``≡``a``), each key character remembering its
   original offset (:mod:`evalpipe.parsers.text_keys`). Equal keys map one-to-one (the usual
   case: only spacing differed, so ``T-cell`` finds ``T - cell``). Otherwise :class:`difflib.SequenceMatcher` matching blocks of
   ≥ 3 characters are the alignment (shorter ones are mostly coincidence — unless one block is
   the whole answer or the whole source, e.g. a two-character answer), and only the first
   ``2·|source| + 1000`` key characters of the answer are aligned (so a runaway 1 MB answer costs
   no more than a normal one). Because the alignment is positional, an entity whose text occurs
   twice in the source maps to the occurrence at its place in the answer. When the texts are too
   big for that (product of lengths > 4·10⁶) each entity's key text is searched in the source in
   answer order instead (an entity nested in one already found is placed by it), and the
   coverages of rule 8 are the share of each text's 16-character chunks found in the other (a
   cheap stand-in for aligned characters).
7. **Entity mapping.** An entity is kept if at least half of its key characters are aligned; its
   span runs from its first to its last aligned character, extended at either end over as many
   *unaligned* source characters as it had unaligned characters there (so ``tumour`` vs source
   ``tumor`` covers the whole word), and must not be more than about twice the entity's length.
   Other entities are dropped and counted in ``unaligned_entities``.
8. **Failure.** ``failed`` is True when the tag-stripped content is empty (``empty``) or when
   the answer is not explained by the source: aligned characters cover < 50 % of the source's
   key characters, and the answer either tags no entity or has < 50 % of its own key characters
   aligned. So "I'm sorry, I can't help" fails, and so does an untagged answer that merely
   occurs in the source (``cancer``, ``No``, an untagged copy of less than half the text): it
   is not a copy of the text, so it cannot stand for "no entity here". An untagged copy of most
   of the text (no entities), a tagged copy even if truncated, and a bare list of tagged
   entities that occur in the source (``<disease>colon cancer</disease>``) are valid
   predictions. A failed parse has no spans.
9. **Bounds.** Parsing is linear in the answer and the source (time and memory) whatever they
   hold: tags, references and nesting are read in one pass, each entity is mapped in O(1), and
   only the first ``MAX_SOURCE_KEYS`` (100,000) key characters of the source are aligned — a
   longer (absurd) source sets ``source_truncated`` and its entities past that point are
   ``unaligned_entities``; its coverage is measured on the aligned part. The search of rule 6
   gives up after scanning ``SEARCH_WORK_FACTOR·(|answer| + |source|)`` key characters in all
   (only many failed searches reach that); entities it has not reached are unaligned. The
   alignment itself lives in :mod:`evalpipe.parsers.key_alignment`.

``text_altered`` is True whenever the tag-stripped content differs from the source other than in
whitespace (before normalisation). Diagnostics always hold the same keys so run summaries can
aggregate them: ``empty``, ``wrapper_missing``, ``code_fence`` (bool), ``tags_unbalanced``,
``unknown_tags``, ``unaligned_entities`` (int), ``text_altered`` (bool), ``unknown_tag_names``
(sorted tuple, at most 20), ``source_coverage`` and ``answer_coverage`` (floats in [0, 1]),
``fullwidth_tags`` (int), ``source_truncated`` (bool).
"""

from __future__ import annotations

import difflib
import functools
import html
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from evalpipe.parsers.key_alignment import Alignment, align_blocks, align_search, ngram_coverage
from evalpipe.parsers.text_keys import SCAN_FACTOR, WHITESPACE, text_keys
from evalpipe.records import Prediction, Span
from evalpipe.text.reasoning import strip_reasoning

__all__ = ["TaggedParse", "char_spans_to_token_spans", "parse_tagged_answer", "to_prediction", "token_offsets"]

MIN_COVERAGE = 0.5  # below this on both sides the answer is not a copy of the source
MAX_NAMES = 20  # unknown tag names kept in diagnostics
SEQUENCE_MATCHER_BUDGET = 4_000_000  # len(answer keys) * len(source keys) above which we search instead
#: key characters of the source that are aligned at most (rule 9); ~50 times a PubMed abstract
MAX_SOURCE_KEYS = 100_000

# Every quantifier is bounded or followed by a disjoint class, so matching stays linear on 1 MB junk.
_NAME = r"[A-Za-z][A-Za-z0-9_.:-]{0,63}(?![A-Za-z0-9_.:-])"
_TAG_RE = re.compile(r"<([ \t]{0,4})(/?)([ \t]{0,4})(" + _NAME + r")([^<>\n]{0,256})>")
_FENCE_RE = re.compile(r"```(?:[A-Za-z0-9_+-]{0,20}[ \t]{0,20}\r?\n)?")
_BLANKS = re.compile(r"\s+")  # \s is exactly str.isspace
_WORD_RUN = re.compile(r"\S+")
_ENTITY_RE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")


@dataclass(frozen=True)
class TaggedParse:
    """Result of :func:`parse_tagged_answer`.

    ``spans`` are character spans over the source text (half-open), labelled with the mapped
    entity type and sorted; empty when ``failed``. ``diagnostics`` always has the keys listed in
    the module docstring, so per-sample values can be summed over a run without key checks.
    """

    spans: tuple[Span, ...]
    diagnostics: Mapping[str, Any]
    failed: bool


def _diagnostics() -> dict[str, Any]:
    return {
        "empty": False, "wrapper_missing": False, "code_fence": False, "tags_unbalanced": 0,
        "unknown_tags": 0, "unaligned_entities": 0, "text_altered": False,
        "unknown_tag_names": (), "source_coverage": 0.0, "answer_coverage": 0.0, "fullwidth_tags": 0,
        "source_truncated": False,
    }


@functools.lru_cache(maxsize=256)
def _tag_re(name: str, closing: bool) -> re.Pattern[str]:
    slash = r"/[ \t]{0,4}" if closing else ""
    return re.compile(r"<[ \t]{0,4}" + slash + re.escape(name) + r"(?![A-Za-z0-9_.:-])[^<>\n]{0,256}>", re.I)


def _strip_think(text: str, wrapper: str) -> str:
    """Drop reasoning: it may quote tags and text, which must not be read as the answer."""
    return strip_reasoning(text, resume_at=_tag_re(wrapper, False) if wrapper else None).answer


def _extract_content(text: str, wrapper: str, diag: dict[str, Any]) -> str:
    """The part of the answer that should be the tagged copy of the source (rule 2)."""
    fence = _FENCE_RE.search(text)
    diag["code_fence"] = fence is not None
    opened = _tag_re(wrapper, False).search(text) if wrapper else None
    if opened is not None:
        closed = _tag_re(wrapper, True).search(text, opened.end())
        content = text[opened.end(): closed.start() if closed else len(text)]
    else:
        diag["wrapper_missing"] = bool(wrapper)
        closed = _tag_re(wrapper, True).search(text) if wrapper else None
        if fence is not None:
            end = _FENCE_RE.search(text, fence.end())
            content = text[fence.end(): end.start() if end else len(text)]
        else:
            content = text[: closed.start()] if closed else text
    return _FENCE_RE.sub("", content)


class _SourceRefs:
    """Answers to "does the source hold this character / this reference literally?" (rule 5).

    Worked out once per parse from the source, so each ``&…;`` in the answer costs O(1) instead of
    a search of the whole source (an answer of 100,000 references against a long source).
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self._chars: set[str] | None = None
        self._refs: set[str] | None = None
        self._texts: dict[str, bool] = {}

    def has_text(self, text: str) -> bool:
        if len(text) == 1:
            if self._chars is None:
                self._chars = set(self.source)
            return text in self._chars
        if text not in self._texts:  # multi-character results: a few named references only
            self._texts[text] = text in self.source
        return self._texts[text]

    def has_reference(self, ref: str) -> bool:
        if self._refs is None:  # references cannot overlap (no & or ; inside), so finditer sees all
            self._refs = {m.group(0) for m in _ENTITY_RE.finditer(self.source)} if "&" in self.source else set()
        return ref in self._refs


def _unescape(piece: str, refs: _SourceRefs) -> str:
    """Unescape ``&amp;``-style references only where the source has the raw character."""
    if "&" not in piece:
        return piece

    def repl(m: re.Match[str]) -> str:
        raw = html.unescape(m.group(0))
        return raw if raw != m.group(0) and refs.has_text(raw) and not refs.has_reference(m.group(0)) else m.group(0)

    return _ENTITY_RE.sub(repl, piece)


@lru_cache(maxsize=4096)
def _near_miss(a: str, b: str) -> bool:
    return a.startswith(b) or b.startswith(a) or difflib.SequenceMatcher(None, a, b).ratio() >= 0.8


class _OpenElements:
    """Stack of open tags with per-name counts, so each tag costs amortised O(1) even on junk."""

    def __init__(self, tag_map: Mapping[str, str]) -> None:
        self.tag_map = tag_map
        self.items: list[tuple[str, int]] = []  # (lower-case name, start offset in stripped text)
        self.known: list[int] = []  # stack indices of entity (tag_map) elements
        self.count: dict[str, int] = {}

    def push(self, name: str, start: int) -> None:
        if name in self.tag_map:
            self.known.append(len(self.items))
        self.items.append((name, start))
        self.count[name] = self.count.get(name, 0) + 1

    def find(self, name: str) -> int | None:
        """Index of the innermost open element called ``name``; the scan only visits what closes."""
        if not self.count.get(name):
            return None
        return next(i for i in range(len(self.items) - 1, -1, -1) if self.items[i][0] == name)

    def pop_to(self, index: int) -> list[tuple[str, int]]:
        popped = self.items[index:]
        del self.items[index:]
        while self.known and self.known[-1] >= index:
            self.known.pop()
        for name, _ in popped:
            self.count[name] -= 1
        return popped


def _read_tags(content: str, tag_map: Mapping[str, str], ignore: set[str], source: str,
               diag: dict[str, Any]) -> tuple[str, list[tuple[int, int, str]]]:
    """Strip tags from ``content``; return that text and entity spans over it (rules 3-5)."""
    pieces: list[str] = []
    length = 0
    stack = _OpenElements(tag_map)
    entities: list[tuple[int, int, str]] = []
    unknown: set[str] = set()
    refs = _SourceRefs(source)
    last = 0

    def note_unknown(name: str) -> None:
        diag["unknown_tags"] += 1
        unknown.add(name)

    for m in _TAG_RE.finditer(content):
        blank_before, slash, blank_after, raw_name, attrs = m.groups()
        name = raw_name.lower()
        known = name in tag_map
        if not known and (blank_before or blank_after) and name not in ignore:
            continue  # "< b" is more likely text than a tag: leave it in the text
        piece = _unescape(content[last:m.start()], refs)
        pieces.append(piece)
        length += len(piece)
        last = m.end()
        if name in ignore and not known:
            continue  # stray wrapper/think markup inside the content
        if slash:
            _close(name, length, stack, entities, diag, note_unknown)
        elif attrs.rstrip().endswith("/"):  # <name/>: an empty element
            if not known:
                note_unknown(name)
        else:
            stack.push(name, length)
            if not known:
                note_unknown(name)
    pieces.append(_unescape(content[last:], refs))
    diag["tags_unbalanced"] += len(stack.known)
    diag["unknown_tag_names"] = tuple(sorted(unknown))[:MAX_NAMES]
    return "".join(pieces), entities


def _close(name: str, pos: int, stack: _OpenElements, entities: list[tuple[int, int, str]],
           diag: dict[str, Any], note_unknown: Callable[[str], None]) -> None:
    """Apply one closing tag to the open elements (rules 3-4)."""
    match = stack.find(name)
    if match is None:
        inner = stack.known[-1] if stack.known else None
        if inner is not None and _near_miss(name, stack.items[inner][0]):
            match = inner
            diag["tags_unbalanced"] += 1
        elif name in stack.tag_map:
            diag["tags_unbalanced"] += 1
            return
        else:
            note_unknown(name)
            return
    (open_name, start), *inside = stack.pop_to(match)
    # entities left open inside the element closing now are dropped
    diag["tags_unbalanced"] += sum(1 for n, _ in inside if n in stack.tag_map)
    if open_name in stack.tag_map and pos > start:
        entities.append((start, pos, stack.tag_map[open_name]))


class _Words:
    """Where the non-blank runs of a text are, so "does text[a:b] hold anything but blanks?" is
    one bisect — not a slice per entity, which is quadratic for thousands of nested tags."""

    def __init__(self, text: str) -> None:
        runs = [m.span() for m in _WORD_RUN.finditer(text)]
        self.starts = [a for a, _ in runs]
        self.ends = [b for _, b in runs]

    def has_text(self, start: int, end: int) -> bool:
        k = bisect_right(self.ends, start)  # first run ending after start
        return k < len(self.starts) and max(self.starts[k], start) < end


def _align_entities(stripped: str, source: str, entities: list[tuple[int, int, str]],
                    diag: dict[str, Any], words: _Words) -> list[Span]:
    """Carry entity spans over the stripped answer onto the source (rules 6, 7 and 9)."""
    s_keys, s_off, diag["source_truncated"] = text_keys(source, MAX_SOURCE_KEYS)
    a_limit = 2 * len(s_keys) + 1000
    if stripped == source and not diag["source_truncated"] and (not s_off or s_off[-1] < SCAN_FACTOR * a_limit):
        # an exact copy whose keys the answer's reading would all reach: the source holds no key
        # past the ones read, the answer's limit is above their number, and its scan bound lies
        # past the last of them — so it would read the very same keys (both lists are only read)
        a_keys, a_off = s_keys, s_off
    else:
        a_keys, a_off, _ = text_keys(stripped, a_limit)
    ranges = [(bisect_left(a_off, e0), bisect_left(a_off, e1)) for e0, e1, _ in entities]
    if a_keys == s_keys:
        blocks = [(0, 0, len(a_keys))]
        diag["source_coverage"] = diag["answer_coverage"] = 1.0
    elif len(a_keys) * len(s_keys) <= SEQUENCE_MATCHER_BUDGET:
        blocks = align_blocks(a_keys, s_keys)
        matched = sum(n for _, _, n in blocks)
        diag["source_coverage"] = matched / len(s_keys) if s_keys else 0.0
        diag["answer_coverage"] = matched / len(a_keys) if a_keys else 0.0
    else:
        blocks = align_search(a_keys, s_keys, ranges)
        diag["source_coverage"] = ngram_coverage(s_keys, a_keys)
        diag["answer_coverage"] = ngram_coverage(a_keys, s_keys)
    if not entities:
        return []
    alignment = Alignment(len(a_keys), len(s_keys), blocks)
    spans: set[Span] = set()
    for (e0, e1, label), (k0, k1) in zip(entities, ranges):
        if not words.has_text(e0, e1):
            continue  # whitespace-only entity: nothing to find
        mapped = alignment.map_entity(k0, k1) if k1 > k0 else None
        if mapped is None:
            diag["unaligned_entities"] += 1
        else:
            spans.add(Span(s_off[mapped[0]], s_off[mapped[1]] + 1, label))
    return sorted(spans)


_FULLWIDTH_TAG_RE = re.compile(r"[<＜][ \t　]{0,4}([/／]?)[ \t　]{0,4}([A-Za-z][A-Za-z0-9_-]{0,40})[ \t　]{0,4}[>＞]")


def _fold_fullwidth_tags(text: str, names: set[str], diag: dict[str, Any]) -> str:
    """Rewrite ``＜dis＞…＜／dis＞`` (full-width brackets, as Chinese IMEs type them) as ASCII tags.

    Only brackets around a *known* tag name are folded: a literal ``＜`` in clinical text
    (``血压＜90``) stays text. Each folded tag is counted in ``fullwidth_tags``.
    """
    if "＜" not in text and "＞" not in text:
        return text

    def repl(m: re.Match[str]) -> str:
        whole, slash, name = m.group(0), m.group(1), m.group(2)
        if name.lower() not in names or not any(c in whole for c in "＜＞／"):
            return whole
        diag["fullwidth_tags"] += 1
        return f"<{'/' if slash else ''}{name}>"

    return _FULLWIDTH_TAG_RE.sub(repl, text)


def _blank_free_length(text: str) -> int:
    return len(text) - sum(map(text.count, WHITESPACE))


def _differs_beyond_blanks(a: str, b: str) -> bool:
    """``a`` and ``b`` differ other than in whitespace. The lengths are compared first (counting
    in C, no copies), so a short answer against an absurdly long source costs next to nothing;
    before that, an exact copy (common) is one comparison."""
    if a == b:
        return False
    if _blank_free_length(a) != _blank_free_length(b):
        return True
    return _BLANKS.sub("", a) != _BLANKS.sub("", b)


def parse_tagged_answer(answer: str | None, source_text: str, tag_map: Mapping[str, str], *,
                        wrapper: str = "response") -> TaggedParse:
    """Parse ``answer`` into entity spans over ``source_text`` (see the module docstring).

    ``tag_map`` maps tag names (matched case-insensitively) to the entity type used as the span
    label, e.g. ``{"disease": "Disease"}``. ``wrapper`` is the tag around the answer; ``""``
    means the answer has none. Never raises: a useless answer is ``failed=True``, not an error.
    """
    diag = _diagnostics()
    source = source_text if isinstance(source_text, str) else ""
    tags = {str(k).lower(): str(v) for k, v in (tag_map or {}).items()}
    wrapper = (wrapper or "").lower()
    text = answer if isinstance(answer, str) else ""
    text = _fold_fullwidth_tags(text, set(tags) | {wrapper, "think"} - {""}, diag)
    text = _strip_think(text, wrapper)
    content = _extract_content(text, wrapper, diag)
    stripped, entities = _read_tags(content, tags, {wrapper, "think"} - {""}, source, diag)
    if not stripped.strip():
        diag["empty"] = True
        return TaggedParse(spans=(), diagnostics=diag, failed=True)
    diag["text_altered"] = _differs_beyond_blanks(stripped, source)
    words = _Words(stripped if entities else "")  # only entities ask it anything
    spans = _align_entities(stripped, source, entities, diag, words)
    # rule 8: the answer's own coverage vouches for it only when it tags something
    tagged = any(words.has_text(e0, e1) for e0, e1, _ in entities)
    explained = diag["source_coverage"] >= MIN_COVERAGE or (tagged and diag["answer_coverage"] >= MIN_COVERAGE)
    failed = not explained
    return TaggedParse(spans=() if failed else tuple(spans), diagnostics=diag, failed=failed)


def to_prediction(parse: TaggedParse) -> Prediction:
    """Wrap a parse as a :class:`Prediction` whose value is the character spans."""
    return Prediction(value=parse.spans, failed=parse.failed, diagnostics=dict(parse.diagnostics))


def token_offsets(tokens: Sequence[str], sep: str = " ") -> list[tuple[int, int]]:
    """Character ``(start, end)`` of each token in ``sep.join(tokens)``: how task text was built."""
    offsets: list[tuple[int, int]] = []
    pos = 0
    for token in tokens:
        offsets.append((pos, pos + len(token)))
        pos += len(token) + len(sep)
    return offsets


def char_spans_to_token_spans(spans: Iterable[Span], token_offsets: Sequence[tuple[int, int]]
                              ) -> tuple[tuple[Span, ...], int]:
    """Snap character spans to token spans ``[first, last + 1)`` over every token they overlap.

    Gold is per token, so a span that cuts a token is widened to whole tokens rather than
    dropped; how often that happened is returned as the second value so a run can report it.
    Spans that overlap no token (only whitespace) are dropped; identical results are merged.
    """
    starts = [s for s, _ in token_offsets]
    ends = [e for _, e in token_offsets]
    out: set[Span] = set()
    cut = 0
    for span in spans:
        first = bisect_right(ends, span.start)  # first token ending after the span starts
        last = bisect_left(starts, span.end) - 1  # last token starting before the span ends
        if first > last:
            continue
        if starts[first] < span.start or ends[last] > span.end:
            cut += 1
        out.add(Span(first, last + 1, span.label))
    return tuple(sorted(out)), cut

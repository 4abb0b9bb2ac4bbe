"""Kind ``span_ner``: mark the entities of a sentence with XML tags (``<disease>…</disease>``).

Data: CoNLL/BIO files (``token<TAB>tag`` lines, a blank line between sentences; ``data.format:
conll`` or a ``.conll``/``.bio``/``.iob`` file), or records holding a token list (``tokens_field``)
and an IOB2 tag list (``fields.answer``, default ``tags``). Tags are checked (``O``, ``B-X``,
``I-X`` continuing ``X``; every type one of ``entities``' types). Templates see ``example.text``
(the tokens joined by single spaces) and ``example.tokens``. Gold: :class:`NerGold` (the tags and
the token spans they encode). A shot demonstrates ``<response>`` + the text with its entities tagged.

``entities`` maps each tag name the model writes to the entity type in the gold tags
(``{disease: Disease}``).

Parsing: :func:`evalpipe.parsers.xml_tags.parse_tagged_answer` (text outside ``<response>`` ignored,
``<think>`` and code fences stripped, tags in any case, entities aligned to the input
whitespace-insensitively and by position, unknown tags counted), then snapped to token spans.
Metrics (:func:`evalpipe.metrics.spans.span_score_sheet`): strict entity-level micro P/R/F1 (exact
start, end, type), partial-overlap F1, seqeval's token accuracy; a failed parse predicts no entity,
so its gold entities are false negatives. Every metric is declared as micro P/R/F1 or a ratio of
token counts, so each gets a bootstrap interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Any

from pydantic import Field, model_validator

from evalpipe.data.file_records import Record
from evalpipe.data.iob2_codes import gold_spans, tag_codes
from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.spans import TOKEN_ACCURACY, bio_to_spans, span_score_sheet, spans_to_bio, token_accuracy, token_counts
from evalpipe.parsers.xml_tags import char_spans_to_token_spans, parse_tagged_answer, token_offsets
from evalpipe.records import Example, Prediction, ScoreSheet, Span
from evalpipe.tasks.base import StructuredOutput, Scoring
from evalpipe.tasks.kinds.base import Drafted, Kind, KindParts, register_kind
from evalpipe.tasks.taskfile.schema import TaskFile, Text

METRICS = ("precision", "recall", "f1", "partial_f1", "accuracy")


@dataclass(frozen=True)
class NerGold:
    """Gold for one sentence: IOB2 tags and the token spans they encode."""

    tags: tuple[str, ...]
    spans: tuple[Span, ...]


class SpanNerTask(TaskFile):
    kind: Literal["span_ner"]
    entities: dict[Text, Text] = Field(min_length=1, description="Tag name in answers → entity type in the gold "
                                       "tags, e.g. {disease: Disease}.")
    tokens_field: Text = Field("tokens", description="Records (not CoNLL): the field holding the token list.")

    @model_validator(mode="after")
    def _types(self) -> SpanNerTask:
        if len(set(self.entities.values())) != len(self.entities):
            raise ValueError("entities: two tags name the same entity type")
        return self


def _tag_field(task: SpanNerTask) -> str:
    field = task.fields.gold_field()
    return (field[0] if isinstance(field, list) else field) or "tags"


def read(task: SpanNerTask, records: Sequence[Record]) -> list[Drafted]:
    """Each record's tokens and checked tags; a sentence's tags are checked and decoded at once
    (:mod:`~evalpipe.data.iob2_codes`) unless that declines, then tag by tag."""
    types = set(task.entities.values())
    codes = tag_codes(types)
    out = []
    for record in records:
        tokens = record.get(task.tokens_field, (list, tuple))
        tags = record.get(_tag_field(task), (list, tuple))
        if len(tokens) != len(tags) or not tokens:
            raise record.error(_tag_field(task), f"{len(tags)} tags for {len(tokens)} tokens")
        spans = gold_spans(codes, tags) if codes is not None else None
        if spans is None:
            _check_tags(task, record, tags, types)
        tokens, tags = _strings(tokens), _strings(tags)
        out.append(Drafted(gold=NerGold(tags=tags, spans=bio_to_spans(tags) if spans is None else spans),
                           inputs={"text": " ".join(tokens), "tokens": tokens}))
    return out


def _strings(values: Sequence[Any]) -> tuple[str, ...]:
    """``tuple(map(str, values))``: a tuple of plain strings (what a CoNLL file gives) is that already."""
    if type(values) is tuple and set(map(type, values)) == {str}:
        return values
    return tuple(map(str, values))


def _check_tags(task: SpanNerTask, record: Record, tags: Sequence[Any], types: set[str]) -> None:
    """The rules tag by tag: the first tag that breaks one is the error."""
    previous = "O"
    for i, tag in enumerate(tags):
        prefix, _, kind = str(tag).partition("-")
        if tag != "O" and (prefix not in ("B", "I") or kind not in types):
            raise record.error(f"{_tag_field(task)}[{i}]", f"{tag!r} is not O, B-<type> or I-<type> with a type "
                               f"of entities ({', '.join(sorted(types))})")
        if prefix == "I" and previous not in (f"B-{kind}", f"I-{kind}"):
            raise record.error(f"{_tag_field(task)}[{i}]", f"{tag!r} follows {previous!r}: bad BIO sequence")
        previous = str(tag)


def tagged_answer(example: Example, tag_of: Mapping[str, str]) -> str:
    """The answer a shot demonstrates: ``<response>`` + the text with each gold entity tagged."""
    tokens: Sequence[str] = example.inputs["tokens"]
    starts = {s.start: s for s in example.gold.spans}
    words: list[str] = []
    i = 0
    while i < len(tokens):
        span = starts.get(i)
        if span is None:
            words.append(tokens[i])
            i += 1
            continue
        tag = tag_of[span.label]
        words.append(f"<{tag}>{' '.join(tokens[span.start:span.end])}</{tag}>")
        i = span.end
    return f"<response>{' '.join(words)}</response>"


def scoring(task: SpanNerTask) -> Scoring:
    tag_map = dict(task.entities)

    def parse(answer: str, example: Example) -> Prediction:
        """Answer → token spans, via character spans aligned to the input text."""
        parsed = parse_tagged_answer(answer, example.inputs["text"], tag_map)
        spans, cut = char_spans_to_token_spans(parsed.spans, token_offsets(example.inputs["tokens"]))
        return Prediction(value=spans, failed=parsed.failed, diagnostics={**parsed.diagnostics, "partial_token_spans": cut})

    def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
        """Strict micro P/R/F1 over (start, end, type), partial-overlap F1, token accuracy (see the module doc)."""
        golds = [ex.gold.spans for ex in examples]
        preds = [tuple(p.value) for p in predictions]
        sheet = span_score_sheet(golds, preds)
        pred_tags = [spans_to_bio(p, len(ex.gold.tags)) for ex, p in zip(examples, preds)]
        accuracy = token_accuracy([ex.gold.tags for ex in examples], pred_tags)
        parts = [{**counts, **token_counts(ex.gold.tags, tags)}
                 for counts, ex, tags in zip(sheet.per_sample, examples, pred_tags)]
        return ScoreSheet(corpus={**sheet.corpus, "accuracy": accuracy}, per_sample=sheet.per_sample, parts=parts,
                          aggregations={**sheet.aggregations, "accuracy": TOKEN_ACCURACY})

    return Scoring(parse=parse, score=score, empty=lambda ex: Prediction((), True, {"no_answer": True}),
                   description="aligned XML parse, strict entity-level micro P/R/F1",
                   # integer counts per sentence, every metric micro P/R/F1 or a ratio of their sums
                   samplewise=True)


#: what each metric measures, for the report's glossary
DEFINITIONS = {
    "precision": "share of predicted mentions that match a gold mention exactly (start, end, type), micro over "
                 "the corpus",
    "recall": "share of gold mentions found exactly (start, end, type), micro over the corpus; the gold mentions "
              "of a failed or unparseable answer count as missed",
    "f1": "harmonic mean of strict precision and recall (micro: entity counts summed over all sentences)",
    "partial_f1": "F1 where a predicted mention counts as found when it overlaps a gold mention of the same type "
                  "(one-to-one matching), micro over the corpus",
    "accuracy": "share of tokens whose predicted IOB2 tag equals the gold tag, O tokens included (seqeval)",
    "tp": "predicted mentions that match a gold mention exactly, summed over sentences",
    "fp": "predicted mentions without an exact gold match, summed over sentences",
    "fn": "gold mentions without an exact predicted match, summed over sentences",
    "partial_precision": "share of predicted mentions overlapping a gold mention of the same type (one-to-one), "
                         "micro over the corpus",
    "partial_recall": "share of gold mentions overlapped by a predicted mention of the same type (one-to-one), "
                      "micro over the corpus",
}


def structured(task: SpanNerTask) -> StructuredOutput:
    """``--structured``: ``{"entities": [{"text": mention, "type": tag}, …]}`` in reading order; each
    mention is found in the sentence after the previous one and tagged, and the tagged sentence is
    read by the default parser (so a mention not in the sentence is what it is in free text)."""
    schema = {"type": "object", "additionalProperties": False, "required": ["entities"], "properties": {
        "entities": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["text", "type"],
            "properties": {"text": {"type": "string"}, "type": {"type": "string", "enum": list(task.entities)}}}}}}
    return StructuredOutput(schema=schema, to_text=_tag_mentions)


def _tag_mentions(value: dict[str, Any], example: Example) -> str:
    text: str = example.inputs["text"]
    out, cursor = [], 0
    for entity in value["entities"]:
        mention = entity["text"].strip()
        at = text.find(mention, cursor) if mention else -1
        if at < 0:
            continue
        out.append(text[cursor:at] + f"<{entity['type']}>{mention}</{entity['type']}>")
        cursor = at + len(mention)
    return "<response>" + "".join(out) + text[cursor:] + "</response>"


def parts(task: SpanNerTask) -> KindParts:
    tag_of = {kind: tag for tag, kind in task.entities.items()}
    return KindParts(scorings={"default": scoring(task)}, shot_target=lambda ex: tagged_answer(ex, tag_of),
                     metrics=METRICS, primary_metric="f1",
                     template_vars={"entity_tags": list(task.entities)}, definitions=DEFINITIONS,
                     structured=structured(task))


KIND = register_kind(Kind(
    name="span_ner",
    description="entities tagged in XML over the input (CoNLL/BIO data; strict and partial entity F1, token accuracy)",
    model=SpanNerTask,
    read=read,
    parts=parts,
))

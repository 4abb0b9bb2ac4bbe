"""What the sample browser shows of each record beyond its slim fields, made while the records are read.

The report holds its records *slim* (:data:`evalpipe.report.runs.ON_DEMAND_FIELDS` left out), and
the sample browser used to read every record's line of ``samples.jsonl`` again, whole, as its row
was made: at 94,000 NCBI samples that second JSON pass, and working the entities out again from
the re-decoded gold and prediction, were the largest part of the report's time (issue 28). But
every record is whole once anyway, as it is read; so what its row needs from the fields the slim
record lacks is made then and written to a temporary file (:class:`BrowserSpool`), and the row
reads it back:

* the inputs as the page shows them, already as the page's JSON text (:func:`shown_inputs` through
  :func:`~evalpipe.report.browser.json_for_script`): the bulk of a row, never decoded again;
* the gold as text — for a record of a possible span task whose gold and prediction read as spans,
  its NER form (with the prediction's text and the entities, from the outcomes just classified),
  else the plain form;
* the API's separate reasoning text;
* what the lean record no longer holds (:data:`evalpipe.report.reading.LEAN_FIELDS`): the answer,
  the prediction as text (for a record not read as spans: the NER form has its own) and the parse
  diagnostics that say something.

A row whose task turns out to be of the other kind than the one its record's texts were made for
(a task of two runs, one of whose records do not read as spans) is made as before, from the
record read whole again: the spool is a shortcut that gives the very same row, never another one.
The helpers that say what a row's texts are live here too, so both paths use the same ones.
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any, NamedTuple

from evalpipe.records import Span
from evalpipe.report.browser import json_for_script
from evalpipe.report.ner_errors import SampleOutcomes, gold_spans, prediction_spans, sample_outcomes, span_text

__all__ = ["INPUT_CHARS", "BrowserSpool", "NerTexts", "SpooledTexts", "WrittenRow", "entities", "gold_text",
           "prediction_text", "record_texts", "result_head", "result_judge", "shown_diagnostics", "shown_inputs"]

#: a text input field longer than this many characters is cut in the page (see browser_data's docstring)
INPUT_CHARS = 20_000


def json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def inputs_of(record: Mapping[str, Any]) -> Mapping[str, Any]:
    inputs = record.get("inputs")
    return inputs if isinstance(inputs, Mapping) else {}


def shown_inputs(record: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs for the page: long texts cut at :data:`INPUT_CHARS`, saying so."""
    shown = {}
    for key, value in inputs_of(record).items():
        if isinstance(value, str) and len(value) > INPUT_CHARS:
            value = (f"{value[:INPUT_CHARS]}\n[… {len(value) - INPUT_CHARS:,} more characters not shown here; "
                     "the whole input is in the run's samples.jsonl]")
        shown[key] = value
    return shown


def spans_text(inputs: Mapping[str, Any], spans: Iterable[Span]) -> str:
    """Entities as the page lists them: ``text (type)``, separated by ``; ``."""
    return "; ".join(f"{span_text(inputs, s)} ({s.label})" for s in spans) or "(no entity)"


def gold_text(record: Mapping[str, Any], ner: bool) -> str:
    gold = record.get("gold")
    if ner:
        return spans_text(inputs_of(record), gold_spans(gold) or ())
    if gold is None:
        return ""
    return json_text(gold)


def prediction_text(record: Mapping[str, Any], ner: bool) -> str:
    prediction = record.get("prediction")
    if prediction is None:
        return ""
    if ner:
        return spans_text(inputs_of(record), prediction_spans(prediction, record.get("gold")) or ())
    if isinstance(prediction, Mapping) and "rank" in prediction and "depth" in prediction:
        # a ranking: where the gold candidate came, within the ranked depth
        rank, depth = prediction.get("rank"), prediction.get("depth")
        where = f"rank {rank} of the top {depth}" if rank is not None else f"not in the top {depth}"
        return f"{where}; ranked: {json_text(prediction.get('top'))}"
    return json_text(prediction)


def shown_diagnostics(record: Mapping[str, Any]) -> dict[str, Any]:
    """The parse diagnostics that say something (a set flag, a count above 0, a non-empty list)."""
    found = record.get("diagnostics")
    if not isinstance(found, Mapping):
        return {}
    return {k: v for k, v in found.items()
            if v not in (False, 0, None, "", [], {}) and not (k.endswith("coverage") and v == 1.0)}


def entities(record: Mapping[str, Any], outcomes: SampleOutcomes | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Each classified entity as the page marks it, and the record's categories in order."""
    gold_out, pred_out = outcomes if outcomes is not None else sample_outcomes(record)
    inputs = inputs_of(record)
    found = [{"side": o.side, "text": span_text(inputs, o.span), "label": o.span.label, "category": o.category,
              "start": o.span.start, "end": o.span.end} for o in (*gold_out, *pred_out)]
    return found, list(dict.fromkeys(o.category for o in (*gold_out, *pred_out)))


@dataclass(frozen=True)
class NerTexts:
    """A span record's texts: its gold and prediction as entity lists, and its marked entities."""

    gold_text: str
    prediction_text: str
    entities: list[dict[str, Any]]


@dataclass(frozen=True)
class SpooledTexts:
    """What a row needs of one record beyond its slim fields (see the module docstring)."""

    #: :func:`shown_inputs` as the page's JSON text
    input_json: str
    #: the plain gold and prediction texts (None when the record's NER texts were made instead)
    plain_gold: str | None
    plain_prediction: str | None
    reasoning: Any
    answer: Any
    #: :func:`shown_diagnostics`
    diagnostics: dict[str, Any]
    ner: NerTexts | None

    def usable(self, ner: bool) -> bool:
        """Whether these texts make the row of a task of this kind (else it is made from the whole record)."""
        return self.ner is not None if ner else self.plain_gold is not None

    def gold(self, ner: bool) -> str:
        text = self.ner.gold_text if ner and self.ner is not None else self.plain_gold
        assert text is not None, "texts not made for this kind (see usable)"
        return text


def result_head(record: Mapping[str, Any], ner: bool, texts: SpooledTexts | None = None,
                outcomes: SampleOutcomes | None = None) -> dict[str, Any]:
    """One run's result of one sample in the sample browser, up to its ``outcomes`` (which depend on the
    report's other runs): what the record alone decides — its answer, its prediction as text, its
    scores, parse flag and error, the reasoning and diagnostics where there are any, and for a task
    shown as NER its entities. From the whole record, or from its lean record and the ``texts`` made
    of it as it was read (usable for the kind: :meth:`SpooledTexts.usable`)."""
    ner_texts = texts.ner if texts is not None and ner else None
    if texts is not None:
        shown = ner_texts.prediction_text if ner_texts is not None else texts.plain_prediction
    else:
        shown = prediction_text(record, ner)
    result: dict[str, Any] = {
        "answer": texts.answer if texts is not None else record.get("answer"),
        "prediction_text": shown,
        "scores": dict(record.get("scores") or {}),
        "parse_failed": record.get("parse_failed"),
        "error": record.get("error"),
    }
    reasoning = texts.reasoning if texts is not None else record.get("reasoning")
    if reasoning:  # the API's separate reasoning text (issue 25), shown apart from the answer
        result["reasoning"] = reasoning
    diagnostics = texts.diagnostics if texts is not None else shown_diagnostics(record)
    if diagnostics:
        result["diagnostics"] = diagnostics
    if ner:
        result["entities"] = ner_texts.entities if ner_texts is not None else entities(record, outcomes)[0]
    return result


def result_judge(record: Mapping[str, Any]) -> dict[str, Any]:
    """The judge member of a run's result (after its outcomes), or nothing."""
    judge = record.get("judge")
    if judge is None:
        return {}
    return {"judge": dict(judge) if isinstance(judge, Mapping) else {"judge": judge}}


class WrittenRow(NamedTuple):
    """A record's part of a browser row as the page's JSON text, made when the record was written (the
    run's extract, :mod:`evalpipe.report.extract`): put into the page as it is, where the row is of
    the kind these texts were made for (``ner``)."""

    ner: bool
    #: the row's task and id, as the page's JSON members
    key: str
    #: :func:`shown_inputs` and the gold as text (:meth:`SpooledTexts.gold`), as the page's JSON
    input_json: str
    gold_json: str
    #: the members of :func:`result_head`'s result, and of :func:`result_judge`'s (``""``: none)
    head: str
    judge: str


#: a span record's gold entities, predicted entities and their outcomes, as the reader classified them
Spans = tuple[tuple[Span, ...], tuple[Span, ...], SampleOutcomes]


def record_texts(record: Mapping[str, Any], spans: Spans | None) -> SpooledTexts:
    """What a browser row shows of one whole record (``spans`` when it reads as spans): the one place
    these texts are made, for the spool and for any other maker of rows from whole records."""
    ner = None
    if spans is not None:
        gold_entities, predicted, outcomes = spans
        inputs = inputs_of(record)
        ner = NerTexts(spans_text(inputs, gold_entities), spans_text(inputs, predicted), entities(record, outcomes)[0])
    return SpooledTexts(
        input_json=json_for_script(shown_inputs(record)),
        plain_gold=gold_text(record, False) if ner is None else None,
        plain_prediction=prediction_text(record, False) if ner is None else None,
        reasoning=record.get("reasoning"), answer=record.get("answer"), diagnostics=shown_diagnostics(record),
        ner=ner)


#: a spool's index packed (:meth:`BrowserSpool.packed_index`): the keys in order, and each one's offset and size
PackedIndex = tuple["array[int]", "array[int]", "array[int]"]


class BrowserSpool:
    """Each record's :class:`SpooledTexts`, in a temporary file (deleted when closed or collected).

    Keyed by the byte offset of each record's line in its run's samples file — what both the
    report's own pass and a process beside it (:mod:`evalpipe.report.read_beside`) know of a
    record — and asked through ``key``: a held record's line offset
    (:meth:`evalpipe.report.reading.RecordLines.offset`), set once the records are read."""

    def __init__(self, file: IO[bytes] | None = None,
                 key: Callable[[Mapping[str, Any]], int | None] | None = None) -> None:
        self._file = tempfile.TemporaryFile() if file is None else file
        self._at: dict[int, tuple[int, int]] = {}
        #: an adopted spool's index (:meth:`adopt`), searched by bisection
        self._packed: PackedIndex | None = None
        self.key = key
        #: the texts of the records this spool does not hold (the rest a process beside made)
        self.rest: BrowserSpool | None = None
        self._written = 0
        self._flushed = True

    def add(self, record: Mapping[str, Any], spans: Spans | None, key: int) -> None:
        """Make and keep the texts of one whole record (:func:`record_texts`) under ``key``, its line's
        offset; ``spans`` when it reads as spans (not once packed: :meth:`pack`)."""
        if self._packed is not None:
            raise RuntimeError("texts added to a packed spool")
        texts = record_texts(record, spans)
        ner = texts.ner
        data = pickle.dumps((texts.input_json, texts.plain_gold, texts.plain_prediction, texts.reasoning,
                             texts.answer, texts.diagnostics,
                             (ner.gold_text, ner.prediction_text, ner.entities) if ner else None),
                            protocol=pickle.HIGHEST_PROTOCOL)
        self._at[key] = (self._written, len(data))
        self._file.write(data)
        self._written += len(data)
        self._flushed = False

    def texts(self, record: Mapping[str, Any]) -> SpooledTexts | None:
        """The texts made of ``record`` (one of this run's slim records, asked through ``key``), or None;
        where this spool does not hold them, its ``rest``'s (asked with the same key)."""
        found = self._find(record)
        return found[0]._texts_at(*found[1]) if found is not None else None

    def _find(self, record: Mapping[str, Any]) -> tuple[BrowserSpool, tuple[int, int]] | None:
        """The spool of the chain holding ``record``'s texts, and where they are in its file."""
        key = self.key(record) if self.key is not None else None
        if key is None:
            return None
        spool: BrowserSpool | None = self
        while spool is not None:
            at = spool._at.get(key)
            if at is None and spool._packed is not None:
                keys, offsets, sizes = spool._packed
                i = bisect_left(keys, key)
                if i < len(keys) and keys[i] == key:
                    at = (offsets[i], sizes[i])
            if at is not None:
                return spool, at
            spool = spool.rest
        return None

    def _texts_at(self, offset: int, size: int) -> SpooledTexts | None:
        if not self._flushed:
            self._file.flush()
            self._flushed = True
        # read at its offset, never moving the file's position: a forked child reading the spool
        # shares that position with its parent (evalpipe.report.browser_beside, both making rows)
        input_json, gold, prediction, reasoning, answer, diagnostics, ner = pickle.loads(self._read(offset, size))
        return SpooledTexts(input_json, gold, prediction, reasoning, answer, diagnostics,
                            NerTexts(*ner) if ner is not None else None)

    def _read(self, offset: int, size: int) -> bytes:
        if hasattr(os, "pread"):
            return os.pread(self._file.fileno(), size, offset)
        self._file.seek(offset)  # no pread (Windows): no fork either, so no process shares the position
        return self._file.read(size)

    def __len__(self) -> int:
        """How many records' texts this spool holds (not its ``rest``'s)."""
        return len(self._at) + (len(self._packed[0]) if self._packed is not None else 0)

    def packed_index(self) -> PackedIndex:
        """Where each record's texts are in the file, as three arrays in the order of the keys (key,
        offset, size): what :meth:`adopt` takes — a twelfth of the dict's memory (~15 MB at 85,000
        records), in the process that adopts it and in the browser child that reads it."""
        self._file.flush()
        items = sorted(self._at.items())
        return (array("q", [k for k, _ in items]), array("q", [at for _, (at, _) in items]),
                array("q", [size for _, (_, size) in items]))

    def pack(self) -> None:
        """Hold the index as :meth:`packed_index`'s arrays from now on (no text is added after): once the
        records are read, at 47,000 records ~7 MB less than the dict — in the report, and in the
        browser child's pages, which its lookups would copy (:mod:`evalpipe.report.browser_beside`)."""
        if self._at and self._packed is None:
            self._packed = self.packed_index()
            self._at = {}

    @classmethod
    def adopt(cls, file: IO[bytes], index: PackedIndex,
              key: Callable[[Mapping[str, Any]], int | None] | None) -> BrowserSpool:
        """The spool another process wrote into ``file`` (its :meth:`packed_index`), asked through ``key``."""
        spool = cls(file, key)
        spool._packed = index
        spool._written = os.fstat(file.fileno()).st_size
        return spool

    def close(self) -> None:
        self._file.close()
        self._at.clear()
        self._packed = None
        if self.rest is not None:
            self.rest.close()
            self.rest = None

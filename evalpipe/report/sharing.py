"""Records read by the report share their repeated values (:class:`_Sharing`).

Kept apart from :mod:`evalpipe.report.runs`, which reads the records and uses it: a small
module of its own, for what it is — a memory device with its own rules about what counts as the
same value (``tests/report/test_record_sharing.py``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SHARED_CHARS", "SHARING_TRIAL", "OutcomeSharing"]

#: strings up to this long are shared between records as they are read (see :class:`_Sharing`)
SHARED_CHARS = 200
#: a field's dicts are shared while fewer than half of them are new after this many records
SHARING_TRIAL = 512
_FLAT = frozenset({str, int, float, bool, type(None)})


class _Sharing:
    """Makes records read by the report share their repeated values, as each is read.

    The JSON decoder makes every value anew: 47,000 NCBI records held 1.1 million token and tag
    strings ("the", "I-Disease" …), the task's name, the endpoint and the data file's name once
    per record, and as many parse ``diagnostics`` dicts, nearly all equal — about half of what a
    record held. So, since the report only reads records:

    * a string up to :data:`SHARED_CHARS` long is replaced by the first equal one (a list of
      strings, such as tokens or tags, in one C-level pass);
    * a *flat* dict (scalar values, empty lists) one level down in a record (``diagnostics``,
      ``scores``, ``parts``, ``usage`` …) is replaced by the first one that is the same JSON value: compared by the ``repr`` of its values, so 1,
      1.0 and True differ, and so do 0.0 and -0.0. A field whose dicts are mostly distinct
      (``usage``, ``meta``: after :data:`SHARING_TRIAL` records, more than half new) is no longer
      tried: its keys would cost more than they save.

    Numbers are never shared on their own (small ints already are; equal floats are rare).
    """

    def __init__(self) -> None:
        self.strings: dict[str, str] = {}
        #: field → its flat dicts by key; None for a field no longer tried
        self.dicts: dict[str, dict[tuple[Any, ...], dict[str, Any]] | None] = {}
        self.records = 0

    def record(self, record: dict[str, Any]) -> dict[str, Any]:
        share = self.strings.setdefault
        for name, item in record.items():
            kind = type(item)
            if kind is str:
                if len(item) <= SHARED_CHARS:
                    record[name] = share(item, item)
            elif kind is dict:
                if item:
                    record[name] = self._dict(name, item, True)
            elif kind is list:
                if item:
                    self._list(name, item)
        self.records += 1
        if self.records == SHARING_TRIAL:
            for name, cache in self.dicts.items():
                if cache is not None and 2 * len(cache) > SHARING_TRIAL:
                    self.dicts[name] = None
        return record

    def _list(self, field: str, items: list[Any]) -> None:
        if set(map(type, items)) == _STR:
            share = self.strings.setdefault
            items[:] = map(share, items, items)

    def _dict(self, field: str, item: dict[str, Any], nested: bool) -> dict[str, Any]:
        values = item.values()
        kinds = set(map(type, values))
        if kinds <= _FLAT or (kinds <= _FLAT_OR_LIST and not any(v for v in values if type(v) is list)):
            cache = self.dicts.get(field, _NEW)
            if cache is not None:
                # str, int and None values are equal only to their own type's; bool (True == 1)
                # and float (1.0 == 1, 0.0 == -0.0) are told apart by their repr
                key = tuple(item.items()) if kinds <= _EXACT else (*item, *map(repr, values))
                found = cache.get(key)
                if found is not None:
                    return found
                if cache is _NEW:
                    cache = self.dicts[field] = {}
                cache[key] = item
            if str not in kinds:
                return item
        share = self.strings.setdefault
        for name, value in item.items():
            kind = type(value)
            if kind is str:
                if len(value) <= SHARED_CHARS:
                    item[name] = share(value, value)
            elif kind is list:
                if value:
                    self._list(f"{field}.{name}", value)
            elif kind is dict and nested:
                item[name] = self._dict(f"{field}.{name}", value, False)
        return item


_STR, _EXACT = frozenset({str}), frozenset({str, int, type(None)})
_FLAT_OR_LIST = _FLAT | {list}
#: a field not seen yet (its cache is made on its first flat dict)
_NEW: dict[tuple[Any, ...], dict[str, Any]] = {}


class OutcomeSharing:
    """Makes the span outcomes of a run's samples share what repeats, as they are classified.

    The report holds every sample's classified entities (:class:`~evalpipe.report.ner_errors.EntityOutcome`,
    frozen and hashable) for the NER analysis and the sample browser's links: at 94,000 NCBI
    sentences ~240,000 of them and their spans, ~29 MB, though an entity's outcome is four small
    values — its side, its span (two token offsets and a type), its category and the span that
    decided it — that repeat across sentences ("a Disease at tokens 3-5, correct"). So an outcome
    equal to one seen before *is* that one, and so is a sample's pair of outcome tuples (a sentence
    whose one entity was found exactly, at the same place as another's). A value that does not
    repeat costs one dictionary entry more than it did (the tuples it is kept in are smaller than
    the lists :func:`~evalpipe.report.ner_errors.classify` gives)."""

    def __init__(self) -> None:
        self._entities: dict[Any, Any] = {}
        self._samples: dict[Any, Any] = {}

    def sample(self, outcomes: tuple[Any, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        share = self._entities.setdefault
        gold, pred = outcomes
        pair = (tuple(share(o, o) for o in gold), tuple(share(o, o) for o in pred))
        found: tuple[tuple[Any, ...], tuple[Any, ...]] = self._samples.setdefault(pair, pair)
        return found

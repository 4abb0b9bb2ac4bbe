"""A sample-browser row's texts as an extract's writer wrote them, read back and checked (see
:mod:`evalpipe.report.extract` and :mod:`evalpipe.report.browser_written`)."""

from __future__ import annotations

from array import array
from collections.abc import Mapping

import orjson

from evalpipe.report.browser_spool import BrowserSpool, SpooledTexts, WrittenRow

__all__ = ["ExtractSpool", "written_row"]


class ExtractSpool(BrowserSpool):
    """The browser texts of an extract's segment (``writing._Texts`` wrote them): its entries, those of
    the segment's reference records in order (:meth:`entries`, :meth:`read_at`), each checked as it is
    read (:func:`written_row`; what is not as a writer of extracts wrote it is None, and the row is
    made from the record). Asked for a record's :class:`SpooledTexts` it has none: a row of a kind its
    writer did not write for is made from the record read whole."""

    #: task → the kind its rows were written for: ``N`` (NER), ``P`` (plain), ``NP`` (both)
    kinds: Mapping[str, str] = {}

    def entries(self) -> tuple[array[int], array[int]]:
        """Where each entry is in the file (offset and size), in the order of the segment's reference records."""
        assert self._packed is not None
        return self._packed[1], self._packed[2]

    def read_at(self, offset: int, size: int) -> bytes:
        """The bytes of an entry (:meth:`entries`), read without moving the file's position."""
        return self._read(offset, size)

    def _texts_at(self, offset: int, size: int) -> SpooledTexts | None:
        return None  # the row is made from the record read whole (a kind the extract did not write)


#: the members a result's head may have (:func:`~evalpipe.report.browser_spool.result_head`), and its judge's
_HEAD = frozenset({"answer", "prediction_text", "scores", "parse_failed", "error", "reasoning", "diagnostics",
                   "entities"})
_JUDGE = frozenset({"judge"})
_KEY = frozenset({"task", "id"})
_loads = orjson.loads


def written_row(data: bytes) -> WrittenRow | None:
    """A record's written part of a browser row, each text checked to be the JSON the page takes there
    (the file holds no markup: checked when it was adopted, :func:`~evalpipe.report.extract.loading.checked_texts`)."""
    end = data.find(b"\n", 0, 80)
    head = data[:end].split(b" ") if end > 0 else ()
    if len(head) != 6 or head[0] not in (b"N", b"P"):
        return None
    try:
        sizes = [int(n) for n in head[1:]]
    except ValueError:
        return None
    pieces, at = [], end + 1
    for size in sizes:
        if size < 0:
            return None
        pieces.append(data[at:at + size])
        at += size
    if at != len(data):
        return None
    key, input_json, gold, members, judge = pieces
    try:
        named = _loads(b"{" + key + b"}")
        if type(named) is not dict or named.keys() != _KEY or type(named["task"]) is not str \
                or type(named["id"]) is not str:
            return None
        if type(_loads(input_json)) is not dict or type(_loads(gold)) is not str:
            return None
        result = _loads(b"{" + members + b"}")
        if type(result) is not dict or not result.keys() <= _HEAD \
                or type(result.get("entities", ())) not in (list, tuple):
            return None
        if judge and (type(judged := _loads(b"{" + judge + b"}")) is not dict or judged.keys() != _JUDGE
                      or type(judged["judge"]) is not dict):
            return None
        return WrittenRow(head[0] == b"N", key.decode("utf-8"), input_json.decode("utf-8"), gold.decode("utf-8"),
                          members.decode("utf-8"), judge.decode("utf-8"))
    except (orjson.JSONDecodeError, UnicodeDecodeError):
        return None

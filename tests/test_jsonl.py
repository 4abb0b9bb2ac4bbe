"""JSON lines: one reader for every loader, line numbers in errors, Unicode line separators kept."""

import json

import pytest

from evalpipe.data.errors import DataError
from evalpipe.data.jsonl import read_json_lines


def test_unicode_line_separators_inside_strings_stay_in_their_record(tmp_path):
    path = tmp_path / "x.jsonl"
    records = [{"text": "first\u2028still first\u0085too"}, {"text": "second"}]
    path.write_text("\r\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n\n", encoding="utf-8")
    assert read_json_lines(path) == [(1, records[0]), (2, records[1])]


def test_bad_line_and_missing_file_are_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: not valid JSON"):
        read_json_lines(path)
    with pytest.raises(DataError, match="nope.jsonl: get it from X"):
        read_json_lines(tmp_path / "nope.jsonl", missing="get it from X")

"""One reader for every data file: containers, line numbers in errors, encodings, absurd records."""

import json

import pytest

from evalpipe.data import file_records as records_module
from evalpipe.data.errors import DataError
from evalpipe.data.file_records import read_json_object, read_records, read_table, read_values


def test_json_lines_keep_unicode_line_separators_inside_strings(tmp_path):
    path = tmp_path / "x.jsonl"
    rows = [{"text": "first\u2028still first\u0085too"}, {"text": "second"}]
    path.write_text("\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n\n", encoding="utf-8")
    assert read_values(path) == [(1, rows[0]), (2, rows[1])]
    assert [(r.line, dict(r.fields)) for r in read_records(path)] == [(1, rows[0]), (2, rows[1])]


def test_a_json_array_gives_each_object_the_line_it_starts_on(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('[\n  {"a": 1},\n\n  {"a": 2,\n   "b": "x"}\n]\n', encoding="utf-8-sig")
    assert [(r.line, r.fields["a"]) for r in read_records(path)] == [(2, 1), (4, 2)]


def test_bad_line_missing_file_and_non_objects_are_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: not valid JSON"):
        read_records(path)
    with pytest.raises(DataError, match="nope.jsonl: get it from X"):
        read_records(tmp_path / "nope.jsonl", missing="get it from X")
    lists = tmp_path / "lists.jsonl"
    lists.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(DataError, match=r"lists.jsonl:2: expected a JSON object, found list"):
        read_records(lists)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(DataError, match="empty.jsonl: no records"):
        read_records(empty)


def test_invalid_utf8_names_the_line_and_column(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"a": "ok"}\n{"a": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"latin1.jsonl:2: not valid UTF-8: byte 0xe9 at column 11"):
        read_records(path)


def test_tables_by_extension_with_quoted_multiline_cells_and_ragged_rows(tmp_path):
    csv_path = tmp_path / "x.csv"
    csv_path.write_text('id,text\n1,"two\nlines"\n2,plain\n', encoding="utf-8")
    assert [(r.line, r.fields["text"]) for r in read_records(csv_path)] == [(2, "two\nlines"), (4, "plain")]
    tsv = tmp_path / "x.tsv"
    tsv.write_text("id\ttext\n1\ta\n2\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"x.tsv:3: 1 columns, the header has 2"):
        read_table(tsv)


def test_parquet_rows_are_records(tmp_path):
    pytest.importorskip("pyarrow")
    import pandas as pd

    path = tmp_path / "x.parquet"
    pd.DataFrame({"q": ["a", "b"], "n": [1, 2]}).to_parquet(path)
    assert [(r.line, r.fields["q"], r.fields["n"]) for r in read_records(path)] == [(1, "a", 1), (2, "b", 2)]


def test_an_absurd_record_is_refused_with_its_line(tmp_path, monkeypatch):
    monkeypatch.setattr(records_module, "MAX_RECORD_CHARS", 100)
    path = tmp_path / "big.jsonl"
    path.write_text('{"a": 1}\n' + json.dumps({"text": "x" * 500}) + "\n")
    with pytest.raises(DataError, match=r"big.jsonl:2: a record of 512 characters, over evalpipe's limit of 100"):
        read_records(path)


def test_record_fields_are_checked_for_presence_and_type(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"id": true, "text": "", "n": 3}\n')
    (record,) = read_records(path)
    with pytest.raises(DataError, match=r"x.jsonl:1: label: missing field \(fields found: id, n, text\)"):
        record.get("label")
    with pytest.raises(DataError, match=r"x.jsonl:1: id: expected str or int, found bool"):
        record.get("id", (str, int))
    with pytest.raises(DataError, match=r"x.jsonl:1: text: empty"):
        record.text("text")
    assert record.get("n", int) == 3


def test_one_json_object(tmp_path):
    path = tmp_path / "o.json"
    path.write_text("[1]")
    with pytest.raises(DataError, match="expected a JSON object at the top level, found list"):
        read_json_object(path)

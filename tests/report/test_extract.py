"""The report's extract of a samples file (evalpipe.report.extract): written as the file is, read instead of it.

A run writes, beside ``samples.jsonl``, what a report takes of each record; a report reads that and
decodes no record. The promise is that the extract changes nothing but the time: the runs read from
it are those read from the file (records, frames, digests, parts, span outcomes, browser texts), the
report is the same bytes, and an extract that does not describe the file as it is — changed since,
damaged, taken by other code, or crafted to put script into the page — is not used.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evalpipe.report import extract
from evalpipe.report.extract.loading import checked_texts
from evalpipe.report.extract.rows import written_row
from evalpipe.report.browser_data import BrowserRows
from evalpipe.report.build import build_report
from evalpipe.report.runs import load_report_runs
from evalpipe.results import RunDir
from tests.report.test_browser_beside import _files
from tests.report.test_read_beside import _page, _same_runs


def _index(run: Path) -> dict:
    return json.loads((run / "samples.extract" / "index.json").read_text(encoding="utf-8"))


def _copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    return to


def _unread(monkeypatch) -> None:
    """Reading a samples file's records fails: what the report holds came from the extract."""
    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a samples file was read")
        yield

    monkeypatch.setattr(RunDir, "iter_samples", refuse)


def _alone(runs: list[Path], monkeypatch):  # type: ignore[no-untyped-def]
    with monkeypatch.context() as m:
        m.setenv(extract.ENV, "0")
        return load_report_runs(runs)


def test_a_run_writes_the_extract_of_its_samples_file(two_runs):
    for run in two_runs:
        index = _index(run)
        samples = run / "samples.jsonl"
        assert index["format"] == extract.FORMAT and index["fingerprint"] == extract.fingerprint()
        assert index["size"] == samples.stat().st_size
        [segment] = index["segments"]
        assert segment["start"] == 0 and segment["size"] == index["size"]
        assert segment["lines"] == sum(1 for line in samples.open(encoding="utf-8") if line.strip())
        assert segment["tasks"] == ["ncbi_disease"] and segment["span_tasks"] == ["ncbi_disease"]
        names = {p.name for p in (run / "samples.extract").iterdir()}
        assert names == {"index.json", *(f"{segment['name']}{suffix}" for suffix in extract.SUFFIXES)}


def test_the_runs_read_from_the_extract_are_those_read_from_the_samples(two_runs, monkeypatch):
    alone = _alone(list(two_runs), monkeypatch)
    page = _page(alone)
    with monkeypatch.context() as m:
        _unread(m)
        from_extract = load_report_runs(list(two_runs))
    for run in from_extract:
        assert isinstance(run.spool, extract.ExtractSpool)  # the extract's texts
    _same_runs(from_extract, alone)
    infos = {t: i for run in from_extract for t, i in run.info.items()}
    assert set(BrowserRows(from_extract, infos).plan().tasks) == {"ncbi_disease"}  # rows of written texts
    assert _page(from_extract) == page


def test_the_report_is_the_same_bytes_with_and_without_the_extract(two_runs, tmp_path, monkeypatch):
    monkeypatch.setenv(extract.ENV, "0")
    build_report(list(two_runs), tmp_path / "alone", resamples=50, seed=0)
    monkeypatch.setenv(extract.ENV, "1")
    _unread(monkeypatch)
    build_report(list(two_runs), tmp_path / "extract", resamples=50, seed=0)
    assert _files(tmp_path / "extract") == _files(tmp_path / "alone")


def test_a_samples_file_changed_since_is_read_again(two_runs, tmp_path, monkeypatch):
    run = _copy(two_runs[1], tmp_path / "run")
    samples = run / "samples.jsonl"
    lines = samples.read_text(encoding="utf-8").splitlines(keepends=True)
    record = json.loads(lines[3])
    record["answer"] = (record["answer"] or "x")[:-1] + "?"  # one character: the same size
    lines[3] = json.dumps(record, ensure_ascii=False) + "\n"
    samples.write_text("".join(lines), encoding="utf-8")
    assert samples.stat().st_size == _index(run)["size"]
    assert extract.load(samples, ["ncbi_disease"], {}, {"ncbi_disease": ()}, True) is None
    runs = load_report_runs([run])
    assert runs[0].records[3].get("id") == record["id"]
    assert _page(runs) == _page(_alone([run], monkeypatch))


@pytest.mark.parametrize("damage", ["index", "fingerprint", "segment", "truncated", "tiling", "kind", "texts",
                                    "parts"])
def test_a_damaged_extract_is_not_used(two_runs, tmp_path, monkeypatch, damage):
    run = _copy(two_runs[1], tmp_path / "run")
    folder = run / "samples.extract"
    index = _index(run)
    name = index["segments"][0]["name"]
    if damage == "index":
        (folder / "index.json").write_text("{not json", encoding="utf-8")
    elif damage == "fingerprint":
        index["fingerprint"] = "0" * 64
        (folder / "index.json").write_text(json.dumps(index), encoding="utf-8")
    elif damage == "segment":
        (folder / f"{name}.json").unlink()
    elif damage == "truncated":
        data = (folder / f"{name}.json").read_bytes()
        (folder / f"{name}.json").write_bytes(data[: len(data) // 2])
    elif damage == "tiling":
        index["segments"][0]["start"] = 1
        (folder / "index.json").write_text(json.dumps(index), encoding="utf-8")
    elif damage == "kind":  # written when the task was not read as spans: the report reads it as one now
        index["segments"][0]["span_tasks"] = []
        (folder / "index.json").write_text(json.dumps(index), encoding="utf-8")
    elif damage == "texts":  # a bit flipped on disk
        data = bytearray((folder / f"{name}.texts").read_bytes())
        data[len(data) // 2] ^= 1
        (folder / f"{name}.texts").write_bytes(bytes(data))
    elif damage == "parts":  # a number changed: the intervals would be wrong
        data = (folder / f"{name}.parts").read_text(encoding="utf-8")
        assert '"tokens":[' in data
        (folder / f"{name}.parts").write_text(data.replace('"tokens":[', '"tokens":[1000.0,', 1), encoding="utf-8")
    head_keys = {"ncbi_disease": ()}
    assert extract.load(run / "samples.jsonl", ["ncbi_disease"], {}, head_keys, True) is None
    assert _page(load_report_runs([run])) == _page(_alone([run], monkeypatch))


def test_a_crafted_input_is_never_spliced_into_the_page(two_runs, tmp_path, monkeypatch):
    """An extract is data from a run directory: texts that could end the page's script element are
    not used (the rows are made from the records, whose inputs are escaped as always), even where
    whoever made them also made the hashes that go with them."""
    run = _copy(two_runs[0], tmp_path / "run")
    folder = run / "samples.extract"
    name = _index(run)["segments"][0]["name"]
    texts = (folder / f"{name}.texts").read_bytes()
    header, rest = texts.split(b"\n", 1)
    key, size = int(header.split()[1]), int(header.split()[2])  # the row's task and id, then its input
    evil = b'{"text":"</script><script>alert(1)</script>"}'
    assert len(evil) <= size
    crafted = rest[:key] + evil + b" " * (size - len(evil)) + rest[key + size:]
    (folder / f"{name}.texts").write_bytes(header + b"\n" + crafted)
    _rehash(run)  # made by hand, as someone who sends a run directory can
    assert extract.load(run / "samples.jsonl", ["ncbi_disease"], {}, {"ncbi_disease": ()}, True) is None
    page = _page(load_report_runs([run]))
    assert "<script>alert(1)" not in page
    assert page == _page(_alone([run], monkeypatch))


def _rehash(run: Path) -> None:
    """The index's hashes of its segments' files made again (an extract changed by a hand that knows how)."""
    import hashlib

    folder = run / "samples.extract"
    index = _index(run)
    for segment in index["segments"]:
        segment["files_sha256"] = [hashlib.sha256((folder / f"{segment['name']}{suffix}").read_bytes()).hexdigest()
                                   for suffix in extract.SUFFIXES]
    (folder / "index.json").write_text(json.dumps(index), encoding="utf-8")


_KEY = '"task":"t","id":"i"'


def _entry(pieces: list[str], kind: str = "N") -> bytes:
    pieces = [_KEY, *pieces] if not pieces[0].startswith('"task"') else pieces
    data = [p.encode() for p in pieces]
    return (" ".join([kind, *(str(len(d)) for d in data)]) + "\n").encode() + b"".join(data)


def test_a_written_row_is_used_only_where_each_text_is_what_the_page_takes_there():
    input_json = '{"text":"a"}'
    head = '"answer":"a","prediction_text":"p","scores":{},"parse_failed":false,"error":null,"entities":[]'
    row = written_row(_entry([input_json, '"g"', head, ""]))
    assert row is not None and row.ner and row.head == head and row.gold_json == '"g"' and row.judge == ""
    assert written_row(_entry([input_json, '"g"', head, ""], "P")).ner is False
    judged = written_row(_entry([input_json, '"g"', head, '"judge":{"j":1}']))
    assert judged is not None and judged.judge == '"judge":{"j":1}'
    for pieces in ([input_json[:-1], '"g"', head, ""], ['["x"]', '"g"', head, ""], [input_json, "3", head, ""],
                   [input_json, '"g"', '"answer":1}],"x":{"a":1', ""], [input_json, '"g"', '"entities":{}', ""],
                   [input_json, '"g"', '"outcomes":[]', ""], [input_json, '"g"', head, '"judge":"x"']):
        assert written_row(_entry(pieces)) is None, pieces
    assert written_row(_entry([input_json, '"g"', head, ""], "X")) is None
    assert written_row(_entry([input_json, '"g"', head, ""]) + b"more") is None  # the sizes do not add up
    assert written_row(b"not an entry") is None
    for key in ('"task":"t"', '"task":1,"id":"i"', '"task":"t","id":"i","x":1'):
        assert written_row(_entry([key, input_json, '"g"', head, ""])) is None, key


def test_a_texts_file_with_markup_is_refused(tmp_path):
    path = tmp_path / "x.texts"
    for markup in ("<", ">", "&", "\u2028", "\u2029"):
        path.write_bytes(b"a" * ((1 << 22) - 1) + markup.encode() + b"b")  # across the chunks it is read in
        with pytest.raises(extract.ExtractUnusable):
            checked_texts(path)
    path.write_bytes(b"plain \\u003c text")
    checked_texts(path)


def test_no_extract_is_written_or_read_when_switched_off(two_runs, tmp_path, monkeypatch):
    from evalpipe.rescoring import rescore

    run = _copy(two_runs[1], tmp_path / "run")
    monkeypatch.setenv(extract.ENV, "0")
    rescore(run)
    assert not (run / "samples.extract" / "index.json").exists()
    monkeypatch.setenv(extract.ENV, "1")
    rescore(run)  # `evalpipe score` writes the extract again, in-process
    assert _index(run)["size"] == (run / "samples.jsonl").stat().st_size
    _unread(monkeypatch)
    load_report_runs([run])


def test_a_run_with_prompt_conditions_has_its_extract_and_the_same_runs(tmp_path, monkeypatch):
    from tests.support.fake_openai import FakeOpenAIProcess
    from tests.test_cli import evalpipe, only_run

    results = tmp_path / "results"
    with FakeOpenAIProcess(latency=0.0) as server:
        done = evalpipe("run", "--task", "ncbi_disease", "--base-url", server.url, "--model", "fake-model",
                        "--limit", "6", "--prompt-variants", "all", "--results-dir", str(results))
    assert done.returncode == 0, done.stderr
    run = only_run(results)
    [segment] = _index(run)["segments"]
    assert segment["references"] == {"ncbi_disease": json.loads((run / "variants.json").read_text())[
        "tasks"]["ncbi_disease"]["reference"]}
    assert segment["parts_tasks"] == []  # a task with conditions keeps its parts in its records
    alone = _alone([run], monkeypatch)
    _unread(monkeypatch)
    runs = load_report_runs([run])
    _same_runs(runs, alone)
    assert _page(runs) == _page(alone)


def test_a_report_of_runs_with_and_without_an_extract_is_the_same(two_runs, tmp_path, monkeypatch):
    """One run read from its extract, the other from its samples file (written before extracts, or
    with EVALPIPE_EXTRACT=0): their rows are made from the records together, and the page is the one
    made from the samples of both."""
    older = _copy(two_runs[1], tmp_path / "older")
    shutil.rmtree(older / "samples.extract")
    runs = [two_runs[0], older]
    mixed = load_report_runs(runs)
    assert isinstance(mixed[0].spool, extract.ExtractSpool) and not isinstance(mixed[1].spool, extract.ExtractSpool)
    infos = {t: i for run in mixed for t, i in run.info.items()}
    assert not BrowserRows(mixed, infos).plan().tasks  # rows of both runs: made from the records
    assert _page(mixed) == _page(_alone(runs, monkeypatch))


def test_digests_are_a_packed_sequence_of_the_answers_digests():
    import pickle

    from evalpipe.report.frame import answer_digest
    from evalpipe.report.taking import Digests

    answers = ["a", None, "b", "", 3]
    plain = [answer_digest(a) for a in answers]
    packed = Digests(plain)
    assert list(packed) == plain and len(packed) == 5 and packed == plain
    assert packed[1] is None and packed[-1] is None and packed[0] == answer_digest("a") and packed[1:3] == plain[1:3]
    hexed = Digests()
    hexed.extend_hex([d.hex() if d is not None else None for d in plain])
    assert hexed == packed and pickle.loads(pickle.dumps(packed)) == packed
    joined = Digests(plain[:2])
    joined.extend(Digests(plain[2:]))
    assert joined == packed
    with pytest.raises(IndexError):
        packed[5]
    with pytest.raises(ValueError):
        Digests([b"short"])
    with pytest.raises(ValueError):
        Digests().extend_hex(["abcd"])

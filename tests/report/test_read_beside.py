"""The runs' last lines read by a forked child while the report reads the first (evalpipe.report.read_beside).

What the child takes of its lines — the held records, the frame's values, the answers' digests, the
parts, the span outcomes, the browser's texts — joined after the report's own is what one pass over
the whole file takes: the runs, their frames, intervals and pages are the same whether the child
read, the report read alone, or the child failed and the report read the file again whole; a child
left running when the reading fails is stopped and reaped.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from evalpipe.report import read_beside
from evalpipe.report.browser import iter_sample_browser
from evalpipe.report.browser_data import BrowserRows
from evalpipe.report.read_beside import ENV
from evalpipe.report.runs import load_report_runs
from tests.report.support import recorded_exits

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")


@pytest.fixture(autouse=True)
def _no_extract(monkeypatch):
    """The samples files read, as a run without an extract is (evalpipe.report.extract)."""
    monkeypatch.setenv("EVALPIPE_EXTRACT", "0")


def _page(runs) -> str:
    infos = {t: i for run in runs for t, i in run.info.items()}
    rows = BrowserRows(runs, infos)
    return "".join(iter_sample_browser(rows.header, rows.pieces(), len(rows)))


def _same_runs(beside, alone) -> None:
    """Everything the report reads of each run is the same."""
    assert len(beside) == len(alone)
    for b, a in zip(beside, alone):
        assert b.records == a.records
        assert b.condition_records == a.condition_records
        assert b.samples.equals(a.samples)
        assert b.answer_digests() == a.answer_digests()
        for task in a.tasks:
            assert b.span_outcomes(task) == a.span_outcomes(task)
            rb, ra = b.resample[task], a.resample[task]
            assert rb.ids == ra.ids and rb.keys == ra.keys and rb.aggregations == ra.aggregations
            assert (rb.parts == ra.parts).all() and rb.parts.shape == ra.parts.shape
        assert b.notes == a.notes
        for record in a.records[:3] + a.records[-3:]:  # the bulky fields read again from the line
            with a.lines.reader() as full_a:
                expected = full_a(record)
            found = b.records[a.records.index(record)]
            with b.lines.reader() as full_b:
                assert full_b(found) == expected


@pytest.fixture(scope="module")
def with_conditions(tmp_path_factory) -> Path:
    """A real NCBI run with prompt conditions (the CLI against the loopback server): only the
    reference condition's records are taken, and the child must skip the others as the report does."""
    from tests.support.fake_openai import FakeOpenAIProcess
    from tests.test_cli import evalpipe, only_run

    results = tmp_path_factory.mktemp("conditions") / "results"
    with FakeOpenAIProcess(latency=0.0) as server:
        done = evalpipe("run", "--task", "ncbi_disease", "--base-url", server.url, "--model", "fake-model",
                        "--limit", "6", "--prompt-variants", "all", "--results-dir", str(results))
    assert done.returncode == 0, done.stderr
    return only_run(results)


def test_the_child_reads_the_last_lines_and_the_runs_are_those_of_one_pass(two_runs, monkeypatch):
    monkeypatch.setenv(ENV, "0")
    alone = load_report_runs(list(two_runs))
    assert all(run.spool is not None and run.spool.rest is None for run in alone)
    page = _page(alone)
    monkeypatch.setenv(ENV, "1")
    exits = recorded_exits(monkeypatch, read_beside)
    beside = load_report_runs(list(two_runs))
    assert exits == [0], "no child read the last lines"
    for run in beside:
        assert run.spool is not None and run.spool.rest is not None and run.lines is not None
        own, child = len(run.spool), len(run.spool.rest)
        # the first lines' texts made by the report's own pass, the last ones' by the child
        assert 0 < own < len(run.records) and own + child == len(run.records)
        assert child == round(len(run.records) * read_beside.CHILD_SHARE)
        last = run.records[-1]
        # the child's texts keyed by the line's offset, not by the record object
        assert run.spool.rest.texts(last) is not None and run.spool.rest.texts(dict(last)) is None
        assert run.spool.rest.texts(run.records[0]) is None and run.spool.texts(run.records[0]) is not None
    _same_runs(beside, alone)
    assert _page(beside) == page


def test_only_reference_records_are_taken_beside(with_conditions, monkeypatch):
    monkeypatch.setenv(ENV, "0")
    alone = load_report_runs([with_conditions])
    page = _page(alone)
    monkeypatch.setenv(ENV, "1")
    exits = recorded_exits(monkeypatch, read_beside)
    runs = load_report_runs([with_conditions])
    assert exits == [0]
    lines = (with_conditions / "samples.jsonl").read_text(encoding="utf-8").count("\n")
    spool = runs[0].spool
    assert spool is not None and spool.rest is not None
    assert len(spool) + len(spool.rest) == len(runs[0].records) < lines
    assert sum(len(c) for by in runs[0].condition_records.values() for c in by.values()) == lines
    _same_runs(runs, alone)
    assert _page(runs) == page


def test_a_failing_child_leaves_the_reading_to_the_report(two_runs, monkeypatch):
    monkeypatch.setenv(ENV, "0")
    alone = load_report_runs(list(two_runs))
    page = _page(alone)

    def broken(self, spool):  # type: ignore[no-untyped-def]
        raise RuntimeError("the child breaks")

    monkeypatch.setattr("evalpipe.report.runs._RunReading.read_rest", broken)
    monkeypatch.setenv(ENV, "1")
    exits = recorded_exits(monkeypatch, read_beside)
    runs = load_report_runs(list(two_runs))
    assert exits == [1]
    assert all(run.spool is not None and run.spool.rest is None for run in runs)  # read here, whole
    _same_runs(runs, alone)
    assert _page(runs) == page


def test_a_damaged_line_among_the_child_s_is_named_as_without_a_child(two_runs, tmp_path, monkeypatch):
    broken = tmp_path / "broken"
    shutil.copytree(two_runs[1], broken)
    with (broken / "samples.jsonl").open("a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    lines = (broken / "samples.jsonl").read_text(encoding="utf-8").count("\n")
    monkeypatch.setenv(ENV, "0")
    with pytest.raises(Exception, match="samples.jsonl") as alone:
        load_report_runs([broken])
    monkeypatch.setenv(ENV, "1")
    exits = recorded_exits(monkeypatch, read_beside)
    with pytest.raises(Exception, match="samples.jsonl") as beside:
        load_report_runs([broken])
    assert exits == [1]  # the child met the line, and the report read the file again
    assert str(beside.value) == str(alone.value) and f":{lines}" in str(beside.value)


def test_lines_that_do_not_pair_with_records_are_read_whole(two_runs, tmp_path, monkeypatch):
    """A line that ``bytes.strip`` keeps and ``str.strip`` empties (a lone U+2028) is a line to the
    offsets and none to the decoder: the records are then held whole, as without a child."""
    odd = tmp_path / "odd"
    shutil.copytree(two_runs[0], odd)
    path = odd / "samples.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join([*lines[:3], "\u2028\n", *lines[3:]]), encoding="utf-8")
    monkeypatch.setenv(ENV, "0")
    alone = load_report_runs([odd])
    monkeypatch.setenv(ENV, "1")
    beside = load_report_runs([odd])
    assert beside[0].lines is None and alone[0].lines is None
    assert beside[0].records == alone[0].records and "inputs" in beside[0].records[0]
    assert _page(beside) == _page(alone)


def test_a_report_whose_reading_fails_stops_and_reaps_the_child(two_runs, tmp_path, monkeypatch):
    broken = tmp_path / "broken"
    shutil.copytree(two_runs[1], broken)
    with (broken / "samples.jsonl").open("r+", encoding="utf-8") as handle:
        handle.write("{not json\n")  # over the first line: the report's own part

    def slow(self, spool):  # type: ignore[no-untyped-def]
        import time

        time.sleep(60)

    monkeypatch.setattr("evalpipe.report.runs._RunReading.read_rest", slow)
    monkeypatch.setenv(ENV, "1")
    exits = recorded_exits(monkeypatch, read_beside)
    pids: list[int] = []
    real_start = read_beside.start

    def start(jobs, spooled):  # type: ignore[no-untyped-def]
        beside = real_start(jobs, spooled)
        pids.append(beside.pid if beside is not None and beside.pid is not None else 0)
        return beside

    monkeypatch.setattr(read_beside, "start", start)
    with pytest.raises(Exception, match="samples.jsonl"):
        load_report_runs([two_runs[0], broken])
    assert exits == [None], "the child was not killed and reaped"
    assert pids and pids[0] > 0
    with pytest.raises(ChildProcessError):  # reaped: no zombie left
        os.waitpid(pids[0], os.WNOHANG)


def test_no_child_below_the_minimum_or_when_turned_off(two_runs, monkeypatch):
    forks: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        forks.append(1)
        return real_fork()

    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.delenv(ENV, raising=False)  # auto: these runs are far below MINIMUM bytes
    assert all(run.spool is not None for run in load_report_runs(list(two_runs)))
    monkeypatch.setenv(ENV, "0")
    load_report_runs(list(two_runs))
    assert forks == []


def test_the_report_is_the_same_with_both_children_or_none(two_runs, tmp_path, monkeypatch):
    from evalpipe.report import build_report
    from evalpipe.report.browser_beside import ENV as BROWSER_ENV
    from tests.report.test_browser_beside import _files

    monkeypatch.setenv(ENV, "0")
    monkeypatch.setenv(BROWSER_ENV, "0")
    build_report(list(two_runs), tmp_path / "alone", resamples=50, seed=0)
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv(BROWSER_ENV, "1")
    exits = recorded_exits(monkeypatch, read_beside)
    build_report(list(two_runs), tmp_path / "beside", resamples=50, seed=0)
    assert exits == [0]
    assert _files(tmp_path / "beside") == _files(tmp_path / "alone")

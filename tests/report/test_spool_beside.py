"""The sample browser's texts made by a forked child while the report reads (evalpipe.report.spool_beside).

The spools the child makes are the ones the report's own pass makes — the same texts for the same
records, asked through the records' line offsets —, so the page is the same bytes whether the child
made them, the report made them itself, or the child failed and the rows were made from the records
read whole again; a child left running when the reading fails is stopped and reaped.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from evalpipe.report import spool_beside
from evalpipe.report.browser import iter_sample_browser
from evalpipe.report.browser_data import BrowserRows
from evalpipe.report.runs import load_report_runs
from evalpipe.report.spool_beside import ENV
from tests.report.support import recorded_exits

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")


def _page(runs) -> str:
    infos = {t: i for run in runs for t, i in run.info.items()}
    rows = BrowserRows(runs, infos)
    return "".join(iter_sample_browser(rows.header, rows.pieces(), len(rows)))


@pytest.fixture(scope="module")
def with_conditions(tmp_path_factory) -> Path:
    """A real NCBI run with prompt conditions (the CLI against the loopback server): only the
    reference condition's records are rows, and the child must skip the others as the report does."""
    from tests.support.fake_openai import FakeOpenAIProcess
    from tests.test_cli import evalpipe, only_run

    results = tmp_path_factory.mktemp("conditions") / "results"
    with FakeOpenAIProcess(latency=0.0) as server:
        done = evalpipe("run", "--task", "ncbi_disease", "--base-url", server.url, "--model", "fake-model",
                        "--limit", "6", "--prompt-variants", "all", "--results-dir", str(results))
    assert done.returncode == 0, done.stderr
    return only_run(results)


def test_the_child_s_spools_make_the_page_the_report_s_own_make(two_runs, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "0")
    own = load_report_runs(list(two_runs))
    assert all(run.spool is not None for run in own)
    page = _page(own)
    monkeypatch.setenv(ENV, "1")
    exits = recorded_exits(monkeypatch, spool_beside)
    beside = load_report_runs(list(two_runs))
    assert exits == [0], "no child made the spools"
    for run in beside:
        assert run.spool is not None and run.spool.rest is not None and run.lines is not None
        own, child = len(run.spool), len(run.spool.rest)
        # the first lines' texts made by the report's own pass, the last ones' by the child
        assert 0 < own < len(run.records) and own + child == len(run.records)
        assert child == round(len(run.records) * spool_beside.CHILD_SHARE)
        last = run.records[-1]
        # the child's keyed by the line's offset, not by the record object
        assert run.spool.rest.texts(last) is not None and run.spool.rest.texts(dict(last)) is None
        assert run.spool.rest.texts(run.records[0]) is None and run.spool.texts(run.records[0]) is not None
    assert _page(beside) == page


def test_only_reference_records_are_spooled_beside(with_conditions, monkeypatch):
    monkeypatch.setenv(ENV, "0")
    page = _page(load_report_runs([with_conditions]))
    monkeypatch.setenv(ENV, "1")
    exits = recorded_exits(monkeypatch, spool_beside)
    runs = load_report_runs([with_conditions])
    assert exits == [0]
    lines = (with_conditions / "samples.jsonl").read_text(encoding="utf-8").count("\n")
    spool = runs[0].spool
    assert spool is not None and spool.rest is not None
    assert len(spool) + len(spool.rest) == len(runs[0].records) < lines
    assert _page(runs) == page


def test_a_failing_child_leaves_the_rows_to_the_whole_records(two_runs, monkeypatch):
    monkeypatch.setenv(ENV, "0")
    page = _page(load_report_runs(list(two_runs)))

    def broken(head, compat, spool):  # type: ignore[no-untyped-def]
        raise RuntimeError("the child breaks")

    monkeypatch.setattr("evalpipe.report.runs.spool_run", broken)
    monkeypatch.setenv(ENV, "1")
    exits = recorded_exits(monkeypatch, spool_beside)
    runs = load_report_runs(list(two_runs))
    assert exits == [1]
    assert all(run.spool is not None and run.spool.rest is None for run in runs)  # the first lines' only
    assert _page(runs) == page


def test_a_report_whose_reading_fails_stops_and_reaps_the_child(two_runs, tmp_path, monkeypatch):
    broken = tmp_path / "broken"
    shutil.copytree(two_runs[1], broken)
    with (broken / "samples.jsonl").open("a", encoding="utf-8") as handle:
        handle.write("{not json\n")

    def slow(head, compat, spool):  # type: ignore[no-untyped-def]
        import time

        time.sleep(60)

    monkeypatch.setattr("evalpipe.report.runs.spool_run", slow)
    monkeypatch.setenv(ENV, "1")
    exits = recorded_exits(monkeypatch, spool_beside)
    pids: list[int] = []
    real_start = spool_beside.start

    def start(jobs, work):  # type: ignore[no-untyped-def]
        beside = real_start(jobs, work)
        pids.append(beside.pid if beside is not None and beside.pid is not None else 0)
        return beside

    monkeypatch.setattr("evalpipe.report.runs.start_spools", start)
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
    exits = recorded_exits(monkeypatch, spool_beside)
    build_report(list(two_runs), tmp_path / "beside", resamples=50, seed=0)
    assert exits == [0]
    assert _files(tmp_path / "beside") == _files(tmp_path / "alone")

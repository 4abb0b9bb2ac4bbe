"""The sample browser's rows made from the texts spooled as the records were read
(evalpipe/report/browser_spool.py) are the very rows made from each record read whole again:
the page's text is compared byte for byte, with and without the spools, for NER runs, a run of a
task of another kind, and both together (a task of one kind in one run, another in the other)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from evalpipe.report.browser import SplicedSample, iter_sample_browser
from evalpipe.report.browser_data import BrowserRows, browser_data
from evalpipe.report.runs import load_report_runs


def _page(runs) -> str:
    infos = {t: i for run in runs for t, i in run.info.items()}
    rows = BrowserRows(runs, infos)
    whole = "".join(iter_sample_browser(rows.header, rows.pieces(), len(rows)))
    split = len(rows) * 2 // 3  # as the report's two processes write it (browser_beside.CHILD_SHARE)
    parts = ["".join(iter_sample_browser(rows.header, rows.pieces(a, b), len(rows), rows=(a, b)))
             for a, b in ((0, split), (split, len(rows)))]
    assert "".join(parts) == whole
    return whole


def _same_page_with_and_without_spools(paths) -> None:
    runs = load_report_runs(list(paths))
    assert all(run.spool is not None for run in runs)
    spooled = _page(runs)
    for run in runs:
        run.spool = None  # every row from its records read whole, as before the spool
    assert _page(runs) == spooled


@pytest.fixture(scope="module")
def other_kind(two_runs, tmp_path_factory) -> Path:
    """The sloppy NCBI run recorded as a classification task, with a reasoning text, a long input,
    a NaN score and a repeated id: every row comes from the plain texts."""
    run = tmp_path_factory.mktemp("other") / "other"
    shutil.copytree(two_runs[1], run)
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    for task in (config.get("tasks") or {}).values():
        task["kind"] = "classification"
    (run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    lines = [json.loads(line) for line in (run / "samples.jsonl").read_text(encoding="utf-8").splitlines() if line]
    lines[0]["reasoning"] = "first <think> & then \u2028 answer"
    lines[1]["inputs"] = {**lines[1]["inputs"], "text": "word <b>&amp; " * 2000}
    lines[2]["scores"] = {**lines[2]["scores"], "f1": math.nan}
    lines[4]["id"] = lines[3]["id"]
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    return run


def test_ner_rows_from_the_spools_are_the_rows_from_whole_records(two_runs):
    _same_page_with_and_without_spools(two_runs)
    _same_page_with_and_without_spools(two_runs[:1])


def test_rows_of_another_kind_and_of_mixed_kinds_are_the_same_too(two_runs, other_kind):
    _same_page_with_and_without_spools([other_kind])
    runs = load_report_runs([other_kind])
    rows = list(BrowserRows(runs, runs[0].info).pieces())
    assert any(isinstance(row, SplicedSample) for row in rows)
    _same_page_with_and_without_spools([two_runs[0], other_kind])


def test_spliced_rows_read_back_as_the_dict_rows(two_runs):
    runs = load_report_runs(list(two_runs))
    spooled = browser_data(runs)
    for run in runs:
        run.spool = None
    assert browser_data(runs) == spooled


def test_a_spool_reads_its_texts_without_pread_too(two_runs, monkeypatch):
    """Windows has no os.pread (and no fork): the texts are read by seeking."""
    import os

    runs = load_report_runs(list(two_runs))
    page = _page(runs)
    monkeypatch.delattr(os, "pread")
    assert _page(runs) == page

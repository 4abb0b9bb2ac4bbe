"""Two runs of one model and task in two results folders (issue 22, item 4): each leaderboard row and
each interval is its own run's, and the rows are told apart by their paths."""

from __future__ import annotations

import pandas as pd
import pytest

from evalpipe.report.build import build_report
from evalpipe.report.runs import _labels, load_report_runs
from tests.report.support import gold_answers, make_run, sloppy_responder
from tests.support.scripted_backend import query_text

from pathlib import Path


def test_labels_are_unique_even_for_runs_of_one_name_in_two_folders():
    paths = [Path("/r/a/m__ncbi"), Path("/r/b/m__ncbi"), Path("/r/c/other")]
    assert _labels(["m", "m", "x"], paths) == ["m [a/m__ncbi]", "m [b/m__ncbi]", "x"]
    assert _labels(["m", "m"], [Path("/r/a"), Path("/r/a")]) == ["m [a]", "m [a] #2"]


def test_two_runs_sharing_a_label_keep_their_own_numbers(tmp_path):
    gold = gold_answers()
    perfect = make_run(tmp_path / "first", "m", lambda p: gold[query_text(p)], limit=20)
    sloppy = make_run(tmp_path / "second", "m", sloppy_responder(gold), limit=20)
    assert perfect.name == sloppy.name  # the same run name, in two results folders
    runs = load_report_runs([perfect, sloppy])
    assert len({r.label for r in runs}) == 2
    own = [r.metrics["ncbi_disease"]["f1"] for r in runs]
    assert own[0] != own[1]
    build_report([perfect, sloppy], tmp_path / "report", resamples=50)
    board = pd.read_csv(tmp_path / "report" / "leaderboard.csv")
    assert board["ncbi_disease:f1"].tolist() == pytest.approx(own, abs=1e-9)
    lows, highs = board["ncbi_disease:f1:ci_low"].tolist(), board["ncbi_disease:f1:ci_high"].tolist()
    assert lows[0] != lows[1] or highs[0] != highs[1]  # each run its own interval
    assert all(low <= value <= high for low, value, high in zip(lows, own, highs))

"""Two realistic NCBI runs (60 samples) made once per session (see tests/report/support.py)."""

from pathlib import Path

import pytest

from tests.report.support import gold_answers, make_run, sloppy_responder
from tests.support.scripted_backend import query_text


@pytest.fixture(scope="session")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("report_runs")
    gold = gold_answers()
    perfect = make_run(root, "perfect", lambda p: gold[query_text(p)])
    sloppy = make_run(root, "sloppy", sloppy_responder(gold))
    return perfect, sloppy

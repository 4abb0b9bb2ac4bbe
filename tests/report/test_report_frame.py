"""The report's frame (:func:`evalpipe.report.frame.report_frame`) is the very frame
:func:`evalpipe.frames.samples_frame` makes of the same records: columns, order, dtypes and values."""

import pandas as pd

from evalpipe.frames import run_identity, samples_frame
from evalpipe.report.frame import report_frame
from evalpipe.report.runs import FRAME_COLUMNS, load_report_runs


def _same(records, identity, columns):
    made = report_frame(records, identity, None, columns)
    expected = samples_frame(records, identity, None, columns=columns)
    assert list(made.columns) == list(expected.columns)
    assert made.dtypes.to_dict() == expected.dtypes.to_dict()
    pd.testing.assert_frame_equal(made, expected, check_exact=True)


def test_the_report_frame_is_samples_frame(two_runs):
    for path in two_runs:
        run = load_report_runs([path])[0]
        identity = run_identity(path)
        _same(run.records, identity, FRAME_COLUMNS)
        _same(run.records, identity, {*FRAME_COLUMNS, "run", "model", "compat", "condition", "variant"})
        _same([], identity, FRAME_COLUMNS)


def test_conditions_scores_and_missing_values():
    identity = {"run": "r", "model": "m"}
    records = [
        {"task": "t", "id": "a", "answer": "yes", "scores": {"acc": 1, "f1": 0.5}, "latency_s": 0.1,
         "usage": {"prompt_tokens": 3}, "condition": "c1", "variant": "v"},
        {"task": "t", "id": "b", "answer": None, "scores": {"acc": True, "bleu": 2.0}, "error": "boom",
         "parse_failed": True},
        {"task": "u", "id": "c", "answer": "\ud800x", "scores": None, "finish_reason": "length",
         "diagnostics": {"truncated_tokens": 4}},
    ]
    _same(records, identity, FRAME_COLUMNS)
    _same(records, identity, {*FRAME_COLUMNS, "run", "compat", "condition", "shots"})

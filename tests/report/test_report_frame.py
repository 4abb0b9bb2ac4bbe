"""The report's frame (:func:`evalpipe.report.frame.report_frame`) is the very frame
:func:`evalpipe.frames.samples_frame` makes of the same records: columns, order, dtypes and values."""

import pandas as pd
import pytest

from evalpipe.frames import run_identity, samples_frame
from evalpipe.report.frame import FrameValues, answer_digest, report_frame
from evalpipe.report.reading import LEAN_FIELDS, read_records
from evalpipe.report.runs import FRAME_COLUMNS, _split_conditions, load_report_runs
from evalpipe.results import RunDir


def _same(records, identity, columns):
    made = report_frame(records, identity, None, columns)
    expected = samples_frame(records, identity, None, columns=columns)
    assert list(made.columns) == list(expected.columns)
    assert made.dtypes.to_dict() == expected.dtypes.to_dict()
    pd.testing.assert_frame_equal(made, expected, check_exact=True)


def test_the_report_frame_is_samples_frame_of_the_whole_records(two_runs):
    """The runs hold lean records (no answer, usage, latency …): their frame is still that of the
    records as samples.jsonl holds them, its values taken while each was whole."""
    for path in two_runs:
        run = load_report_runs([path])[0]
        identity = run_identity(path)
        assert run.records and not any(name in r for r in run.records for name in LEAN_FIELDS)
        whole = _split_conditions(read_records(RunDir(path), None)[0], run.variants)[0]
        expected = samples_frame(whole, identity, None, columns=FRAME_COLUMNS)
        assert run.samples.dtypes.to_dict() == expected.dtypes.to_dict()
        pd.testing.assert_frame_equal(run.samples, expected, check_exact=True)
        _same(whole, identity, FRAME_COLUMNS)
        _same(whole, identity, {*FRAME_COLUMNS, "run", "model", "compat", "condition", "variant"})
        _same([], identity, FRAME_COLUMNS)


def test_frame_values_taken_from_whole_records_make_the_frame_of_lean_ones():
    identity = {"run": "r", "model": "m"}
    whole = [{"task": "t", "id": "a", "answer": "yes", "usage": {"prompt_tokens": 3}, "latency_s": 0.5,
              "scores": {"acc": 1}},
             {"task": "t", "id": "b", "answer": None, "finish_reason": "length", "scores": {"acc": 0}}]
    values = FrameValues(FRAME_COLUMNS)
    for record in whole:
        values.add(record)
    lean = [{k: v for k, v in r.items() if k not in LEAN_FIELDS} for r in whole]
    made = report_frame(lean, identity, None, FRAME_COLUMNS, values)
    pd.testing.assert_frame_equal(made, samples_frame(whole, identity, None, columns=FRAME_COLUMNS),
                                  check_exact=True)
    assert list(made["answer_chars"].isna()) == [False, True] and made["prompt_tokens"].iloc[0] == 3
    with pytest.raises(ValueError, match="1 records for 2"):
        short = FrameValues(FRAME_COLUMNS)
        short.add(whole[0])
        report_frame(lean, identity, None, FRAME_COLUMNS, short)


def test_an_answer_digest_tells_answers_apart_as_a_comparison_reads_them():
    assert answer_digest("yes") == answer_digest("yes") != answer_digest("yes ")
    assert answer_digest(None) is None and answer_digest(3) is None
    assert answer_digest("\ud800x") != answer_digest("x")  # a lone surrogate kept, not an error


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

"""Runs as DataFrames: shapes, columns, missing values, parquet."""

import importlib.util

import pytest

from evalpipe.frames import load_metrics, load_samples, write_parquet
from tests.report.support import LIMIT


def test_load_samples_one_row_per_sample_with_score_columns(two_runs):
    perfect, sloppy = two_runs
    frame = load_samples(sloppy)
    assert frame.shape[0] == LIMIT
    assert {"run", "model", "task", "id", "answer", "parse_failed", "error", "latency_s", "prompt_tokens",
            "completion_tokens", "truncated_tokens", "prediction", "gold"} <= set(frame.columns)
    assert [c for c in frame.columns if c.startswith("score.")] == [
        "score.f1", "score.fn", "score.fp", "score.partial_fn", "score.partial_fp", "score.partial_tp", "score.tp"]
    assert set(frame["model"]) == {"sloppy"} and set(frame["task"]) == {"ncbi_disease"}
    # the prompt as sent, from the run's store (samples.jsonl names its key), and only where asked
    first = frame.iloc[0]
    assert first["prompt"]["messages"][-1]["content"].endswith(f"Text to process:\n{first['inputs']['text']}\n")
    assert len(first["key"]) == 64 and load_samples(sloppy, prompts=False)["prompt"].isna().all()
    failed = frame[frame["error"].notna()]
    assert len(failed) == 8  # the sloppy responder's failing bucket (tests/report/support.py)
    assert failed["parse_failed"].isna().all()  # no answer is not a parse failure
    assert (frame["truncated_tokens"] == 0).all()  # recorded, nothing cut
    # the sum of per-sample fn equals the corpus fn in metrics.json
    metrics = load_metrics([sloppy])
    fn = metrics[(metrics["metric"] == "fn")]["value"].item()
    assert frame["score.fn"].sum() == fn
    # partial counts too: P = Σtp / (Σtp + Σfp)
    tp, fp = frame["score.partial_tp"].sum(), frame["score.partial_fp"].sum()
    partial_precision = metrics[(metrics["metric"] == "partial_precision")]["value"].item()
    assert partial_precision == pytest.approx(tp / (tp + fp))


def test_load_metrics_long_format(two_runs):
    frame = load_metrics(two_runs)
    # 2 runs × 1 task × 15 metrics (10 from the scorer + parse_failure_rate, n, errors, answered, coverage)
    assert frame.shape == (30, 7)
    assert set(frame["kind"]) == {"task"} and set(frame["model"]) == {"perfect", "sloppy"}
    wide = frame.pivot_table(index="model", columns=["task", "metric"], values="value")
    assert wide.loc["perfect", ("ncbi_disease", "f1")] == 1.0
    assert wide.loc["sloppy", ("ncbi_disease", "f1")] < 1.0


def test_missing_samples_file_names_the_command(two_runs, tmp_path):
    with pytest.raises(FileNotFoundError, match="evalpipe score .* --compat evalscope"):
        load_samples(two_runs[0], compat="evalscope")


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is not None, reason="pyarrow installed")
def test_parquet_without_pyarrow_says_what_to_install(two_runs, tmp_path):
    with pytest.raises(RuntimeError, match="pyarrow"):
        write_parquet(load_samples(two_runs[0]), tmp_path / "s.parquet")
    assert not (tmp_path / "s.parquet").exists()


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow not installed")
def test_parquet_round_trip(two_runs, tmp_path):
    import json

    import pandas as pd

    frame = load_samples(two_runs[1])
    back = pd.read_parquet(write_parquet(frame, tmp_path / "s.parquet"))
    assert back.shape == frame.shape
    assert json.loads(back["gold"][0]) == frame["gold"][0]


def test_a_report_of_a_run_whose_answers_hold_lone_surrogates(tmp_path):
    """The store keeps such an answer exactly; the frames (pandas refuses lone surrogates in its
    string columns) show it with U+FFFD, and the report is written."""
    from evalpipe.report import build_report
    from tests.report.support import make_run

    run = make_run(tmp_path, "m", lambda prompt: "<response>bad \udcff answer</response>", limit=3)
    assert "\\udcff" in run.joinpath("samples.jsonl").read_text(encoding="utf-8")  # kept, escaped
    frame = load_samples(run)
    assert frame["answer"].str.contains("\ufffd").all()
    built = build_report([run], tmp_path / "report", resamples=20)
    assert built.html.is_file()


def _row_by_row(records, identity, columns):
    """The obvious frame of the records — one dict per row, pandas fills what a row lacks with NaN —
    that samples_frame (built a column at a time) must equal, dtypes included."""
    import pandas as pd

    rows = []
    for r in records:
        answer = r.get("answer")
        row = {"run": identity["run"], "model": identity["model"], "compat": "default", "task": r.get("task"),
               "id": r.get("id"), "answer": answer,
               "answer_chars": len(answer) if isinstance(answer, str) else float("nan"),
               "parse_failed": r.get("parse_failed"), "error": r.get("error"), "latency_s": r.get("latency_s"),
               "attempts": r.get("attempts"),
               "prompt_tokens": float((r.get("usage") or {}).get("prompt_tokens", float("nan"))),
               "completion_tokens": float((r.get("usage") or {}).get("completion_tokens", float("nan"))),
               "truncated_tokens": float(r.get("truncated_tokens", float("nan"))),
               "finish_reason": r.get("finish_reason"), "endpoint": r.get("endpoint"), "key": r.get("key"),
               **{c: r.get(c) for c in ("inputs", "prompt", "prediction", "gold", "parts", "diagnostics", "meta")}}
        if "condition" in r:
            row.update({c: r.get(c) for c in ("condition", "variant", "shots", "shot_order")})
        row.update({f"score.{k}": float(v) for k, v in (r.get("scores") or {}).items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame[[c for c in columns if c in frame.columns]]


def test_samples_frame_equals_the_row_by_row_frame_dtypes_and_missing_values_included():
    import pandas as pd

    from evalpipe.frames import samples_frame

    identity = {"run": "r", "model": "m"}
    records = [
        {"task": "t", "id": "a", "answer": "yes", "parse_failed": False, "error": None, "latency_s": 0.5,
         "attempts": 1, "usage": {"prompt_tokens": 10, "completion_tokens": 2}, "truncated_tokens": 0,
         "finish_reason": "stop", "scores": {"acc": 1, "f1": 0.5, "flag": True}, "gold": {"x": [1]}},
        {"task": "t", "id": "b", "answer": None, "parse_failed": None, "error": "timeout", "latency_s": None,
         "scores": {"rouge": 0.25}, "condition": "c1", "variant": "v", "shots": 2, "shot_order": "o"},
        {"task": "u", "id": "c", "answer": "", "parse_failed": True, "error": None, "latency_s": 1,
         "attempts": 2, "usage": {}, "finish_reason": "length", "scores": {"acc": 0}},
    ]
    whole = samples_frame(records, identity)
    expected = _row_by_row(records, identity, whole.columns)
    assert list(whole.columns) == [
        "run", "model", "compat", "task", "id", "condition", "variant", "shots", "shot_order", "answer",
        "answer_chars", "parse_failed", "error", "latency_s", "attempts", "prompt_tokens", "completion_tokens",
        "truncated_tokens", "finish_reason", "endpoint", "key", "inputs", "prompt", "prediction", "gold", "parts",
        "diagnostics", "meta", "score.acc", "score.f1", "score.rouge"]
    pd.testing.assert_frame_equal(whole, expected, check_exact=True)
    # a few columns: those, in the same order, and every score column
    few = samples_frame(records, identity, columns={"task", "error", "finish_reason"})
    assert list(few.columns) == ["task", "error", "finish_reason", "score.acc", "score.f1", "score.rouge"]
    pd.testing.assert_frame_equal(few, whole[list(few.columns)], check_exact=True)
    # no records: every fixed column, as objects
    empty = samples_frame([], identity)
    assert empty.shape == (0, 24) and {str(d) for d in empty.dtypes} == {"object"}

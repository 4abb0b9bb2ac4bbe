"""The run directory is the contract: config.json records each task's kind, its suites and its
family's reference boards, and the report decides from those records (older runs: by shape)."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from evalpipe.report import build_report
from evalpipe.report.runs import ReportRun, TaskInfo, load_report_runs
from evalpipe.rundir.boards import ReferenceBoard, ReferenceRow
from evalpipe.tasks.base import Scoring, TaskSpec
from evalpipe.tasks.cblue.board import BOARD
from evalpipe.tasks.registry import all_tasks

RESAMPLES = 50


def test_every_registered_task_declares_a_kind():
    kinds = {name: spec.kind for name, spec in all_tasks().items()}
    assert all(kinds.values()), [n for n, k in kinds.items() if not k]
    assert (kinds["ncbi_disease"], kinds["cmeee"], kinds["clue_longhealth_task1"], kinds["promptcblue"]) == \
        ("span_ner", "span_ner", "multiple_choice", "custom")


def test_a_spec_without_a_kind_is_refused():
    with pytest.raises(ValueError, match="'t' declares no kind"):
        TaskSpec(name="t", description="", template="x.j2", load=None, shot_target=str,  # type: ignore[arg-type]
                 scorings={"default": Scoring(parse=None, score=None, empty=None, samplewise=True)},  # type: ignore[arg-type]
                 metrics=(), max_tokens=8)


def test_config_records_the_kind_of_every_task(two_runs):
    config = json.loads((two_runs[0] / "config.json").read_text(encoding="utf-8"))
    assert config["tasks"]["ncbi_disease"]["kind"] == "span_ner"
    assert config["boards"] == []  # no family of the run has a board
    assert "suites" in config


def test_summary_records_how_each_task_was_valued(two_runs):
    """NCBI's default scoring is samplewise: its metrics are their aggregations of the summed parts, and
    summary.json says so beside each metric's declared aggregation (what the report's intervals use)."""
    summary = json.loads((two_runs[0] / "summary.json").read_text(encoding="utf-8"))["tasks"]["ncbi_disease"]
    assert summary["valuation"]["path"] == "summed parts"
    assert summary["aggregations"]["f1"]["kind"] == "micro_prf"


def test_a_recorded_board_round_trips_and_is_checked():
    assert ReferenceBoard.from_json(json.loads(json.dumps(BOARD.to_json()))) == BOARD
    with pytest.raises(ValueError, match="no headline metric or display name for b"):
        ReferenceBoard(name="x", title="X", table_title="X", tasks=("a", "b"), display={"a": "A", "b": "B"},
                       headline={"a": "f1"}, rows=())
    with pytest.raises(ValueError, match="unknown average 'median'"):
        ReferenceBoard(name="x", title="X", table_title="X", tasks=("a",), display={"a": "A"},
                       headline={"a": "f1"}, rows=(), average="median")


def _spans_record(task: str, i: int) -> dict:
    span = {"start": 0, "end": 1, "label": "D"}
    return {"task": task, "id": str(i), "inputs": {"tokens": ["x", "y"]}, "gold": {"spans": [span], "tags": ["B-D", "O"]},
            "prediction": [span]}


def _run(kind: str | None) -> ReportRun:
    records = [_spans_record("t", i) for i in range(3)]
    run = ReportRun(path=Path("/runs/x"), label="x", model="x", compat=None, config={}, tasks=("t",),
                    metrics={"t": {}}, summary=None, samples=pd.DataFrame(), records=records)
    run.info["t"] = TaskInfo.from_config("t", {"kind": kind} if kind else {})
    return run


def test_the_recorded_kind_decides_whether_a_task_is_ner_and_older_runs_fall_back_to_the_shape():
    # the same span-shaped records: a span_ner task is classified, a task of another kind never is,
    # and a run that recorded no kind is judged by the records' shape (as before kinds were recorded)
    assert len(_run("span_ner").span_outcomes("t")) == 3
    assert _run("classification").span_outcomes("t") is None
    assert len(_run(None).span_outcomes("t")) == 3


@pytest.fixture(scope="module")
def edited_board_run(two_runs, tmp_path_factory):
    """The perfect NCBI run with a board recorded in its config.json, as a family of its own would."""
    path = tmp_path_factory.mktemp("contract") / "run"
    shutil.copytree(two_runs[0], path)
    board = ReferenceBoard(name="probe", title="Probe board", table_title="Probe board (percent)",
                           tasks=("ncbi_disease",), display={"ncbi_disease": "NCBI"}, headline={"ncbi_disease": "f1"},
                           rows=(ReferenceRow("Paper model", "test", {"ncbi_disease": 88.5, "average": 88.5}),),
                           source="reference: probe paper", reference_cell="reference (probe)",
                           label="reference rows: probe paper; our runs: {splits} split", note="Percent.",
                           incomplete="No probe average for {runs}.")
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    config["boards"] = [board.to_json()]
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return path


def test_the_report_renders_the_board_the_run_recorded(edited_board_run, tmp_path):
    result = build_report([edited_board_run], tmp_path, resamples=RESAMPLES)
    md = result.markdown.read_text(encoding="utf-8")
    section = md.split("## Probe board")[1].split("\n## ")[0]
    assert "Reference rows: probe paper; our runs: test split." in section
    assert "| Paper model | reference (probe) | test | 88.5 | 88.5 |" in section
    perfect = next(line for line in section.splitlines() if line.startswith("| perfect |"))
    assert perfect == "| perfect | our run | test | 100.0 [100.0, 100.0] | 100.0 [100.0, 100.0] |"
    csv = pd.read_csv(result.csv)
    reference = csv[csv["source"] == "reference: probe paper"].iloc[0]
    assert reference["ncbi_disease:f1"] == pytest.approx(0.885) and reference["probe:average"] == pytest.approx(0.885)


def test_recorded_suites_are_the_only_suites(two_runs):
    runs = load_report_runs([two_runs[0]])
    from evalpipe.report.suites import report_suites

    runs[0].config["suites"] = {"pair": {"tasks": ["ncbi_disease", "other"], "description": "d"}}
    suites = report_suites(runs)
    assert list(suites) == ["pair"] and suites["pair"].tasks == ("ncbi_disease", "other")
    assert suites["pair"].aggregate is None and not suites["pair"].has_aggregate
    # a recorded declaration is read back; an older run records the suite without one
    from evalpipe.rundir.suite_aggregates import Mean, Metric, Output, OutputGroup, SuiteAggregate

    declared = SuiteAggregate((OutputGroup("pair", "both", (Output("mean", Mean((Metric("ncbi_disease", "f1"),))),)),))
    runs[0].config["suites"]["pair"] = {"tasks": ["ncbi_disease"], "aggregate": declared.to_json()}
    assert report_suites(runs)["pair"].aggregate == declared and report_suites(runs)["pair"].has_aggregate
    runs[0].config["suites"]["pair"] = {"tasks": ["ncbi_disease"], "has_aggregate": True}
    older = report_suites(runs)["pair"]
    assert older.aggregate is None and older.has_aggregate and "predates declared suite aggregates" in older.undeclared[runs[0].label]
    runs[0].config["suites"]["pair"] = {"tasks": ["ncbi_disease"], "aggregate": {"groups": "?"}}
    assert "unreadable" in report_suites(runs)["pair"].undeclared[runs[0].label]  # never a failed report
    del runs[0].config["suites"]  # a run from before suites were recorded: none, never the registry's
    assert report_suites(runs) == {}


@pytest.fixture(scope="module")
def declared_suite_runs(two_runs, tmp_path_factory):
    """The sloppy NCBI run with a suite aggregate recorded as data (its value in metrics.json, its
    declaration in config.json), and the same run as an older evalpipe wrote it (no declaration)."""
    from evalpipe.rundir.suite_aggregates import Mean, Metric, Output, OutputGroup, SuiteAggregate
    from evalpipe.rundir.suites import SuiteRecord

    declared = SuiteAggregate((OutputGroup("probe", "NCBI", (Output("f1_mean", Mean((Metric("ncbi_disease", "f1"),))),)),))
    root = tmp_path_factory.mktemp("declared")
    paths = []
    for name, aggregate in (("declared", declared), ("older", None)):
        path = root / name
        shutil.copytree(two_runs[1], path)
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        config["suites"] = {"probe": SuiteRecord("probe", ("ncbi_disease",), "d", True, aggregate).to_json()}
        (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
        metrics = json.loads((path / "metrics.json").read_text(encoding="utf-8"))
        metrics["probe"] = declared(metrics)
        (path / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
        paths.append(path)
    return paths


def test_the_report_recomputes_a_declared_aggregate_without_the_task_registry(declared_suite_runs, tmp_path):
    """The report runs in a process where importing the task registry fails, and still gives the
    recorded aggregate its bootstrap interval, from config.json alone."""
    import subprocess
    import sys

    declared, older = declared_suite_runs
    code = ("import sys; from pathlib import Path\n"
            "sys.modules['evalpipe.tasks.registry'] = None  # any import of it raises ImportError\n"
            "from evalpipe.report import build_report\n"
            f"build_report([Path({str(declared)!r}), Path({str(older)!r})], Path({str(tmp_path)!r}), resamples=50)\n"
            "assert sys.modules['evalpipe.tasks.registry'] is None\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    csv = pd.read_csv(tmp_path / "leaderboard.csv")
    row = csv[csv["run"] == "declared"].iloc[0]
    # the aggregate is the mean of one metric, so its replicates are the task's: the same interval
    assert row["probe:f1_mean"] == row["ncbi_disease:f1"]
    assert row["probe:f1_mean:ci_low"] == pytest.approx(row["ncbi_disease:f1:ci_low"], abs=1e-12)
    assert row["probe:f1_mean:ci_high"] == pytest.approx(row["ncbi_disease:f1:ci_high"], abs=1e-12)
    assert row["probe:f1_mean:ci_low"] < row["probe:f1_mean"] < row["probe:f1_mean:ci_high"]
    # the older run: its value, no interval, and the leaderboard says why
    old = csv[csv["run"] == "older"].iloc[0]
    assert old["probe:f1_mean"] == row["probe:f1_mean"] and pd.isna(old["probe:f1_mean:ci_low"])
    assert "predates declared suite aggregates" in (tmp_path / "report.md").read_text(encoding="utf-8")

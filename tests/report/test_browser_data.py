"""What the sample browser is given (evalpipe/report/browser_data.py): outcomes, entities, texts, links.

Built from real NCBI runs (tests/report/support.py) and from hand-made sample records whose outcome
is known by construction.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from evalpipe.report.browser import samples_fragment, validate
from evalpipe.report.browser_data import BrowserRows, SampleLinks, browser_data, correctness_key, run_key
from evalpipe.report.ner_errors import sample_outcomes
from evalpipe.report.runs import ReportRun, TaskInfo, load_report_runs, resample_task
from evalpipe.results import TaskSummary

NOWHERE = Path("/nonexistent/run")


def hand_run(label: str, task: str, records: list[dict], aggregations: dict, info: TaskInfo | None = None,
             metrics: dict | None = None) -> ReportRun:
    """A ReportRun of sample records (never read from disk), with declared aggregations."""
    records = [{"task": task, "parts": {}, **r} for r in records]  # parts: a run that declares aggregations
    metrics = metrics or {m: 0.5 for m in aggregations}
    run = ReportRun(path=NOWHERE, label=label, model=label, compat=None, config={}, tasks=(task,),
                    metrics={task: metrics}, summary=None, samples=pd.DataFrame(), records=records)
    run.info[task] = info or TaskInfo(task)
    run.resample[task] = resample_task(task, records, metrics, TaskSummary(aggregations=aggregations), run.notes)
    return run


MEAN_ACCURACY = {"kind": "mean", "key": "accuracy"}


# ---- NER: every entity and outcome from the records --------------------------------------------------

@pytest.fixture(scope="module")
def ner(two_runs):
    runs = load_report_runs(list(two_runs))
    infos = {t: i for run in runs for t, i in run.info.items()}
    return runs, browser_data(runs, infos)


def test_ner_data_follows_the_contract_and_has_every_sample_of_both_runs(ner):
    runs, data = ner
    validate(data)
    assert [r["key"] for r in data["runs"]] == ["r0", "r1"]
    assert [r["label"] for r in data["runs"]] == ["perfect", "sloppy"]
    assert data["tasks"] == [{"name": "ncbi_disease", "kind": "NER", "score_keys": ["f1"]}]
    assert [s["id"] for s in data["samples"]] == [r["id"] for r in runs[0].records]
    assert all(set(s["runs"]) == {"r0", "r1"} for s in data["samples"])


def test_ner_outcomes_and_entities_are_the_error_analysis_of_each_record(ner):
    runs, data = ner
    by_id = {s["id"]: s for s in data["samples"]}
    seen = Counter()
    for key, run in zip(("r0", "r1"), runs):
        for record in run.full_records(run.records):  # whole: the runs hold slim records
            result = by_id[record["id"]]["runs"][key]
            gold, pred = sample_outcomes(record)
            want = [(o.side, o.span.start, o.span.end, o.span.label, o.category) for o in (*gold, *pred)]
            got = [(e["side"], e["start"], e["end"], e["label"], e["category"]) for e in result["entities"]]
            assert got == want
            categories = list(dict.fromkeys(o.category for o in (*gold, *pred)))
            extra = (["parse_failure"] if record["parse_failed"] is True else []) + (["error"] if record["error"] else [])
            assert result["outcomes"] == categories + extra
            seen.update(result["outcomes"])
            assert result["answer"] == record["answer"] and result["scores"] == record["scores"]
    # the sloppy responder makes every kind of outcome the test means to check
    assert {"correct", "missed", "boundary", "parse_failure", "error"} <= set(seen)


def test_ner_texts_name_entities_in_words(ner):
    runs, data = ner
    sample = data["samples"][0]  # test-0: two diseases in "ataxia - telangiectasia … T - cell leukaemia"
    assert sample["gold_text"] == "ataxia - telangiectasia (Disease); sporadic T - cell leukaemia (Disease)"
    assert sample["runs"]["r0"]["prediction_text"] == sample["gold_text"]
    entity = sample["runs"]["r0"]["entities"][0]
    assert entity == {"side": "gold", "text": "ataxia - telangiectasia", "label": "Disease", "category": "correct",
                      "start": 6, "end": 9}
    # only diagnostics that say something travel to the page (the perfect answers have none)
    assert "diagnostics" not in sample["runs"]["r0"]
    failed = next(s["runs"]["r1"] for s in data["samples"] if s["runs"]["r1"]["parse_failed"] is True)
    assert failed["diagnostics"] and all(v not in (False, 0, None, "", []) for v in failed["diagnostics"].values())


def test_sample_links_count_rows_and_build_the_page_links(ner):
    _, data = ner
    links = SampleLinks(data)
    missed = [s for s in data["samples"] if "missed" in s["runs"]["r1"]["outcomes"]]
    assert links.count("ncbi_disease", "r1", "missed") == len(missed) > 0
    assert links.count("ncbi_disease", "r1") == len(data["samples"])
    assert links.count("ncbi_disease", "r0", "missed") == 0
    assert links.outcome("ncbi_disease", "r1", "missed") == "#samples?task=ncbi_disease&run=r1&outcome=missed"
    texts = dict(links.row_links("ncbi_disease", "r1"))
    assert texts[f"missed: {len(missed)}"] == "#samples?task=ncbi_disease&run=r1&outcome=missed"
    assert any(t.startswith("parse failures: ") for t in texts) and any(t.startswith("errors: ") for t in texts)
    assert links.row_links("ncbi_disease", "r0") == ()  # a perfect run has nothing to point at
    assert links.sample("ncbi_disease", "test-2", "r0", "r1") == samples_fragment(
        task="ncbi_disease", sample="test-2", run="r0", compare="r1")
    assert run_key(3) == "r3"


# ---- correct / incorrect ----------------------------------------------------------------------------

def _classification(values, primary="accuracy", aggregations=None):
    records = [{"id": str(i), "inputs": {"text": f"s{i}"}, "gold": "yes", "answer": "yes" if v else "no",
                "prediction": "yes" if v else "no", "parse_failed": False, "error": None,
                "scores": {"accuracy": v}} for i, v in enumerate(values)]
    info = TaskInfo("cls", metrics=("macro_f1", "accuracy"), primary_metric=primary)
    aggregations = aggregations or {"accuracy": MEAN_ACCURACY,
                                    "macro_f1": {"kind": "macro_f1", "labels": ["no", "yes"], "prefix": "",
                                                 "over": "gold", "stat": "f1", "weighting": "uniform"}}
    return hand_run("m", "cls", records, aggregations, info)


def test_a_binary_accuracy_makes_correct_and_incorrect_even_under_a_macro_f1_primary():
    run = _classification([1.0, 0.0, 1.0, None], primary="macro_f1")
    assert correctness_key("cls", [run], run.info["cls"]) == "accuracy"
    data = browser_data([run], run.info)
    assert data["tasks"][0]["kind"] == "correct = accuracy is 1"
    assert [s["runs"]["r0"]["outcomes"] for s in data["samples"]] == [["correct"], ["incorrect"], ["correct"], []]


def test_a_fractional_value_means_no_correctness():
    run = _classification([1.0, 0.5, 0.0])
    assert correctness_key("cls", [run], run.info["cls"]) is None
    assert browser_data([run], run.info)["tasks"][0]["kind"] == "scored"


def test_a_metric_that_happens_to_be_binary_is_not_correctness_unless_it_is_primary_or_accuracy():
    records = [{"id": str(i), "inputs": {"q": "x"}, "answer": "a", "gold": "a", "parse_failed": False, "error": None,
                "scores": {"rougeL": v, "bertscore_f1": 0.3 + v / 2}} for i, v in enumerate([0.0, 1.0, 1.0])]
    info = TaskInfo("summ", metrics=("rougeL", "bertscore_f1"), primary_metric="bertscore_f1")
    run = hand_run("m", "summ", records, {"rougeL": {"kind": "mean", "key": "rougeL"},
                                          "bertscore_f1": {"kind": "mean", "key": "bertscore_f1"}}, info)
    assert correctness_key("summ", [run], info) is None
    # the same values as the primary metric do say correct/incorrect
    primary = hand_run("m", "summ", records, {"rougeL": {"kind": "mean", "key": "rougeL"}},
                       TaskInfo("summ", metrics=("rougeL",), primary_metric="rougeL"))
    assert correctness_key("summ", [primary], primary.info["summ"]) == "rougeL"


def test_a_ratio_metric_is_not_read_as_correctness():
    run = _classification([1.0, 0.0], aggregations={"accuracy": {"kind": "ratio", "numerator": "accuracy",
                                                                  "denominator": "n", "empty": 0.0}})
    assert correctness_key("cls", [run], run.info["cls"]) is None


# ---- texts, judge, failures --------------------------------------------------------------------------

def test_ranking_predictions_say_where_the_gold_came():
    records = [
        {"id": "q1", "inputs": {"question": "?"}, "answer": '{"top": [3, 1]}', "gold": {"index": 1},
         "prediction": {"rank": 2, "top": [3, 1], "depth": 10}, "parse_failed": False, "error": None,
         "scores": {"mrr@10": 0.5}},
        {"id": "q2", "inputs": {"question": "?"}, "answer": '{"top": [3, 4]}', "gold": {"index": 1},
         "prediction": {"rank": None, "top": [3, 4], "depth": 10}, "parse_failed": False, "error": None,
         "scores": {"mrr@10": 0.0}},
    ]
    run = hand_run("emb", "retrieval", records, {"mrr@10": {"kind": "mean", "key": "mrr@10"}})
    texts = [s["runs"]["r0"]["prediction_text"] for s in browser_data([run])["samples"]]
    assert texts == ["rank 2 of the top 10; ranked: [3, 1]", "not in the top 10; ranked: [3, 4]"]


def test_judge_ratings_travel_to_the_page_when_samples_carry_them():
    records = [{"id": "1", "inputs": {"q": "x"}, "answer": "a", "gold": "b", "parse_failed": False, "error": None,
                "scores": {}, "judge": {"accuracy": 4, "rationale": "close"}},
               {"id": "2", "inputs": {"q": "y"}, "answer": "a", "gold": "b", "parse_failed": False, "error": None,
                "scores": {}, "judge": 3},
               {"id": "3", "inputs": {"q": "z"}, "answer": "a", "gold": "b", "parse_failed": False, "error": None,
                "scores": {}}]
    run = hand_run("m", "gen", records, {})
    results = [s["runs"]["r0"] for s in browser_data([run])["samples"]]
    assert results[0]["judge"] == {"accuracy": 4, "rationale": "close"}
    assert results[1]["judge"] == {"judge": 3}
    assert "judge" not in results[2]


def test_parse_failures_errors_and_samples_only_one_run_has():
    a = hand_run("a", "gen", [
        {"id": "1", "inputs": {"q": "x"}, "answer": "??", "gold": {"k": "v"}, "prediction": None, "parse_failed": True,
         "error": None, "scores": {"s": 0.0}, "diagnostics": {"empty": False, "reason": "no label"}},
        {"id": "2", "inputs": {"q": "y"}, "answer": None, "gold": {"k": "v"}, "prediction": None, "parse_failed": None,
         "error": "HTTP 500", "scores": {"s": None}},
    ], {})
    b = hand_run("b", "gen", [
        {"id": "3", "inputs": {"q": "z"}, "answer": "fine", "gold": {"k": "w"}, "prediction": "fine",
         "parse_failed": False, "error": None, "scores": {"s": 1.0}},
    ], {})
    data = browser_data([a, b])
    validate(data)
    samples = {s["id"]: s for s in data["samples"]}
    assert samples["1"]["runs"]["r0"]["outcomes"] == ["parse_failure"]
    assert samples["1"]["runs"]["r0"]["diagnostics"] == {"reason": "no label"}
    assert samples["1"]["gold_text"] == '{"k": "v"}' and samples["1"]["runs"]["r0"]["prediction_text"] == ""
    assert samples["2"]["runs"]["r0"]["outcomes"] == ["error"] and samples["2"]["runs"]["r0"]["scores"] == {"s": None}
    assert set(samples["3"]["runs"]) == {"r1"} and set(samples["1"]["runs"]) == {"r0"}


def test_a_very_long_input_is_cut_in_the_page_saying_where_the_rest_is():
    from evalpipe.report.browser_data import INPUT_CHARS

    letter = "word " * (INPUT_CHARS // 5 + 1000)
    run = hand_run("m", "qa", [{"id": "1", "inputs": {"letter": letter, "question": "Which drug?"}, "answer": "A",
                                "gold": "A", "parse_failed": False, "error": None, "scores": {}}], {})
    shown = browser_data([run])["samples"][0]["input"]
    assert shown["question"] == "Which drug?"
    assert shown["letter"].startswith(letter[:INPUT_CHARS])
    assert shown["letter"].endswith(f"[… {len(letter) - INPUT_CHARS:,} more characters not shown here; "
                                    "the whole input is in the run's samples.jsonl]")


# ---- rows made as the page is written (BrowserRows) -----------------------------------------------------

def _gen(sample_id: str, answer: str, *, failed: bool = False, score: float = 0.0, text: str = "q") -> dict:
    return {"id": sample_id, "inputs": {"q": text}, "answer": answer, "gold": "g", "prediction": answer,
            "parse_failed": failed, "error": None, "scores": {"accuracy": score}}


def test_streamed_rows_keep_the_order_first_input_and_last_result_of_a_repeated_id():
    a = hand_run("a", "gen", [_gen("1", "first", text="one"), _gen("2", "x", failed=True),
                              _gen("1", "again", score=1.0, text="one, later")], {"acc": MEAN_ACCURACY})
    b = hand_run("b", "gen", [_gen("3", "only b"), _gen("2", "y", score=1.0)], {"acc": MEAN_ACCURACY})
    rows = BrowserRows([a, b])
    samples = list(rows)
    assert len(rows) == len(samples) == 3
    assert [s["id"] for s in samples] == ["1", "2", "3"]
    assert samples[0]["input"] == {"q": "one"} and samples[0]["runs"]["r0"]["answer"] == "again"
    assert samples[0]["runs"]["r0"]["outcomes"] == ["correct"]
    assert list(samples[1]["runs"]) == ["r0", "r1"] and samples[1]["runs"]["r0"]["outcomes"] == ["incorrect", "parse_failure"]
    assert list(samples[2]["runs"]) == ["r1"]
    assert list(iter(rows)) == samples  # made again, the same


def test_the_rows_of_a_range_are_those_rows_of_all_of_them_across_tasks():
    a = hand_run("a", "gen", [_gen("1", "first"), _gen("2", "x", failed=True), _gen("1", "again", score=1.0)],
                 {"acc": MEAN_ACCURACY})
    b = hand_run("b", "gen", [_gen("3", "only b"), _gen("2", "y", score=1.0)], {"acc": MEAN_ACCURACY})
    c = hand_run("c", "other", [_gen("7", "p"), _gen("8", "q"), _gen("9", "r")], {"acc": MEAN_ACCURACY})
    rows = BrowserRows([a, b, c])
    every = list(rows)
    assert len(every) == 6 and [s["task"] for s in every] == ["gen"] * 3 + ["other"] * 3
    for start in range(7):
        for stop in range(start, 8):
            assert list(rows.pieces(start, stop)) == every[start:stop], (start, stop)


def test_the_links_counts_come_without_the_rows_and_count_what_the_rows_show():
    a = hand_run("a", "gen", [_gen("1", "first"), _gen("2", "x", failed=True), _gen("1", "again", score=1.0)],
                 {"acc": MEAN_ACCURACY})
    b = hand_run("b", "gen", [_gen("3", "only b"), _gen("2", "y", score=1.0)], {"acc": MEAN_ACCURACY})
    counted = BrowserRows([a, b]).links()
    shown = SampleLinks(browser_data([a, b]))
    assert counted.samples == shown.samples == {("gen", "r0"): 2, ("gen", "r1"): 2}
    assert counted.outcomes == shown.outcomes
    assert counted.count("gen", "r0", "incorrect") == 1 and counted.count("gen", "r0", "correct") == 1


def test_ner_links_counted_from_the_records_equal_those_of_the_rows(ner, two_runs):
    runs, data = ner
    infos = {t: i for run in runs for t, i in run.info.items()}
    counted, shown = BrowserRows(runs, infos).links(), SampleLinks(data)
    assert counted.samples == shown.samples and counted.outcomes == shown.outcomes
    assert counted.count("ncbi_disease", "r1", "missed") > 0

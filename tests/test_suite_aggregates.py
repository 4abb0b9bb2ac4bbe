"""The declarative suite-aggregate language (evalpipe.rundir.suite_aggregates): hand-computed cases,
JSON round trips, and the shipped suites reproducing the Python aggregates they replaced bit for bit."""

import json
import random
from collections.abc import Mapping
from pathlib import Path

import pytest

from evalpipe.metrics.aggregate import level_score, pooled_accuracy
from evalpipe.rundir.suite_aggregates import (
    IncompleteSuite,
    MalformedAggregate,
    Mean,
    Metric,
    Output,
    OutputGroup,
    PartialSuite,
    SuiteAggregate,
    WeightedMean,
)
from evalpipe.rundir.suites import SuiteRecord
from evalpipe.tasks.registry import suites

GOLDEN = Path(__file__).parent / "golden" / "expected"


def _one(*outputs: Output, name="g", requires="everything") -> SuiteAggregate:
    return SuiteAggregate((OutputGroup(name, requires, outputs),))


# ---- hand-computed cases ---------------------------------------------------------------------

def test_mean_and_weighted_mean_by_hand():
    metrics = {"a": {"acc": 1.0, "n": 30}, "b": {"acc": 0.0, "n": 10}, "c": {"acc": 0.5, "answered": 20, "n": 40}}
    acc = tuple(Metric(t, "acc") for t in "abc")
    size = tuple(Metric(t, "answered", otherwise=("n",)) for t in "abc")
    out = _one(Output("macro", Mean(acc)), Output("micro", WeightedMean(acc, size)))(metrics)
    assert out == {"macro": 0.5, "micro": (30 + 0 + 10) / 60}  # c weighs its 20 answered, not its 40
    assert list(out) == ["macro", "micro"]  # in declared order
    nested = _one(Output("s", Mean((Mean((Metric("a", "acc"),)), Mean((Metric("b", "acc"), Metric("c", "acc")))))))
    assert nested(metrics) == {"s": (1.0 + 0.25) / 2}  # a mean of dataset means, not of metrics


def test_defaults_and_weights_that_sum_to_zero():
    acc, n = Metric("a", "acc"), Metric("a", "n", default=0.0)
    assert _one(Output("m", WeightedMean((acc,), (n,), if_no_weight=0.0)))({"a": {"acc": 0.7}}) == {"m": 0.0}
    with pytest.raises(IncompleteSuite, match="g: a weighted mean has no weight"):
        _one(Output("m", WeightedMean((acc,), (n,))))({"a": {"acc": 0.7}})


def test_missing_tasks_and_metrics_are_named_with_their_reasons():
    aggregate = _one(Output("m", Mean((Metric("a", "acc"), Metric("b", "f1[*]_x", absent="not computed here"),
                                       Metric("c", "acc")))), name="the average", requires="a, b and c")
    with pytest.raises(IncompleteSuite) as missing:
        aggregate({"b": {"f1[s]_y": 1.0}, "c": {"acc": None}})  # None: not computed, i.e. absent
    assert str(missing.value) == ("the average needs a, b and c; missing: a, "
                                  "b (no f1[*]_x: not computed here), c (no acc)")


def test_tagged_metrics_name_their_settings_and_must_agree():
    tagged = _one(Output("score[{settings}]", Mean((Metric("a", "bert[*]_f1"), Metric("a", "umls[*]_f1"),
                                                    Metric("b", "bert[*]_f1")))))
    metrics = {"a": {"bert[enc@L6]_f1": 0.5, "bert[enc@L6]_precision": 0.9, "umls[ext]_f1": 0.2},
               "b": {"bert[enc@L6]_f1": 0.8}}
    assert tagged(metrics) == {"score[bert=enc@L6,umls=ext]": (0.5 + 0.2 + 0.8) / 3}
    with pytest.raises(IncompleteSuite, match=r"different settings \{'bert': \['enc@L6', 'other'\]\}"):
        tagged({**metrics, "b": {"bert[other]_f1": 0.8}})
    with pytest.raises(IncompleteSuite, match="a has several bert f1 metrics"):
        tagged({**metrics, "a": {**metrics["a"], "bert[two]_f1": 0.1}})


def test_several_groups_report_the_complete_ones():
    both = SuiteAggregate((OutputGroup("one", "a", (Output("x", Metric("a", "v")),)),
                           OutputGroup("two", "b", (Output("y", Metric("b", "v")),))))
    assert both({"a": {"v": 1.0}, "b": {"v": 2.0}}) == {"x": 1.0, "y": 2.0}
    with pytest.raises(PartialSuite) as partial:
        both({"a": {"v": 1.0}})
    assert partial.value.partial == {"x": 1.0} and str(partial.value) == "two needs b; missing: b"
    with pytest.raises(IncompleteSuite) as none:
        both({})
    assert not isinstance(none.value, PartialSuite)
    assert str(none.value) == "one needs a; missing: a; two needs b; missing: b"
    assert both.tasks() == ("a", "b")


# ---- JSON ------------------------------------------------------------------------------------

def test_every_shipped_declaration_round_trips_through_json():
    declared = {name: s.aggregate for name, s in suites().items() if s.aggregate is not None}
    assert {"mmlu_medical", "cblue", "clue", "clue-level1", "clue-level2"} <= set(declared)
    for name, aggregate in declared.items():
        assert isinstance(aggregate, SuiteAggregate), name
        assert SuiteAggregate.from_json(json.loads(json.dumps(aggregate.to_json()))) == aggregate
        record = SuiteRecord(name, suites()[name].tasks, "d", True, aggregate)
        assert SuiteRecord.from_json(name, json.loads(json.dumps(record.to_json()))) == record


def test_the_json_form_is_readable_and_checked():
    weighted = WeightedMean((Metric("a", "acc"),), (Metric("a", "answered", otherwise=("n",), default=0.0),), 0.0)
    assert weighted.to_json() == {
        "op": "weighted_mean", "of": [{"op": "metric", "task": "a", "key": "acc"}],
        "weights": [{"op": "metric", "task": "a", "key": "answered", "otherwise": ["n"], "default": 0.0}],
        "if_no_weight": 0.0}
    for bad in ({}, {"groups": []}, {"groups": [{"name": "g", "outputs": [{"name": "x", "value": {"op": "median"}}]}]},
                {"groups": [{"name": "g", "outputs": [{"name": "x", "value": {"op": "mean", "of": []}}]}]}, []):
        with pytest.raises(MalformedAggregate):
            SuiteAggregate.from_json(bad)
    with pytest.raises(MalformedAggregate, match="one weight per value"):
        WeightedMean((Metric("a", "acc"),), ())
    # a run written before declarations: the suite has an aggregate but no formula
    old = SuiteRecord.from_json("s", {"tasks": ["a"], "description": "", "has_aggregate": True})
    assert old.has_aggregate and old.aggregate is None


def test_registering_a_python_aggregate_is_refused():
    from evalpipe.tasks.base import SuiteSpec
    from evalpipe.tasks.registry import register_suite

    with pytest.raises(TypeError, match="must be a SuiteAggregate declaration"):
        register_suite(SuiteSpec("python-suite", ("a",), aggregate=lambda m: {}))  # type: ignore[arg-type]


# ---- the shipped suites equal the Python functions they replaced, bit for bit ----------------
# The functions below are the aggregates as they were before the declarations (evalpipe 2026-12-02,
# tasks/mcqa/suites.py, tasks/cblue/suite.py, tasks/clue/suites.py), kept here as the reference.

MMLU = ("mmlu_anatomy", "mmlu_clinical_knowledge", "mmlu_college_biology", "mmlu_college_medicine",
        "mmlu_medical_genetics", "mmlu_professional_medicine")
CBLUE = {"cmeee": "f1", "cmeie": "f1", "chip_cdn": "f1", "chip_ctc": "macro_f1", "chip_sts": "macro_f1",
         "kuake_qic": "accuracy", "kuake_qtr": "accuracy", "kuake_qqr": "accuracy"}


def old_mmlu(metrics):
    accuracies = [float(metrics[t]["accuracy"]) for t in MMLU]
    sizes = [float(metrics[t].get("answered", metrics[t].get("n", 0))) for t in MMLU]
    total = sum(sizes)
    return {"accuracy_macro": sum(accuracies) / len(accuracies),
            "accuracy_micro": sum(a * n for a, n in zip(accuracies, sizes)) / total if total else 0.0}


def old_cblue(metrics):
    scores = {t: float(metrics[t][m]) for t, m in CBLUE.items()}
    return {"average": sum(scores.values()) / len(scores), **scores}


def _tagged(values, family, part):
    (key,) = [k for k in values if k.startswith(f"{family}[") and k.endswith(f"]_{part}")]
    return float(values[key]), key[len(family) + 1:-len(part) - 2]


def old_level(number, metrics):
    def sizes(t):
        return float(metrics[t].get("answered", metrics[t].get("n")))

    out, tags = {}, {}

    def bert(t):
        value, tags["bertscore"] = _tagged(metrics[t], "bertscore", "f1")
        return value

    def umls(t):
        value, tags["umls"] = _tagged(metrics[t], "umls", "f1")
        return value

    if number == 1:
        datasets = {"MedNLI": [float(metrics["clue_mednli"]["accuracy"])],
                    "problem summaries": [bert("clue_problem_summaries"), umls("clue_problem_summaries")],
                    "MeQSum": [bert("clue_meqsum")]}
    else:
        out["longhealth_task2and3_accuracy"] = pooled_accuracy(
            [(float(metrics[t]["accuracy"]), sizes(t)) for t in ("clue_longhealth_task2", "clue_longhealth_task3")])
        datasets = {"LongHealth": [float(metrics["clue_longhealth_task1"]["accuracy"]),
                                   out["longhealth_task2and3_accuracy"]],
                    "MeDiSumQA": [bert("clue_medisumqa"), umls("clue_medisumqa")],
                    "MeDiSumCode": [float(metrics["clue_medisumcode"][k]) for k in ("exact_f1", "category_f1",
                                                                                     "valid_ratio")]}
    label = ",".join(f"{family}={tag}" for family, tag in sorted(tags.items()))
    out[f"level{number}_score[{label}]"] = level_score(datasets)
    return out


def old_clue(metrics):
    return {**old_level(1, metrics), **old_level(2, metrics)}


def _golden(run: str, name: str = "metrics.json") -> Mapping[str, Mapping[str, float]]:
    return json.loads((GOLDEN / run / name).read_text(encoding="utf-8"))


def _task_metrics(metrics):
    return {t: {k: v for k, v in m.items() if v is not None} for t, m in metrics.items()}


@pytest.mark.parametrize(("run", "name"), [("clue", "metrics.json"), ("clue", "metrics.clue.json"),
                                           ("cblue", "metrics.json"), ("mcqa", "metrics.json")])
def test_the_declarations_give_the_golden_suite_values_bit_for_bit(run, name):
    golden = _golden(run, name)
    known = suites()
    found = [s for s in golden if s in known and known[s].aggregate is not None]
    assert found
    by_task = _task_metrics({t: m for t, m in golden.items() if t not in known})
    for suite in found:
        assert known[suite].aggregate(by_task) == golden[suite], suite
        assert list(known[suite].aggregate(by_task)) == list(golden[suite])  # same key order: same JSON bytes


def _random_metrics(rng: random.Random):
    def value():
        return rng.choice([rng.random(), rng.randint(0, 7) / 7, 1.0, 0.0, rng.random() / 3])

    metrics = {t: {"accuracy": value(), "n": rng.randint(1, 500), **({"answered": rng.randint(0, 400)}
                                                                     if rng.random() < 0.7 else {})} for t in MMLU}
    metrics.update({t: {m: value(), "n": rng.randint(1, 50)} for t, m in CBLUE.items()})
    enc, ext = f"enc{rng.randint(0, 3)}@L{rng.randint(1, 12)}", rng.choice(["scispacy:en_core_sci_sm", "fake"])
    for t in ("clue_problem_summaries", "clue_meqsum", "clue_medisumqa"):
        metrics[t] = {f"bertscore[{enc}]_f1": value(), f"bertscore[{enc}]_precision": value(), "rougeL": value()}
        if t != "clue_meqsum":
            metrics[t][f"umls[{ext}]_f1"] = value()
    for t in ("clue_mednli", "clue_longhealth_task1", "clue_longhealth_task2", "clue_longhealth_task3"):
        metrics[t] = {"accuracy": value(), "n": rng.randint(1, 300), "answered": rng.randint(1, 300)}
    metrics["clue_medisumcode"] = {"exact_f1": value(), "category_f1": value(), "valid_ratio": value()}
    return metrics


def test_the_declarations_equal_the_old_functions_on_many_metric_sets():
    known = suites()
    rng = random.Random(24)
    for _ in range(500):
        metrics = _random_metrics(rng)
        assert known["mmlu_medical"].aggregate(metrics) == old_mmlu(metrics)
        assert known["cblue"].aggregate(metrics) == old_cblue(metrics)
        assert known["clue-level1"].aggregate(metrics) == old_level(1, metrics)
        assert known["clue-level2"].aggregate(metrics) == old_level(2, metrics)
        assert known["clue"].aggregate(metrics) == old_clue(metrics)
        assert list(known["clue"].aggregate(metrics)) == list(old_clue(metrics))


def test_the_level_declarations_reproduce_the_paper_rows_exactly():
    # the paper's Mixtral rows (percent) as task metrics; the declared level equals metrics.aggregate's
    # level_score on the same datasets bit for bit
    metrics = {"clue_mednli": {"accuracy": 76.48},
               "clue_problem_summaries": {"bertscore[e]_f1": 68.56, "umls[u]_f1": 19.51},
               "clue_meqsum": {"bertscore[e]_f1": 72.80},
               "clue_longhealth_task1": {"accuracy": 43.82, "n": 1},
               "clue_longhealth_task2": {"accuracy": 31.23, "n": 1}, "clue_longhealth_task3": {"accuracy": 31.23, "n": 1},
               "clue_medisumqa": {"bertscore[e]_f1": 69.57, "umls[u]_f1": 24.47},
               "clue_medisumcode": {"exact_f1": 10.49, "category_f1": 28.99, "valid_ratio": 82.87}}
    out = suites()["clue"].aggregate(metrics)
    assert out["level1_score[bertscore=e,umls=u]"] == level_score({"a": [76.48], "b": [68.56, 19.51], "c": [72.80]})
    assert round(out["level1_score[bertscore=e,umls=u]"], 2) == 64.44
    assert out["level2_score[bertscore=e,umls=u]"] == level_score(
        {"a": [43.82, pooled_accuracy([(31.23, 1.0), (31.23, 1.0)])], "b": [69.57, 24.47], "c": [10.49, 28.99, 82.87]})

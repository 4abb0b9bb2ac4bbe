"""CBLUE tasks end to end (execute + ScriptedBackend), hand-scored answers, and the suite aggregate."""

from __future__ import annotations

import asyncio
import json

import pytest

from evalpipe.config import RunConfig
from evalpipe.records import Completion
from evalpipe.pipeline.execute import execute
from evalpipe.scoring import score_task
from evalpipe.tasks.base import IncompleteSuite, LoadOptions
from evalpipe.tasks.cblue.reference import BEST_BASELINE, HUMAN, HUMAN_AVERAGE, TASK_ORDER
from evalpipe.tasks.cblue.suite import aggregate
from evalpipe.tasks.registry import get_task, suites
from tests.cblue import synthetic as syn
from tests.support.scripted_backend import ScriptedBackend, last_user_text

#: the line after which each task's prompt names the evaluated item (first field of the example)
MARKERS = ("待标注文本：\n", "文本：\n", "诊断原词：", "筛选标准：", "问句1：", "搜索词1：", "搜索词：")


@pytest.fixture(scope="module")
def cblue(tmp_path_factory):
    return syn.write_cblue(tmp_path_factory.mktemp("cblue") / "CBLUEDatasets")


def first_field(prompt_text: str) -> str:
    for marker in MARKERS:
        if marker in prompt_text:
            return prompt_text.rsplit(marker, 1)[1].lstrip("\n").split("\n", 1)[0]
    raise AssertionError(f"no marker in prompt: {prompt_text[-200:]}")


def answers_by_text(cblue, tasks, transform=lambda task, answer: answer):
    """First field of every dev example → the answer a perfect model gives (its shot target)."""
    out = {}
    for task in tasks:
        spec = get_task(task)
        for ex in spec.load(LoadOptions(data_dir=cblue)).examples:
            out[next(iter(ex.inputs.values()))] = transform(task, spec.shot_target(ex))
    return out


def run(cblue, tmp_path, tasks, responder, **kw):
    config = RunConfig(tasks=tuple(tasks), model="m", base_url="http://127.0.0.1:1/v1", data_dir=str(cblue), **kw)
    backend = ScriptedBackend(responder)
    return asyncio.run(execute(config, lambda _: backend, tmp_path)), backend


def test_perfect_answers_score_one_on_all_eight_and_the_suite_averages_them(cblue, tmp_path):
    perfect = answers_by_text(cblue, TASK_ORDER)
    outcome, backend = run(cblue, tmp_path, TASK_ORDER, lambda p: perfect[first_field(last_user_text(p))],
                           suites=("cblue",))
    for task in TASK_ORDER:
        m = outcome.metrics[task]
        assert m["parse_failure_rate"] == 0.0 and m["errors"] == 0, task
        headline = {"cmeee": "f1", "cmeie": "f1", "chip_cdn": "f1", "chip_ctc": "macro_f1",
                    "chip_sts": "macro_f1"}.get(task, "accuracy")
        assert m[headline] == 1.0, task
    assert outcome.aggregates["cblue"]["average"] == 1.0
    metrics = json.loads((outcome.run_dir.path / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["cblue"]["average"] == 1.0 and metrics["kuake_qqr"]["accuracy"] == 1.0
    config = json.loads((outcome.run_dir.path / "config.json").read_text(encoding="utf-8"))
    assert config["tasks"]["cmeie"]["shots"] == ["train-0", "train-1", "train-2"]
    assert any(path.endswith("53_schemas.json") for path in config["tasks"]["cmeie"]["data_files"])
    assert len(backend.calls) == 3 + 2 + 2 + 3 + 4 + 2 + 2 + 2


def test_a_partial_run_has_no_cblue_average(cblue, tmp_path):
    perfect = answers_by_text(cblue, ("kuake_qic",))
    outcome, _ = run(cblue, tmp_path, ("kuake_qic",), lambda p: perfect[first_field(last_user_text(p))],
                     suites=("cblue",))
    assert "cblue" not in outcome.aggregates
    assert "missing: cmeee, cmeie" in outcome.incomplete["cblue"]


def test_sloppy_label_answers_still_parse_and_invented_labels_fail(cblue, tmp_path):
    sloppy = {"1": "是的。", "0": "“否”"}
    answers = answers_by_text(cblue, ("chip_sts",), lambda task, a: sloppy.get({"是": "1", "否": "0"}[a]))
    texts = list(answers)
    answers[texts[3]] = "不确定"  # invented label on the 4th (gold 0)
    outcome, _ = run(cblue, tmp_path, ("chip_sts",), lambda p: answers[first_field(last_user_text(p))])
    m = outcome.metrics["chip_sts"]
    # gold 1 0 1 0, pred 1 0 1 None → accuracy 3/4; class 1: P 1 R 1 F 1; class 0: tp1 fn1 → F 2/3
    assert m["accuracy"] == 0.75 and m["macro_f1"] == pytest.approx((1 + 2 / 3) / 2)
    assert m["parse_failure_rate"] == 0.25
    assert outcome.tasks[0].summary.diagnostics["invalid_label"] == 1


def _score(task, examples, answers):
    spec = get_task(task)
    return score_task(spec, examples, ["{}"] * len(examples), [Completion(text=a) for a in answers], None)


def test_cmeee_strict_micro_f1_counts_inner_and_outer_entities(cblue):
    examples = get_task("cmeee").load(LoadOptions(data_dir=cblue)).materialized().examples[:2]
    answers = [
        # outer sym right, inner bod missed, dis right → tp 2, fn 1
        "<response>患者<sym>腹部疼痛</sym>三天，诊断为<dis>急性阑尾炎</dis>。</response>",
        # dru right, ite typed as pro → tp 1, fp 1, fn 1
        "<response>给予<dru>阿莫西林</dru>口服，复查<pro>血常规</pro>。</response>",
    ]
    m = _score("cmeee", examples, answers).metrics
    # tp 3, fp 1, fn 2 → P 3/4, R 3/5, F1 = 2·0.75·0.6/1.35 = 2/3
    assert (m["tp"], m["fp"], m["fn"]) == (3, 1, 2)
    assert m["precision"] == 0.75 and m["recall"] == pytest.approx(0.6) and m["f1"] == pytest.approx(2 / 3)
    assert m["f1_dru"] == 1.0 and m["f1_bod"] == 0.0


def test_cmeie_and_cdn_compare_match_keys(cblue):
    examples = get_task("cmeie").load(LoadOptions(data_dir=cblue)).examples
    answers = ["糖尿病 ｜ 药物治疗 ｜ 二甲双胍\n糖尿病 | 并发症 | 肾病", "无"]
    m = _score("cmeie", examples, answers).metrics
    # tp 1 (width of ｜ irrelevant), fp 1, fn 1 + 1 → P 1/2, R 1/3, F1 0.4
    assert (m["tp"], m["fp"], m["fn"]) == (1, 1, 2) and m["f1"] == pytest.approx(0.4)
    cdn = get_task("chip_cdn").load(LoadOptions(data_dir=cblue)).examples
    m = _score("chip_cdn", cdn, ["高血压", "２型糖尿病##糖尿病"]).metrics
    # sample 1 tp 1; sample 2 tp 1 (２型 ≡ 2型), fp 1 (糖尿病), fn 1 → tp 2, fp 1, fn 1
    assert (m["tp"], m["fp"], m["fn"]) == (2, 1, 1) and m["f1"] == pytest.approx(2 / 3)
    assert "candidate_recall" not in m


def test_cdn_candidate_recall_and_outside_candidates(cblue, tmp_path):
    table = syn.write_term_table(tmp_path / "terms.xlsx")
    examples = get_task("chip_cdn").load(LoadOptions(data_dir=cblue, paths={"cdn_terms": table})).examples
    outcome = _score("chip_cdn", examples, ["高血压##原发性高血压", "2型糖尿病##糖尿病肾病"])
    assert outcome.metrics["candidate_recall"] == 1.0
    assert outcome.summary.diagnostics["outside_candidates"] == 1


def test_aggregate_needs_all_eight_headline_metrics():
    full = {t: {"f1": 0.5, "macro_f1": 0.5, "accuracy": 0.5} for t in TASK_ORDER}
    full["kuake_qqr"] = {"accuracy": 0.9}
    result = aggregate(full)
    assert result["average"] == pytest.approx((0.5 * 7 + 0.9) / 8) and result["kuake_qqr"] == 0.9
    del full["cmeie"]
    with pytest.raises(IncompleteSuite, match="missing: cmeie"):
        aggregate(full)
    assert suites()["cblue"].tasks == TASK_ORDER


def test_reference_rows_are_the_papers():
    assert list(HUMAN.values()) == [67.0, 66.0, 65.0, 78.0, 93.0, 88.0, 71.0, 89.0]
    assert round(sum(HUMAN.values()) / 8, 1) == HUMAN_AVERAGE
    assert round(sum(BEST_BASELINE.values()) / 8, 1) == 70.0

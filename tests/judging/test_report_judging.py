"""The report's Judges section: Spearman length bias against scipy, the self-preference flag and its
difference-in-differences estimate with two runs, and the judge metrics' intervals."""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from evalpipe.config import RunConfig
from evalpipe.judging.panel import Judge, model_key
from evalpipe.judging.run import JudgeOptions, execute_judging
from evalpipe.report.bootstrap import bootstrap_task
from evalpipe.report.build import build_document
from evalpipe.report.judging import judged_tasks, judging_section, spearman, spearman_interval
from evalpipe.report.leaderboard import build_leaderboard
from evalpipe.report.runs import load_report_runs
from evalpipe.pipeline.execute import execute
from evalpipe.tasks.registry import suites
from tests.support.scripted_backend import ScriptedBackend, last_user_text

SELF = "judge-a"  # evaluated, and a judge
OTHER = "other-model"
PANEL = [Judge(SELF, "http://127.0.0.1:9/v1"), Judge("judge-b", "http://127.0.0.1:9/v1")]


def evaluated_answer(model):
    def respond(prompt):
        i = int(last_user_text(prompt).split("Q")[1][:2])
        style = "MINE" if model == SELF else "THEIRS"
        return f"ANSWER-{i:02d} {style} " + "多喝水。" * (1 + i % 4)
    return respond


def judge_reply(judge, prompt):
    """judge-a rates its own style one point higher (3 → 4); judge-b rates both styles 3, except that
    longer answers get one more point from both (so length and rating correlate)."""
    text = prompt.messages[-1].content
    answer = text.split("ANSWER TO GRADE--------------\n")[1].split("\n--------------END")[0]
    base = 3 + (1 if judge == SELF and "MINE" in answer else 0)
    longer = 1 if answer.count("。") >= 3 else 0
    return json.dumps({"accuracy": base + longer, "completeness": 3 + longer, "clarity": 3})


@pytest.fixture(scope="module")
def two_judged_runs(questions, tmp_path_factory):
    root = tmp_path_factory.mktemp("two_runs")
    paths = []
    for model in (SELF, OTHER):
        config = RunConfig(tasks=("huatuo_generation",), model=model, base_url="http://127.0.0.1:1/v1",
                           data={"huatuo_generation": str(questions)}, run_name=model)
        outcome = asyncio.run(execute(config, lambda c, m=model: ScriptedBackend(evaluated_answer(m), model=m), root))
        asyncio.run(execute_judging(outcome.run_dir.path, PANEL, JudgeOptions(), backend_factory=lambda j, o: ScriptedBackend(
            lambda p, name=j.model: judge_reply(name, p), model=j.model)))
        paths.append(outcome.run_dir.path)
    return paths


def document(paths, resamples=200):
    runs = load_report_runs(paths)
    boots = {r.label: {t: bootstrap_task(s, resamples=resamples, seed=0) for t, s in r.resample.items()} for r in runs}
    board = build_leaderboard(runs, boots, suites(), {}, 0.95)
    return runs, boots, build_document(runs, boots, board, resamples=resamples, seed=0)


def table(doc, table_id):
    (found,) = [t for t in doc.tables() if t.id == table_id]
    return found


def test_self_preference_is_flagged_and_estimated_against_the_other_run(two_judged_runs):
    _, _, doc = document(two_judged_runs)
    rows = table(doc, "judge-self-preference").rows
    by_criterion = {row[5].text: row for row in rows}
    assert {row[0].text for row in rows} == {SELF} and {row[3].text for row in rows} == {"model name"}
    # own answer 4 vs other 3 by the judge, 3 vs 3 by judge-b: d = 1 on every shared sample
    assert by_criterion["accuracy"][7].text == "1.000" and by_criterion["accuracy"][7].sub == "[1.000, 1.000]"
    assert by_criterion["accuracy"][6].text == "20"
    assert by_criterion["clarity"][7].text == "0.000"


def test_length_bias_is_spearman_with_a_bootstrap_interval(two_judged_runs):
    runs, _, doc = document(two_judged_runs)
    judged = judged_tasks(runs)
    lengths, ratings = judged[0].ratings("judge-b", "accuracy")
    assert len(lengths) == 20
    expected = spearmanr(lengths, ratings).statistic
    assert math.isclose(float(spearman(lengths, ratings)[0]), expected, rel_tol=1e-12)
    rho, interval = spearman_interval(lengths, ratings, resamples=200, seed=0, stream="s")
    assert math.isclose(rho, expected) and interval[0] <= rho <= interval[1]
    rows = table(doc, "judge-length-bias").rows
    row = [r for r in rows if r[0].text == runs[0].label and r[2].text == "judge-b" and r[3].text == "accuracy"][0]
    assert row[5].text == f"{expected:.3f}" and row[5].sub.startswith("[")
    clarity = [r for r in rows if r[2].text == "judge-b" and r[3].text == "clarity"][0]
    assert clarity[5].text == "–"  # a constant rating has no rank correlation


def test_random_spearman_rows_match_scipy():
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 50, size=(6, 30)), rng.integers(1, 6, size=(6, 30))
    for row, value in enumerate(spearman(x, y)):
        assert math.isclose(value, spearmanr(x[row], y[row]).statistic, rel_tol=1e-12)


def test_judge_metrics_have_intervals_and_ratings_table(two_judged_runs):
    runs, boots, doc = document(two_judged_runs)
    boot = boots[runs[1].label]["huatuo_generation"]
    for metric in ("judge_accuracy", "judge[judge-b]_completeness", "judge_failures"):
        assert boot.intervals[metric].available, metric
    assert boot.intervals["judge_n"].reason.startswith("the number of samples with a usable rating")
    assert boot.intervals["judge_alpha_accuracy"].method == "krippendorff_alpha"
    # every clarity rating is 3: alpha is undefined, so it is absent with the reason, not a number
    assert "judge_alpha_clarity" not in runs[1].metrics["huatuo_generation"]
    assert "same value" in runs[1].task_summary("huatuo_generation").not_computed["judge_alpha_clarity"]
    ratings = table(doc, "judge-ratings")
    assert ratings.columns[3:5] == ("jury mean", "Krippendorff's α (ordinal)")
    panel = table(doc, "judge-panels")
    assert "judge/free_text.j2" in panel.rows[0][3].text


def test_no_judges_no_section(answered_run):
    runs = load_report_runs([answered_run])
    assert judging_section(runs, {}, resamples=10, seed=0) is None


def test_model_names_match_across_paths_and_suffixes():
    assert model_key("/models/Llama-3.1-8B-Instruct") == model_key("meta-llama/llama-3.1-8b-instruct")
    assert model_key("/w/SmolLM2-135M.Q4_1.gguf") == model_key("smollm2-135m.q4_1-0123456789ab")
    assert model_key("gpt-4o") != model_key("gpt-4o-mini")


def test_jury_versus_overlap_metrics_and_the_disagreements_to_audit(run_copy, server):
    from tests.judging.test_judge_cli import judge_cli

    assert judge_cli(run_copy, server).returncode == 0
    runs, _, doc = document([run_copy])
    versus = table(doc, "judge-vs-metrics")
    (jt,) = judged_tasks(runs)
    row = [r for r in versus.rows if r[2].text == "accuracy" and r[3].text == "rouge_l"][0]
    ids = sorted(jt.samples)
    jury = [np.mean([r["accuracy"] for r in jt.samples[i][1].values()]) for i in ids]
    rouge = [jt.records[i]["scores"]["rouge_l"] for i in ids]
    assert row[5].text == f"{spearmanr(rouge, jury).statistic:.3f}"
    (examples,) = [b for s in doc.sections for b in s.blocks if getattr(b, "id", "").startswith("judge-disagreements")]
    assert len(examples.entries) == 3  # the report's examples per list (build_document default)
    label, lines = examples.entries[0]
    assert "(range" in label and any(line.startswith("judge-a: accuracy") for line in lines)


def test_judged_runs_have_the_extract_of_their_judged_samples(two_judged_runs, monkeypatch):
    """The judges' merge rewrites samples.jsonl with each sample's judge field; it writes the report's
    extract of it as well (evalpipe.samples_file), and a report read from it is the one read from the
    samples (judge ratings in the sample browser included)."""
    from evalpipe.report import extract
    from evalpipe.results import RunDir
    from tests.report.test_read_beside import _page, _same_runs

    for run in two_judged_runs:
        index = json.loads((run / "samples.extract" / "index.json").read_text(encoding="utf-8"))
        assert index["size"] == (run / "samples.jsonl").stat().st_size
    with monkeypatch.context() as m:
        m.setenv(extract.ENV, "0")
        alone = load_report_runs(two_judged_runs)
    with monkeypatch.context() as m:
        m.setattr(RunDir, "iter_samples", lambda *a, **k: (_ for _ in ()).throw(AssertionError("read")))
        from_extract = load_report_runs(two_judged_runs)
    _same_runs(from_extract, alone)
    page = _page(from_extract)
    assert '"judge":{' in page and page == _page(alone)

"""`evalpipe judge` end to end: two scripted judges on the loopback fake server rate 20 answers.

Every aggregate is checked against an independent computation from the scripted ratings: means by
plain Python, Krippendorff's alpha with the ``krippendorff`` package on the reliability matrix. The
evaluated model gets no request while judging, the judges never see its name, a second `judge` asks
nothing again, `score` keeps the judge metrics, and the API key is never written.
"""

from __future__ import annotations

import json
import math
import statistics

import krippendorff
import numpy as np
import pytest

from tests.judging import scripted
from tests.judging.conftest import evalpipe, model_requests

SECRET = "sk-judge-4b3a29f8e7d6c5b4a392"


def judge_cli(run, server, *extra, env=None):
    return evalpipe("judge", str(run), "--judge", f"judge-a={server.url}", "--judge", f"judge-b={server.url}",
                    "--judge-api-key-env", "JUDGE_KEY", *extra, env={"JUDGE_KEY": SECRET, **(env or {})})


def expected_metrics() -> dict[str, float]:
    """The judge metrics computed independently from the scripted table (see tests/judging/scripted.py)."""
    usable = scripted.usable_ratings()
    out: dict[str, float] = {}
    for c in scripted.CRITERIA:
        per_sample = [statistics.mean([usable[j][i][c] for j in scripted.JUDGES if i in usable[j]])
                      for i in range(scripted.N)]
        out[f"judge_{c}"] = sum(per_sample) / len(per_sample)
        matrix = np.array([[usable[j][i][c] if i in usable[j] else np.nan for i in range(scripted.N)]
                           for j in scripted.JUDGES], dtype=float)
        out[f"judge_alpha_{c}"] = krippendorff.alpha(reliability_data=matrix, value_domain=[1, 2, 3, 4, 5],
                                                     level_of_measurement="ordinal")
        for j in scripted.JUDGES:
            out[f"judge[{j}]_{c}"] = statistics.mean(r[c] for r in usable[j].values())
    out["judge_failures"] = 1
    out["judge[judge-a]_failures"] = 0
    out["judge[judge-b]_failures"] = 1
    out["judge_n"] = scripted.N
    return out


def test_two_judges_rate_twenty_answers_and_every_aggregate_is_independently_right(run_copy, server):
    before = model_requests(server, scripted.EVALUATED)
    judge_requests = len(server.requests)
    result = judge_cli(run_copy, server)
    assert result.returncode == 0, result.stderr
    assert model_requests(server, scripted.EVALUATED) == before, "the evaluated model was asked while judging"

    sent = server.requests[judge_requests:]
    # 20 answers x 2 judges, plus judge-b's retries of samples 3 and 5
    assert len(sent) == 2 * scripted.N + 2
    for request in sent:
        assert request.body["model"] in scripted.JUDGES
        assert scripted.EVALUATED not in json.dumps(request.body), "a judge saw the evaluated model's name"

    metrics = json.loads((run_copy / "metrics.json").read_text())["huatuo_generation"]
    for name, value in expected_metrics().items():
        assert math.isclose(metrics[name], value, rel_tol=1e-12, abs_tol=1e-12), (name, metrics[name], value)
    assert "bleu4" in metrics and "rouge_l" in metrics  # the task's own metrics are still there

    records = [json.loads(line) for line in (run_copy / "samples.jsonl").read_text().splitlines()]
    by_id = {r["id"]: r for r in records}
    fifth = by_id["test-5"]["judge"]
    assert "judge-b" not in fifth["ratings"] and "outside 1–5" in fifth["failures"]["judge-b"]
    assert fifth["ratings"]["judge-a"] == scripted.RATINGS["judge-a"][5]
    assert by_id["test-3"]["judge"]["retried"] == ["judge-b"]
    assert by_id["test-3"]["judge"]["ratings"]["judge-b"] == scripted.RATINGS["judge-b"][3]
    assert by_id["test-0"]["judge"]["rationales"]["judge-a"] == "sample 0 is fine"

    summary = json.loads((run_copy / "summary.json").read_text())["tasks"]["huatuo_generation"]
    assert summary["aggregations"]["judge_alpha_accuracy"]["kind"] == "krippendorff_alpha"
    assert summary["aggregations"]["judge_accuracy"]["kind"] == "rating_mean"
    assert "judge_n" in summary["no_interval"]
    assert summary["notes"]["judging"]["by_judge"]["judge-b"] == {"rated": 19, "unusable": 1, "missing": 0,
                                                                  "retried": 2}
    assert summary["notes"]["judging"]["usage"]["judge-b"]["replies"] == scripted.N + 2
    config = json.loads((run_copy / "config.json").read_text())
    assert [j["model"] for j in config["judging"]["judges"]] == list(scripted.JUDGES)
    assert config["judging"]["tasks"]["huatuo_generation"]["rubric"] == "judge/free_text.j2"
    assert "judge_accuracy" in result.stdout

    for path in run_copy.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in result.stdout + result.stderr


def test_judging_again_asks_nothing_and_score_keeps_the_judge_metrics(run_copy, server):
    assert judge_cli(run_copy, server).returncode == 0
    judged = json.loads((run_copy / "metrics.json").read_text())["huatuo_generation"]
    count = len(server.requests)
    again = judge_cli(run_copy, server)
    assert again.returncode == 0, again.stderr
    assert len(server.requests) == count, "a stored judgement was asked again"
    assert "sent 0" in again.stdout

    rescored = evalpipe("score", str(run_copy))
    assert rescored.returncode == 0, rescored.stderr
    after = json.loads((run_copy / "metrics.json").read_text())["huatuo_generation"]
    assert after == judged
    assert "judge_alpha_clarity" in rescored.stdout
    records = [json.loads(line) for line in (run_copy / "samples.jsonl").read_text().splitlines()]
    assert all("judge" in r for r in records)


def test_the_report_shows_judges_agreement_and_bias_checks(run_copy, server, tmp_path):
    assert judge_cli(run_copy, server).returncode == 0
    result = evalpipe("report", str(run_copy), "--out", str(tmp_path / "report"), "--resamples", "200")
    assert result.returncode == 0, result.stderr
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "## Judges" in markdown
    assert "Spearman" in markdown and "judge-a" in markdown and "krippendorff" in markdown.lower()
    html = (tmp_path / "report" / "report.html").read_text()
    assert 'id="judge-ratings"' in html and 'id="judge-length-bias"' in html


def test_run_with_inline_judges(server, questions, tmp_path):
    results = tmp_path / "results"
    result = evalpipe("run", "--task", "huatuo_generation", "--data", f"huatuo_generation={questions}",
                      "--base-url", server.url, "--model", scripted.EVALUATED, "--results-dir", str(results),
                      "--limit", "6", "--judge", f"judge-a={server.url}", "--judge", f"judge-b={server.url}",
                      "--judge-rubric", "huatuo_generation=judge/free_text.j2")
    assert result.returncode == 0, result.stderr
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    metrics = json.loads((run / "metrics.json").read_text())["huatuo_generation"]
    assert metrics["judge_n"] == 6 and metrics["judge_failures"] == 1
    expected = statistics.mean(scripted.RATINGS["judge-a"][i]["accuracy"] for i in range(6))
    assert math.isclose(metrics["judge[judge-a]_accuracy"], expected)
    judging = json.loads((run / "config.json").read_text())["judging"]
    assert judging["tasks"]["huatuo_generation"]["rubric"] == "judge/free_text.j2"


@pytest.mark.parametrize("url", ["http://93.184.216.34/v1", "https://judge.example.com/v1"])
def test_an_external_judge_of_credentialed_answers_is_refused_before_any_connection(medisumqa_copy, url):
    before = (medisumqa_copy / "metrics.json").read_bytes()
    result = evalpipe("judge", str(medisumqa_copy), "--judge", f"big-judge={url}")
    assert result.returncode == 1
    assert "--allow-external-endpoint" in result.stderr and "credentialed" in result.stderr
    assert "clue_medisumqa" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert (medisumqa_copy / "metrics.json").read_bytes() == before
    assert "judging" not in json.loads((medisumqa_copy / "config.json").read_text())


def test_run_refuses_an_external_judge_of_credentialed_answers_before_evaluating(server, tmp_path):
    results = tmp_path / "results"
    before = len(server.requests)
    result = evalpipe("run", "--task", "clue_medisumqa", "--data-dir", str(scripted_fixtures()),
                      "--base-url", server.url, "--model", scripted.EVALUATED, "--results-dir", str(results),
                      "--judge", "big-judge=http://93.184.216.34/v1")
    assert result.returncode == 1 and "--allow-external-endpoint" in result.stderr
    assert len(server.requests) == before
    assert not results.exists() or not any(results.iterdir())


def scripted_fixtures():
    from tests.judging.conftest import CLUE_FIXTURES

    return CLUE_FIXTURES

"""Judges against human ratings (`judge --human-ratings FILE`): alpha and bias equal the `krippendorff`
package and plain arithmetic on the same ratings; bad files are one clear error before any judge
request; the ratings are stored in the run and survive `score` and a later `judge` without the file."""

from __future__ import annotations

import json
import math
import statistics

import krippendorff
import numpy as np
import pytest

from tests.judging import scripted
from tests.judging.conftest import evalpipe
from tests.judging.test_judge_cli import SECRET, judge_cli

HUMANS = ("dr-h1", "dr-h2")
#: the samples the humans rated (indices), and the criteria
RATED = tuple(range(12))
CRITERIA = ("accuracy", "clarity")


def human_rating(rater: str, i: int, criterion: str) -> int:
    """A fixed table: close to judge-a's ratings, dr-h2 a little harsher on clarity, some disagreement."""
    base = scripted.RATINGS["judge-a"][i][criterion]
    shift = {("dr-h1", 0): 0, ("dr-h1", 1): 1, ("dr-h1", 2): 0, ("dr-h2", 0): -1, ("dr-h2", 1): 0, ("dr-h2", 2): 0}
    value = base + shift[(rater, i % 3)] - (rater == "dr-h2" and criterion == "clarity")
    return min(5, max(1, value))


def write_ratings(path, rows=None):
    if rows is None:
        rows = [(f"test-{i}", h, c, str(human_rating(h, i, c))) for i in RATED for h in HUMANS for c in CRITERIA]
    path.write_text("sample_id,rater,criterion,rating\n" + "".join(",".join(r) + "\n" for r in rows), encoding="utf-8")
    return path


def expected() -> dict[str, float]:
    usable = scripted.usable_ratings()
    out = {}
    for c in CRITERIA:
        humans = [[human_rating(h, i, c) for i in RATED] for h in HUMANS]
        judges = {j: [usable[j].get(i, {}).get(c, np.nan) for i in RATED] for j in scripted.JUDGES}

        def alpha(rows):
            return krippendorff.alpha(reliability_data=np.array(rows, dtype=float), value_domain=[1, 2, 3, 4, 5],
                                      level_of_measurement="ordinal")

        out[f"human_alpha_{c}"] = alpha(humans)
        out[f"judge_human_alpha_{c}"] = alpha([*humans, *judges.values()])
        for j in scripted.JUDGES:
            out[f"judge[{j}]_human_alpha_{c}"] = alpha([*humans, judges[j]])
        diffs = []
        for k, i in enumerate(RATED):
            mine = [usable[j][i][c] for j in scripted.JUDGES if i in usable[j]]
            diffs.append(statistics.mean(mine) - statistics.mean(h[k] for h in humans))
        out[f"judge_human_bias_{c}"] = statistics.mean(diffs)
        for j in scripted.JUDGES:
            own = [usable[j][i][c] - statistics.mean(h[k] for h in humans) for k, i in enumerate(RATED) if i in usable[j]]
            out[f"judge[{j}]_human_bias_{c}"] = statistics.mean(own)
    return out


def test_alpha_and_bias_equal_the_krippendorff_package_and_survive_rescoring(run_copy, server, tmp_path):
    ratings = write_ratings(tmp_path / "clinicians.csv")
    result = judge_cli(run_copy, server, "--human-ratings", str(ratings))
    assert result.returncode == 0, result.stderr
    metrics = json.loads((run_copy / "metrics.json").read_text())["huatuo_generation"]
    want = expected()
    for name, value in want.items():
        assert math.isclose(metrics[name], value, rel_tol=1e-9, abs_tol=1e-12), (name, metrics[name], value)
    assert "human_alpha_completeness" not in metrics  # the humans did not rate it
    summary = json.loads((run_copy / "summary.json").read_text())["tasks"]["huatuo_generation"]
    assert summary["aggregations"]["judge_human_alpha_accuracy"]["kind"] == "krippendorff_alpha"
    assert summary["aggregations"]["judge_human_bias_clarity"]["kind"] == "mean_difference"
    stored = json.loads((run_copy / "human_ratings.json").read_text())
    assert stored["ratings"]["huatuo_generation"]["test-0"]["accuracy"]["dr-h1"] == human_rating("dr-h1", 0, "accuracy")
    config = json.loads((run_copy / "config.json").read_text())["judging"]["human_ratings"]
    assert config["raters"] == list(HUMANS) and config["ratings"] == len(RATED) * 2 * 2

    ratings.unlink()  # the run holds them now
    assert evalpipe("score", str(run_copy)).returncode == 0
    again = judge_cli(run_copy, server)  # a later judge without the file keeps them
    assert again.returncode == 0, again.stderr
    metrics = json.loads((run_copy / "metrics.json").read_text())["huatuo_generation"]
    assert metrics["judge_human_alpha_clarity"] == pytest.approx(want["judge_human_alpha_clarity"], abs=1e-12)

    report = evalpipe("report", str(run_copy), "--out", str(tmp_path / "report"), "--resamples", "200")
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "report" / "report.md").read_text()
    assert "Judges against human ratings" in md and "as well as the humans agree with each other" in md


@pytest.mark.parametrize("rows, where, message", [
    ([("test-0", "dr-h1", "accuracy", "4"), ("test-99", "dr-h1", "accuracy", "3")], ":3: sample_id:",
     "not a judged sample"),
    ([("test-0", "dr-h1", "kindness", "4")], ":2: criterion:", "not a criterion of the rubric"),
    ([("test-0", "dr-h1", "accuracy", "6")], ":2: rating:", "outside the rubric's scale 1–5"),
    ([("test-0", "dr-h1", "accuracy", "3.5")], ":2: rating:", "not a whole number"),
    ([("test-0", "dr-h1", "accuracy", "4"), ("test-0", "dr-h1", "accuracy", "5")], ":3: rating:", "twice"),
    ([("test-0", "judge-a", "accuracy", "4")], ":2: rater:", "also the name of a judge"),
    ([("test-0", "dr-h1", "accuracy")], ":2: row:", "3 fields, the header has 4"),
])
def test_a_bad_ratings_file_is_one_clear_error_before_any_judge_request(run_copy, server, tmp_path, rows, where,
                                                                       message):
    path = tmp_path / "bad.csv"
    path.write_text("sample_id,rater,criterion,rating\n" + "".join(",".join(r) + "\n" for r in rows), encoding="utf-8")
    before = len(server.requests)
    result = judge_cli(run_copy, server, "--human-ratings", str(path))
    assert result.returncode != 0
    assert f"{path}{where}" in result.stderr and message in result.stderr, result.stderr
    assert len(server.requests) == before, "a judge was asked before the ratings were checked"
    assert SECRET not in result.stderr


def test_a_file_without_the_columns_names_the_missing_one(run_copy, server, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("id,rater,criterion,rating\ntest-0,a,accuracy,3\n", encoding="utf-8")
    result = judge_cli(run_copy, server, "--human-ratings", str(path))
    assert result.returncode != 0 and f"{path}:1: sample_id: missing column" in result.stderr, result.stderr


def test_a_sample_answered_anew_since_the_humans_rated_it_is_left_out():
    from evalpipe.judging.judge_metrics import Verdict, judge_sheet
    from evalpipe.judging.humans import HumanRatings, add_human_metrics
    from evalpipe.judging.items import JudgedItem, TaskToJudge

    items = tuple(JudgedItem("t", f"s{i}", {}, None, f"answer {i}", f"sha{i}") for i in range(4))
    task = TaskToJudge("t", "", "free_text", None, False, items)
    judge = {0: 2, 1: 4, 2: 5, 3: 1}
    verdicts = {f"s{i}": {"j": Verdict("rated", {"accuracy": r})} for i, r in judge.items()}
    sheet = judge_sheet(task, ["j"], ["accuracy"], (1, 5), verdicts)
    human = {"s0": (2, 3), "s1": (4, 4), "s2": (5, 4), "s3": (1, 5)}
    ratings = HumanRatings({"t": {s: {"accuracy": {"h1": a, "h2": b}} for s, (a, b) in human.items()}},
                           answers={"t": {"s0": "sha0", "s1": "sha1", "s2": "sha2", "s3": "an older answer"}})
    add_human_metrics(sheet, task, ["j"], ["accuracy"], (1, 5), ratings, strict=True)
    fresh = ["s0", "s1", "s2"]
    matrix = np.array([[human[s][0] for s in fresh], [human[s][1] for s in fresh], [judge[int(s[1])] for s in fresh]],
                      dtype=float)
    want = krippendorff.alpha(reliability_data=matrix, value_domain=[1, 2, 3, 4, 5], level_of_measurement="ordinal")
    assert sheet.metrics["judge_human_alpha_accuracy"] == pytest.approx(want, abs=1e-12)
    assert sheet.metrics["judge_human_bias_accuracy"] == pytest.approx(((2 - 2.5) + 0 + (5 - 4.5)) / 3)
    assert sheet.notes["human_ratings"]["left_out"] == 1

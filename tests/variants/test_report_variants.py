"""The report of runs with prompt variants: spread with worst and best variant, per-variant intervals
apart from the spread, the strip plot, rank stability in its section and as a leaderboard column —
and nothing of it for runs without variants."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from evalpipe.frames import load_conditions, load_samples
from evalpipe.report import build_report
from evalpipe.report.bootstrap import bootstrap_task
from evalpipe.report.runs import load_report_runs
from evalpipe.report.variants import axis_views, rank_stability
from tests.variants.support import GOLD, answer, config, run, sentence, variant

RESAMPLES = 200


def reversed_policy(prompt):
    """Model B: perfect under every variant but the canonical one, where every 2nd sentence is copied
    untagged — so A leads under default, B under concise, guidelines and instructions_first."""
    text = sentence(prompt)
    if variant(prompt) == "default" and list(GOLD).index(text) % 2 == 0:
        return f"<response>{text}</response>"
    return GOLD[text]


def silent(prompt):
    return ""  # model C: no usable answer anywhere, last under every variant


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    paths = []
    for model, policy in (("a", answer), ("b", reversed_policy), ("c", silent)):
        outcome, _ = run(config(model=model, prompt_variants=("all",)), root, policy)
        paths.append(outcome.run_dir.path)
    return paths


@pytest.fixture(scope="module")
def report(three_runs, tmp_path_factory):
    return build_report(three_runs, tmp_path_factory.mktemp("report"), resamples=RESAMPLES, seed=0)


def test_the_report_reads_the_reference_condition_everywhere_else(three_runs):
    runs = load_report_runs(three_runs)
    a = runs[0]
    assert len(a.records) == 12 and {r["condition"] for r in a.records} == {"default"}
    assert set(a.condition_records["ncbi_disease"]) == {"default", "concise", "guidelines", "instructions_first",
                                                       "system_role"}
    assert not any(k.endswith("_variant_std") for k in a.metrics["ncbi_disease"])
    assert a.resample["ncbi_disease"].n == 12


def test_spread_table_names_worst_and_best_and_keeps_intervals_apart(report, three_runs):
    html = report.html.read_text(encoding="utf-8")
    tables = re.findall(r'<table id="([^"]+)"', html)
    assert tables[:2] == ["runs", "leaderboard"]
    assert [t for t in tables if t.startswith("robustness")] == [
        "robustness-ncbi_disease", "robustness-ncbi_disease-metrics", "robustness-ncbi_disease-variant-levels",
        "robustness-ncbi_disease-variant-ranks"]
    assert 'id="plot-robustness-ncbi_disease-variant"' in html and html.count("<svg") == 3
    ids = re.findall(r'\sid="([^"]+)"', html)
    assert len(ids) == len(set(ids))
    md = report.markdown.read_text(encoding="utf-8")
    doc = json.loads((three_runs[0] / "variants.json").read_text())["tasks"]["ncbi_disease"]
    stats = doc["spread"]["variant"]["f1"]
    row = next(line for line in md.splitlines() if line.startswith("| a | prompt variants |"))
    assert f"{stats['mean']:.3f} ± {stats['std']:.3f}" in row
    assert stats["min_at"] in row and stats["max_at"] in row
    assert "How to read this" in md
    pfr = doc["spread"]["variant"]["parse_failure_rate"]
    row = next(line for line in md.splitlines() if line.startswith("| a | prompt variants | parse_failure_rate |"))
    assert f"{pfr['mean']:.3f} ± {pfr['std']:.3f}" in row and pfr["max_at"] in row


def test_each_level_has_its_own_interval_and_the_reference_one_is_the_tasks(three_runs):
    runs = load_report_runs(three_runs)
    views = axis_views(runs[0], "ncbi_disease", resamples=RESAMPLES, seed=0)
    (view,) = views
    assert [lv.level for lv in view.levels] == ["default", "concise", "guidelines", "instructions_first",
                                               "system_role"]
    main = bootstrap_task(runs[0].resample["ncbi_disease"], resamples=RESAMPLES, seed=0).intervals["f1"]
    reference = view.levels[0]
    assert (reference.value, reference.low, reference.high) == (main.point, main.low, main.high)
    worst = next(lv for lv in view.levels if lv.level == "concise")
    assert worst.low < worst.value < worst.high  # a sloppy variant: an interval with width
    diff, low, high = view.best_minus_worst
    assert diff == pytest.approx(view.stats["max"] - view.stats["min"]) and low <= diff <= high


def test_rank_stability_by_hand(three_runs, report):
    runs = load_report_runs(three_runs)
    stability = rank_stability([axis_views(r, "ncbi_disease", resamples=0)[0] for r in runs])
    # a leads under default, b under concise/guidelines/instructions_first, a and b tie under system_role
    assert stability.ranks["a"] == {"default": 1, "concise": 2, "guidelines": 2, "instructions_first": 2,
                                    "system_role": 1}
    assert stability.ranks["b"] == {"default": 2, "concise": 1, "guidelines": 1, "instructions_first": 1,
                                    "system_role": 1}
    assert stability.ranks["c"] == dict.fromkeys(stability.levels, 3)
    assert not stability.identical and stability.stable("c") and not stability.stable("a")
    assert stability.rank_text("a") == "no (ranks 1–2)" and stability.rank_text("c") == "yes (rank 3)"
    # default vs concise: a/b swap, c last: pairs (a,b) discordant, (a,c) and (b,c) concordant → 1/3
    assert stability.taus[("default", "concise")] == pytest.approx(1 / 3)
    board = pd.read_csv(report.csv)
    column = "ncbi_disease:rank stable across variants?"
    assert board[column].tolist() == [0.0, 0.0, 1.0]
    md = report.markdown.read_text(encoding="utf-8")
    assert "rank stable across variants?" in md and "yes (rank 3)" in md and "Kendall's τ-b" in md
    assert "the ranking is not the same under every level" in md


def test_frames_show_every_condition(three_runs):
    samples = load_samples(three_runs[0])
    assert len(samples) == 60 and samples.columns[5:9].tolist() == ["condition", "variant", "shots", "shot_order"]
    conditions = load_conditions(three_runs)
    f1 = conditions[(conditions.metric == "f1") & (conditions.model == "a")].set_index("condition")["value"]
    doc = json.loads((three_runs[0] / "variants.json").read_text())["tasks"]["ncbi_disease"]
    assert f1.to_dict() == {c: v["metrics"]["f1"] for c, v in doc["conditions"].items()}
    assert conditions[conditions.reference].condition.unique().tolist() == ["default"]


def test_runs_without_variants_get_no_robustness(tmp_path):
    paths = [run(config(model=m, limit=6), tmp_path / "r")[0].run_dir.path for m in ("a", "b")]
    built = build_report(paths, tmp_path / "out", resamples=50)
    html = built.html.read_text(encoding="utf-8")
    assert "robustness" not in html and "rank stable" not in html
    assert load_conditions(paths).empty
    assert "condition" not in load_samples(paths[0]).columns

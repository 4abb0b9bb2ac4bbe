"""The report's contamination section, from a run directory's contamination.json alone."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from evalpipe.contamination.result import read_result, summary_text
from evalpipe.report.contamination import contamination_section, has_probe
from evalpipe.report.contributions import sections
from evalpipe.report.document import Document
from evalpipe.report.markdown import render_markdown

RESULT = {
    "task": "qa", "dataset": "QA set", "split": "test", "verdict": "likely_contaminated", "n": 2,
    "guided_rougeL": 0.6, "general_rougeL": 0.1,
    "difference": {"value": 0.5, "ci_low": 0.2, "ci_high": 0.8, "resamples": 1000, "seed": 0, "level": 0.95,
                   "method": "paired percentile bootstrap over samples"},
    "exact": 1, "near_exact": 1, "skipped": {"count": 3}, "errors": {"count": 0, "samples": []},
    "min_k_prob": {"available": False, "reason": "the endpoint returns no prompt log-probabilities"},
    "samples": [
        {"id": "s1", "first_half": "what is", "second_half": "the dose of aspirin", "guided_completion":
         "the dose of aspirin", "guided_rougeL": 1.0, "near_exact": True},
        {"id": "s2", "first_half": "is it", "second_half": "safe in pregnancy", "guided_completion": "fine",
         "guided_rougeL": 0.2, "near_exact": False},
    ],
}


def test_the_section_shows_the_verdict_its_numbers_and_the_near_exact_completions(tmp_path):
    (tmp_path / "contamination.json").write_text(json.dumps(RESULT))
    empty = tmp_path / "other"
    empty.mkdir()
    runs = [SimpleNamespace(path=tmp_path, label="model-a"), SimpleNamespace(path=empty, label="model-b")]
    assert has_probe(runs) and not has_probe(runs[1:])
    assert any(s.name == "contamination" for s in sections())
    section = contamination_section(runs)
    table = next(b for b in section.blocks if getattr(b, "id", "") == "contamination")
    (row,) = table.rows  # the run without a probe has no row
    cells = dict(zip(table.columns, row))
    assert cells["verdict"].text == "likely_contaminated" and cells["verdict"].bold
    assert cells["guided − general"].text == "0.500" and cells["guided − general"].sub == "[0.200, 0.800]"
    assert cells["probed"].text == "2" and cells["probed"].sub == "3 skipped"
    assert cells["Min-K % test"].text == "not available" and "no prompt log-probabilities" in cells["Min-K % test"].title
    text = render_markdown(Document("r", [section]))
    assert "the dose of aspirin" in text and "safe in pregnancy" not in text  # only near-exact ones shown
    assert "Golchin" in text and "Shi et al." in text


def test_a_file_that_is_no_probe_result_is_named(tmp_path):
    (tmp_path / "contamination.json").write_text(json.dumps({"task": "qa"}))
    with pytest.raises(ValueError, match=r"contamination.json: not a contamination probe result \(missing verdict"):
        read_result(tmp_path)
    assert read_result(tmp_path / "nowhere") is None


def test_summary_line():
    line = summary_text(RESULT)
    assert line.startswith("qa: likely_contaminated — guided ROUGE-L 0.600, general 0.100, difference 0.500 "
                           "[0.200, 0.800]; exact 1, near-exact 1 of 2 probed (3 skipped: too short)")
    assert line.endswith("Min-K % Prob not available")

"""A real report.html, built from two NCBI runs, opened in headless Chromium from a file:// URL.

The component's own tests (test_browser.py) use synthetic data; these check the report as a reviewer
gets it by e-mail: the links from the numbers lead to the right samples, two clicks from "model B's
recall is lower" to the missed entities behind it. They skip, saying so, without Chromium.
"""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from evalpipe.report import build_report
from evalpipe.report.browser import PAGE_SIZE, samples_fragment
from evalpipe.report.ner_errors import sample_outcomes
from tests.report.test_browser import dump, ids, needs_chromium

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def report(two_runs, tmp_path_factory) -> Path:
    return build_report(list(two_runs), tmp_path_factory.mktemp("in-browser"), resamples=100, top=3).html


@pytest.fixture(scope="module")
def sloppy(two_runs) -> list[dict]:
    return [json.loads(line) for line in (two_runs[1] / "samples.jsonl").read_text().splitlines()]


def _with_script(report: Path, tmp_path: Path, script: str) -> Path:
    """A copy of the report with ``script`` run after the page's own."""
    page = tmp_path / "report.html"
    page.write_text(report.read_text(encoding="utf-8").replace("</body>", f"<script>{script}</script></body>"),
                    encoding="utf-8")
    return page


def test_a_link_to_the_missed_entities_of_a_run_shows_exactly_those_samples(report, sloppy):
    dom = dump(report, samples_fragment(task="ncbi_disease", run="r1", outcome="missed"))
    want = [(r["id"], "r1") for r in sloppy if any(o.category == "missed" for o in sample_outcomes(r)[0])]
    assert 0 < len(want) <= PAGE_SIZE and ids(dom) == want
    assert dom.count == f"Showing 1–{len(want)} of {len(want)} rows (sample × run)"
    # each row marks its missed gold entities in the sentence
    for text in dom.row_text:
        assert "Disease · missed" in text


def test_two_clicks_from_the_metrics_table_to_the_missed_entities(report, sloppy, tmp_path):
    """Click 1: the contents' link to the task; click 2: "missed: N" in run B's metrics row. The page then
    shows those N samples (the hash changes in the page, no reload)."""
    script = """
    document.querySelector('nav a[href="#section-task-ncbi_disease"]').click();
    var link = Array.prototype.filter.call(document.querySelectorAll('#metrics-ncbi_disease a.more'),
                                           function (a) { return a.textContent.indexOf('missed: ') === 0; })[0];
    document.body.setAttribute('data-clicked', link.textContent);
    setTimeout(function () { link.click(); }, 50);
    setTimeout(function () { document.body.setAttribute('data-hash', location.hash); }, 300);
    """
    dom = dump(_with_script(report, tmp_path, script))
    want = [(r["id"], "r1") for r in sloppy if any(o.category == "missed" for o in sample_outcomes(r)[0])]
    assert dom.body["data-clicked"] == f"missed: {len(want)}"
    assert unescape(dom.body["data-hash"]) == samples_fragment(task="ncbi_disease", run="r1", outcome="missed")
    assert ids(dom) == want


def test_a_disagreement_opens_both_runs_side_by_side_on_its_sample(report):
    html = report.read_text(encoding="utf-8")
    href, sample = re.search(r'<dt><a href="([^"]+)">ncbi_disease / (test-\d+) — ', html).groups()
    dom = dump(report, unescape(href))
    assert ids(dom) == [(sample, "r0")] and dom.rows[0]["data-compare"] == "r1"
    columns = [a["data-run"] for tag, a in dom.tags if tag == "div" and "sb-col" in a.get("class", "").split()]
    assert columns == ["r0", "r1"]


def test_parse_failures_and_errors_of_a_real_run(report, sloppy):
    failed = dump(report, samples_fragment(task="ncbi_disease", run="r1", outcome="parse_failure"))
    assert ids(failed) == [(r["id"], "r1") for r in sloppy if r["parse_failed"] is True] != []
    errors = dump(report, samples_fragment(run="r1", outcome="error"))
    assert ids(errors) == [(r["id"], "r1") for r in sloppy if r["error"]] != []
    assert all("HTTP 500 after 3 attempts" in text for text in errors.row_text)


def test_the_whole_report_still_renders_around_the_browser(report):
    dom = dump(report)
    sections = [a["id"] for tag, a in dom.tags if tag == "section" and "id" in a]
    assert sections[0] == "section-summary" and "samples" in sections and sections[-1] == "section-method"
    assert len(dom.rows) == PAGE_SIZE  # the browser drew its first page (60 samples × 2 runs)


def test_screenshot_script_takes_chosen_sections_of_a_real_report_in_few_colours(report, tmp_path):
    import subprocess
    import sys

    from tests.report.test_browser import CHROMIUM, SCRIPT

    result = subprocess.run([sys.executable, str(SCRIPT), str(report), "--out", str(tmp_path), "--chromium", CHROMIUM,
                             "--only", "samples", "--only", "section-summary", "--colors", "32", "--height", "600",
                             "--samples-view", "run=r1&outcome=missed"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == [str(tmp_path / "section-summary.png"), str(tmp_path / "samples.png")]
    from PIL import Image

    for name in ("section-summary.png", "samples.png"):
        with Image.open(tmp_path / name) as image:
            assert image.mode == "P" and len(image.getcolors()) <= 32 and image.height <= 600
    bad = subprocess.run([sys.executable, str(SCRIPT), str(report), "--out", str(tmp_path), "--chromium", CHROMIUM,
                          "--only", "section-nope"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "no section section-nope" in bad.stderr

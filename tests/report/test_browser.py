"""The sample browser (evalpipe/report/browser.py): data escaping and links in Python, and the page
itself in headless Chromium — the rows a URL fragment shows, search, paging, side by side, a
``</script>`` in the data, 10k × 2 samples, and the screenshot script.

The Chromium tests load a standalone page from a file:// URL with ``--dump-dom`` (and a virtual
time budget so the script runs) and read the rendered rows' ``data-*`` attributes. Where no
Chromium is installed they skip, saying so (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from evalpipe.report.browser import (
    PAGE_SIZE,
    json_for_script,
    render_sample_browser,
    samples_fragment,
    standalone_page,
    validate,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "report_screenshots.py"

# ---- test data: two tasks, two runs, every outcome, deterministic --------------------------------

WORDS = ("the patient with familial adenomatous polyposis developed colorectal cancer but showed "
         "no sign of heart disease or ataxia telangiectasia after treatment").split()
NER_CYCLE = ("correct", "missed", "boundary", "spurious", "type", "boundary+type", "parse_failure", "error")


def _ner_result(i: int, run: int, tokens: list[str]) -> dict:
    """Sample i of run r<run>: the outcome cycles through NER_CYCLE (shifted per run)."""
    outcome = NER_CYCLE[(i + 3 * run) % len(NER_CYCLE)]
    gold = {"side": "gold", "text": " ".join(tokens[3:6]), "label": "Disease", "start": 3, "end": 6}
    result = {"answer": f"the answer of run {run} to sample {i}", "prediction": [], "prediction_text": "",
              "scores": {"f1": 0.0, "tp": 0, "fp": 0, "fn": 1}, "parse_failed": False, "error": None,
              "diagnostics": {}, "outcomes": [outcome], "entities": [dict(gold, category="missed")]}
    if outcome == "correct":
        result.update(prediction=[[3, 6, "Disease"]], prediction_text=gold["text"],
                      scores={"f1": 1.0, "tp": 1, "fp": 0, "fn": 0},
                      entities=[dict(gold, category="correct"), dict(gold, side="pred", category="correct")])
    elif outcome in ("boundary", "type", "boundary+type", "spurious"):
        start, end, label = {"boundary": (3, 7, "Disease"), "type": (3, 6, "Gene"),
                             "boundary+type": (2, 5, "Gene"), "spurious": (9, 10, "Disease")}[outcome]
        pred = {"side": "pred", "text": " ".join(tokens[start:end]), "label": label, "start": start, "end": end,
                "category": outcome}
        gold_category = "missed" if outcome == "spurious" else outcome
        result.update(prediction=[[start, end, label]], prediction_text=pred["text"],
                      scores={"f1": 0.0, "tp": 0, "fp": 1, "fn": 1},
                      entities=[dict(gold, category=gold_category), pred])
        if outcome == "spurious":
            result["outcomes"] = ["missed", "spurious"]
    elif outcome == "parse_failure":
        result.update(answer="I cannot help with that.", prediction=None, parse_failed=True,
                      diagnostics={"reason": "no <disease> tags found"}, entities=[dict(gold, category="missed")])
    elif outcome == "error":
        result.update(answer=None, prediction=None, parse_failed=None, error="HTTP 500 after 3 attempts",
                      scores={"f1": None, "tp": 0, "fp": 0, "fn": 1})
    return result


def make_data(n_ner: int = 120, n_gen: int = 40, runs: int = 2) -> dict:
    """Synthetic browser data; every 7th NER input mentions 'tachycardia', every 4th generation gold
    asks for a 'dose', run r1 answers every 5th generation sample with 'zebrafish'."""
    samples = []
    for i in range(n_ner):
        tokens = [WORDS[(i + k) % len(WORDS)] for k in range(14)]
        if i % 7 == 0:
            tokens[-1] = "tachycardia"
        samples.append({
            "task": "ncbi_disease", "id": f"ner-{i}", "input": {"text": " ".join(tokens), "tokens": tokens},
            "gold": [[3, 6, "Disease"]], "gold_text": f"<disease>{' '.join(tokens[3:6])}</disease>",
            "runs": {f"r{r}": _ner_result(i, r, tokens) for r in range(runs)},
        })
    long_question = " ".join(WORDS * 12)  # > 400 characters: folded
    for i in range(n_gen):
        gold = "What is the dose?" if i % 4 == 0 else "What treats it?"
        samples.append({
            "task": "meqsum", "id": f"gen-{i}", "input": {"question": f"Question {i}: {long_question}"},
            "gold": gold, "gold_text": gold,
            "runs": {f"r{r}": {
                "answer": f"Run {r} summary {i}" + (" zebrafish" if r == 1 and i % 5 == 0 else ""),
                "prediction": f"Run {r} summary {i}", "prediction_text": f"Run {r} summary {i}",
                "scores": {"rougeL": round(0.1 * (i % 10), 2)}, "parse_failed": False, "error": None,
                "diagnostics": {}, "outcomes": ["correct" if i % 2 else "incorrect"],
                "judge": {"judge_accuracy": 1 + (i + r) % 5},
            } for r in range(runs)},
        })
    return {
        "runs": [{"key": f"r{r}", "label": f"model-{'ab'[r] if r < 2 else r}", "path": f"results/run{r}"}
                 for r in range(runs)],
        "tasks": [{"name": "ncbi_disease", "kind": "span_ner", "score_keys": ["f1", "tp", "fp", "fn"]},
                  {"name": "meqsum", "kind": "generation", "score_keys": ["rougeL"]}],
        "samples": samples,
    }


def expected_rows(data: dict, keep, run: str | None = None) -> list[tuple[str, str]]:
    """(sample id, run key) of the rows passing ``keep(sample, run result)``, in page order."""
    keys = [run] if run else [r["key"] for r in data["runs"]]
    return [(s["id"], k) for s in data["samples"] for k in keys if k in s["runs"] and keep(s, s["runs"][k])]


# ---- pure Python ----------------------------------------------------------------------------------

def test_json_for_script_cannot_end_the_script_element_and_reads_back_unchanged():
    data = {"answer": "</script><script>alert(1)</script>", "x": "<!-- ]]> & \u2028 \u2029 </SCRIPT >",
            "nested": [{"ok": "ä 中文 🙂"}]}
    text = json_for_script(data)
    assert "<" not in text and ">" not in text and "&" not in text
    assert "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == data


def test_json_for_script_writes_undefined_numbers_as_null():
    assert json.loads(json_for_script({"f1": float("nan"), "r": [float("inf"), 0.5, -float("inf")]})) == \
        {"f1": None, "r": [None, 0.5, None]}


def test_json_for_script_accepts_numpy_values():
    np = pytest.importorskip("numpy")
    assert json.loads(json_for_script({"f1": np.float32(0.5), "n": np.int64(3), "v": np.array([1, 2]),
                                       "u": np.float64("nan")})) == {"f1": 0.5, "n": 3, "v": [1, 2], "u": None}


def test_samples_fragment_orders_encodes_and_omits_defaults():
    assert samples_fragment() == "#samples"
    assert samples_fragment(page=1) == "#samples"
    assert samples_fragment(q="heart attack", outcome="missed", task="ncbi_disease", run="r1", page=3) == \
        "#samples?task=ncbi_disease&run=r1&outcome=missed&q=heart+attack&page=3"
    # '+' is a space in a query string: a category with '+' must be escaped
    assert samples_fragment(outcome="boundary+type") == "#samples?outcome=boundary%2Btype"
    assert samples_fragment(q="a&b=c #d") == "#samples?q=a%26b%3Dc+%23d"


def test_render_embeds_the_data_and_inlines_everything():
    data = make_data(5, 2)
    html = render_sample_browser(data)
    assert html.startswith('<section id="samples"') and html.endswith("</section>")
    block = re.search(r'<script type="application/json" id="samples-data">(.*?)</script>', html, re.S)
    assert block and json.loads(block.group(1)) == data
    # no external resource of any kind: the report must work from a mailed file
    assert not re.search(r"\b(src|href)\s*=\s*[\"']?(https?:|//)", html)
    assert "http://" not in html and "https://" not in html and "@import" not in html
    assert html.count("<script") == 2 and html.count("</script>") == 2
    assert html.count("<style>") == 1 and html.count("</style>") == 1


def test_standalone_page_is_a_document_with_an_escaped_title():
    page = standalone_page(make_data(2, 1), title="A <b> & c")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<title>A &lt;b&gt; &amp; c</title>" in page


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["samples"][1]["runs"].update(r9={}), r"samples\[1\]\.runs: 'r9' is not one of runs\[\]\.key"),
    (lambda d: d["samples"][2].update(task="nope"), r"samples\[2\]\.task: 'nope' is not one of tasks\[\]\.name"),
    (lambda d: d["samples"][0].update(id=3), r"samples\[0\]\.id: must be a string"),
    (lambda d: d["samples"][0]["runs"]["r0"].update(outcomes="missed"), r"samples\[0\]\.runs\.r0\.outcomes: must be a list"),
    (lambda d: d["samples"][0]["runs"].update(r0=None), r"samples\[0\]\.runs\.r0: must be an object"),
    (lambda d: d["runs"].append({"key": "r0", "label": "again"}), r"runs need unique non-empty string keys"),
    (lambda d: d.pop("tasks"), r"'tasks' must be a list"),
])
def test_validate_names_the_sample_and_field(change, message):
    data = make_data(3, 1)
    change(data)
    with pytest.raises(ValueError, match=message):
        validate(data)


# ---- in Chromium ----------------------------------------------------------------------------------

def _chromium() -> str | None:
    explicit = os.environ.get("EVALPIPE_CHROMIUM")
    if explicit:
        return shutil.which(explicit) or explicit
    return next((found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))),
                None)


CHROMIUM = _chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium not installed (Debian: apt-get install chromium); the page is not opened")


class _Dom(HTMLParser):
    """What a test reads from the dumped DOM: rendered rows, the count, the link, body attributes."""

    VOID = {"br", "img", "input", "hr", "meta", "link", "wbr"}

    def __init__(self):
        super().__init__()
        self.rows: list[dict[str, str]] = []
        #: the visible text of each row (all text inside its <li>)
        self.row_text: list[str] = []
        self._depth = 0
        self.count = ""
        self.link = ""
        self.body: dict[str, str] = {}
        self.title = ""
        self.tags: list[tuple[str, dict]] = []
        self._into: str | None = None

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        classes = a.get("class", "").split()
        if self._depth and tag not in self.VOID:
            self._depth += 1
        if tag == "li" and "sb-row" in classes:
            self.rows.append(a)
            self.row_text.append("")
            self._depth = 1
        elif "sb-count" in classes:
            self._into = "count"
        elif tag == "a" and "sb-link" in classes:
            self.link = a.get("href", "")
        elif tag == "body":
            self.body = a
        elif tag == "title":
            self._into = "title"

    def handle_endtag(self, tag):
        self._into = None
        if self._depth and tag not in self.VOID:
            self._depth -= 1

    def handle_data(self, text):
        if self._depth:
            self.row_text[-1] += text
        if self._into:
            setattr(self, self._into, getattr(self, self._into) + text)


def dump(page: Path, fragment: str = "", budget_ms: int = 5000) -> _Dom:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        command = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-extensions",
                   f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", "--dump-dom",
                   page.resolve().as_uri() + fragment]
        result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    dom = _Dom()
    dom.feed(result.stdout)
    return dom


def ids(dom: _Dom) -> list[tuple[str, str]]:
    return [(r["data-id"], r["data-run"]) for r in dom.rows]


@pytest.fixture(scope="module")
def data() -> dict:
    return make_data()


@pytest.fixture(scope="module")
def page(tmp_path_factory, data) -> Path:
    path = tmp_path_factory.mktemp("browser") / "samples.html"
    path.write_text(standalone_page(data, "Samples"), encoding="utf-8")
    return path


def _count_text(first: int, last: int, total: int, unit: str = "rows (sample × run)") -> str:
    return f"Showing {first}–{last} of {total} {unit}"


@needs_chromium
def test_without_a_fragment_the_first_page_of_all_rows_shows(page, data):
    dom = dump(page)
    every = expected_rows(data, lambda s, r: True)
    assert ids(dom) == every[:PAGE_SIZE]
    assert dom.count == _count_text(1, PAGE_SIZE, len(every))
    assert dom.link == "#samples"


@needs_chromium
def test_outcome_missed_shows_exactly_the_rows_whose_outcomes_contain_missed(page, data):
    dom = dump(page, samples_fragment(outcome="missed"))
    want = expected_rows(data, lambda s, r: "missed" in r["outcomes"])
    assert ids(dom) == want[:PAGE_SIZE]
    assert dom.count == _count_text(1, PAGE_SIZE, len(want))
    last = dump(page, samples_fragment(outcome="missed", page=2))
    assert ids(last) == want[PAGE_SIZE:]


@needs_chromium
def test_outcome_with_a_plus_sign_survives_the_url(page, data):
    fragment = samples_fragment(outcome="boundary+type", run="r1")
    dom = dump(page, fragment)
    want = expected_rows(data, lambda s, r: "boundary+type" in r["outcomes"], run="r1")
    assert want and ids(dom) == want
    assert dom.link == fragment  # the page writes the fragment exactly as Python builds it


@needs_chromium
def test_run_and_task_filters(page, data):
    dom = dump(page, samples_fragment(task="meqsum", run="r1"))
    want = expected_rows(data, lambda s, r: s["task"] == "meqsum", run="r1")
    assert ids(dom) == want and {r["data-task"] for r in dom.rows} == {"meqsum"}


@needs_chromium
def test_search_matches_inputs_and_answers_case_insensitively(page, data):
    in_input = dump(page, samples_fragment(q="TACHYcardia", run="r0"))
    assert ids(in_input) == [(f"ner-{i}", "r0") for i in range(0, 120, 7)][:PAGE_SIZE]
    in_answer = dump(page, samples_fragment(q="zebrafish summary"))  # every word must occur
    assert ids(in_answer) == [(f"gen-{i}", "r1") for i in range(0, 40, 5)]
    in_gold = dump(page, samples_fragment(q="DOSE", run="r0"))
    assert ids(in_gold) == [(f"gen-{i}", "r0") for i in range(0, 40, 4)]


@needs_chromium
def test_parse_failed_filter(page, data):
    dom = dump(page, samples_fragment(parse="failed"))
    want = expected_rows(data, lambda s, r: r["parse_failed"] is True)
    assert want and ids(dom) == want


@needs_chromium
def test_paging_through_the_fragment(page, data):
    every = expected_rows(data, lambda s, r: True)
    dom = dump(page, samples_fragment(page=2))
    assert ids(dom) == every[PAGE_SIZE:2 * PAGE_SIZE]
    assert dom.count == _count_text(PAGE_SIZE + 1, 2 * PAGE_SIZE, len(every))
    last_page = -(-len(every) // PAGE_SIZE)
    beyond = dump(page, samples_fragment(page=last_page + 5))  # clamped to the last page
    assert ids(beyond) == every[(last_page - 1) * PAGE_SIZE:]


@needs_chromium
def test_two_runs_side_by_side_on_the_same_sample(page, data):
    dom = dump(page, samples_fragment(run="r1", compare="r0", outcome="missed", task="ncbi_disease"))
    want = expected_rows(data, lambda s, r: "missed" in r["outcomes"] and s["task"] == "ncbi_disease", run="r1")
    assert ids(dom) == want
    assert {r["data-compare"] for r in dom.rows} == {"r0"}
    columns = [a["data-run"] for tag, a in dom.tags if tag == "div" and "sb-col" in a.get("class", "").split()]
    assert columns == ["r1", "r0"] * len(want)
    assert dom.count == _count_text(1, len(want), len(want), unit="samples")


@needs_chromium
def test_a_row_shows_what_it_is_given(tmp_path, data):
    keep = {"ner-4", "ner-6", "ner-7", "gen-0", "gen-1"}  # gen-1: rougeL 0.1, so the column is fractional
    subset = dict(data, samples=[s for s in data["samples"] if s["id"] in keep])
    path = tmp_path / "rows.html"
    path.write_text(standalone_page(subset), encoding="utf-8")
    dom = dump(path)
    text = dict(zip(ids(dom), dom.row_text))
    assert set(text) == {(i, r) for i in keep for r in ("r0", "r1")}
    # ner-4, r0: a type error — gold and predicted entity marked with type and category, in words
    assert "Disease · type" in text["ner-4", "r0"] and "Gene · type" in text["ner-4", "r0"]
    assert "the answer of run 0 to sample 4" in text["ner-4", "r0"]
    # ner-6, r0: a parse failure with its diagnostics (markup in them shown as text)
    assert "parse_failure" in text["ner-6", "r0"] and "reason: no <disease> tags found" in text["ner-6", "r0"]
    assert "Disease · missed" in text["ner-6", "r0"]
    # ner-7, r0: a failed request: no answer, the error, an undefined score shown as a dash
    row = text["ner-7", "r0"]
    assert "(no answer)" in row and "HTTP 500 after 3 attempts" in row and "request failed" not in row
    assert re.search(r"f1tpfpfn–001", row.replace(" ", ""))
    # gen-0, r1: the long input folded, the judge's rating, a fractional score column with decimals
    row = text["gen-0", "r1"]
    question = subset["samples"][-2]["input"]["question"]
    assert f"show all ({len(question)} characters)" in row
    assert "judge_accuracy: 2" in row and "rougeL0.000" in row.replace(" ", "")
    assert "Gold" in row and "What is the dose?" in row


@needs_chromium
def test_a_single_sample_by_id(page):
    dom = dump(page, samples_fragment(sample="ner-7"))
    assert ids(dom) == [("ner-7", "r0"), ("ner-7", "r1")]


@needs_chromium
def test_an_unknown_task_in_a_link_shows_nothing_and_says_so(page):
    dom = dump(page, samples_fragment(task="no_such_task"))
    assert dom.rows == [] and dom.count.startswith("No rows")
    # the task select gets an option for the unknown value (it is only added for values the data lacks)
    assert [a for tag, a in dom.tags if tag == "option" and a.get("value") == "no_such_task"]


@needs_chromium
def test_hashchange_and_controls_keep_the_fragment_in_step(tmp_path, data):
    """A link inside the page changes the hash (hashchange re-filters); changing a control writes the
    fragment with replaceState, from a file:// URL."""
    script = """<script>
    setTimeout(function () { location.hash = "#samples?outcome=spurious&run=r0"; }, 100);
    setTimeout(function () {
      document.body.setAttribute("data-after-hash", document.querySelectorAll("#samples li.sb-row").length);
      var select = document.querySelector('#samples select[name="task"]');
      select.value = "meqsum";
      select.dispatchEvent(new Event("change", {bubbles: true}));
      document.body.setAttribute("data-hash", location.hash);
      var q = document.querySelector('#samples input[name="q"]');
      q.value = "zebrafish";
      q.dispatchEvent(new Event("input", {bubbles: true}));
    }, 300);
    setTimeout(function () { document.body.setAttribute("data-hash-q", location.hash); }, 1000);
    </script>"""
    path = tmp_path / "interactive.html"
    path.write_text(standalone_page(data).replace("</body>", script + "</body>"), encoding="utf-8")
    dom = dump(path, samples_fragment(run="r1"))
    spurious = expected_rows(data, lambda s, r: "spurious" in r["outcomes"], run="r0")
    assert dom.body["data-after-hash"] == str(len(spurious))
    # a control change keeps the other filters (and resets the page)
    assert dom.body["data-hash"] == samples_fragment(task="meqsum", run="r0", outcome="spurious")
    assert dom.body["data-hash-q"] == samples_fragment(task="meqsum", run="r0", outcome="spurious", q="zebrafish")


@needs_chromium
def test_script_text_in_the_data_cannot_break_out(tmp_path):
    data = make_data(3, 1)
    evil = '</script><script>document.title="pwned"</script><img src=x onerror="document.title=1">'
    data["samples"][0]["input"]["text"] = evil + " <!-- "
    data["samples"][0]["runs"]["r0"]["answer"] = evil
    data["samples"][0]["runs"]["r0"]["diagnostics"] = {evil: evil}
    data["tasks"][0]["name"] = "t</script>"
    for s in data["samples"]:
        if s["task"] == "ncbi_disease":
            s["task"] = "t</script>"
    path = tmp_path / "evil.html"
    path.write_text(standalone_page(data, "safe"), encoding="utf-8")
    dom = dump(path)
    assert dom.title == "safe"
    assert not [a for tag, a in dom.tags if tag == "img"]  # the data's <img> is text, not an element
    assert len(dom.rows) == 8 and dom.rows[0]["data-task"] == "t</script>"


@needs_chromium
def test_ten_thousand_samples_per_run_open_on_the_first_page(tmp_path):
    """The first page of 10k × 2 rows renders within the virtual time budget; then (same browser, to
    save a launch) a link to a filtered later page shows the right rows."""
    data = make_data(n_ner=10_000, n_gen=0)
    target = samples_fragment(outcome="missed", run="r1", page=3)
    script = f"""<script>
    document.body.setAttribute("data-first-count", document.querySelector("#samples .sb-count").textContent);
    document.body.setAttribute("data-first-rows", document.querySelectorAll("#samples li.sb-row").length);
    setTimeout(function () {{ location.hash = "{target}"; }}, 100);
    </script>"""
    path = tmp_path / "big.html"
    path.write_text(standalone_page(data).replace("</body>", script + "</body>"), encoding="utf-8")
    dom = dump(path, budget_ms=15000)
    assert dom.body["data-first-rows"] == str(PAGE_SIZE)
    assert dom.body["data-first-count"] == _count_text(1, PAGE_SIZE, 20_000)
    want = expected_rows(data, lambda s, r: "missed" in r["outcomes"], run="r1")
    assert ids(dom) == want[2 * PAGE_SIZE:3 * PAGE_SIZE]


# ---- the screenshot script ------------------------------------------------------------------------

@needs_chromium
def test_screenshot_script_writes_one_png_per_section(tmp_path):
    report = tmp_path / "report.html"
    page = standalone_page(make_data(30, 5), "Report")
    other = '<section id="section-leaderboard"><h2>Leaderboard</h2><table><tr><td>0.5</td></tr></table></section>'
    report.write_text(page.replace("<section id=\"samples\"", other + "<section id=\"samples\"", 1), encoding="utf-8")
    out = tmp_path / "shots"
    result = subprocess.run([sys.executable, str(SCRIPT), str(report), "--out", str(out), "--chromium", CHROMIUM,
                             "--samples-view", "outcome=missed", "--height", "900"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    pngs = sorted(out.glob("*.png"))
    assert [p.name for p in pngs] == ["samples.png", "section-leaderboard.png"]
    assert result.stdout.split() == [str(out / "section-leaderboard.png"), str(out / "samples.png")]
    for png in pngs:
        head = png.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        assert width == 1300 and 0 < height <= 900
    # the leaderboard alone is short: cropped well below the window height
    short = (out / "section-leaderboard.png").read_bytes()[20:24]
    assert int.from_bytes(short, "big") < 400


def test_screenshot_script_without_chromium_says_how_to_get_it(tmp_path):
    report = tmp_path / "report.html"
    report.write_text(standalone_page(make_data(2, 1)), encoding="utf-8")
    env = dict(os.environ, PATH=str(tmp_path), EVALPIPE_CHROMIUM="")
    result = subprocess.run([sys.executable, str(SCRIPT), str(report), "--out", str(tmp_path / "o")],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2 and "apt-get install chromium" in result.stderr



# ---- the page in pieces -------------------------------------------------------------------------------

def test_streamed_samples_make_the_same_fragment_as_the_whole_data(monkeypatch):
    import evalpipe.report.browser as browser

    data = make_data(7, 4)
    data["samples"][3]["runs"]["r0"]["scores"] = {"f1": float("nan")}  # one batch needs the NaN fallback
    whole = "".join(browser.iter_sample_browser(data))
    head = {k: v for k, v in data.items() if k != "samples"}
    for batch in (1, 2, 3, 500):  # batch boundaries anywhere
        monkeypatch.setattr(browser, "BATCH", batch)
        pieces = list(browser.iter_sample_browser(head, iter(data["samples"]), len(data["samples"])))
        assert "".join(pieces) == whole
    block = re.search(r'id="samples-data">(.*?)</script>', whole, re.S).group(1)
    assert block == json_for_script(data) and json.loads(block)["samples"][3]["runs"]["r0"]["scores"]["f1"] is None


def test_the_parts_of_consecutive_rows_joined_are_the_whole_fragment(monkeypatch):
    import evalpipe.report.browser as browser

    data = make_data(7, 4)
    whole = "".join(browser.iter_sample_browser(data))
    head = {k: v for k, v in data.items() if k != "samples"}
    samples, count = data["samples"], len(data["samples"])
    for batch in (1, 3, 500):
        monkeypatch.setattr(browser, "BATCH", batch)
        for cuts in ((0, count), (0, 1, count), (0, count - 1, count), (0, 5, 6, count), (0, 2, 3, 9, count)):
            parts = ["".join(browser.iter_sample_browser(head, iter(samples[a:b]), count, rows=(a, b)))
                     for a, b in zip(cuts, cuts[1:])]
            assert "".join(parts) == whole, cuts
    first = "".join(browser.iter_sample_browser(head, iter(samples[:3]), count, rows=(0, 3)))
    assert whole.startswith(first) and first.startswith('<section id="samples"') and "</section>" not in first
    for wrong in ((3, 2), (0, 0), (count, count), (2, count + 1)):
        with pytest.raises(ValueError, match=rf"rows {wrong[0]}\.\.{wrong[1]} are not a part"):
            "".join(browser.iter_sample_browser(head, iter(()), count, rows=wrong))
    with pytest.raises(ValueError, match=r"1 samples in rows 2\.\.4"):
        "".join(browser.iter_sample_browser(head, iter(samples[2:3]), count, rows=(2, 4)))
    monkeypatch.setattr(browser, "BATCH", 2)
    broken = [dict(s) for s in samples]
    broken[5]["task"] = "nope"
    with pytest.raises(ValueError, match=r"samples\[5\]\.task"):  # named by its place in all the samples
        "".join(browser.iter_sample_browser(head, iter(broken[4:]), count, rows=(4, count)))


def test_a_streamed_sample_that_breaks_the_contract_is_named_by_its_place_in_all_samples(monkeypatch):
    import evalpipe.report.browser as browser

    monkeypatch.setattr(browser, "BATCH", 2)
    data = make_data(3, 2)
    data["samples"][4]["task"] = "nope"
    head = {k: v for k, v in data.items() if k != "samples"}
    with pytest.raises(ValueError, match=r"samples\[4\]\.task"):
        "".join(browser.iter_sample_browser(head, iter(data["samples"]), len(data["samples"])))
    with pytest.raises(ValueError, match="announced"):
        "".join(browser.iter_sample_browser(head, iter(make_data(3, 2)["samples"]), 4))


def test_the_page_written_in_pieces_is_the_page_as_one_string_even_with_a_lone_surrogate(tmp_path):
    from evalpipe.report.document import Document, Html, Paragraph, Section
    from evalpipe.report.html import render_html, utf8, write_html

    data = make_data(4, 2)
    data["samples"][0]["runs"]["r0"]["answer"] = "bad \ud800 answer"
    doc = Document("t", [Section("a", "A", [Paragraph("before")]),
                         Section("samples", "Samples", [Html("", "md", pieces=lambda: browser_pieces(data))],
                                 own_element=True),
                         Section("b", "B", [Paragraph("after \udfff")])])
    write_html(doc, tmp_path / "r.html")
    written = (tmp_path / "r.html").read_bytes()
    assert written == utf8(render_html(doc))
    assert "\ufffd" in written.decode("utf-8") and json_for_script(data) in render_html(doc)


def browser_pieces(data: dict):
    from evalpipe.report.browser import iter_sample_browser

    return iter_sample_browser(data)

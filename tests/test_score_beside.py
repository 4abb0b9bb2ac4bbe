"""Scoring beside the sending (evalpipe.pipeline.score_beside): the same numbers and records as
scoring after it, the child waiting for answers as they commit, and every way out of the run."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest

from evalpipe.backends.base import BackendError
from evalpipe.config import RunConfig
from evalpipe.outcome import RunError
from evalpipe import forking
from evalpipe.pipeline import score_beside
from evalpipe.pipeline.execute import execute
from evalpipe.records import Completion, Usage
from evalpipe.store.answers import ResponseStore
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task
from tests.support.scripted_backend import ScriptedBackend, query_text

pytestmark = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                                reason="scoring beside the sending forks (not on this platform)")

SPEC = get_task("ncbi_disease")
GOLD = {ex.inputs["text"]: SPEC.shot_target(ex) for ex in SPEC.load(LoadOptions()).examples}
#: more samples than a page of the plan (1,024), so the child folds several pages
N = 2_300


@pytest.fixture(scope="module")
def big_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """N CoNLL sentences: the test split cycled, sentence i ending with the token ``[i]`` (tag O)."""
    source = Path("data/ncbi_disease/test.tsv").read_text(encoding="utf-8").strip().split("\n\n")
    path = tmp_path_factory.mktemp("data") / "ncbi.tsv"
    path.write_text("".join(f"{source[i % len(source)]}\n[{i}]\tO\n\n" for i in range(N)), encoding="utf-8")
    return path


def answer(prompt):
    """Gold-like for most sentences, something unparseable for some, a failure for a few."""
    text = query_text(prompt)
    i = int(text.rsplit("[", 1)[1].rstrip("]"))
    if i % 97 == 5:
        return RuntimeError("refused")
    if i % 31 == 3:
        return "no tags at all"
    base = text.rsplit(" [", 1)[0]
    gold = GOLD.get(base)
    return gold.replace("</response>", f" [{i}]</response>") if gold else f"<response>{text}</response>"


def run(tmp_path: Path, data: Path, mode: str, monkeypatch: pytest.MonkeyPatch, name: str, **kw):
    monkeypatch.setenv(score_beside.ENV, mode)
    config = RunConfig(tasks=("ncbi_disease",), model="m", base_url="http://127.0.0.1:1/v1", concurrency=16,
                       data={"ncbi_disease": str(data)}, run_name=name, **kw)
    return asyncio.run(execute(config, lambda _: ScriptedBackend(answer), tmp_path))


def without_latency(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        row.pop("latency_s", None)
    return rows


def test_beside_gives_the_records_and_numbers_of_scoring_after(tmp_path, big_data, monkeypatch):
    after = run(tmp_path, big_data, "0", monkeypatch, "after")
    beside = run(tmp_path, big_data, "1", monkeypatch, "beside")
    a, b = after.run_dir.path, beside.run_dir.path
    assert (a / "metrics.json").read_bytes() == (b / "metrics.json").read_bytes()
    assert without_latency(a / "samples.jsonl") == without_latency(b / "samples.jsonl")
    summary_a, summary_b = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    assert summary_a["tasks"]["ncbi_disease"]["coverage"] == summary_b["tasks"]["ncbi_disease"]["coverage"]
    assert summary_b["tasks"]["ncbi_disease"]["parse_failures"] == summary_a["tasks"]["ncbi_disease"]["parse_failures"] > 0
    assert summary_b["tasks"]["ncbi_disease"]["error_kinds"] == summary_a["tasks"]["ncbi_disease"]["error_kinds"] != {}
    assert "scoring" not in summary_a["run"]
    assert summary_b["run"]["scoring"]["beside_sending"] == ["ncbi_disease"]
    assert not list(tmp_path.glob(".evalpipe-stage-*")), "the stage (with the child's files) is removed"
    assert not multiprocessing.active_children()


def test_a_corpus_scoring_is_scored_after_the_sending(tmp_path, big_data, monkeypatch):
    outcome = run(tmp_path, big_data, "1", monkeypatch, "corpus", compat="evalscope", limit=1_100)
    summary = json.loads((outcome.run_dir.path / "summary.evalscope.json").read_text())
    assert "scoring" not in summary["run"]  # no samplewise task: no child at all
    assert outcome.tasks[0].metrics["n"] == 1_100


def test_a_child_that_dies_leaves_the_scoring_to_the_run(tmp_path, big_data, monkeypatch):
    after = run(tmp_path, big_data, "0", monkeypatch, "after", limit=1_500)
    monkeypatch.setattr(score_beside, "_child", lambda *args: os._exit(3))
    outcome = run(tmp_path, big_data, "1", monkeypatch, "died", limit=1_500)
    assert outcome.tasks[0].metrics == after.tasks[0].metrics
    assert any("beside the sending gave no result: it ended without a result (exit code 3)" in n
               for n in outcome.notes)
    summary = json.loads((outcome.run_dir.path / "summary.json").read_text())
    assert "scoring" not in summary["run"]


def test_an_error_in_the_child_is_met_again_by_the_run(tmp_path, big_data, monkeypatch):
    """The run scores after the sending and raises the error itself (its own type and line)."""
    calls = []
    real = score_beside.plan_chunks

    def broken(*args, **kw):
        if os.getpid() != parent:
            raise RuntimeError("the child's reading broke")
        calls.append(args)
        return real(*args, **kw)

    parent = os.getpid()
    after = run(tmp_path, big_data, "0", monkeypatch, "after", limit=1_500)
    monkeypatch.setattr(score_beside, "plan_chunks", broken)  # the child's reader of the plan
    outcome = run(tmp_path, big_data, "1", monkeypatch, "broken", limit=1_500)
    assert outcome.tasks[0].metrics == after.tasks[0].metrics
    assert any("gave no result: it failed (RuntimeError: the child's reading broke)" in n for n in outcome.notes)

    def bad_data(*args, **kw):
        raise RunError("task ncbi_disease: sample ids not in the data any more (or in another order): 'x'")

    monkeypatch.setattr(score_beside, "plan_chunks", bad_data)
    monkeypatch.setattr("evalpipe.pipeline.execute.plan_chunks", bad_data)
    with pytest.raises(RunError, match="sample ids not in the data any more"):
        run(tmp_path, big_data, "1", monkeypatch, "bad", limit=1_500)
    assert not multiprocessing.active_children()


def test_a_dead_endpoint_stops_the_child_too(tmp_path, big_data, monkeypatch):
    class Dead(ScriptedBackend):
        async def preflight(self) -> None:
            raise BackendError("cannot reach http://127.0.0.1:1/v1 (connection refused)")

    monkeypatch.setenv(score_beside.ENV, "1")
    config = RunConfig(tasks=("ncbi_disease",), model="m", base_url="http://127.0.0.1:1/v1",
                       data={"ncbi_disease": str(big_data)}, run_name="dead", limit=1_500)
    with pytest.raises(BackendError):
        asyncio.run(execute(config, lambda _: Dead(answer), tmp_path))
    assert not multiprocessing.active_children()


def test_when_the_child_is_used(monkeypatch):
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(forking.sys, "platform", "linux")
    monkeypatch.setattr(forking, "_cores", lambda: 2)
    many = score_beside.MIN_PENDING
    assert score_beside.wanted(many, {})
    assert not score_beside.wanted(many - 1, {})  # a small run: not worth a fork
    assert not score_beside.wanted(0, {score_beside.ENV: "1"})  # nothing to send: scored at once
    assert not score_beside.wanted(many, {score_beside.ENV: "0"})
    assert score_beside.wanted(1, {score_beside.ENV: "1"})
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    assert not score_beside.wanted(many, {})  # another thread: a fork would copy its locks
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(forking.sys, "platform", "darwin")
    assert not score_beside.wanted(many, {})


def completion(text: str) -> Completion:
    return Completion(text=text, finish_reason="stop", usage=Usage(1, 1), latency_s=0.01)


def test_the_child_waits_for_each_answer_until_the_sending_is_over(tmp_path, monkeypatch):
    """A page is handed to the fold only once every answer is stored, or the sending is over (then a
    key without an answer is a failure's, or unanswered)."""
    monkeypatch.setattr(score_beside, "POLL_FIRST_S", 0.01)
    store = ResponseStore(tmp_path / "responses.sqlite")
    ours, theirs = multiprocessing.Pipe(duplex=True)
    arrivals = score_beside._Arrivals(theirs)
    keys = ["a", "b", "c", "d"]
    got: list[dict] = []
    reader = threading.Thread(target=lambda: got.append(dict(arrivals(ResponseStore(store.path), keys))))
    store.put_many("m", [("a", completion("A"))])
    reader.start()
    time.sleep(0.1)
    assert not got, "a page with answers still to come is not handed over"
    store.put_many("m", [("b", completion("B"))])
    time.sleep(0.1)
    assert not got
    failed = Completion(text=None, error="refused", attempts=3, latency_s=0.01)
    ours.send(("sent", str(score_beside._dump(tmp_path, "failures", {"c": failed}))))
    reader.join(timeout=10)
    assert not reader.is_alive()
    (page,) = got
    assert {k: v.text for k, v in page.items()} == {"a": "A", "b": "B", "c": None}
    assert page["c"].error == "refused" and "d" not in page  # d: never answered, never failed
    store.close()


def test_no_fork_to_be_had_scores_after_the_sending(tmp_path, big_data, monkeypatch):
    def refused(*args, **kw):
        raise OSError(11, "Resource temporarily unavailable")

    after = run(tmp_path, big_data, "0", monkeypatch, "after", limit=1_500)
    monkeypatch.setattr(score_beside.ScoringBeside, "start", refused)
    outcome = run(tmp_path, big_data, "1", monkeypatch, "refused", limit=1_500)
    assert outcome.tasks[0].metrics == after.tasks[0].metrics
    assert "scoring" not in json.loads((outcome.run_dir.path / "summary.json").read_text())["run"]


def test_the_child_takes_the_report_s_extract_of_the_lines_it_spills(tmp_path, big_data, monkeypatch):
    """The report's extract of a task's lines is taken in the scoring child, beside the sending, as it
    spills them (evalpipe.report.extract); the run moves it beside samples.jsonl."""
    from evalpipe.report import extract
    from evalpipe.report.runs import load_report_runs
    from evalpipe.results import RunDir

    real = extract.SegmentBuilder.finish

    def finish(self):  # type: ignore[no-untyped-def]
        with (tmp_path / "takers").open("a") as out:
            out.write(f"{os.getpid()}\n")
        return real(self)

    monkeypatch.setattr(extract.SegmentBuilder, "finish", finish)
    outcome = run(tmp_path, big_data, "1", monkeypatch, "extract", limit=1_500)
    takers = [int(pid) for pid in (tmp_path / "takers").read_text().split()]
    assert takers and os.getpid() not in takers, "the extract was not taken by the child"
    folder = outcome.run_dir.path / "samples.extract"
    index = json.loads((folder / "index.json").read_text())
    assert index["size"] == (outcome.run_dir.path / "samples.jsonl").stat().st_size
    assert {p.name for p in folder.iterdir()} == {"index.json", *(index["segments"][0]["name"] + s
                                                                  for s in extract.SUFFIXES)}
    monkeypatch.setenv(extract.ENV, "0")
    alone = load_report_runs([outcome.run_dir.path])
    monkeypatch.setenv(extract.ENV, "1")
    monkeypatch.setattr(RunDir, "iter_samples", lambda *a, **k: (_ for _ in ()).throw(AssertionError("read")))
    from tests.report.test_read_beside import _page, _same_runs

    from_extract = load_report_runs([outcome.run_dir.path])
    _same_runs(from_extract, alone)
    assert _page(from_extract) == _page(alone)

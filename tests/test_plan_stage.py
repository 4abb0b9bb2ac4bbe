"""The staged plan (evalpipe.pipeline.stage) and how the store takes it over and queues what is pending."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalpipe.store.answers import ResponseStore
from evalpipe.config import RunConfig
from evalpipe.pipeline.stage import PREFIX, DuplicateSample, PlanStage, info_json, remove_stale
from evalpipe.records import Completion, Usage
from evalpipe.outcome import RunError
from evalpipe.pipeline.execute import execute
from evalpipe.tasks import registry
from tests.support.scripted_backend import ScriptedBackend


def rows(n: int, start: int = 0) -> list[tuple[str, str, str, str]]:
    return [(f"s{i}", f"k{i % 3}" if i >= 6 else f"k{i}", f'{{"text": "p{i}"}}', info_json(i % 2))
            for i in range(start, start + n)]


def test_staged_rows_come_back_in_order_across_pages_and_a_rewrite_replaces_them(tmp_path):
    stage = PlanStage(tmp_path)
    assert stage.write("t", iter(rows(2500))) == 2500  # more than two pages of 1,024
    back = list(stage.rows("t"))
    assert back == rows(2500)
    assert stage.row("t", 2499) == rows(2500)[-1]
    assert stage.write("t", iter(rows(3, start=7))) == 3
    assert list(stage.rows("t")) == rows(3, start=7)
    stage.update("t", [(1, "new", "{}", info_json(40))])
    assert list(stage.rows("t"))[1] == ("s8", "new", "{}", info_json(40))
    with pytest.raises(IndexError):
        stage.row("t", 3)
    stage.close()
    assert not stage.folder.exists()


def test_a_plan_that_fails_half_way_leaves_nothing_staged(tmp_path):
    stage = PlanStage(tmp_path)
    stage.write("t", iter(rows(4)))

    def failing():
        yield from rows(2000)
        raise ValueError("bad record at line 40,000")

    with pytest.raises(ValueError):
        stage.write("t", failing())
    assert list(stage.rows("t")) == rows(4)  # the earlier plan, untouched
    stage.close()


def test_stages_of_dead_processes_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"{PREFIX}{int(dead.stdout)}-abc"
    live = tmp_path / f"{PREFIX}{os.getpid()}-xyz"
    for folder in (stale, live):
        folder.mkdir()
        (folder / "plan.sqlite").write_text("x")
    remove_stale(tmp_path)
    assert not stale.exists() and live.exists()


def test_the_store_takes_a_staged_plan_and_writes_an_unchanged_one_no_more(tmp_path):
    stage = PlanStage(tmp_path / "results")
    stage.write("t", iter(rows(10)))
    store = ResponseStore(tmp_path / "responses.sqlite")
    store.write_staged_plan("t", stage.path, "t", {"sha": "shared text"})
    assert store.read_plan("t") == [(sid, key, {"truncated_tokens": i % 2}) for i, (sid, key, _, _) in enumerate(rows(10))]
    assert [row for page in store.plan_pages("t", size=3) for row in page] == store.read_plan("t")
    # each key's prompt once (the first sample that asked it), the shared texts
    assert store.prompts(["k0", "k3"]) == {"k0": {"text": "p0"}, "k3": {"text": "p3"}}  # k0 asked again by s6, s9
    assert store._db.execute("SELECT key, text FROM texts").fetchall() == [("sha", "shared text")]
    changes = store._db.total_changes
    store.write_staged_plan("t", stage.path, "t", {"sha": "shared text"})  # a resumed run: the very same plan
    assert store._db.total_changes == changes
    stage.write("t", iter(rows(4)))
    store.write_staged_plan("t", stage.path, "t", {})
    assert store.plan_size("t") == 4
    store.close()
    stage.close()


def test_the_pending_queue_holds_each_unanswered_key_once_in_plan_order(tmp_path):
    stage = PlanStage(tmp_path)
    stage.write("a", iter(rows(9)))  # keys k0…k5, then k0 k1 k2 again
    stage.write("b", iter([("x", "k5", "{}", info_json(0)), ("y", "k7", "{}", info_json(0))]))
    store = ResponseStore(tmp_path / "responses.sqlite")
    for plan in ("a", "b"):
        store.write_staged_plan(plan, stage.path, plan, {})
    store.put_many("m", [("k1", Completion(text="stored", usage=Usage(1, 1)))])
    assert store.unanswered("a") == 7 and store.unanswered("b") == 2
    assert store.queue_pending("q0", ["a"]) == 5
    assert store.queue_pending("q1", ["b"], exclude=["q0"]) == 1  # k5 is q0's
    assert [key for page in store.pending_pages("q0", size=2) for key, _ in page] == ["k0", "k2", "k3", "k4", "k5"]
    assert [(key, prompt) for page in store.pending_pages("q1") for key, prompt in page] == [("k7", "{}")]
    assert store.distinct_keys(["a", "b"]) == 7
    store.close()
    stage.close()


def test_a_run_leaves_no_stage_behind_whether_it_succeeds_or_fails(tmp_path):
    results = tmp_path / "results"
    config = RunConfig(tasks=("ncbi_disease",), model="m", base_url="http://127.0.0.1:9/v1", limit=3)
    asyncio.run(execute(config, lambda c: ScriptedBackend(lambda prompt: "<diseases></diseases>"), results))
    assert [p.name for p in results.iterdir()] == [config.default_run_name()]
    bad = tmp_path / "bad.tsv"
    bad.write_text("word\tO\nword\tB-Nope\n")
    with pytest.raises(Exception, match="bad.tsv"):
        asyncio.run(execute(RunConfig(tasks=("ncbi_disease",), model="m", base_url="http://127.0.0.1:9/v1",
                                      data={"ncbi_disease": str(bad)}, run_name="bad"),
                            lambda c: ScriptedBackend(lambda prompt: ""), results))
    assert sorted(p.name for p in results.iterdir()) == [config.default_run_name()]
    assert not any(Path(results).glob(f"{PREFIX}*"))


def test_a_sample_id_given_twice_is_named_with_both_places(tmp_path):
    stage = PlanStage(tmp_path)
    twice = rows(1500) + [("s3", "k", "{}", info_json(0))]
    with pytest.raises(DuplicateSample, match=r"'s3' is given twice \(samples 4 and 1501\)"):
        stage.write("t", iter(twice))
    assert list(stage.rows("t")) == []
    stage.close()


def test_duplicate_ids_within_a_limit_stop_the_run_before_any_request(tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("id,text,label\n" + "".join(f"{i % 3},note {i},yes\n" for i in range(10)))
    task = tmp_path / "dup.task.yaml"
    task.write_text("name: dup\nkind: classification\ndata: {files: {test: d.csv}, default_dir: .}\n"
                    "fields: {id: id, inputs: {text: text}, label: label}\nlabels: [\"yes\", \"no\"]\n"
                    "template: dup.j2\n")
    (tmp_path / "dup.j2").write_text("{% macro prompt(example, shots) %}{{ example.text }}{% endmacro %}")
    asked = []
    before = dict(registry._TASKS)
    try:
        registry.register_task_file(task)
        with pytest.raises(RunError, match=r"task dup: sample id '0' is given twice \(samples 1 and 4\)"):
            asyncio.run(execute(RunConfig(tasks=("dup",), model="m", base_url="http://127.0.0.1:9/v1", limit=5),
                                lambda c: ScriptedBackend(lambda p: asked.append(p) or "yes"), tmp_path / "results"))
    finally:
        registry._TASKS.clear()
        registry._TASKS.update(before)
    assert asked == []

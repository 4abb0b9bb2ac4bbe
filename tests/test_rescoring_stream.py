"""Data read again: `evalpipe score` beside the stored plan, page by page, gives the run's numbers,
and a run whose data changed under it stops before scoring."""

from __future__ import annotations

import asyncio
import json

import pytest

from evalpipe.config import RunConfig
from evalpipe.rescoring import load_stored, rescore
from evalpipe.pipeline.execute import execute
from tests.support.scripted_backend import ScriptedBackend, last_user_text


def _answer(prompt) -> str:
    text = last_user_text(prompt)
    return "<diseases><disease>cancer</disease></diseases>" if "[3" in text or "[1" in text else "no entity"


def _data(tmp_path, n: int):
    path = tmp_path / "ncbi.tsv"
    path.write_text("".join(f"breast\tB-Disease\ncancer\tI-Disease\n[{i}]\tO\n\n" for i in range(n)))
    return path


def _run(tmp_path, **options) -> tuple:
    config = RunConfig(tasks=("ncbi_disease",), model="m", base_url="http://127.0.0.1:9/v1",
                       data={"ncbi_disease": str(_data(tmp_path, 2500))}, **options)
    outcome = asyncio.run(execute(config, lambda c: ScriptedBackend(_answer), tmp_path / "results"))
    return outcome.run_dir, json.loads(outcome.run_dir.metrics_path(None).read_text())


def test_a_limited_run_rescores_to_its_own_numbers_across_plan_pages(tmp_path):
    run, metrics = _run(tmp_path, limit=2100)  # a prefix of the data, three pages of the plan
    samples = run.samples_path(None).read_text()
    _, (task,) = load_stored(run.path)
    assert task.size == 2100 and task.answered == 2100
    assert [len(c.examples) for c in task.chunks()] == [1024, 1024, 52]
    rescore(run.path)
    assert json.loads(run.metrics_path(None).read_text()) == metrics
    assert run.samples_path(None).read_text() == samples


def test_a_run_of_chosen_ids_rescores_in_its_own_order(tmp_path):
    ids = ("test-2400", "test-7", "test-31")
    run, metrics = _run(tmp_path, ids=ids)
    samples = [json.loads(line)["id"] for line in run.samples_path(None).read_text().splitlines()]
    rescore(run.path)
    assert json.loads(run.metrics_path(None).read_text()) == metrics
    assert [json.loads(line)["id"] for line in run.samples_path(None).read_text().splitlines()] == samples


def test_a_data_file_changed_while_the_run_goes_stops_it_before_scoring_with_every_answer_kept(tmp_path):
    from evalpipe.store.answers import ResponseStore
    from evalpipe.outcome import RunError

    data = _data(tmp_path, 30)

    def answer(prompt) -> str:  # the file is edited while the answers arrive
        data.write_text(data.read_text().replace("cancer\tI-Disease", "cancer\tO", 1))
        return _answer(prompt)

    config = RunConfig(tasks=("ncbi_disease",), model="m", base_url="http://127.0.0.1:9/v1",
                       data={"ncbi_disease": str(data)}, run_name="edited")
    with pytest.raises(RunError, match="changed while the run was going"):
        asyncio.run(execute(config, lambda c: ScriptedBackend(answer), tmp_path / "results"))
    run = tmp_path / "results" / "edited"
    assert not (run / "metrics.json").exists()
    store = ResponseStore(run / "responses.sqlite")
    assert len(store) == 30  # nothing lost
    store.close()

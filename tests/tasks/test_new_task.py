"""`evalpipe new-task`: a user's CSV becomes a running task (scaffold, then run --task-file), and the
scaffold's clear errors for a missing field, an empty file and a label field that is free text."""

from __future__ import annotations

import asyncio
import csv
import json
import time
from pathlib import Path

import pytest

from evalpipe.config import RunConfig
from evalpipe.data.errors import DataError
from evalpipe.pipeline.execute import execute
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks import registry
from evalpipe.tasks.taskfile.scaffold import ScaffoldError, identifier, new_task
from tests.support.fake_openai import FakeOpenAIProcess
from tests.support.scripted_backend import ScriptedBackend, last_user_text
from tests.test_cli import evalpipe, only_run

ROWS = [("a1", "Patient smokes 20 cigarettes a day.", "current"), ("a2", "Never smoked.", "never"),
        ("a3", "Stopped smoking in 2001.", "former"), ("a4", "Smokes a pipe daily.", "current"),
        ("a5", "Lifelong non-smoker.", "never"), ("a6", "Ex-smoker since 2015.", "former")]


def write_csv(path: Path, rows=ROWS, header=("Note ID", "Note text", "Smoking status")) -> Path:
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture(autouse=True)
def forget_user_tasks():
    before = dict(registry._TASKS)
    yield
    registry._TASKS.clear()
    registry._TASKS.update(before)


def test_identifiers_are_template_names():
    taken: set[str] = set()
    assert [identifier(f, taken) for f in ("Note text", "note_text", "2nd field", "options")] == \
        ["note_text", "note_text_2", "f_2nd_field", "options_2"]


def test_scaffold_inspects_writes_and_runs(tmp_path):
    data = write_csv(tmp_path / "notes.csv")
    made = new_task("smoking", "classification", data, ["Note text"], "Smoking status", tmp_path / "tasks",
                    id_field="Note ID")
    text = made.task_file.read_text()
    assert "6 records; fields: Note ID, Note text, Smoking status; labels: current (2), former (2), never (2)" in text
    assert made.command == (f"./run.sh run --task-file {made.task_file} --data-dir {tmp_path.resolve()} "
                            "--base-url URL --model MODEL")
    spec = registry.register_task_file(made.task_file)

    def answer(prompt) -> str:  # right except for the ex-smoker, called current
        note = last_user_text(prompt).rsplit("Note text: ", 1)[1].lower()
        return "never" if "never" in note or "non-smoker" in note else "former" if "stopped" in note else "current"

    backend = ScriptedBackend(answer, model="m")
    config = RunConfig(tasks=(spec.name,), model="m", base_url="http://127.0.0.1:1/v1", data_dir=str(tmp_path))
    outcome = asyncio.run(execute(config, lambda _: backend, tmp_path / "results"))
    metrics = outcome.metrics["smoking"]
    assert metrics["accuracy"] == pytest.approx(5 / 6) and metrics["n"] == 6
    # current: tp 2, fp 1 → F1 0.8; former: tp 1, fn 1 → F1 2/3; never: F1 1
    assert metrics["macro_f1"] == pytest.approx((0.8 + 2 / 3 + 1) / 3)
    samples = [json.loads(line) for line in (outcome.run_dir.path / "samples.jsonl").read_text().splitlines()]
    assert [s["id"] for s in samples] == ["a1", "a2", "a3", "a4", "a5", "a6"]


def test_missing_field_is_named_with_a_suggestion(tmp_path):
    data = write_csv(tmp_path / "notes.csv")
    with pytest.raises(ScaffoldError, match=r"no field 'Note txt' for --input-field \(did you mean 'Note text'\?\); "
                                            r"the file's fields: Note ID, Note text, Smoking status"):
        new_task("t", "classification", data, ["Note txt"], "Smoking status", tmp_path)
    with pytest.raises(ScaffoldError, match="no field 'label' for --label-field"):
        new_task("t", "classification", data, ["Note text"], "label", tmp_path)


def test_empty_file_and_header_only(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="empty.jsonl: no records"):
        new_task("t", "classification", empty, ["text"], "label", tmp_path)
    header_only = write_csv(tmp_path / "h.csv", rows=[])
    with pytest.raises(DataError, match="h.csv: no records"):
        new_task("t", "classification", header_only, ["Note text"], "Smoking status", tmp_path)


def test_a_free_text_label_field_suggests_generation(tmp_path):
    rows = [(f"n{i}", f"note {i}", f"summary number {i}") for i in range(150)]
    data = write_csv(tmp_path / "notes.csv", rows=rows)
    with pytest.raises(ScaffoldError, match=r"has 150 distinct values in 150 records: that is free text, not a label "
                                            r"set\. .*use --kind generation"):
        new_task("t", "classification", data, ["Note text"], "Smoking status", tmp_path)
    made = new_task("t", "generation", data, ["Note text"], "Smoking status", tmp_path / "gen")
    assert registry.register_task_file(made.task_file).scorings["default"].description.startswith("ROUGE")


def test_refuses_to_overwrite_and_checks_the_name(tmp_path):
    data = write_csv(tmp_path / "notes.csv")
    new_task("smoking", "classification", data, ["Note text"], "Smoking status", tmp_path / "t")
    with pytest.raises(ScaffoldError, match="exists; choose another name or pass --force"):
        new_task("smoking", "classification", data, ["Note text"], "Smoking status", tmp_path / "t")
    with pytest.raises(ScaffoldError, match="task name 'Smoking'"):
        new_task("Smoking", "classification", data, ["Note text"], "Smoking status", tmp_path / "t")


def test_multiple_choice_from_option_columns(tmp_path):
    rows = [("Which organ makes insulin?", "Liver", "Pancreas", "Heart", "B"),
            ("Which vitamin prevents scurvy?", "C", "D", "K", "A")]
    data = write_csv(tmp_path / "q.csv", rows=rows, header=("question", "o1", "o2", "o3", "correct"))
    made = new_task("quiz", "multiple_choice", data, ["question"], "correct", tmp_path / "t",
                    option_fields=["o1", "o2", "o3"])
    examples = registry.register_task_file(made.task_file).load(LoadOptions(data_dir=tmp_path)).examples
    assert [e.gold for e in examples] == ["B", "A"] and examples[1].inputs["options"][0] == {"letter": "A", "text": "C"}


def test_a_user_csv_becomes_a_running_task_from_the_command_line(tmp_path):
    """The whole user path, as commands: new-task, then run --task-file against a loopback server."""
    started = time.monotonic()
    data = write_csv(tmp_path / "notes.csv")
    made = evalpipe("new-task", "smoking", "--kind", "classification", "--data", str(data),
                    "--input-field", "Note text", "--label-field", "Smoking status", "--out", str(tmp_path / "tasks"))
    assert made.returncode == 0, made.stderr
    assert "labels: current (2), former (2), never (2)" in made.stdout
    assert f"--task-file {tmp_path / 'tasks' / 'smoking.yaml'}" in made.stdout
    script = tmp_path / "answers.json"
    script.write_text(json.dumps({"20 cigarettes": "current", "Never smoked": "never", "Stopped smoking": "former",
                                  "pipe": "Current.", "non-smoker": "never", "Ex-smoker": "I am not sure."}))
    with FakeOpenAIProcess(latency=0.0, script=script) as server:
        result = evalpipe("run", "--task-file", str(tmp_path / "tasks" / "smoking.yaml"), "--data-dir", str(tmp_path),
                          "--base-url", server.url,
                          "--model", "fake-model", "--results-dir", str(tmp_path / "results"))
    assert result.returncode == 0, result.stderr
    metrics = json.loads((only_run(tmp_path / "results") / "metrics.json").read_text())["smoking"]
    assert metrics["accuracy"] == pytest.approx(5 / 6) and metrics["parse_failure_rate"] == pytest.approx(1 / 6)
    assert f"--data-dir {tmp_path.resolve()}" in made.stdout.replace("\n", "")
    listed = evalpipe("tasks", "--tasks-dir", str(tmp_path / "tasks"))
    assert listed.returncode == 0 and "smoking" in listed.stdout
    assert time.monotonic() - started < 60


def test_data_beside_the_new_task_is_found_without_data_dir(tmp_path):
    (tmp_path / "tasks").mkdir()
    data = write_csv(tmp_path / "tasks" / "notes.csv")
    made = new_task("smoking", "classification", data, ["Note text"], "Smoking status", tmp_path / "tasks",
                    id_field="Note ID")
    assert "--data-dir" not in made.command and "default_dir: ." in made.task_file.read_text()
    assert len(list(registry.register_task_file(made.task_file).load(LoadOptions()).examples)) == 6

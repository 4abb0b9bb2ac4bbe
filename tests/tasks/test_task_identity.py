"""Two task files with one `name` (issue 22, item 5): one invocation naming both is a one-line error
naming both files; run one after the other, they never share (and overwrite) one run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalpipe.cli import app
from evalpipe.config import RunConfig
from evalpipe.tasks import registry
from tests.tasks.test_task_files import NOTES, TEMPLATE, run, task_text


@pytest.fixture(autouse=True)
def forget_user_tasks():
    registry.load_builtin_tasks()
    before = dict(registry._TASKS)
    yield
    registry._TASKS.clear()
    registry._TASKS.update(before)


def task_folder(root: Path, notes) -> Path:
    root.mkdir(parents=True)
    (root / "notes.jsonl").write_text(
        "".join(json.dumps({"note_id": i, "text": t, "status": s}) + "\n" for i, t, s in notes), encoding="utf-8")
    (root / "smoking.j2").write_text(TEMPLATE, encoding="utf-8")
    (root / "smoking.yaml").write_text(task_text(), encoding="utf-8")
    return root / "smoking.yaml"


def test_two_files_of_one_name_in_one_invocation_is_one_line_naming_both(tmp_path):
    a = task_folder(tmp_path / "a", NOTES)
    b = task_folder(tmp_path / "b", NOTES[:3])
    result = CliRunner().invoke(app, ["run", "--task-file", str(a), "--task-file", str(b), "--base-url",
                                      "http://127.0.0.1:9/v1", "--model", "m", "--results-dir",
                                      str(tmp_path / "results")], catch_exceptions=True)
    assert result.exit_code != 0 and "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert "defined twice" in text and str(a.resolve()) in result.output.replace("\n", "") \
        and str(b.resolve()) in result.output.replace("\n", "")


def test_two_definitions_of_one_name_never_share_a_run_directory(tmp_path):
    config = RunConfig(tasks=("smoking",), model="m", base_url="http://127.0.0.1:1/v1")
    registry.register_task_file(task_folder(tmp_path / "a", NOTES))
    first, _ = run(config, tmp_path / "results")
    registry._TASKS.pop("smoking")
    registry.register_task_file(task_folder(tmp_path / "b", NOTES[:3]))
    (tmp_path / "b" / "smoking.yaml").write_text(task_text(**{"Smoking status": "Smoking (copy)"}), encoding="utf-8")
    registry._TASKS.pop("smoking")
    registry.register_task_file(tmp_path / "b" / "smoking.yaml")
    second, _ = run(config, tmp_path / "results")
    assert first.run_dir.path != second.run_dir.path
    assert first.metrics["smoking"]["n"] == 6 and second.metrics["smoking"]["n"] == 3
    kept = json.loads((first.run_dir.path / "metrics.json").read_text())
    assert kept["smoking"]["n"] == 6  # the first run's results are untouched
    assert not any("--limit/--ids" in note for note in second.notes)
    again, backend = run(config, tmp_path / "results")  # the same file again: its own run, resumed
    assert again.run_dir.path == second.run_dir.path and not backend.calls


def test_shipped_tasks_keep_their_run_names():
    from evalpipe.pipeline.execute import run_dir_for
    from evalpipe.tasks.registry import get_task

    config = RunConfig(tasks=("ncbi_disease",), model="m")
    assert run_dir_for(config, Path("r"), [get_task("ncbi_disease")]).path.name == config.default_run_name()

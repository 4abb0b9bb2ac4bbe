"""A task file reads only beneath its own folder and the folders the user named (issue 22, item 2).

Each test reproduces a probe that read a file it had no business reading (``/proc/self/environ``
sent the API key to the endpoint): now one error naming the task file, its line and the field,
before any request.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalpipe.cli import app
from evalpipe.data.errors import DataError
from evalpipe.tasks import registry
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.taskfile.build import load_task_file
from evalpipe.tasks.taskfile.source import TaskFileError
from tests.tasks.test_task_files import NOTES, TEMPLATE, task_text

URL = "http://127.0.0.1:9/v1"  # nothing listens there: a request would fail, so none must be made


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    task = tmp_path / "task"
    task.mkdir()
    (task / "notes.jsonl").write_text(
        "".join(json.dumps({"note_id": i, "text": t, "status": s}) + "\n" for i, t, s in NOTES), encoding="utf-8")
    (task / "smoking.j2").write_text(TEMPLATE, encoding="utf-8")
    (tmp_path / "secret.jsonl").write_text(json.dumps({"note_id": "s", "text": "SECRET", "status": "yes"}) + "\n",
                                           encoding="utf-8")
    (tmp_path / "secret.j2").write_text(TEMPLATE.replace("Note:", "SECRET"), encoding="utf-8")
    return task


@pytest.fixture(autouse=True)
def forget_user_tasks():
    registry.load_builtin_tasks()
    before = dict(registry._TASKS)
    yield
    registry._TASKS.clear()
    registry._TASKS.update(before)


def write(folder: Path, **changes: str) -> Path:
    path = folder / "smoking.yaml"
    path.write_text(task_text(**changes), encoding="utf-8")
    return path


def build_error(folder: Path, **changes: str) -> str:
    path = write(folder, **changes)
    with pytest.raises(TaskFileError) as error:
        load_task_file(path)
    message = str(error.value)
    assert message.startswith(f"{path}:") and "\n" not in message, message
    return message


def load_error(folder: Path, options: LoadOptions = LoadOptions(), **changes: str) -> str:
    spec = load_task_file(write(folder, **changes))
    with pytest.raises(DataError) as error:
        spec.load(options)
    message = str(error.value)
    assert "\n" not in message and "SECRET" not in message
    return message


@pytest.mark.parametrize("name", ["/proc/self/environ", "/etc/passwd", "~/notes.jsonl"])
def test_an_absolute_data_path_is_refused_naming_line_and_field(folder, name):
    message = build_error(folder, **{"test: notes.jsonl": f"test: {name}"})
    assert ":6: data.files.test:" in message and "absolute path" in message


def test_a_dotdot_escape_is_refused_with_the_task_files_line(folder):
    message = load_error(folder, **{"test: notes.jsonl": "test: ../secret.jsonl"})
    assert message.startswith(f"{folder / 'smoking.yaml'}:6: data.files.test:")
    assert "outside the folders a task file may read" in message


def test_a_symlink_out_of_the_folder_is_refused(folder):
    (folder / "notes.jsonl").unlink()
    (folder / "notes.jsonl").symlink_to(folder.parent / "secret.jsonl")
    message = load_error(folder)
    assert ":6: data.files.test:" in message and "secret.jsonl" in message


def test_a_symlink_to_proc_is_refused(folder):
    (folder / "notes.jsonl").unlink()
    (folder / "notes.jsonl").symlink_to("/proc/self/environ")
    assert ":6: data.files.test:" in load_error(folder)


@pytest.mark.parametrize("key,value,field", [
    ("  default_dir: .", "  default_dir: /etc", "data.default_dir"),
    ("  default_dir: .", "  default_dir: ../../../../../../etc", "data.default_dir"),
    ("template: smoking.j2", "template: /etc/passwd", "template"),
    ("template: smoking.j2", "template: ../secret.j2", "template"),
])
def test_folders_and_templates_out_of_the_folder_are_refused(folder, key, value, field):
    message = build_error(folder, **{key: value})
    assert f": {field}: " in message


def test_a_symlinked_template_is_refused(folder):
    (folder / "smoking.j2").unlink()
    (folder / "smoking.j2").symlink_to(folder.parent / "secret.j2")
    assert ":14: template:" in build_error(folder)


def test_a_template_that_includes_a_symlink_out_is_refused(folder):
    from evalpipe.prompting import PromptRenderer, TemplateError
    from evalpipe.records import GenerationParams

    (folder / "inc.j2").symlink_to(folder.parent / "secret.j2")
    (folder / "smoking.j2").write_text('{% include "inc.j2" %}' + TEMPLATE, encoding="utf-8")
    spec = load_task_file(write(folder))
    with pytest.raises(TemplateError, match="outside the folders"):
        PromptRenderer(spec, [], GenerationParams(max_tokens=4))


def test_a_fifo_in_the_folder_is_not_read(folder):
    (folder / "notes.jsonl").unlink()
    os.mkfifo(folder / "notes.jsonl")
    assert "not a regular file" in load_error(folder)


def test_files_under_the_users_data_dir_are_allowed(folder, tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "other").mkdir()
    (data / "other" / "notes.jsonl").write_text((folder / "notes.jsonl").read_text(), encoding="utf-8")
    spec = load_task_file(write(folder, **{"test: notes.jsonl": "test: ../other/notes.jsonl",
                                           "  default_dir: .": "  dir: sub"}))
    examples = list(spec.load(LoadOptions(data_dir=data)).examples)
    assert [e.id for e in examples] == [i for i, _, _ in NOTES]


def test_a_path_the_user_gives_is_trusted_but_must_be_a_regular_file(folder, tmp_path):
    spec = load_task_file(write(folder))
    outside = tmp_path / "secret.jsonl"  # outside the task folder, but the user chose it
    assert [e.id for e in spec.load(LoadOptions(paths={"eval": outside})).examples] == ["s"]
    with pytest.raises(DataError, match="not a regular file"):
        spec.load(LoadOptions(paths={"eval": Path("/dev/zero")}))


def test_the_cli_refuses_proc_self_environ_before_any_request(folder, tmp_path):
    path = write(folder, **{"test: notes.jsonl": "test: /proc/self/environ"})
    result = CliRunner().invoke(app, ["run", "--task-file", str(path), "--base-url", URL, "--model", "m",
                                      "--results-dir", str(tmp_path / "results")], catch_exceptions=True)
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert f"{path}:6: data.files.test:" in result.output and "absolute path" in result.output
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("samples.jsonl"))

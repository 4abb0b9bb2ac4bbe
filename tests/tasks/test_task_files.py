"""Task files: the schema's errors (file, line, field), loading, where tasks live, and user tasks getting
everything a shipped task has (resume, score, report intervals, credentialed guard)."""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from evalpipe.config import RunConfig
from evalpipe.data.errors import DataError
from evalpipe.outcome import RunError
from evalpipe.report.runs import load_report_runs
from evalpipe.rescoring import rescore
from evalpipe.pipeline.execute import execute
from evalpipe.tasks import registry
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.taskfile.build import json_schema, load_task_file
from evalpipe.tasks.taskfile.source import TaskFileError
from tests.support.scripted_backend import ScriptedBackend, last_user_text

TEMPLATE = """{%- macro prompt(example, shots) -%}
{% for shot in shots %}Note: {{ shot.inputs.note }}
Answer: {{ shot.target }}
{% endfor %}Note: {{ example.note }}
Answer:
{%- endmacro -%}
"""

NOTES = [("n1", "Smokes a pack a day.", "yes"), ("n2", "Never smoked.", "no"), ("n3", "Quit smoking 1990.", "no"),
         ("n4", "Smokes cigars daily.", "yes"), ("n5", "Denies tobacco.", "no"), ("n6", "Heavy smoker.", "yes")]


def task_text(**changes: str) -> str:
    text = """name: smoking
kind: classification
description: Smoking status of a note.
data:
  files:
    test: notes.jsonl
  default_dir: .
fields:
  inputs:
    note: text
  label: status
  id: note_id
labels: ["yes", "no"]
template: smoking.j2
generation:
  max_tokens: 8
"""
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    tmp_path = tmp_path / "task"
    tmp_path.mkdir()
    (tmp_path / "notes.jsonl").write_text(
        "".join(json.dumps({"note_id": i, "text": t, "status": s}) + "\n" for i, t, s in NOTES), encoding="utf-8")
    (tmp_path / "smoking.j2").write_text(TEMPLATE, encoding="utf-8")
    (tmp_path / "smoking.yaml").write_text(task_text(), encoding="utf-8")
    return tmp_path


@pytest.fixture(autouse=True)
def forget_user_tasks():
    """Each test registers its own task files; the registry is shared by the process."""
    before = dict(registry._TASKS)
    yield
    registry._TASKS.clear()
    registry._TASKS.update(before)


def error_of(folder: Path, text: str) -> str:
    path = folder / "smoking.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TaskFileError) as error:
        load_task_file(path)
    return str(error.value)


# ---- the schema's errors ---------------------------------------------------------------------

def test_unknown_key_names_line_and_suggests(folder):
    message = error_of(folder, task_text(**{"  max_tokens: 8": "  max_token: 8"}))
    assert message == f"{folder / 'smoking.yaml'}:16: generation.max_token: unknown key (did you mean 'max_tokens'?)"


def test_missing_key_and_wrong_type_are_all_reported(folder):
    text = task_text(**{"labels: [\"yes\", \"no\"]\n": "", "  max_tokens: 8": "  max_tokens: eight"})
    lines = error_of(folder, text).splitlines()
    assert any(line.endswith(":1: labels: missing (required)") for line in lines)
    assert any(":15: generation.max_tokens: Input should be a valid integer" in line for line in lines)


def test_yaml_booleans_where_text_is_expected_say_quote_it(folder):
    message = error_of(folder, task_text(**{'labels: ["yes", "no"]': "labels:\n  - yes\n  - no"}))
    assert ":14: labels[0]:" in message and "quote it" in message


def test_duplicate_key_bad_yaml_unknown_kind(folder):
    assert ":3: kind: given twice" in error_of(folder, task_text(**{"kind: classification": "kind: classification\nkind: generation"}))
    assert ":14: not valid YAML" in error_of(folder, task_text(**{"labels: [\"yes\", \"no\"]": "labels: [\"yes\", \"no\""}))
    message = error_of(folder, task_text(**{"kind: classification": "kind: clasification"}))
    assert ":2: kind: unknown task kind 'clasification'" in message and "did you mean 'classification'" in message


def test_template_missing_and_metric_not_of_the_kind(folder):
    assert ":14: template:" in error_of(folder, task_text(**{"template: smoking.j2": "template: nope.j2"}))
    message = error_of(folder, task_text(**{"generation:": "metrics: [rouge1]\ngeneration:"}))
    assert "metrics: 'rouge1' is not a metric of kind classification" in message


def test_aliases_must_point_to_labels_and_long_field_be_an_input(folder):
    message = error_of(folder, task_text(**{"template:": "aliases: {y: maybe}\ntemplate:"}))
    assert "aliases: 'maybe' not in labels" in message
    assert "long_field 'notes' is not an input" in error_of(folder, task_text(**{"template:": "long_field: notes\ntemplate:"}))


def test_json_schema_covers_every_kind():
    schema = json_schema()
    titles = set(schema["$defs"])
    assert {"ClassificationTask", "MultipleChoiceTask", "GenerationTask", "CodeListTask"} <= titles
    described = schema["$defs"]["DataSpec"]["properties"]["files"]["description"]
    assert "--data-dir" in described
    assert schema["discriminator"]["propertyName"] == "kind"


# ---- loading ---------------------------------------------------------------------------------

def test_loads_ids_inputs_gold_and_provenance(folder):
    spec = load_task_file(folder / "smoking.yaml")
    data = spec.load(LoadOptions()).materialized()
    assert [ex.id for ex in data.examples] == [i for i, _, _ in NOTES]
    assert data.examples[1].inputs == {"note": "Never smoked."} and data.examples[1].gold == "no"
    assert data.examples[1].meta == {"file": str(folder / "notes.jsonl"), "line": 2, "row": 1}
    assert spec.task_file == (folder / "smoking.yaml").resolve() and spec.template_dir == folder.resolve()


def test_data_errors_name_file_line_field(folder):
    (folder / "notes.jsonl").write_text('{"note_id": "a", "text": "x", "status": "yes"}\n'
                                        '{"note_id": "b", "text": "  ", "status": "no"}\n', encoding="utf-8")
    spec = load_task_file(folder / "smoking.yaml")
    with pytest.raises(DataError, match=r"notes.jsonl:2: text: empty"):
        spec.load(LoadOptions()).materialized()
    (folder / "notes.jsonl").write_text('{"note_id": "a", "text": "x", "status": "perhaps"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"notes.jsonl:1: status: unknown label 'perhaps' \(expected one of yes, no\)"):
        spec.load(LoadOptions()).materialized()


def test_held_out_shots_are_seeded_and_never_scored(folder):
    (folder / "smoking.yaml").write_text(task_text(**{"template:": "shots: {count: 2, source: held_out, seed: 3}\n"
                                                                   "template:"}), encoding="utf-8")
    data = load_task_file(folder / "smoking.yaml").load(LoadOptions()).materialized()
    assert len(data.examples) == 4 and len(data.shot_pool) == 2
    assert not {e.id for e in data.examples} & {e.id for e in data.shot_pool}
    assert [e.meta["shuffle_position"] for e in data.shot_pool] == [0, 1]
    assert [e.id for e in data.examples] == sorted(e.id for e in data.examples)  # file order


def test_shots_from_a_train_split_missing_file_is_named(folder):
    (folder / "smoking.yaml").write_text(task_text(**{
        "    test: notes.jsonl": "    test: notes.jsonl\n    train: train.jsonl",
        "template:": "shots: {count: 1, source: train}\ntemplate:"}), encoding="utf-8")
    spec = load_task_file(folder / "smoking.yaml")
    with pytest.raises(DataError, match=r"train.jsonl not found \(the file the few-shot examples come from; or "
                                        r"--shots 0\).*--data smoking:shots=PATH"):
        spec.load(LoadOptions()).materialized()
    assert "train.jsonl not found" in spec.data_problem(LoadOptions())
    assert spec.load(LoadOptions(shots=0)).shot_pool == ()
    shutil.copy(folder / "notes.jsonl", folder / "train.jsonl")
    assert len(spec.load(LoadOptions()).shot_pool) == 6


def test_csv_with_alternative_column_names_and_header_check(folder):
    (folder / "notes.csv").write_text("id,Note Text,status\na,x,yes\nb,y,no\n", encoding="utf-8")
    text = task_text(**{"notes.jsonl": "notes.csv", "    note: text": "    note: [text, Note Text]",
                        "  id: note_id": "  id: id"})
    (folder / "smoking.yaml").write_text(text, encoding="utf-8")
    assert [e.inputs["note"] for e in load_task_file(folder / "smoking.yaml").load(LoadOptions()).examples] == ["x", "y"]
    (folder / "notes.csv").write_text("id,body,status\na,x,yes\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"notes.csv:1: text: missing column \(header has: id, body, status\)"):
        load_task_file(folder / "smoking.yaml").load(LoadOptions()).materialized()


# ---- where tasks live ------------------------------------------------------------------------

def test_tasks_dir_from_the_environment_and_name_clashes(folder, monkeypatch):
    monkeypatch.setenv("EVALPIPE_TASKS_DIR", str(folder))
    monkeypatch.setattr(registry, "_loaded", False)
    assert registry.get_task("smoking").task_file == (folder / "smoking.yaml").resolve()
    clash = folder / "other"
    clash.mkdir()
    (clash / "smoking.yaml").write_text(task_text(**{"default_dir: .": "default_dir: .."}), encoding="utf-8")
    shutil.copy(folder / "smoking.j2", clash / "smoking.j2")
    with pytest.raises(ValueError, match="task 'smoking' is defined twice"):
        registry.register_task_file(clash / "smoking.yaml")
    assert registry.register_task_file(folder / "smoking.yaml") is registry.get_task("smoking")


def test_hook_from_a_file_beside_the_task(folder):
    (folder / "my_hooks.py").write_text(
        "from dataclasses import replace\n"
        "def longer(spec, task):\n"
        "    return replace(spec, max_tokens=spec.max_tokens * 2, description=task.description + ' (hooked)')\n",
        encoding="utf-8")
    (folder / "smoking.yaml").write_text(task_text(**{"template:": "hook: my_hooks.py:longer\ntemplate:"}),
                                         encoding="utf-8")
    spec = load_task_file(folder / "smoking.yaml")
    assert spec.max_tokens == 16 and spec.description.endswith("(hooked)")
    (folder / "smoking.yaml").write_text(task_text(**{"template:": "hook: my_hooks.py:missing\ntemplate:"}),
                                         encoding="utf-8")
    with pytest.raises(TaskFileError, match=r":14: hook: cannot load my_hooks.py:missing"):
        load_task_file(folder / "smoking.yaml")


# ---- a user task gets everything a shipped one has ------------------------------------------

def answer_from_note(prompt) -> str:
    """Right on every note but one: 'Quit smoking' is answered yes."""
    note = last_user_text(prompt).rsplit("Note: ", 1)[1]
    return "yes" if "smok" in note.lower() and "Never" not in note else "no"


def run(config: RunConfig, root: Path, responder=answer_from_note):
    backend = ScriptedBackend(responder, model=config.model)
    outcome = asyncio.run(execute(config, lambda _: backend, root))
    return outcome, backend


def test_user_task_runs_resumes_scores_and_reports_intervals(folder, tmp_path):
    registry.register_task_file(folder / "smoking.yaml")
    config = RunConfig(tasks=("smoking",), model="m", base_url="http://127.0.0.1:1/v1")
    outcome, backend = run(config, tmp_path / "results")
    metrics = outcome.metrics["smoking"]
    # n3 "Quit smoking 1990." (gold no) is answered yes: 5 of 6 right; macro-F1 over yes/no:
    # yes: tp 3, fp 1, fn 0 → F1 6/7; no: tp 2, fp 0, fn 1 → F1 4/5
    assert metrics["accuracy"] == pytest.approx(5 / 6)
    assert metrics["macro_f1"] == pytest.approx((6 / 7 + 4 / 5) / 2)
    assert len(backend.calls) == 6
    recorded = json.loads((outcome.run_dir.path / "config.json").read_text())["tasks"]["smoking"]
    assert recorded["task_file"] == str((folder / "smoking.yaml").resolve()) and len(recorded["task_file_sha256"]) == 64
    again, backend = run(config, tmp_path / "results")
    assert len(backend.calls) == 0 and again.metrics["smoking"] == metrics  # resumed from the store
    (report,) = load_report_runs([outcome.run_dir.path])
    assert set(report.resample["smoking"].aggregations) >= {"accuracy", "macro_f1", "parse_failure_rate"}
    assert rescore(outcome.run_dir.path).metrics["smoking"] == metrics


def test_score_after_the_task_file_moved_or_changed(folder, tmp_path):
    registry.register_task_file(folder / "smoking.yaml")
    config = RunConfig(tasks=("smoking",), model="m", base_url="http://127.0.0.1:1/v1")
    outcome, _ = run(config, tmp_path / "results")
    registry._TASKS.pop("smoking")  # a new process: the task is known only from config.json
    assert rescore(outcome.run_dir.path).metrics["smoking"]["n"] == 6  # re-built from the recorded path
    registry._TASKS.pop("smoking")
    moved = tmp_path / "moved"
    shutil.move(folder, moved)
    with pytest.raises(KeyError, match=r"which is not there any more .*--task-file PATH"):
        rescore(outcome.run_dir.path)
    (moved / "smoking.yaml").write_text(task_text(**{"Smoking status": "Smoking status (edited)"}), encoding="utf-8")
    registry.register_task_file(moved / "smoking.yaml")
    rescored = rescore(outcome.run_dir.path)
    assert rescored.metrics["smoking"]["n"] == 6
    assert any("changed since the run" in note for note in rescored.notes)


def test_credentialed_user_task_refuses_a_remote_endpoint(folder, tmp_path):
    (folder / "smoking.yaml").write_text(task_text(**{"template:": "credentialed: true\ntemplate:"}), encoding="utf-8")
    registry.register_task_file(folder / "smoking.yaml")
    config = RunConfig(tasks=("smoking",), model="m", base_url="http://8.8.8.8/v1")
    with pytest.raises(RunError, match="credentialed"):
        run(config, tmp_path / "results")
    allowed = replace(config, allow_external_endpoint=True)
    assert run(allowed, tmp_path / "results")[0].metrics["smoking"]["n"] == 6


def test_inline_template(folder, tmp_path):
    inline = "template_text: |\n" + "".join(f"  {line}\n" for line in TEMPLATE.splitlines())
    (folder / "smoking.yaml").write_text(task_text(**{"template: smoking.j2\n": inline}), encoding="utf-8")
    spec = registry.register_task_file(folder / "smoking.yaml")
    assert spec.template_source is not None
    outcome, _ = run(RunConfig(tasks=("smoking",), model="m", base_url="http://127.0.0.1:1/v1"), tmp_path / "r")
    assert outcome.metrics["smoking"]["accuracy"] == pytest.approx(5 / 6)
    recorded = json.loads((outcome.run_dir.path / "config.json").read_text())["tasks"]["smoking"]
    assert recorded["template"].endswith("smoking.yaml") and len(recorded["template_sha256"]) == 64


def test_docs_explain_every_key():
    """docs/tasks.md names every key of the schema (common, nested and each kind's own)."""
    import re

    from evalpipe.tasks.kinds.base import all_kinds
    from evalpipe.tasks.kinds.multiple_choice import OptionsSpec
    from evalpipe.tasks.taskfile.schema import DataSpec, FieldsSpec, GenerationSpec, ShotsSpec, TaskFile

    text = (Path(__file__).resolve().parents[2] / "docs" / "tasks.md").read_text(encoding="utf-8")
    models = [TaskFile, DataSpec, FieldsSpec, ShotsSpec, GenerationSpec, OptionsSpec,
              *(kind.model for kind in all_kinds().values())]
    keys = {key for model in models for key in model.model_fields}
    missing = sorted(k for k in keys if not re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-])", text))
    assert not missing, f"docs/tasks.md does not mention: {missing}"
    assert set(all_kinds()) <= {m.group(1) for m in re.finditer(r"^### (\w+)$", text, re.M)}


def test_score_needs_no_shot_file(folder, tmp_path):
    """Shots are in the stored prompts: re-scoring works after the train file is gone."""
    (folder / "train.jsonl").write_text('{"note_id": "t1", "text": "Smokes.", "status": "yes"}\n'
                                        '{"note_id": "t2", "text": "Never.", "status": "no"}\n', encoding="utf-8")
    (folder / "smoking.yaml").write_text(task_text(**{
        "    test: notes.jsonl": "    test: notes.jsonl\n    train: train.jsonl",
        "template:": "shots: {count: 2, source: train}\ntemplate:"}), encoding="utf-8")
    registry.register_task_file(folder / "smoking.yaml")
    outcome, _ = run(RunConfig(tasks=("smoking",), model="m", base_url="http://127.0.0.1:1/v1"), tmp_path / "r")
    (folder / "train.jsonl").unlink()
    assert rescore(outcome.run_dir.path).metrics["smoking"] == outcome.metrics["smoking"]


@pytest.mark.parametrize("loader", ["libyaml", "pure Python"])
def test_libyaml_and_pure_python_loaders_read_every_shipped_task_file_alike(monkeypatch, loader):
    """evalpipe uses libyaml's loader where PyYAML has it; the pure-Python one must read the same
    values and the same lines, and name the same line of a YAML error."""
    import yaml

    from evalpipe.tasks.taskfile import source

    if loader == "libyaml" and not hasattr(yaml, "CSafeLoader"):
        pytest.skip("PyYAML was built without libyaml")
    monkeypatch.setattr(source, "_Loader", yaml.CSafeLoader if loader == "libyaml" else yaml.SafeLoader)
    files = sorted(Path("prompts").rglob("*.task.yaml"))
    assert len(files) >= 10
    for path in files:
        parsed = source.read_task_source(path)
        assert parsed.data == yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader), path
        # the line recorded for every top-level key is where it is written
        lines = path.read_text(encoding="utf-8").splitlines()
        for key in parsed.data:
            assert lines[parsed.lines[(key,)] - 1].startswith(f"{key}:"), (path, key)
    with pytest.raises(TaskFileError, match=r"broken.yaml:4: not valid YAML: .*expected ',' or '\]'"):
        source.parse_task_text('name: x\nkind: generation\nlabels: ["yes", "no"\n', Path("broken.yaml"))

"""Bounded inputs (issue 22, items 3, 6, 11, 12, 13): YAML alias bombs, template denial of service,
JSON nesting, the readers' edge cases. Each test reproduces a probe that hung, ate memory, crashed
with a traceback or read the wrong thing; now each is one error naming the file (and line)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalpipe.tasks import registry
from evalpipe.tasks.taskfile import source
from evalpipe.tasks.taskfile.build import load_task_file
from evalpipe.tasks.taskfile.source import TaskFileError
from tests.tasks.test_task_files import NOTES, TEMPLATE, task_text

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "notes.jsonl").write_text(
        "".join(json.dumps({"note_id": i, "text": t, "status": s}) + "\n" for i, t, s in NOTES), encoding="utf-8")
    (tmp_path / "smoking.j2").write_text(TEMPLATE, encoding="utf-8")
    (tmp_path / "smoking.yaml").write_text(task_text(), encoding="utf-8")
    return tmp_path


@pytest.fixture(autouse=True)
def forget_user_tasks():
    registry.load_builtin_tasks()
    before = dict(registry._TASKS)
    yield
    registry._TASKS.clear()
    registry._TASKS.update(before)


def alias_bomb(levels: int) -> str:
    """Nested aliases: ``levels`` levels of 9 copies each (9**levels values from a few hundred bytes)."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "name: bomb\nkind: classification\n" + "\n".join(lines) + "\n"


# ---- YAML (item 3) -----------------------------------------------------------------------------

def test_a_yaml_alias_bomb_is_refused_quickly(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(6), encoding="utf-8")  # 531,441 values; the probe's 9 levels: 5.4 GB
    assert len(path.read_bytes()) < 1000
    with pytest.raises(TaskFileError, match="alias") as error:
        load_task_file(path)
    assert str(error.value).startswith(f"{path}:")


def test_a_few_aliases_are_still_fine(folder):
    text = task_text(**{'labels: ["yes", "no"]': 'labels: &labels ["yes", "no"]\ntemplate_vars: {all: *labels}'})
    (folder / "smoking.yaml").write_text(text, encoding="utf-8")
    assert load_task_file(folder / "smoking.yaml").template_vars["all"] == ["yes", "no"]


def test_a_task_file_too_large_or_too_deep_is_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("name: big\n" + "# padding\n" * (source.MAX_TASK_FILE_BYTES // 10 + 1), encoding="utf-8")
    with pytest.raises(TaskFileError, match="KiB"):
        load_task_file(big)
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: deep\nx: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(TaskFileError, match="deep"):
        load_task_file(deep)


def test_a_bomb_in_the_tasks_folder_blocks_neither_listing_nor_other_tasks(folder, tmp_path):
    (folder / "bomb.yaml").write_text(alias_bomb(9), encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "EVALPIPE_TASKS_DIR": str(folder), "COLUMNS": "300"}
    done = subprocess.run([sys.executable, "-m", "evalpipe.cli", "tasks"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "smoking" in done.stdout and "ncbi_disease" in done.stdout
    assert "bomb.yaml" in done.stdout and "alias" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    asked = subprocess.run([sys.executable, "-m", "evalpipe.cli", "tasks", "bomb"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=120)
    assert asked.returncode != 0 and "bomb.yaml could not be read" in asked.stdout + asked.stderr


# ---- JSON readers (items 6, 12, 13) --------------------------------------------------------------

from evalpipe.data.errors import DataError  # noqa: E402
from evalpipe.tasks.base import LoadOptions  # noqa: E402

PQA = {"QUESTION": "Does aspirin help?", "CONTEXTS": ["First paragraph.", "Second."], "final_decision": "yes"}


def load_shipped(task: str, path: Path):
    return list(registry.get_task(task).load(LoadOptions(paths={"eval": path})).examples)


def data_error(task: str, path: Path) -> str:
    with pytest.raises(DataError) as error:
        load_shipped(task, path)
    message = str(error.value)
    assert message.startswith(f"{path}:") and "\n" not in message, message
    return message


def test_pubmedqa_reads_its_object_and_refuses_json_lines_or_two_objects(tmp_path):
    good = tmp_path / "ori_pqal.json"
    good.write_text(json.dumps({"1": PQA, "2": {**PQA, "final_decision": "no"}}, indent=1), encoding="utf-8")
    assert [e.id for e in load_shipped("pubmedqa", good)] == ["1", "2"]
    lines = tmp_path / "lines.json"
    lines.write_text(json.dumps({"1": PQA}) + "\n" + json.dumps({"2": PQA}) + "\n", encoding="utf-8")
    assert ":2: text after the object" in data_error("pubmedqa", lines)
    two = tmp_path / "two.json"
    two.write_text(json.dumps({"1": PQA}, indent=1) + "\n\n" + json.dumps({"2": PQA}), encoding="utf-8")
    assert f"{two}:{len(json.dumps({'1': PQA}, indent=1).splitlines()) + 2}: text after" in data_error("pubmedqa", two)


def test_pubmedqa_contexts_given_as_one_text_are_one_context(tmp_path):
    path = tmp_path / "ori_pqal.json"
    path.write_text(json.dumps({"1": {**PQA, "CONTEXTS": "One whole abstract."}}), encoding="utf-8")
    (example,) = load_shipped("pubmedqa", path)
    assert example.inputs["contexts"] == ["One whole abstract."]
    from evalpipe.prompting import PromptRenderer
    from evalpipe.records import GenerationParams

    prompt = PromptRenderer(registry.get_task("pubmedqa"), [], GenerationParams(max_tokens=4)).render(example)
    assert "Context: One whole abstract." in prompt.messages[-1].content
    path.write_text(json.dumps({"1": {**PQA, "CONTEXTS": {"a": 1}}}), encoding="utf-8")
    assert ":1: CONTEXTS: expected a list" in data_error("pubmedqa", path)


MEDQA = {"question": "Which?", "options": {"A": "one", "B": "two", "C": "three", "D": "four"}, "answer_idx": "A"}


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_in_medqa_are_an_error_naming_the_field(tmp_path, constant):
    path = tmp_path / "test.jsonl"
    bad = json.dumps(MEDQA).replace('"two"', constant)
    path.write_text(json.dumps(MEDQA) + "\n" + bad + "\n", encoding="utf-8")
    message = data_error("medqa", path)
    assert f":2: options.B: {constant} is not a JSON value" in message


def test_a_record_nested_100000_deep_is_one_line_with_its_line(tmp_path):
    path = tmp_path / "test.jsonl"
    deep = '{"question": ' + "[" * 100_000 + "]" * 100_000 + "}"
    path.write_text(json.dumps(MEDQA) + "\n" + deep + "\n", encoding="utf-8")
    assert ":2: nested too deeply" in data_error("medqa", path)
    array = tmp_path / "test.json"
    array.write_text("[" + json.dumps(MEDQA) + ",\n" + deep + "]", encoding="utf-8")
    assert ":2: nested too deeply" in data_error("medqa", array)


# ---- templates (item 11) ----------------------------------------------------------------------

import time  # noqa: E402

from evalpipe.prompting import PromptRenderer, TemplateError  # noqa: E402
from evalpipe.records import Example, GenerationParams  # noqa: E402
from evalpipe.tasks.base import Scoring, TaskSpec  # noqa: E402
from evalpipe import template_limits  # noqa: E402


def _spec(template: str) -> TaskSpec:
    def load(options):
        raise AssertionError

    return TaskSpec(name="t", description="", template=template, load=load, shot_target=str,
                    scorings={"default": Scoring(parse=None, score=None, empty=None, samplewise=True)},  # type: ignore[arg-type]
                    metrics=(), max_tokens=8, kind="custom")


def render_error(tmp_path: Path, body: str) -> str:
    prompts = tmp_path / "prompts"
    prompts.mkdir(exist_ok=True)
    (prompts / "t.j2").write_text("{%- macro prompt(example, shots) -%}\n" + body + "\n{%- endmacro -%}\n")
    renderer = PromptRenderer(_spec("t.j2"), [], GenerationParams(max_tokens=8), prompts_dir=prompts)
    start = time.monotonic()
    with pytest.raises(TemplateError) as err:
        renderer.render(Example("ex-7", {"text": "abc"}, None))
    assert time.monotonic() - start < template_limits.MAX_RENDER_SECONDS + 3
    message = str(err.value)
    assert "\n" not in message and "t.j2" in message and "example ex-7" in message, message
    return message


@pytest.mark.parametrize("body,needle", [
    ("{{ 9 ** (9 ** 9) }}", "bits"),
    ("{% set n = 9 %}{{ n ** (n ** n) }}", "bits"),
    ("{{ '%999999999s' % example.text }}", "width"),
    ("{{ '%*s' % (999999999, 'x') }}", "width"),
    ("{{ '%999999999s' | format(example.text) }}", "width"),
    ("{{ '{:>999999999}'.format(example.text) }}", "width"),
    ("{{ example.text.ljust(999999999) }}", "width"),
    ("{{ example.text | center(999999999) }}", "width"),
    ("{{ 'x' * 999999999 }}", "repeating"),
    ("{{ ['x'] * 999999999 }}", "repeating"),
    ("{{ range(100000) | join('x' * 1000) }}", "join"),
    ("{{ example.text.replace('', 'y' * 3000000) }}", "replace"),
    ("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "range items"),
    ("{% set r = range(100000) %}{% for a in r %}{% for b in r %}{% for c in r %}{% endfor %}{% endfor %}"
     "{% endfor %}", "range items"),
])
def test_a_costly_template_is_stopped_with_one_line_naming_template_and_example(tmp_path, body, needle):
    assert needle in render_error(tmp_path, body)


def test_lipsum_is_not_available(tmp_path):
    assert "lipsum" in render_error(tmp_path, "{{ lipsum(10 ** 6) }}")


def test_a_prompt_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(template_limits, "MAX_PROMPT_CHARS", 1000)
    assert "rendered prompt has" in render_error(tmp_path, "{% for i in range(600) %}ab{% endfor %}")


def test_a_render_past_its_time_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(template_limits, "MAX_RENDER_SECONDS", 0.2)
    monkeypatch.setattr(template_limits, "MAX_LOOP_ITEMS", 10 ** 12)
    body = "{% for a in range(100000) %}{% for b in range(100000) %}{{ b }}{% endfor %}{% endfor %}"
    assert "took more than 0.2 s" in render_error(tmp_path, body)


def test_ordinary_templates_still_render(tmp_path):
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "t.j2").write_text("{%- macro prompt(example, shots) -%}{{ '%-6s|' % example.text }}{{ 2 ** 10 }}"
                                  "{{ '{:>5}'.format('x') }}{% for i in range(3) %}{{ i }}{% endfor %}"
                                  "{{ ['a', 'b'] | join(', ') }}{{ 'ab' * 2 }}{%- endmacro -%}")
    renderer = PromptRenderer(_spec("t.j2"), [], GenerationParams(max_tokens=8), prompts_dir=prompts)
    assert renderer.render(Example("e", {"text": "abc"}, None)).messages[-1].content == "abc   |1024    x012a, babab"


# ---- --out naming a file or a read-only place (item 12) -----------------------------------------

from typer.testing import CliRunner  # noqa: E402

from evalpipe.cli import app  # noqa: E402


def one_line(result, *needles: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    text = " ".join(result.output.split())
    for needle in needles:
        assert needle in text, result.output


def test_new_task_out_naming_a_file_is_one_line(folder, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    csv_path = tmp_path / "d.csv"
    csv_path.write_text("text,label\na,yes\nb,no\n")
    args = ["new-task", "t", "--data", str(csv_path), "--input-field", "text", "--label-field", "label"]
    one_line(CliRunner().invoke(app, [*args, "--out", str(blocker)]), "afile", "not a folder", "--out")
    one_line(CliRunner().invoke(app, [*args, "--out", str(blocker / "sub")]), "afile", "--out")


def test_report_out_naming_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    one_line(CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(blocker)]), "afile", "not a folder")
    one_line(CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(blocker / "r")]), "afile", "--out")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere: the read-only case cannot be set up")
def test_report_out_in_a_read_only_place_is_one_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        one_line(CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(locked / "r")]), "locked")
    finally:
        locked.chmod(0o700)


# ---- lower-severity readers and task files (item 13) ----------------------------------------------

from evalpipe.data.conll import read_conll  # noqa: E402
from evalpipe.data.file_records import read_records  # noqa: E402
from evalpipe.results import RunDir  # noqa: E402


def test_duplicate_csv_column_names_are_an_error_naming_the_column(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("text,label,text\na,yes,b\n", encoding="utf-8")
    with pytest.raises(DataError) as error:
        read_records(path)
    assert str(error.value) == f"{path}:1: text: column name given twice (columns 1 and 3); rename one"


def test_a_bad_samples_line_names_the_file_and_line(tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    good = json.dumps({"id": "a", "task": "t"})
    run.samples_path(None).write_text("\n".join([good] * 700 + ["{broken"] + [good]) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as error:
        list(run.iter_samples())
    assert str(error.value).startswith(f"{run.samples_path(None)}:701: not valid JSON")


def test_samples_read_from_a_line_s_offset_are_the_records_from_there(tmp_path):
    from evalpipe.report.reading import line_starts

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    lines = [json.dumps({"id": str(i), "task": "t", "text": "é" * i}) for i in range(1200)]
    run.samples_path(None).write_text("\n".join(lines[:600] + [""] + lines[600:]) + "\n", encoding="utf-8")
    starts = line_starts(run.samples_path(None))
    every = list(run.iter_samples())
    assert len(starts) == len(every) == 1200
    for at in (0, 1, 599, 600, 1199):  # non-ASCII before the offset, a blank line after it
        assert list(run.iter_samples(start=starts[at])) == every[at:]


def test_conll_docstart_lines_are_document_separators(tmp_path):
    path = tmp_path / "d.conll"
    path.write_text("-DOCSTART-\tO\n\nA\tB-Disease\nb\tO\n\n-DOCSTART-\tO\n\nC\tO\n", encoding="utf-8")
    sentences = read_conll(path)
    assert [s.tokens for s in sentences] == [("A", "b"), ("C",)] and [s.line for s in sentences] == [3, 8]


def test_the_shipped_conll_data_has_no_docstart():
    files = [p for p in (REPO / "data").rglob("*") if p.is_file() and p.suffix in (".tsv", ".conll", ".bio", ".iob")]
    assert files and not any("-DOCSTART-" in p.read_text(encoding="utf-8", errors="replace") for p in files)


@pytest.mark.parametrize("labels,needle", [
    ('["yes", "no", "\u0443es"]', "U+0443"),  # Cyrillic у: looks like yes, matches nothing
    ('["yes", "no", "YES"]', "the same after Unicode normalisation"),
    ('["yes", "no", "\uff59\uff45\uff53"]', "the same after Unicode normalisation"),  # full-width yes
])
def test_look_alike_and_duplicate_labels_are_refused(folder, labels, needle):
    (folder / "smoking.yaml").write_text(task_text(**{'labels: ["yes", "no"]': f"labels: {labels}"}), encoding="utf-8")
    with pytest.raises(TaskFileError) as error:
        load_task_file(folder / "smoking.yaml")
    assert ":13: labels:" in str(error.value) and needle in str(error.value)


def test_duplicate_fixed_options_are_refused(tmp_path):
    text = (REPO / "prompts" / "mcqa" / "pubmedqa.task.yaml").read_text(encoding="utf-8")
    (tmp_path / "pubmedqa.j2").write_text("{%- macro prompt(example, shots) -%}x{%- endmacro -%}", encoding="utf-8")
    path = tmp_path / "mine.yaml"
    path.write_text(text.replace("name: pubmedqa", "name: mine").replace('["yes", "no", "maybe"]', '["yes", "no", "Yes"]'),
                    encoding="utf-8")
    with pytest.raises(TaskFileError, match="options.fixed: 'yes' and 'Yes' are the same"):
        load_task_file(path)

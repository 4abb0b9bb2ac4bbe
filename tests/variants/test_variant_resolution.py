"""Where a task's prompt variants are found and how each is loaded, for every way a task can hold its
template: a Python task's template under ``prompts/``, a shipped task file's (``prompts/mcqa/*.task.yaml``
naming ``mcqa/question.j2``), a user's task file with its template beside it outside ``prompts/``, and
a task file with its template inline.

The contract (evalpipe/prompting.py): ``variant_templates(spec)[name]`` passed to
``PromptRenderer(template=…)``, ``template_path`` and ``template_sha256`` names the template that
variant renders — ``default`` the canonical one wherever it lives — and a user's task file keeps its
variants beside it, in ``<task file's folder>/<task>/variants/<name>.j2``, importing from its own
template by the name it has there."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

from evalpipe.config import RunConfig
from evalpipe.prompting import (
    DEFAULT_VARIANT,
    PROMPTS_DIR,
    PromptOptions,
    PromptRenderer,
    TemplateError,
    template_path,
    template_sha256,
    variant_templates,
)
from evalpipe.records import GenerationParams
from evalpipe.pipeline.execute import execute
from evalpipe.tasks import registry
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import all_tasks, get_task
from evalpipe.tasks.taskfile.build import load_task_file
from tests.support.scripted_backend import ScriptedBackend, last_user_text
from tests.test_every_task_renders import FORMS, _load, data_roots  # noqa: F401 - the fixture

PARAMS = GenerationParams(max_tokens=8)

TASK = """name: smoking_status
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
{template}
generation:
  max_tokens: 8
"""
CANONICAL = """{%- macro cue() -%}Answer yes or no.{%- endmacro -%}
{%- macro prompt(example, shots) -%}
{% for shot in shots %}Note: {{ shot.inputs.note }}
Answer: {{ shot.target }}
{% endfor %}Note: {{ example.note }}
{{ cue() }}
Answer:
{%- endmacro -%}
"""
#: a variant importing a macro from the canonical template beside the task file, by its name there
TERSE = """{#- smoking_status · variant `terse`: the note and the canonical cue, nothing else. -#}
{%- from "smoking_status.j2" import cue -%}
{%- macro prompt(example, shots) -%}
TERSE {{ example.note }}
{{ cue() }}
{%- endmacro -%}
"""
SHOUT = """{#- smoking_status · variant `shout`: the question in capitals. -#}
{%- macro prompt(example, shots) -%}
DOES THE PATIENT SMOKE? {{ example.note }}
{%- endmacro -%}
"""
NOTES = [("n1", "Smokes a pack a day.", "yes"), ("n2", "Never smoked.", "no"), ("n3", "Quit smoking 1990.", "no"),
         ("n4", "Heavy smoker.", "yes")]


@pytest.fixture(autouse=True)
def forget_user_tasks():
    """Each test registers its own task files; the registry is shared by the process."""
    before = dict(registry._TASKS)
    yield
    registry._TASKS.clear()
    registry._TASKS.update(before)


def user_task(root: Path, *, inline: bool = False) -> Path:
    """A user's task folder outside prompts/: the task file, its data, its template (or inline), and
    two variants in ``smoking_status/variants/``."""
    root.mkdir(parents=True)
    (root / "notes.jsonl").write_text(
        "".join(json.dumps({"note_id": i, "text": t, "status": s}) + "\n" for i, t, s in NOTES), encoding="utf-8")
    if inline:
        body = "\n".join("  " + line for line in CANONICAL.splitlines())
        (root / "smoking_status.yaml").write_text(TASK.format(template=f"template_text: |\n{body}"), encoding="utf-8")
    else:
        (root / "smoking_status.j2").write_text(CANONICAL, encoding="utf-8")
        (root / "smoking_status.yaml").write_text(TASK.format(template="template: smoking_status.j2"),
                                                  encoding="utf-8")
    variants = root / "smoking_status" / "variants"
    variants.mkdir(parents=True)
    (variants / "shout.j2").write_text(SHOUT, encoding="utf-8")
    if not inline:  # an inline template has no file a variant could import from
        (variants / "terse.j2").write_text(TERSE, encoding="utf-8")
    return root / "smoking_status.yaml"


def text_of(prompt) -> str:
    return prompt.text if prompt.text is not None else "\n".join(m.content for m in prompt.messages)


@pytest.mark.parametrize("name", sorted(n for n, s in all_tasks().items() if s.ranking is None))
def test_every_shipped_variant_resolves_to_a_file_under_prompts_and_default_to_the_canonical_prompt(name, data_roots):  # noqa: F811 - the imported fixture
    spec = all_tasks()[name]
    data = _load(name, spec, data_roots)
    example = data.examples[0]
    canonical = PromptRenderer(spec, (), PARAMS).render(example)
    for variant, template in variant_templates(spec).items():
        rendered = PromptRenderer(spec, (), PARAMS, template=template).render(example)
        path = template_path(spec, template=template)
        assert path.is_file() and path.is_relative_to(PROMPTS_DIR), (name, variant, path)
        assert template_sha256(spec, template=template) == hashlib.sha256(path.read_bytes()).hexdigest()
        if variant == DEFAULT_VARIANT:
            assert rendered == canonical and path == template_path(spec)
        else:
            assert rendered != canonical and path.is_relative_to(PROMPTS_DIR / name / "variants")


def test_a_user_task_files_variants_live_beside_it_and_import_its_template(tmp_path):
    spec = load_task_file(user_task(tmp_path / "mine"))
    folder = (tmp_path / "mine").resolve()
    found = variant_templates(spec)
    assert list(found) == ["default", "shout", "terse"]
    example = spec.load(LoadOptions()).materialized().examples[0]
    canonical = PromptRenderer(spec, (), PARAMS).render(example)
    # default: the canonical template beside the task file (not a file of that name under prompts/)
    assert PromptRenderer(spec, (), PARAMS, template=found["default"]).render(example) == canonical
    assert template_path(spec, template=found["default"]) == folder / "smoking_status.j2"
    assert template_sha256(spec, template=found["default"]) == template_sha256(spec)
    terse = PromptRenderer(spec, (), PARAMS, template=found["terse"]).render(example)
    assert text_of(terse) == f"TERSE {example.inputs['note']}\nAnswer yes or no."
    assert template_path(spec, template=found["terse"]) == folder / "smoking_status" / "variants" / "terse.j2"
    assert template_sha256(spec, template=found["shout"]) == hashlib.sha256(SHOUT.encode()).hexdigest()
    for form, options in FORMS.items():
        if options.endpoint == "chat":
            shout = PromptRenderer(spec, (), PARAMS, options, template=found["shout"]).render(example)
            assert text_of(shout).startswith("DOES THE PATIENT SMOKE?"), form
    # the variant lacks `completion`: one line naming its file, as for any template
    with pytest.raises(TemplateError, match=r"terse\.j2: the template has no `completion` macro"):
        PromptRenderer(spec, (), PARAMS, PromptOptions(endpoint="completions"), template=found["terse"])


def test_an_inline_template_task_has_default_and_its_folders_variants(tmp_path):
    spec = load_task_file(user_task(tmp_path / "inline", inline=True))
    found = variant_templates(spec)
    assert list(found) == ["default", "shout"]
    example = spec.load(LoadOptions()).materialized().examples[0]
    assert (PromptRenderer(spec, (), PARAMS, template=found["default"]).render(example)
            == PromptRenderer(spec, (), PARAMS).render(example))
    assert template_sha256(spec, template=found["default"]) == template_sha256(spec)
    assert text_of(PromptRenderer(spec, (), PARAMS, template=found["shout"]).render(example)).startswith("DOES THE")


def test_a_run_of_a_user_task_with_every_variant_records_each_template_and_scores_each(tmp_path):
    """Through the runner: each variant's prompts rendered from the files beside the task file, their
    paths and hashes in config.json, each variant scored by its own answers."""
    registry.register_task_file(user_task(tmp_path / "mine"))

    def answer(prompt) -> str:
        text = last_user_text(prompt)
        if text.startswith("TERSE"):
            return "no"  # right on 2 of 4
        if text.startswith("DOES THE PATIENT"):
            return "maybe"  # not a label: a parse failure each
        return "yes" if "Smokes" in text or "Heavy" in text else "no"  # right on all

    backend = ScriptedBackend(answer, model="m")
    config = RunConfig(tasks=("smoking_status",), model="m", base_url="http://127.0.0.1:1/v1",
                       prompt_variants=("all",))
    outcome = asyncio.run(execute(config, lambda _: backend, tmp_path / "results"))
    path = outcome.run_dir.path
    doc = json.loads((path / "variants.json").read_text())["tasks"]["smoking_status"]
    assert {v: m["accuracy"] for v, m in doc["by_variant"].items()} == {"default": 1.0, "shout": 0.0, "terse": 0.5}
    conditions = json.loads((path / "config.json").read_text())["tasks"]["smoking_status"]["conditions"]
    folder = (tmp_path / "mine").resolve()
    assert [c["template"] for c in conditions] == [
        str(folder / "smoking_status.j2"), str(folder / "smoking_status" / "variants" / "shout.j2"),
        str(folder / "smoking_status" / "variants" / "terse.j2")]
    assert conditions[2]["template_sha256"] == hashlib.sha256(TERSE.encode()).hexdigest()
    assert len(backend.calls) == 3 * len(NOTES)


def test_shipped_task_files_find_their_variants_under_prompts_not_beside_the_task_file():
    """MedQA's task file is prompts/mcqa/medqa.task.yaml and its template prompts/mcqa/question.j2; its
    variants are in prompts/medqa/variants/ (the one place for shipped tasks), importing the
    canonical template by its prompts-relative name."""
    spec = get_task("medqa")
    found = variant_templates(spec)
    assert found[DEFAULT_VARIANT] in (None, "mcqa/question.j2")
    assert template_path(spec, template=found[DEFAULT_VARIANT]) == PROMPTS_DIR / "mcqa" / "question.j2"
    assert all(t.startswith("medqa/variants/") for v, t in found.items() if v != DEFAULT_VARIANT)

"""Every prompt variant of every task renders in every prompt form, differs from the canonical prompt,
keeps the shots' answers (so the parser still reads what the shots demonstrate), and says its intent."""

from __future__ import annotations

import re

import pytest

from evalpipe.prompting import (
    DEFAULT_VARIANT,
    PROMPTS_DIR,
    PromptRenderer,
    TemplateError,
    select_shots,
    variant_templates,
)
from evalpipe.records import GenerationParams
from evalpipe.tasks.registry import all_tasks, get_task
from tests.test_every_task_renders import FORMS, _load, data_roots  # noqa: F401 - the fixture

#: the tasks the issue asks variants for, with at least four each
REQUIRED = ("ncbi_disease", "clue_mednli", "clue_meqsum", "medqa", "chip_ctc", "kuake_qic")

VARIANTS = [(name, variant) for name, spec in sorted(all_tasks().items()) if spec.ranking is None
            for variant in variant_templates(spec) if variant != DEFAULT_VARIANT]


@pytest.mark.parametrize("name", REQUIRED)
def test_required_tasks_ship_four_documented_variants(name):
    variants = [v for v in variant_templates(get_task(name)) if v != DEFAULT_VARIANT]
    assert len(variants) >= 4, f"{name}: {variants}"
    readme = (PROMPTS_DIR / name / "variants" / "README.md").read_text(encoding="utf-8")
    for variant in variants:
        assert f"`{variant}`" in readme, f"{name}: README does not describe {variant}"
        header = (PROMPTS_DIR / variant_templates(get_task(name))[variant]).read_text(encoding="utf-8")
        assert header.startswith("{#-") and f"variant `{variant}`" in header.split("-#}")[0], \
            f"{name}/{variant}: no header comment stating its intent"


@pytest.mark.parametrize(("name", "variant"), VARIANTS)
def test_variant_renders_in_every_form_differs_from_default_and_shows_the_shot_answers(name, variant, data_roots):  # noqa: F811 - the imported fixture
    spec = all_tasks()[name]
    data = _load(name, spec, data_roots)
    k = min(max(spec.default_shots, 2), len(data.shot_pool))
    shots = select_shots(data.shot_pool, k, None, {ex.id for ex in data.examples})
    example = data.examples[0]
    template = variant_templates(spec)[variant]
    params = GenerationParams(max_tokens=spec.max_tokens)
    for form, options in FORMS.items():
        prompt = PromptRenderer(spec, shots, params, options, template=template).render(example)
        canonical = PromptRenderer(spec, shots, params, options).render(example)
        text = prompt.text if prompt.text is not None else "\n".join(m.content for m in prompt.messages)
        assert text.strip(), f"{name}/{variant}/{form}: empty prompt"
        assert prompt != canonical, f"{name}/{variant}/{form}: renders the canonical prompt"
        for shot in shots:  # each shot's answer appears as the task writes it (a label's case may change)
            assert spec.shot_target(shot).strip().lower() in text.lower(), f"{name}/{variant}/{form}"
        if not options.system_role:
            assert all(m.role != "system" for m in prompt.messages)
        # the evaluated example's own text is in the prompt
        first_field = next(v for v in example.inputs.values() if isinstance(v, str))
        assert first_field[:40] in text, f"{name}/{variant}/{form}: the example is missing"


def test_variant_names_are_validated_and_declared_variants_win(tmp_path):
    spec = get_task("ncbi_disease")
    folder = tmp_path / spec.name / "variants"
    folder.mkdir(parents=True)
    (tmp_path / spec.template).write_text((PROMPTS_DIR / spec.template).read_text())
    (folder / "b.j2").write_text("{% macro prompt(example, shots) %}B {{ example.text }}{% endmacro %}")
    (folder / "a.j2").write_text("{% macro prompt(example, shots) %}A {{ example.text }}{% endmacro %}")
    assert list(variant_templates(spec, tmp_path)) == ["default", "a", "b"]
    from dataclasses import replace
    declared = replace(spec, variants={"b": "elsewhere/b.j2", "c": "elsewhere/c.j2"})
    assert variant_templates(declared, tmp_path) == {
        "default": None, "a": f"{spec.name}/variants/a.j2", "b": "elsewhere/b.j2", "c": "elsewhere/c.j2"}
    (folder / "default.j2").write_text("x")
    with pytest.raises(TemplateError, match="reserved"):
        variant_templates(spec, tmp_path)
    (folder / "default.j2").unlink()
    (folder / "bad name.j2").write_text("x")
    with pytest.raises(TemplateError, match=re.escape("'bad name'")):
        variant_templates(spec, tmp_path)

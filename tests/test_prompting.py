"""Prompt rendering: evalscope's exact NCBI text, the three forms, shots, strictness."""

from pathlib import Path

import pytest

from evalpipe.prompting import PromptOptions, PromptRenderer, TemplateError, select_shots
from evalpipe.records import Example, GenerationParams
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task

PARAMS = GenerationParams(max_tokens=512)

# evalscope utils/ner.py FEWSHOT_TEMPLATE with entities/entity_list for `ncbi`, written out by hand
EXPECTED_ONE_SHOT = (
    "Here are some examples of named entity recognition:\n"
    "\n"
    "Input:\n"
    "Identification of APC2 , a homologue of the adenomatous polyposis coli tumour suppressor .\n"
    "\n"
    "Output:\n"
    "<response>Identification of APC2 , a homologue of the <disease>adenomatous polyposis coli tumour</disease>"
    " suppressor .</response>\n"
    "\n"
    "You are a named entity recognition system that identifies the following entity types:\n"
    "disease (Names of diseases, disorders, syndromes, and related pathological conditions)\n"
    "\n"
    "Process the provided text and mark all named entities with XML-style tags.\n"
    "\n"
    "For example:\n"
    "<person>John Smith</person> works at <organization>Google</organization> in "
    "<location>Mountain View</location>.\n"
    "\n"
    "Available entity tags: <disease>\n"
    "\n"
    "INSTRUCTIONS:\n"
    "1. Wrap your entire response in <response>...</response> tags.\n"
    "2. Inside these tags, include the original text with entity tags inserted.\n"
    "3. Do not change the original text in any way (preserve spacing, punctuation, case, etc.).\n"
    "4. Tag ALL entities you can identify using the exact tag names provided.\n"
    "5. Do not include explanations, just the tagged text.\n"
    "6. If entity spans overlap, choose the most specific entity type.\n"
    "7. Ensure every opening tag has a matching closing tag.\n"
    "\n"
    "Text to process:\n"
    "Clustering of missense mutations in the ataxia - telangiectasia gene in a sporadic T - cell leukaemia .\n"
)


@pytest.fixture(scope="module")
def ncbi():
    spec = get_task("ncbi_disease")
    return spec, spec.load(LoadOptions()).materialized()


def test_chat_prompt_is_evalscope_text_exactly(ncbi):
    spec, data = ncbi
    shots = select_shots(data.shot_pool, 1, None)
    prompt = PromptRenderer(spec, shots, PARAMS).render(data.examples[0])
    assert prompt.endpoint == "chat"
    assert len(prompt.messages) == 1 and prompt.messages[0].role == "user"
    assert prompt.messages[0].content == EXPECTED_ONE_SHOT


def test_zero_shot_prompt_has_no_example_header(ncbi):
    spec, data = ncbi
    content = PromptRenderer(spec, (), PARAMS).render(data.examples[0]).messages[0].content
    assert content == EXPECTED_ONE_SHOT[EXPECTED_ONE_SHOT.index("You are a named"):]


def test_default_shots_are_first_five_train_sentences_joined_by_blank_lines(ncbi):
    spec, data = ncbi
    shots = select_shots(data.shot_pool, spec.default_shots, None)
    assert [s.id for s in shots] == [f"train-{i}" for i in range(5)]
    content = PromptRenderer(spec, shots, PARAMS).render(data.examples[3]).messages[0].content
    assert content.count("Input:\n") == 5
    assert content.count("Output:\n<response>") == 5
    assert content.endswith(data.examples[3].inputs["text"] + "\n")


def test_seeded_shots_are_reproducible_and_come_from_train(ncbi):
    _, data = ncbi
    a = select_shots(data.shot_pool, 3, 7)
    b = select_shots(data.shot_pool, 3, 7)
    c = select_shots(data.shot_pool, 3, 8)
    assert [s.id for s in a] == [s.id for s in b]
    assert [s.id for s in a] != [s.id for s in c]
    assert all(s.id.startswith("train-") for s in a)


def test_shots_never_include_evaluated_ids():
    pool = [Example(id=str(i), inputs={}, gold=None) for i in range(4)]
    picked = select_shots(pool, 2, None, evaluated_ids={"0", "1"})
    assert [s.id for s in picked] == ["2", "3"]
    with pytest.raises(ValueError, match="only 2"):
        select_shots(pool, 3, None, evaluated_ids={"0", "1"})


def test_fewshot_as_turns_alternates_user_and_assistant(ncbi):
    spec, data = ncbi
    shots = select_shots(data.shot_pool, 2, None)
    prompt = PromptRenderer(spec, shots, PARAMS, PromptOptions(fewshot_as_turns=True)).render(data.examples[0])
    roles = [m.role for m in prompt.messages]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert prompt.messages[1].content == spec.shot_target(shots[0])
    assert prompt.messages[0].content.endswith(shots[0].inputs["text"] + "\n")
    assert prompt.messages[-1].content == EXPECTED_ONE_SHOT[EXPECTED_ONE_SHOT.index("You are a named"):]


def test_completion_form_ends_with_open_output_and_stops_at_next_input(ncbi):
    spec, data = ncbi
    shots = select_shots(data.shot_pool, 1, None)
    prompt = PromptRenderer(spec, shots, PARAMS, PromptOptions(endpoint="completions")).render(data.examples[0])
    assert prompt.endpoint == "completions"
    assert prompt.text.endswith("Input:\n" + data.examples[0].inputs["text"] + "\n\nOutput:\n")
    assert prompt.text.count("INSTRUCTIONS:") == 1
    assert prompt.params.stop == ("\n\nInput:",)


def _spec_with_template(tmp_path: Path, body: str):
    (tmp_path / "t.j2").write_text(body)
    spec = get_task("ncbi_disease")
    from dataclasses import replace

    return replace(spec, template="t.j2")


def test_undefined_variable_is_an_error_naming_the_file(tmp_path):
    spec = _spec_with_template(tmp_path, "{% macro prompt(example, shots) %}{{ example.txet }}{% endmacro %}")
    renderer = PromptRenderer(spec, (), PARAMS, prompts_dir=tmp_path)
    with pytest.raises(TemplateError, match="t.j2.*txet"):
        renderer.render(Example(id="x", inputs={"text": "a"}, gold=None))


def test_syntax_error_and_missing_macro_fail_at_construction(tmp_path):
    spec = _spec_with_template(tmp_path, "{% macro prompt(example, shots) %}{{ example.text }")
    with pytest.raises(TemplateError, match="t.j2"):
        PromptRenderer(spec, (), PARAMS, prompts_dir=tmp_path)
    spec = _spec_with_template(tmp_path, "{% macro other() %}x{% endmacro %}")
    with pytest.raises(TemplateError, match="no `prompt` macro"):
        PromptRenderer(spec, (), PARAMS, prompts_dir=tmp_path)


def test_template_is_sandboxed(tmp_path):
    spec = _spec_with_template(
        tmp_path, "{% macro prompt(example, shots) %}{{ example.text.__class__.__mro__ }}{% endmacro %}"
    )
    renderer = PromptRenderer(spec, (), PARAMS, prompts_dir=tmp_path)
    with pytest.raises(TemplateError):
        renderer.render(Example(id="x", inputs={"text": "a"}, gold=None))


def test_system_macro_as_role_or_merged(tmp_path):
    spec = _spec_with_template(
        tmp_path,
        "{% macro system() %}Be brief.{% endmacro %}{% macro prompt(example, shots) %}Q: {{ example.text }}{% endmacro %}",
    )
    ex = Example(id="x", inputs={"text": "a"}, gold=None)
    with_role = PromptRenderer(spec, (), PARAMS, prompts_dir=tmp_path).render(ex)
    assert [(m.role, m.content) for m in with_role.messages] == [("system", "Be brief."), ("user", "Q: a")]
    merged = PromptRenderer(spec, (), PARAMS, PromptOptions(system_role=False), prompts_dir=tmp_path).render(ex)
    assert [(m.role, m.content) for m in merged.messages] == [("user", "Be brief.\n\nQ: a")]

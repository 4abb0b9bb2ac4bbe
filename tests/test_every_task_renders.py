"""Every registered task renders in every prompt form, and its shot answers parse back.

A guard for "adding a task = a template + a spec + tests": a new task is picked up here
automatically, with shipped data or the synthetic fixtures of its suite.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from evalpipe.config import RunConfig
from evalpipe.prompting import PromptOptions, PromptRenderer, select_shots
from evalpipe.records import GenerationParams
from evalpipe.config import load_options
from evalpipe.tasks.registry import all_tasks
from tests.cblue import synthetic
from tests.tasks import mcqa_synthetic

CLUE_FIXTURES = Path(__file__).parent / "clue" / "fixtures"
FORMS = {
    "chat": PromptOptions(),
    "turns": PromptOptions(fewshot_as_turns=True),
    "no-system-role": PromptOptions(system_role=False),
    "completions": PromptOptions(endpoint="completions"),
}


@pytest.fixture(scope="module")
def data_roots(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    cblue = synthetic.write_cblue(root / "cblue")
    return {
        "cblue": cblue,
        "promptcblue": synthetic.write_promptcblue(root / "promptcblue" / "dev.json"),
        "huatuo": synthetic.write_huatuo(root / "huatuo" / "test_datasets.jsonl"),
        "mcqa": mcqa_synthetic.write_all(root / "mcqa"),
    }


def _load(name, spec, roots):
    return spec.load(_options(name, spec, roots)).materialized()


def _options(name, spec, roots):
    """The load options of a task with shipped data or its suite's synthetic fixtures."""
    config = RunConfig(tasks=(name,), model="m", data_dir=str(CLUE_FIXTURES))
    if spec.template.startswith("cblue/") and name != "promptcblue":
        config = replace(config, data_dir=str(roots["cblue"]))
    elif name == "promptcblue":
        config = replace(config, data={name: str(roots["promptcblue"])})
    elif spec.template.startswith("mcqa/"):
        config = replace(config, data_dir=str(roots["mcqa"]))
    elif name.startswith("huatuo"):
        config = replace(config, data={name: str(roots["huatuo"])})
    return load_options(config, name)


@pytest.mark.parametrize("name", sorted(n for n, s in all_tasks().items() if s.ranking is None))
def test_task_renders_in_every_form_and_shots_parse(name, data_roots):
    spec = all_tasks()[name]
    data = _load(name, spec, data_roots)
    assert data.examples, f"{name}: no examples loaded"
    k = min(spec.default_shots, len(data.shot_pool))
    shots = select_shots(data.shot_pool, k, None, {ex.id for ex in data.examples})
    example = data.examples[0]
    for form, options in FORMS.items():
        prompt = PromptRenderer(spec, shots, GenerationParams(max_tokens=spec.max_tokens), options).render(example)
        if options.endpoint == "completions":
            assert prompt.text and prompt.text.strip(), f"{name}/{form}: empty text"
        else:
            assert prompt.messages and all(m.content.strip() for m in prompt.messages), f"{name}/{form}"
            if not options.system_role:
                assert all(m.role != "system" for m in prompt.messages)
    scoring = spec.scoring(None)
    for shot in shots:  # the answer a shot demonstrates is one the parser accepts
        prediction = scoring.parse(spec.shot_target(shot), shot)
        assert not prediction.failed, f"{name}: its own shot answer does not parse: {spec.shot_target(shot)!r}"


@pytest.mark.parametrize("name", sorted(n for n, s in all_tasks().items() if s.ranking is not None))
def test_retrieval_task_plans_a_pool_holding_every_gold_and_parses_a_perfect_ranking(name, data_roots):
    """A retrieval task has no template: its query text is what is embedded, and a ranking that puts
    each gold first parses as rank 1."""
    spec = all_tasks()[name]
    data = _load(name, spec, data_roots)
    options = load_options(RunConfig(tasks=(name,), model="m"), name)
    planned = spec.ranking.plan(data, data.examples, options)
    assert planned.pool and len(planned.examples) == len(data.examples)
    scoring = spec.scoring(None)
    for position, example in enumerate(planned.examples):
        assert spec.ranking.query(example).strip()
        gold = next(i for i in range(len(planned.pool)) if scoring.parse(f'{{"top": [{i}]}}', example).value["rank"])
        assert scoring.parse(f'{{"top": [{gold}]}}', example).value["rank"] == 1, position

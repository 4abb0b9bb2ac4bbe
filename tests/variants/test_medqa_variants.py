"""MedQA's prompt variants (prompts/medqa/variants/): what each shot demonstrates is a letter the
strict parser reads back, each evaluated question ends in a cue a letter answers, and a real
``evalpipe run --task medqa --data medqa=FILE --prompt-variants all`` against the loopback server
writes per-variant metrics and spread numbers equal to those derived by hand from the model's
scripted answers. The other multiple-choice tasks run under ``--prompt-variants all`` with their
``default`` only."""

from __future__ import annotations

import asyncio
import json
import re
import statistics

import pytest

from evalpipe.config import RunConfig, load_options
from evalpipe.parsers.letter import parse_letter
from evalpipe.prompting import DEFAULT_VARIANT, PromptRenderer, select_shots, variant_templates
from evalpipe.records import GenerationParams
from evalpipe.pipeline.execute import execute
from evalpipe.tasks.registry import get_task
from tests.support.fake_openai import FakeOpenAIServer, request_text
from tests.support.scripted_backend import ScriptedBackend
from tests.tasks import mcqa_synthetic
from tests.test_cli import evalpipe, only_run
from tests.test_every_task_renders import FORMS

SPEC = get_task("medqa")
VARIANTS = ["default", "inline_options", "minimal", "nbme", "tutor", "worked_examples"]
#: the test questions of the synthetic MedQA file (its train file holds the others: the shots)
TEST = mcqa_synthetic.QUESTIONS[:5]


@pytest.fixture(scope="module")
def medqa_file(tmp_path_factory):
    return mcqa_synthetic.write_medqa(tmp_path_factory.mktemp("medqa"))


@pytest.fixture(scope="module")
def medqa_data(medqa_file):
    config = RunConfig(tasks=("medqa",), model="m", data={"medqa": str(medqa_file)})
    return SPEC.load(load_options(config, "medqa"))


def text_of(prompt) -> str:
    return prompt.text if prompt.text is not None else "\n".join(m.content for m in prompt.messages)


def test_medqa_ships_its_variants():
    assert list(variant_templates(SPEC)) == VARIANTS


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("form", list(FORMS))
def test_each_shot_demonstrates_a_letter_the_parser_reads_and_the_question_ends_in_an_answer_cue(
        variant, form, medqa_data):
    """Between a shot's last option and the next question stands the shot's answer as the variant
    lays it out (``Answer: C``, ``Correct answer: C``): parsed with the task's strict letter parser
    it is the shot's gold letter. After the evaluated question's last option comes a cue that a bare
    letter completes into a parsed answer (what log-likelihood scoring scores as a continuation)."""
    shots = select_shots(medqa_data.shot_pool, 3, None, {ex.id for ex in medqa_data.examples})
    example = medqa_data.examples[0]
    prompt = PromptRenderer(SPEC, shots, GenerationParams(max_tokens=32), FORMS[form],
                            template=variant_templates(SPEC)[variant]).render(example)
    text = text_of(prompt)
    options = {o["letter"]: o["text"] for o in example.inputs["options"]}
    if FORMS[form].fewshot_as_turns:  # shots as chat turns: the assistant turns are the letters
        answers = [m.content for m in prompt.messages if m.role == "assistant"]
        assert answers == [s.gold for s in shots]
        assert all(parse_letter(a, options).value == a for a in answers)
    else:
        starts = [text.index(s.inputs["question"]) for s in shots] + [text.index(example.inputs["question"])]
        assert starts == sorted(starts), "the shots come before the question"
        for shot, start, following in zip(shots, starts, starts[1:]):
            last_option = shot.inputs["options"][-1]["text"]
            end = text.index(last_option, start) + len(last_option)
            demonstrated = text[end:following]
            shot_options = {o["letter"]: o["text"] for o in shot.inputs["options"]}
            parsed = parse_letter(demonstrated, shot_options)
            assert not parsed.failed and parsed.value == shot.gold, (variant, form, demonstrated)
    tail = text[text.rindex(example.inputs["options"][-1]["text"]) + len(example.inputs["options"][-1]["text"]):]
    cues = re.findall(r"(?im)^(?:correct )?answer:", tail)
    assert len(cues) == 1, (variant, form, tail)
    if FORMS[form].endpoint == "completions":
        assert text.endswith(cues[0]), "the completion form ends in the answer cue"
    assert parse_letter(f"{cues[0]} B", options).value == "B", (variant, form, tail)


# ---- a run with every variant: per-variant metrics, spread and consistency, by hand ----------

def variant_of(body) -> str:
    """Which variant a request was rendered from: text only that variant's template writes."""
    messages = body.get("messages") or []
    if messages and messages[0].get("role") == "system":
        return "tutor"
    text = request_text(body)
    for marker, name in (("DIRECTIONS:", "nbme"), ("Options: (A)", "inline_options"),
                         ("Correct answer:", "worked_examples"), ("Question:", "minimal")):
        if marker in text:
            return name
    return "default"


def scripted(variant: str, i: int) -> str:
    """The model's answer to test question ``i`` under ``variant``: default and inline_options right
    on all; tutor right in bold; minimal explains instead of answering on the even questions (a
    parse failure); nbme picks A on question 0 (wrong: C); worked_examples hedges on 1 and 2."""
    gold = TEST[i][2]
    if variant == "minimal" and i % 2 == 0:
        return "This condition is explained by the patient's history."
    if variant == "nbme" and i == 0:
        return "(A)"
    if variant == "worked_examples" and i in (1, 2):
        return f"{gold} or {'A' if gold != 'A' else 'D'}"
    return {"tutor": f"**{gold}**", "inline_options": f"Answer: {gold}."}.get(variant, gold)


def answer(body) -> str:
    text = request_text(body)
    # the evaluated question is the last test question in the prompt (shots are train questions)
    i = max(range(len(TEST)), key=lambda k: text.rfind(f"{TEST[k][0]} (synthetic MedQA)"))
    assert f"{TEST[i][0]} (synthetic MedQA)" in text
    return scripted(variant_of(body), i)


#: accuracy and parse failures per variant, and per question the predictions, from ``scripted``
ACCURACY = {"default": 1.0, "inline_options": 1.0, "minimal": 2 / 5, "nbme": 4 / 5, "tutor": 1.0,
            "worked_examples": 3 / 5}
FAILURES = {"default": 0.0, "inline_options": 0.0, "minimal": 3 / 5, "nbme": 0.0, "tutor": 0.0,
            "worked_examples": 2 / 5}
#: per question, how many of the 6 variants give the most frequent prediction, and how many are right
AGREEING = [4, 5, 4, 6, 5]
CORRECT = [4, 5, 4, 6, 5]


@pytest.fixture(scope="module")
def variants_run(medqa_file, tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    with FakeOpenAIServer(responder=answer) as server:
        args = ("run", "--task", "medqa", "--data", f"medqa={medqa_file}", "--base-url", server.url,
                "--model", "fake-model", "--shots", "2", "--prompt-variants", "all", "--results-dir", str(results))
        first = evalpipe(*args)
        sent = server.total_requests
        again = evalpipe(*args)
        resent = server.total_requests - sent
    return first, again, sent, resent, only_run(results)


def test_the_run_finishes_and_asks_each_prompt_once(variants_run):
    first, again, sent, resent, _ = variants_run
    assert first.returncode == 0, first.stderr
    assert sent == len(TEST) * len(VARIANTS)
    assert again.returncode == 0, again.stderr
    assert resent == 0, "re-running a finished command asks nothing"


def test_per_variant_metrics_are_those_the_answers_give(variants_run):
    *_, path = variants_run
    doc = json.loads((path / "variants.json").read_text())["tasks"]["medqa"]
    assert doc["reference"] == DEFAULT_VARIANT and doc["axes"] == {"variant": VARIANTS}
    for variant in VARIANTS:
        assert doc["by_variant"][variant]["accuracy"] == pytest.approx(ACCURACY[variant]), variant
        assert doc["by_variant"][variant]["parse_failure_rate"] == pytest.approx(FAILURES[variant]), variant
    records = [json.loads(line) for line in (path / "samples.jsonl").read_text().splitlines()]
    assert len(records) == len(TEST) * len(VARIANTS)
    assert {r["shots"] for r in records} == {2}
    # the reference condition is what metrics.json reports as the task's accuracy
    assert json.loads((path / "metrics.json").read_text())["medqa"]["accuracy"] == 1.0


def test_spread_numbers_are_those_of_the_per_variant_metrics(variants_run):
    *_, path = variants_run
    metrics = json.loads((path / "metrics.json").read_text())["medqa"]
    doc = json.loads((path / "variants.json").read_text())["tasks"]["medqa"]
    for metric, by_hand in (("accuracy", ACCURACY), ("parse_failure_rate", FAILURES)):
        values = [by_hand[v] for v in VARIANTS]
        assert metrics[f"{metric}_variant_mean"] == pytest.approx(statistics.fmean(values))
        assert metrics[f"{metric}_variant_std"] == pytest.approx(statistics.pstdev(values))
        assert metrics[f"{metric}_variant_min"] == pytest.approx(min(values))
        assert metrics[f"{metric}_variant_max"] == pytest.approx(max(values))
        assert metrics[f"{metric}_variant_spread"] == pytest.approx(max(values) - min(values))
    # accuracy: mean 0.8, worst minimal (0.4), best default (the first of the 1.0s), spread 0.6
    assert metrics["accuracy_variant_mean"] == pytest.approx(0.8)
    assert metrics["accuracy_variant_spread"] == pytest.approx(0.6)
    stats = doc["spread"]["variant"]["accuracy"]
    assert (stats["min_at"], stats["max_at"]) == ("minimal", "default")


def test_per_sample_consistency_follows_the_answers(variants_run):
    *_, path = variants_run
    metrics = json.loads((path / "metrics.json").read_text())["medqa"]
    doc = json.loads((path / "variants.json").read_text())["tasks"]["medqa"]
    assert metrics["variant_agreement"] == pytest.approx(statistics.fmean(a / 6 for a in AGREEING))
    assert metrics["variant_unanimous"] == pytest.approx(1 / 5)  # question 3 only
    assert metrics["variant_flip_rate"] == pytest.approx(4 / 5)  # right under some variants, wrong under others
    records = [json.loads(line) for line in (path / "samples.jsonl").read_text().splitlines()]
    ids = list(dict.fromkeys(r["id"] for r in records))
    for sample_id, agreeing, correct in zip(ids, AGREEING, CORRECT):
        assert doc["samples"][sample_id]["variant"]["agreement"] == pytest.approx(agreeing / 6)
        assert doc["samples"][sample_id]["variant"]["correct"] == pytest.approx(correct / 6)


# ---- the other multiple-choice tasks: --prompt-variants all is their default ------------------

def test_other_multiple_choice_tasks_run_under_every_variant_with_default_only(tmp_path):
    root = mcqa_synthetic.write_all(tmp_path / "mcqa")
    tasks = ("medmcqa", "pubmedqa", *(f"mmlu_{s}" for s in mcqa_synthetic.MMLU_SUBJECTS))
    for name in tasks:
        assert list(variant_templates(get_task(name))) == [DEFAULT_VARIANT], name
    backend = ScriptedBackend(lambda prompt: "A")
    config = RunConfig(tasks=tasks, model="scripted", base_url="http://127.0.0.1:1/v1", data_dir=str(root),
                       prompt_variants=("all",))
    outcome = asyncio.run(execute(config, lambda _: backend, tmp_path / "results"))
    assert set(outcome.metrics) == set(tasks)
    records = [json.loads(line) for line in (outcome.run_dir.path / "samples.jsonl").read_text().splitlines()]
    assert {r.get("variant", DEFAULT_VARIANT) for r in records} == {DEFAULT_VARIANT}
    assert len(backend.calls) == len(records) and all(math_finite(v) for m in outcome.metrics.values()
                                                       for v in m.values() if isinstance(v, float))


def math_finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))


def test_every_variants_completion_form_scores_options_by_log_likelihood(medqa_file, tmp_path):
    """``--mcqa-scoring loglikelihood --prompt-variants all``: each variant's completion form ends in
    its answer cue, so each letter is scored as its continuation; the fake server prefers, after each
    question, the letter the script names (wrong on the opioid question), under every variant alike."""
    from evalpipe.backends.factory import make_backend
    from tests.support.fake_openai import ScriptedResponder
    from tests.tasks.test_loglikelihood import PREFERRED

    async def go():
        server = FakeOpenAIServer(responder=ScriptedResponder(PREFERRED))
        await server.serve_async()
        config = RunConfig(tasks=("medqa",), model=server.models[0], base_url=server.url,
                           data={"medqa": str(medqa_file)}, choice_scoring="loglikelihood", prompt_variants=("all",))
        try:
            return await execute(config, make_backend, tmp_path / "results"), server.total_requests
        finally:
            await server.close_async()

    outcome, requests = asyncio.run(go())
    doc = json.loads((outcome.run_dir.path / "variants.json").read_text())["tasks"]["medqa"]
    assert {v: m["accuracy"] for v, m in doc["by_variant"].items()} == {v: pytest.approx(4 / 5) for v in VARIANTS}
    assert requests == 1 + len(TEST) * len(VARIANTS)  # the capability probe, then one request per prompt
    records = outcome.run_dir.add_prompts(list(outcome.run_dir.iter_samples()))  # prompts live in the store
    assert all(r["prompt"]["choices"] == [" A", " B", " C", " D"] for r in records)
    assert {r["prompt"]["text"].rsplit("\n", 1)[-1] for r in records} == {"Answer:", "Correct answer:"}

"""``--compat lm-eval``: evalpipe asks exactly what lm-evaluation-harness asks, and scores it as lm-eval does.

The contexts in ``fixtures/lm_eval_contexts.json`` were built by lm-eval 0.4.13's own code (its
``doc_to_text`` functions, MMLU YAML/Jinja and prompt assembly; see ``make_lm_eval_contexts.py``) for
synthetic items in lm-eval's dataset schemas. Each item is written here in the file format evalpipe's
task reads (the MedQA release, MedMCQA JSON lines, PubMedQA's ori_pqal.json, MMLU's CSVs), rendered in
the ``lm-eval`` form, and must give the very same context and continuations."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from evalpipe.compat.lm_eval import choose
from evalpipe.prompting import PromptOptions, PromptRenderer, select_shots
from evalpipe.records import Example, GenerationParams
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task
from tests.support.fake_openai import FakeOpenAIProcess
from tests.test_cli import evalpipe, only_run

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "lm_eval_contexts.json").read_text(encoding="utf-8"))
LETTERS = "ABCD"


def _write(item: dict, folder: Path) -> tuple[str, LoadOptions]:
    """The fixture's doc as the file evalpipe's task reads; the task name and its load options."""
    doc, task = item["doc"], item["task"]
    folder.mkdir(parents=True, exist_ok=True)
    if task == "medqa_4options":
        path = folder / "test.jsonl"
        options = {c: doc[f"ending{i}"] for i, c in enumerate(LETTERS)}
        path.write_text(json.dumps({"question": doc["sent1"], "options": options,
                                    "answer_idx": LETTERS[doc["label"]]}) + "\n", encoding="utf-8")
        return "medqa", LoadOptions(paths={"eval": path}, shots=0)
    if task == "medmcqa":
        path = folder / "dev.json"
        path.write_text(json.dumps({"id": "x", **{k: doc[k] for k in ("question", "opa", "opb", "opc", "opd", "cop")},
                                    "subject_name": "Medicine"}) + "\n", encoding="utf-8")
        return "medmcqa", LoadOptions(paths={"eval": path}, shots=0, args={"cop_base": 0})  # the hub's 0-based cop
    if task == "pubmedqa":
        path = folder / "ori_pqal.json"
        path.write_text(json.dumps({"1": doc}), encoding="utf-8")
        return "pubmedqa", LoadOptions(paths={"eval": path}, shots=0)
    subject = task.removeprefix("mmlu_")
    paths = {}
    for role, docs in (("eval", [doc]), ("shots", item["dev"] or [doc])):
        path = folder / f"{subject}_{role}.csv"
        with path.open("w", encoding="utf-8", newline="") as out:
            for d in docs:
                csv.writer(out).writerow([d["question"], *d["choices"], LETTERS[d["answer"]]])
        paths[role] = path
    return task, LoadOptions(paths=paths, shots=item["shots"])


@pytest.mark.parametrize("index", range(len(FIXTURE["items"])),
                         ids=[f"{i['task']}-{i.get('shots', 0)}shot-{n}" for n, i in enumerate(FIXTURE["items"])])
def test_the_lm_eval_form_asks_what_lm_eval_asks(tmp_path, index):
    item = FIXTURE["items"][index]
    name, options = _write(item, tmp_path)
    spec = get_task(name).in_form("lm-eval").scored_by("loglikelihood")
    data = spec.load(options)
    example = data.examples[0]
    shots = select_shots(data.shot_pool, item.get("shots", 0), None, {example.id})  # the dev rows, in file order
    prompt = PromptRenderer(spec, shots, GenerationParams(max_tokens=1), PromptOptions(endpoint="completions")).render(example)
    assert prompt.text == item["context"]
    assert list(spec.choice_scoring.continuations(example)) == item["choices"]
    assert example.gold == LETTERS[item["gold"]]


def test_lm_eval_picks_the_same_option_on_every_item():
    """acc: the argmax of the log-likelihoods; acc_norm: of each over len(choice) in characters (lm-eval's
    process_results), the first of equal maxima as np.argmax. Hand-computed cases."""
    # PubMedQA: " yes" -3.0 (len 3: -1.0), " no" -2.5 (len 2: -1.25), " maybe" -4.0 (len 5: -0.8)
    assert choose([-3.0, -2.5, -4.0], ["yes", "no", "maybe"]) == (1, 2)
    assert choose([-1.0, -1.0, -2.0, -3.0], list("ABCD")) == (0, 0)  # a tie: the first, as np.argmax
    assert choose([-2.0, -0.5, -0.7, -9.0], list("ABCD")) == (1, 1)  # letters: acc_norm is acc


def test_scoring_gives_acc_and_acc_norm():
    spec = get_task("pubmedqa").in_form("lm-eval").scored_by("loglikelihood")
    scoring = spec.scoring("lm-eval")
    opts = [{"letter": letter, "text": text} for letter, text in zip("ABC", ("yes", "no", "maybe"))]
    examples = [Example("1", {"options": opts}, "B"), Example("2", {"options": opts}, "C"),
                Example("3", {"options": opts}, "A")]
    answers = [{" yes": -3.0, " no": -2.5, " maybe": -4.0},   # acc → no (right), acc_norm → maybe (wrong)
               {" yes": -3.0, " no": -2.5, " maybe": -4.0},   # acc → no (wrong), acc_norm → maybe (right)
               {" yes": -0.1, " no": -2.5}]                   # a missing choice: a counted failure
    predictions = [scoring.parse(json.dumps({"logprobs": a}), ex) for a, ex in zip(answers, examples)]
    assert [p.value for p in predictions] == ["B", "B", None] and predictions[2].failed
    sheet = scoring.score(examples, predictions, None)
    assert sheet.corpus["acc"] == pytest.approx(1 / 3) and sheet.corpus["acc_norm"] == pytest.approx(1 / 3)
    assert [r["acc_norm"] for r in sheet.per_sample] == [0.0, 1.0, 0.0]


def test_a_task_without_the_form_is_one_clear_error():
    with pytest.raises(ValueError, match=r"task 'clue_mednli' has no prompt form 'lm-eval'"):
        get_task("clue_mednli").in_form("lm-eval")


def test_run_compat_lm_eval_from_the_command_line(tmp_path):
    """PubMedQA end to end: lm-eval's prompt, the words scored by log-likelihood, acc/acc_norm, re-scored."""
    item = next(i for i in FIXTURE["items"] if i["task"] == "pubmedqa")
    _, options = _write(item, tmp_path / "data")
    script = tmp_path / "answers.json"
    script.write_text(json.dumps({"Does daily walking": "yes"}))  # the fake server prefers " yes" there
    args = ("run", "--task", "pubmedqa", "--data", f"pubmedqa={options.paths['eval']}", "--compat", "lm-eval",
            "--model", "fake-model", "--results-dir", str(tmp_path / "results"))
    with FakeOpenAIProcess(latency=0.0, script=script) as server:
        result = evalpipe(*args, "--base-url", server.url)
    assert result.returncode == 0, result.stderr
    run = only_run(tmp_path / "results")
    config = json.loads((run / "config.json").read_text())
    assert config["config"]["prompt_form"] == "lm-eval" and config["config"]["choice_scoring"] == "loglikelihood"
    assert config["tasks"]["pubmedqa"]["template"].endswith("lm_eval_pubmedqa.j2")
    metrics = json.loads((run / "metrics.lm-eval.json").read_text())["pubmedqa"]
    assert metrics["acc"] == 1.0 and metrics["n"] == 1 and not math.isnan(metrics["acc_norm"])
    from evalpipe.results import RunDir
    sample = RunDir(run).read_samples("lm-eval", prompts=True)[0]
    assert sample["prompt"]["text"] == item["context"] and sample["prompt"]["choices"] == item["choices"]
    rescored = evalpipe("score", str(run), "--compat", "lm-eval")
    assert rescored.returncode == 0, rescored.stderr
    assert json.loads((run / "metrics.lm-eval.json").read_text())["pubmedqa"] == metrics

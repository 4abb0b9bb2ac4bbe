"""Runs with prompt conditions, end to end through the runner: per-condition metrics, the spread
numbers and consistency checked against values derived by hand from a scripted model's policy,
identical prompts asked once, resume per variant, re-scoring, and runs without conditions untouched."""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter

import pytest

from evalpipe.rescoring import rescore
from evalpipe.results import RunDir
from evalpipe.outcome import RunError
from tests.variants.support import EXAMPLES, answer, config, run

VARIANTS = ["default", "concise", "guidelines", "instructions_first", "system_role"]
N = 12


def expected(variant: str) -> dict:
    """tp/fn and the predicted value per sample, from the scripted policy (tests/variants/support.py)."""
    tp = fn = failed = 0
    predictions = []
    for i, ex in enumerate(EXAMPLES[:N]):
        gold = len(ex.gold.spans)
        untagged = variant == "concise" and i % 3 == 0 or variant == "instructions_first" and i % 4 == 0
        refused = variant == "guidelines" and i % 2 == 0
        if refused:
            fn += gold
            failed += 1
            predictions.append("unparsed")
        elif untagged:
            fn += gold
            predictions.append("none" if gold else "gold")
        else:
            tp += gold
            predictions.append("gold")
    recall = tp / (tp + fn)
    return {"f1": 2 * recall / (1 + recall) if tp else 0.0, "recall": recall, "precision": 1.0 if tp else 0.0,
            "parse_failure_rate": failed / N, "predictions": predictions}


@pytest.fixture(scope="module")
def variants_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    outcome, backend = run(config(prompt_variants=("all",)), root)
    return outcome, backend, outcome.run_dir.path


def test_each_variant_scores_as_its_answers_say_and_the_reference_is_the_canonical_run(variants_run, tmp_path):
    outcome, backend, path = variants_run
    doc = json.loads((path / "variants.json").read_text())["tasks"]["ncbi_disease"]
    assert doc["reference"] == "default" and doc["axes"] == {"variant": VARIANTS}
    assert list(doc["conditions"]) == VARIANTS
    for variant in VARIANTS:
        metrics = doc["conditions"][variant]["metrics"]
        want = expected(variant)
        for metric in ("f1", "recall", "precision", "parse_failure_rate"):
            assert metrics[metric] == pytest.approx(want[metric]), (variant, metric)
        assert doc["by_variant"][variant] == {k: float(v) for k, v in metrics.items()}
    # the task's metrics.json entry is the canonical prompt's, number for number
    plain, _ = run(config(), tmp_path)
    metrics = json.loads((path / "metrics.json").read_text())["ncbi_disease"]
    assert {k: v for k, v in metrics.items() if k in plain.metrics["ncbi_disease"]} == plain.metrics["ncbi_disease"]
    assert len(backend.calls) == N * len(VARIANTS)


def test_spread_numbers_are_those_of_the_per_variant_metrics(variants_run):
    _, _, path = variants_run
    metrics = json.loads((path / "metrics.json").read_text())["ncbi_disease"]
    doc = json.loads((path / "variants.json").read_text())["tasks"]["ncbi_disease"]
    assert doc["metrics"] == ["precision", "recall", "f1", "partial_f1", "accuracy", "parse_failure_rate"]
    for metric in doc["metrics"]:
        values = [doc["by_variant"][v][metric] for v in VARIANTS]
        assert metrics[f"{metric}_variant_mean"] == pytest.approx(statistics.fmean(values))
        assert metrics[f"{metric}_variant_std"] == pytest.approx(statistics.pstdev(values))
        assert metrics[f"{metric}_variant_min"] == min(values) and metrics[f"{metric}_variant_max"] == max(values)
        assert metrics[f"{metric}_variant_spread"] == pytest.approx(max(values) - min(values))
        stats = doc["spread"]["variant"][metric]
        assert stats["min_at"] == VARIANTS[values.index(min(values))]
        assert stats["max_at"] == VARIANTS[values.index(max(values))]
    f1 = {v: expected(v)["f1"] for v in VARIANTS}
    assert doc["spread"]["variant"]["f1"]["min_at"] == min(f1, key=f1.get)
    assert metrics["f1_variant_spread"] == pytest.approx(max(f1.values()) - min(f1.values())) and max(f1.values()) == 1


def test_per_sample_agreement_and_unanimity_follow_the_answers(variants_run):
    _, _, path = variants_run
    metrics = json.loads((path / "metrics.json").read_text())["ncbi_disease"]
    doc = json.loads((path / "variants.json").read_text())["tasks"]["ncbi_disease"]
    by_variant = {v: expected(v)["predictions"] for v in VARIANTS}
    shares = []
    for i, ex in enumerate(EXAMPLES[:N]):
        values = [by_variant[v][i] for v in VARIANTS]
        share = Counter(values).most_common(1)[0][1] / len(values)
        shares.append(share)
        assert doc["samples"][ex.id]["variant"]["agreement"] == pytest.approx(share)
    assert metrics["variant_agreement"] == pytest.approx(statistics.fmean(shares))
    assert metrics["variant_unanimous"] == pytest.approx(sum(s == 1 for s in shares) / N)
    # NER has no 0/1 per-sample correctness (micro F1, token accuracy): no flip rate
    assert doc["correctness"] is None and "variant_flip_rate" not in metrics


def test_samples_carry_their_condition_reference_first(variants_run):
    _, _, path = variants_run
    records = RunDir(path).read_samples(prompts=True)  # the prompts are kept once, in the store
    assert len(records) == N * len(VARIANTS)
    assert [r["condition"] for r in records[:N]] == ["default"] * N
    assert list(records[0])[:6] == ["task", "id", "condition", "variant", "shots", "shot_order"]
    assert Counter(r["variant"] for r in records) == {v: N for v in VARIANTS}
    assert {r["shots"] for r in records} == {5} and {r["shot_order"] for r in records} == {0}
    system = [r for r in records if r["variant"] == "system_role"]
    assert system[0]["prompt"]["messages"][0]["role"] == "system"
    config = json.loads((path / "config.json").read_text())
    assert config["config"]["prompt_variants"] == ["all"]
    conditions = config["tasks"]["ncbi_disease"]["conditions"]
    assert [c["template"] for c in conditions] == ["prompts/ncbi_disease.j2"] + [
        f"prompts/ncbi_disease/variants/{v}.j2" for v in VARIANTS[1:]]
    assert all(len(c["template_sha256"]) == 64 for c in conditions)
    assert [c["plan"] for c in conditions] == ["ncbi_disease"] + [f"ncbi_disease|{v}" for v in VARIANTS[1:]]


def test_rescoring_writes_the_same_files(variants_run):
    _, _, path = variants_run
    before = {name: (path / name).read_bytes() for name in ("metrics.json", "variants.json", "samples.jsonl")}
    rescore(path)
    assert {name: (path / name).read_bytes() for name in before} == before
    rescore(path, compat="evalscope")
    compat = json.loads((path / "variants.evalscope.json").read_text())["tasks"]["ncbi_disease"]
    assert list(compat["conditions"]) == VARIANTS
    assert "f1_variant_std" in json.loads((path / "metrics.evalscope.json").read_text())["ncbi_disease"]


def test_a_run_without_conditions_writes_what_it_always_did(tmp_path):
    outcome, _ = run(config(), tmp_path)
    path = outcome.run_dir.path
    records = [json.loads(line) for line in (path / "samples.jsonl").read_text().splitlines()]
    assert not any("condition" in r or "variant" in r for r in records)
    assert not (path / "variants.json").exists()
    assert not any(k.endswith(("_variant_mean", "_agreement")) for k in outcome.metrics["ncbi_disease"])
    recorded = json.loads((path / "config.json").read_text())
    assert not {"prompt_variants", "shot_orders", "shots_sweep"} & set(recorded["config"])
    assert "conditions" not in recorded["tasks"]["ncbi_disease"]


def test_adding_variants_extends_the_run_and_asks_only_new_prompts_then_resumes_per_variant(tmp_path):
    first, plain = run(config(), tmp_path)
    assert len(plain.calls) == N
    second, backend = run(config(prompt_variants=("default", "concise")), tmp_path)
    assert second.run_dir.path == first.run_dir.path  # the variant options are not part of the run's identity
    assert len(backend.calls) == N  # the canonical prompts' answers are reused
    assert json.loads((second.run_dir.path / "variants.json").read_text())["tasks"]["ncbi_disease"]["axes"] == {
        "variant": ["default", "concise"]}

    def flaky(prompt):
        from tests.variants.support import sentence, variant
        if variant(prompt) == "guidelines" and EXAMPLES[N - 1].inputs["text"] == sentence(prompt):
            return RuntimeError("HTTP 500 after 3 attempts")
        return answer(prompt)

    third, backend = run(config(prompt_variants=("all",)), tmp_path, flaky)
    assert len(backend.calls) == 3 * N  # guidelines, instructions_first, system_role
    doc = json.loads((third.run_dir.path / "variants.json").read_text())["tasks"]["ncbi_disease"]
    assert doc["conditions"]["guidelines"]["metrics"]["errors"] == 1
    fourth, backend = run(config(prompt_variants=("all",)), tmp_path)
    assert len(backend.calls) == 1  # only the failed guidelines prompt is asked again
    doc = json.loads((fourth.run_dir.path / "variants.json").read_text())["tasks"]["ncbi_disease"]
    assert doc["conditions"]["guidelines"]["metrics"]["f1"] == pytest.approx(expected("guidelines")["f1"])
    # back to the plain command: the files describe the plain run again
    fifth, backend = run(config(), tmp_path)
    assert len(backend.calls) == 0 and not (fifth.run_dir.path / "variants.json").exists()
    assert "f1_variant_std" not in json.loads((fifth.run_dir.path / "metrics.json").read_text())["ncbi_disease"]


def test_shot_orders_are_seeded_permutations_and_identical_prompts_are_asked_once(tmp_path):
    outcome, backend = run(config(shot_orders=3, shots_sweep=(0, 5), limit=6), tmp_path)
    recorded = json.loads((outcome.run_dir.path / "config.json").read_text())["tasks"]["ncbi_disease"]
    conditions = {c["id"]: c for c in recorded["conditions"]}
    assert list(conditions) == ["default/5-shot", "default/5-shot/order-1", "default/5-shot/order-2",
                                "default/0-shot", "default/0-shot/order-1", "default/0-shot/order-2"]
    canonical = [f"train-{i}" for i in range(5)]
    assert conditions["default/5-shot"]["shot_ids"] == canonical
    orders = [conditions[f"default/5-shot/order-{j}"]["shot_ids"] for j in (1, 2)]
    assert all(sorted(o) == canonical and o != canonical for o in orders) and orders[0] != orders[1]
    assert all(conditions[f"default/0-shot{s}"]["shot_ids"] == [] for s in ("", "/order-1", "/order-2"))
    # three 5-shot orders + one 0-shot prompt (its three orders are the same prompt): asked once each
    assert len(backend.calls) == 4 * 6
    doc = json.loads((outcome.run_dir.path / "variants.json").read_text())["tasks"]["ncbi_disease"]
    assert doc["axes"] == {"order": ["0", "1", "2"], "shots": ["5", "0"]}
    # a level is the mean over the other axis' levels: order j = mean of its 5-shot and 0-shot conditions
    for j, suffix in enumerate(("", "/order-1", "/order-2")):
        both = [doc["conditions"][f"default/{k}-shot{suffix}"]["metrics"]["f1"] for k in (5, 0)]
        assert doc["by_order"][str(j)]["f1"] == pytest.approx(sum(both) / 2)
    assert doc["by_shots"]["0"]["f1"] == pytest.approx(statistics.fmean(
        doc["conditions"][f"default/0-shot{s}"]["metrics"]["f1"] for s in ("", "/order-1", "/order-2")))


def test_shots_sweep_takes_prefixes_of_the_largest_selection(tmp_path):
    outcome, _ = run(config(shots_sweep=(1, 3), fewshot_seed=7, limit=3), tmp_path)
    recorded = json.loads((outcome.run_dir.path / "config.json").read_text())["tasks"]["ncbi_disease"]
    ids = {c["shot_count"]: c["shot_ids"] for c in recorded["conditions"]}
    assert list(ids) == [1, 3] and ids[3][:1] == ids[1] and len(set(ids[3])) == 3
    # the reference is the sweep's first count when the run's own (5) is not swept
    assert json.loads((outcome.run_dir.path / "variants.json").read_text())["tasks"]["ncbi_disease"][
        "reference"] == "default/1-shot"


def test_variants_crossed_with_orders_take_agreement_within_each_order(tmp_path):
    outcome, _ = run(config(prompt_variants=("default", "guidelines"), shot_orders=2, limit=4), tmp_path)
    doc = json.loads((outcome.run_dir.path / "variants.json").read_text())["tasks"]["ncbi_disease"]
    assert doc["axes"] == {"variant": ["default", "guidelines"], "order": ["0", "1"]}
    # guidelines refuses samples 0 and 2 whatever the order; agreement across variants: 1/2 there, else 1
    assert [doc["samples"][ex.id]["variant"]["agreement"] for ex in EXAMPLES[:4]] == [0.5, 1.0, 0.5, 1.0]
    assert [doc["samples"][ex.id]["order"]["agreement"] for ex in EXAMPLES[:4]] == [1.0] * 4
    assert doc["by_variant"]["guidelines"]["parse_failure_rate"] == 0.5
    assert not math.isnan(doc["spread"]["order"]["f1"]["std"])


def test_an_unknown_variant_or_a_bad_count_fails_before_any_request(tmp_path):
    for kwargs, message in ((dict(prompt_variants=("nope",)), "task ncbi_disease has no prompt variant 'nope'; "
                             "its variants: default, concise, guidelines"),
                            (dict(prompt_variants=("all", "concise")), "cannot be combined"),
                            (dict(shots_sweep=(2, 10_000)), "shot pool has only")):
        with pytest.raises(RunError, match=message):
            run(config(**kwargs), tmp_path)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("task", "metrics"), [
    ("clue_meqsum", ["rouge1", "rouge2", "rougeL", "bertscore[all-MiniLM-L6-v2@L6]_f1", "parse_failure_rate", "n"]),
    ("ncbi_disease", ["precision", "recall", "f1", "tp", "partial_f1", "accuracy", "parse_failure_rate", "n"]),
    ("kuake_qic", ["accuracy", "macro_f1", "parse_failure_rate", "errors", "n"]),
])
def test_displayed_and_headline_metrics_are_the_leaderboards(task, metrics):
    from evalpipe.report.leaderboard import primary_metric, shown_metrics
    from evalpipe.report.runs import TaskInfo
    from evalpipe.variants.robustness import displayed_metrics, headline_metric
    from evalpipe.tasks.registry import get_task
    spec = get_task(task)
    info = TaskInfo(name=task, metrics=spec.metrics, primary_metric=spec.primary_metric)
    assert displayed_metrics(spec, metrics) == shown_metrics(info, metrics)
    assert headline_metric(spec, displayed_metrics(spec, metrics)) == primary_metric(info, metrics)


def test_a_task_with_0_1_correctness_gets_correct_shares_and_a_flip_rate(tmp_path):
    """MedNLI (synthetic fixtures): minimal always answers neutral, definitions gets the first pair
    wrong, every other variant is right — correct shares and flips follow by hand."""
    from pathlib import Path

    from evalpipe.tasks.registry import get_task
    from tests.support.scripted_backend import last_user_text
    from tests.variants.support import run as run_with

    fixtures = Path(__file__).resolve().parents[1] / "clue" / "fixtures"
    spec = get_task("clue_mednli")
    cfg = config(tasks=("clue_mednli",), data_dir=str(fixtures), limit=None, prompt_variants=("all",))
    from evalpipe.config import load_options
    examples = spec.load(load_options(cfg, "clue_mednli")).examples
    wrong = {"entailment": "contradiction", "contradiction": "neutral", "neutral": "entailment"}

    def respond(prompt):
        text = last_user_text(prompt)
        system = prompt.messages[0].content if prompt.messages[0].role == "system" else ""
        position, i = max((text.rfind(ex.inputs["sentence2"]), i) for i, ex in enumerate(examples)
                          if ex.inputs["sentence2"] in text and ex.inputs["sentence1"] in text)
        if "Relation (ENTAILMENT, NEUTRAL or CONTRADICTION):" in text:
            return "NEUTRAL"
        if "You are a clinician" in system and i == 0:
            return wrong[examples[i].gold].upper()
        return examples[i].gold

    outcome, _ = run_with(cfg, tmp_path, respond)
    doc = json.loads((outcome.run_dir.path / "variants.json").read_text())["tasks"]["clue_mednli"]
    assert doc["correctness"] == "accuracy" and len(doc["conditions"]) == 5
    flips = []
    for i, ex in enumerate(examples):
        wrongs = (ex.gold != "neutral") + (i == 0)
        assert doc["samples"][ex.id]["variant"]["correct"] == pytest.approx((5 - wrongs) / 5)
        flips.append(wrongs > 0)
    metrics = outcome.metrics["clue_mednli"]
    assert metrics["variant_flip_rate"] == pytest.approx(sum(flips) / len(examples))
    assert doc["by_variant"]["minimal"]["accuracy"] == pytest.approx(
        sum(ex.gold == "neutral" for ex in examples) / len(examples))
    assert metrics["accuracy"] == 1.0 and metrics["accuracy_variant_max"] == 1.0
    assert doc["spread"]["variant"]["accuracy"]["min_at"] == "minimal"
    # the first pair: entailment (default, question, premise_hypothesis), neutral, contradiction → 3/5
    assert doc["samples"][examples[0].id]["variant"]["agreement"] == pytest.approx(3 / 5)

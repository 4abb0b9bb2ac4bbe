"""Issue 25 without the Batch API: prices, reasoning models (reasoning_effort, max_completion_tokens,
reasoning text and tokens), structured output and schema conformance — runs in-process against the
loopback fake (:mod:`tests.support.fake_batch` answers direct chat requests too)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from evalpipe.backends.factory import make_backend
from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig
from evalpipe.backends.wire import read_answer
from evalpipe.store.keys import cache_key
from evalpipe.config import RunConfig
from evalpipe.cost import PriceError, Prices, resolve_prices, task_costs
from evalpipe.records import Example, GenerationParams, Message, Prompt
from evalpipe.pipeline.execute import execute
from evalpipe.structured import SCHEMA_CONFORMANCE, structured_spec, validate
from evalpipe.tasks.registry import get_task
from tests.support.fake_batch import FakeBatchServer, tagging_responder
from tests.support.fake_openai import request_text

MODEL = "fake-model"


def run(config: RunConfig, root: Path):
    return asyncio.run(execute(config, make_backend, root))


def config(url: str, **extra) -> RunConfig:
    return RunConfig(tasks=("ncbi_disease",), model=MODEL, base_url=url, limit=6, concurrency=4, **extra)


def samples(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


# ---- prices --------------------------------------------------------------------------------------

def test_answer_cost_by_hand():
    prices = Prices(input=2.5, output=10.0, cached_input=1.25, batch_discount=0.5)
    # (600 × 2.5 + 400 × 1.25 + 200 × 10) / 10⁶ = (1500 + 500 + 2000) / 10⁶
    assert prices.answer_cost(1000, 200, 400, batch=False) == pytest.approx(0.004, rel=1e-12)
    assert prices.answer_cost(1000, 200, 400, batch=True) == pytest.approx(0.002, rel=1e-12)
    # no cached price: cached tokens cost the input price
    assert Prices(2.5, 10.0).answer_cost(1000, 200, 400, batch=False) == pytest.approx(0.0045, rel=1e-12)


def test_prices_from_a_file_and_the_flags(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text("gpt-x:\n  input: 1.0\n  output: 4.0\n  batch_discount: 0.5\nother:\n  input: 9\n  output: 9\n")
    found = resolve_prices("gpt-x", None, 8.0, None, path, None)
    assert (found.input, found.output, found.batch_discount, found.source) == (1.0, 8.0, 0.5, str(path))
    assert resolve_prices("m", None, None, None, None, None) is None
    with pytest.raises(PriceError, match=r"no entry for model 'nope' \(it has: gpt-x, other\)"):
        resolve_prices("nope", None, None, None, path, None)
    with pytest.raises(PriceError, match="--input: missing"):
        resolve_prices("m", None, 3.0, None, None, None)
    with pytest.raises(PriceError, match="batch_discount: a share between 0 and 1"):
        resolve_prices("m", 1.0, 1.0, None, None, 2.0)
    path.write_text("gpt-x:\n  input: 1\n  output: 2\n  discount: 0.5\n")
    with pytest.raises(PriceError, match=r"gpt-x\.discount: unknown field"):
        resolve_prices("gpt-x", None, None, None, path, None)


# ---- the wire ------------------------------------------------------------------------------------

def test_reasoning_text_and_token_details_are_read_apart_from_the_answer():
    reply = {"choices": [{"message": {"content": "A", "reasoning_content": "first, think"}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 10, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 4},
                       "completion_tokens_details": {"reasoning_tokens": 25}}}
    answer = read_answer(reply, chat=True)
    assert (answer.text, answer.reasoning) == ("A", "first, think")
    assert (answer.usage.cached_tokens, answer.usage.reasoning_tokens) == (4, 25)
    other = read_answer({"choices": [{"message": {"content": "B", "reasoning": "hmm"}}], "usage": {}}, chat=True)
    assert other.reasoning == "hmm" and other.usage.reasoning_tokens is None


def test_keys_of_prompts_without_the_new_parameters_are_unchanged():
    prompt = Prompt(params=GenerationParams(max_tokens=5, seed=1, stop=("x",)), messages=(Message("user", "hi"),))
    # computed by the code before issue 25: stored answers of older runs stay found
    assert cache_key("m", prompt) == "ad71beaaade6d99cca1760d53aa382830cc6d5b749b8c6391b48b4cf20b42255"
    effort = Prompt(params=GenerationParams(max_tokens=5, seed=1, stop=("x",), reasoning_effort="low"),
                    messages=prompt.messages)
    assert cache_key("m", effort) != cache_key("m", prompt)
    assert Prompt.from_json(json.loads(json.dumps(__import__("evalpipe.records").records.to_jsonable(effort)))) == effort


def test_a_400_asking_for_max_completion_tokens_is_adapted_to_once():
    async def go(server: FakeBatchServer):
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model=MODEL, max_retries=0))
        try:
            prompts = [Prompt(params=GenerationParams(max_tokens=7), messages=(Message("user", f"q{i}"),))
                       for i in range(3)]
            first = await backend.complete(prompts[0])
            rest = [await backend.complete(p) for p in prompts[1:]]
            return first, rest, backend.stats()
        finally:
            await backend.aclose()

    with FakeBatchServer(require_max_completion_tokens=True) as server:
        first, rest, stats = asyncio.run(go(server))
        assert first.ok and all(c.ok for c in rest)
        assert stats["adapted_max_completion_tokens"] is True
        assert [("max_tokens" in b, b.get("max_completion_tokens")) for b in server.bodies] == [
            (True, None), (False, 7), (False, 7), (False, 7)]  # one refusal, then the other name


# ---- reasoning models ----------------------------------------------------------------------------

def test_reasoning_effort_is_sent_and_reasoning_is_kept_apart_and_counted(tmp_path):
    with FakeBatchServer(reasoning="Let me think about diseases.") as server:
        outcome = run(config(server.url, reasoning_effort="low", prices={"input": 1.0, "output": 2.0,
                                                                          "cached_input": 0.5}), tmp_path)
        assert {b["reasoning_effort"] for b in server.bodies} == {"low"}
    rows = samples(outcome.run_dir.path)
    assert all(r["reasoning"] == "Let me think about diseases." for r in rows)
    assert all("think" not in r["answer"] for r in rows)  # the answer is the content alone
    metrics = json.loads((outcome.run_dir.path / "metrics.json").read_text())["ncbi_disease"]
    assert metrics["reasoning_tokens"] == sum(r["usage"]["reasoning_tokens"] for r in rows) > 0
    assert metrics["cached_tokens"] == sum(r["usage"]["cached_tokens"] for r in rows) > 0
    expected = sum((u["prompt_tokens"] - u["cached_tokens"]) * 1.0 + u["cached_tokens"] * 0.5
                   + u["completion_tokens"] * 2.0 for u in (r["usage"] for r in rows)) / 1e6
    assert metrics["cost_usd"] == pytest.approx(expected, rel=1e-12)
    # the effort is part of the run's identity: a run without it is another directory
    assert config(server.url).default_run_name() != config(server.url, reasoning_effort="low").default_run_name()


def test_the_costs_summed_while_the_samples_are_written_reach_metrics_and_summary(tmp_path, monkeypatch):
    import evalpipe.outcome as outcome_module

    written_first: list[bool] = []

    def spied(run_dir, outcome, compat, info):  # type: ignore[no-untyped-def]
        assert callable(info), "the run's info is not worked out beside the samples"

        def after_samples():  # type: ignore[no-untyped-def]
            written_first.append(run_dir.samples_path(compat).is_file())
            return info()

        outcome_module.write_outcome(run_dir, outcome, compat, after_samples)

    monkeypatch.setattr("evalpipe.pipeline.execute.write_outcome", spied)
    with FakeBatchServer() as server:
        outcome = run(config(server.url, prices={"input": 1.0, "output": 2.0}), tmp_path)
    assert written_first == [True]
    rows = samples(outcome.run_dir.path)
    expected = sum(r["usage"]["prompt_tokens"] * 1.0 + r["usage"]["completion_tokens"] * 2.0 for r in rows) / 1e6
    metrics = json.loads((outcome.run_dir.path / "metrics.json").read_text())["ncbi_disease"]
    summary = json.loads((outcome.run_dir.path / "summary.json").read_text())
    assert metrics["cost_usd"] == pytest.approx(expected, rel=1e-12) and expected > 0
    assert summary["run"]["cost"]["answers_usd"] == pytest.approx(expected, rel=1e-12)


def test_an_answer_two_samples_ask_is_counted_once(tmp_path):
    """Two samples (or two prompt conditions) with the same prompt share one stored answer: its tokens
    are summed once; an answer no plan of the task asks is not summed."""
    path = tmp_path / "store.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE plan (task TEXT, sample_id TEXT, key TEXT)")
    db.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, prompt_tokens INTEGER, completion_tokens INTEGER, "
               "extra TEXT, created REAL)")
    db.executemany("INSERT INTO plan VALUES (?, ?, ?)", [("t", "s1", "k1"), ("t", "s2", "k1"), ("t", "s3", "k2"),
                                                         ("t@v2", "s1", "k1"), ("other", "s9", "k9")])
    db.executemany("INSERT INTO responses VALUES (?, ?, ?, NULL, 1.0)", [("k1", 10, 1), ("k2", 20, 2), ("k9", 90, 9)])
    db.commit()
    db.close()
    (totals,) = task_costs(path, {"t": ["t", "t@v2"]}, Prices.from_json({"input": 1.0, "output": 2.0}), 0.0).values()
    assert (totals.answers, totals.prompt_tokens, totals.completion_tokens) == (2, 30, 3)
    assert totals.cost_usd == pytest.approx((30 * 1.0 + 3 * 2.0) / 1e6)


# ---- structured output ---------------------------------------------------------------------------

def _json_entities(body: dict) -> str:
    """Tagged mentions as the structured JSON answer; every other sentence breaks the schema."""
    if "response_format" not in body:
        return tagging_responder(body)
    tagged = tagging_responder(body)
    words = [w[len("<disease>"):-len("</disease>")] for w in tagged.split(" ") if w.startswith("<disease>")]
    if len(request_text(body)) % 2:
        return json.dumps({"entities": [{"text": w, "type": "illness"} for w in words] or [{"txt": 1}]})
    return json.dumps({"entities": [{"text": w, "type": "disease"} for w in words]})


def test_a_structured_run_asks_for_the_schema_and_reports_conformance(tmp_path):
    with FakeBatchServer(responder=_json_entities) as server:
        free = run(config(server.url), tmp_path)
        structured = run(config(server.url, structured=True), tmp_path)
        formats = [b.get("response_format") for b in server.bodies]
    assert formats[:6] == [None] * 6
    assert all(f["type"] == "json_schema" and f["json_schema"]["schema"]["required"] == ["entities"]
               for f in formats[6:])
    assert structured.run_dir.path != free.run_dir.path
    rows = samples(structured.run_dir.path)
    valid = [r["diagnostics"].get("schema_valid") for r in rows]
    metrics = json.loads((structured.run_dir.path / "metrics.json").read_text())["ncbi_disease"]
    assert 0 < valid.count(1) < 6
    assert metrics[SCHEMA_CONFORMANCE] == valid.count(1) / 6
    assert metrics["parse_failure_rate"] == valid.count(0) / 6
    # the samples that conform score exactly as the free-text answers they stand for
    free_rows = {r["id"]: r for r in samples(free.run_dir.path)}
    for row in rows:
        if row["diagnostics"]["schema_valid"]:
            assert row["prediction"] == free_rows[row["id"]]["prediction"]


def test_each_kind_with_a_schema_parses_by_it():
    spec = structured_spec(get_task("medqa"), True)
    example = Example("q", {"options": [{"letter": k, "text": k} for k in "ABCD"]}, "B")
    parse = spec.scoring(None).parse
    assert parse('{"answer": "B"}', example).value == "B"
    assert parse('{"answer": "Z"}', example).failed and parse("B", example).failed
    assert SCHEMA_CONFORMANCE in spec.metrics and SCHEMA_CONFORMANCE in spec.metric_definitions
    nli = structured_spec(get_task("clue_mednli"), True)
    labels = nli.structured.schema["properties"]["label"]["enum"]
    assert nli.scoring(None).parse(json.dumps({"label": labels[0]}), Example("x", {}, labels[0])).value == labels[0]
    codes = structured_spec(get_task("clue_medisumcode"), True).scoring(None).parse('{"codes": ["E11.9"]}',
                                                                                     Example("d", {}, None))
    assert not codes.failed and codes.diagnostics["schema_valid"] == 1
    assert structured_spec(get_task("clue_meqsum"), True) is get_task("clue_meqsum")  # no schema: free text
    assert validate({"a": [1]}, {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}) \
        == "$.a[0]: expected string"


# ---- the report ----------------------------------------------------------------------------------

def test_the_report_sets_a_structured_run_beside_the_free_text_run_with_their_cost(tmp_path):
    from evalpipe.report.build import build_report

    prices = {"input": 3.0, "output": 15.0}
    with FakeBatchServer(responder=_json_entities, reasoning="hmm") as server:
        free = run(config(server.url, prices=prices), tmp_path)
        structured = run(config(server.url, prices=prices, structured=True), tmp_path)
    build_report([free.run_dir.path, structured.run_dir.path], tmp_path / "report", resamples=50)
    html = (tmp_path / "report" / "report.html").read_text()
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert 'id="cost"' in html and "| model | task | cost | n | per sample | correct | per correct |" in markdown

    def money(value: float) -> str:
        return f"${value:.6f}" if value < 0.01 else f"${value:.4f}"

    for outcome, label in ((free, "fake-model"), (structured, "fake-model (structured)")):
        metrics = json.loads((outcome.run_dir.path / "metrics.json").read_text())["ncbi_disease"]
        correct = sum(1 for r in samples(outcome.run_dir.path) if r["scores"].get("f1") == 1.0)
        per_correct = money(metrics["cost_usd"] / correct) if correct else "–"
        reasoning = str(int(metrics['reasoning_tokens']))
        assert (f"| {label} | ncbi_disease | {money(metrics['cost_usd'])} | 6 | {money(metrics['cost_usd'] / 6)} | "
                f"{correct} | {per_correct} | {reasoning} |") in markdown
    assert "hmm" in html  # the reasoning text reaches the sample browser


def test_options_that_cannot_work_together_are_refused_before_anything_runs():
    with pytest.raises(ValueError, match="--engine vllm-inprocess"):
        RunConfig(tasks=("ncbi_disease",), model="m", engine="vllm-inprocess", structured=True)
    with pytest.raises(ValueError, match="--batch needs a server with the OpenAI Batch API"):
        RunConfig(tasks=("ncbi_disease",), model="m", engine="llamacpp", batch={"retry": "batch"})
    with pytest.raises(ValueError, match="cannot score by log-likelihood"):
        RunConfig(tasks=("medqa",), model="m", choice_scoring="loglikelihood", batch={"export": "x.jsonl"})
    with pytest.raises(ValueError, match="--reasoning-effort must be one of"):
        RunConfig(tasks=("ncbi_disease",), model="m", reasoning_effort="extreme")
    # none of them is part of a run's name unless set: runs made before keep their directories
    plain = RunConfig(tasks=("ncbi_disease",), model="m")
    assert plain.default_run_name() == RunConfig(tasks=("ncbi_disease",), model="m", batch={"retry": "batch"},
                                                 prices={"input": 1.0, "output": 1.0}).default_run_name()
    assert "batch" not in plain.to_json() and "prices" not in plain.to_json() and "structured" not in plain.to_json()

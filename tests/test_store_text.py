"""Answers that are valid JSON strings but not valid Unicode (lone surrogates) survive every stage.

A server may send ``"\\udcff"`` inside a JSON answer: ``json.loads`` accepts it and gives a Python
string that UTF-8 cannot encode. Such an answer must be stored (never lost, never a crash that
stops the run for good), read back as the very same string, written to ``samples.jsonl`` as valid
UTF-8 JSON, and parsed and scored like any other junk answer.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalpipe.store.answers import ResponseStore
from evalpipe.store.keys import cache_key
from evalpipe.store.prompt_pack import Packer
from evalpipe.records import Completion, GenerationParams, Message, Prediction, Prompt, Usage
from evalpipe.results import RunDir
from tests.fuzz.strategies import fuzz_settings
from tests.support.plans import write_plan

LONE = "\udcff"
ANSWERS = [
    f"<response>a {LONE} b</response>",
    "\ud800",  # a lone high surrogate
    "\ud83d\ude00 split pair",  # two surrogate code points, as two streamed chunks can leave them
    f"mixed é 中文 {LONE}\x00\u202e end",
    "plain text",
    "",
]


def _completion(text: str, finish: str = "stop") -> Completion:
    return Completion(text=text, finish_reason=finish, usage=Usage(3, 4), latency_s=0.5, attempts=2,
                      endpoint_url="http://127.0.0.1:1/v1")


@pytest.mark.parametrize("text", ANSWERS)
def test_store_round_trip_is_lossless(tmp_path, text):
    store = ResponseStore(tmp_path / "r.sqlite")
    store.put("k", "m", _completion(text, finish=f"stop{LONE}"))
    got = store.get("k")
    assert got is not None and got.text == text and type(got.text) is str
    assert got.finish_reason == f"stop{LONE}"
    assert got.usage == Usage(3, 4) and got.attempts == 2
    assert store.get_many(["k", "absent"])["k"].text == text
    store.close()
    # a second connection (resume, `evalpipe score`) reads the same string
    again = ResponseStore(tmp_path / "r.sqlite")
    assert again.get("k").text == text
    assert len(again) == 1


def test_encodable_text_is_still_stored_as_sqlite_text(tmp_path):
    """Ordinary answers keep the TEXT storage class (readable with the sqlite3 shell)."""
    store = ResponseStore(tmp_path / "r.sqlite")
    store.put("a", "m", _completion("héllo 中文"))
    store.put("b", "m", _completion(f"x{LONE}"))
    store.close()
    db = sqlite3.connect(tmp_path / "r.sqlite")
    kinds = dict(db.execute("SELECT key, typeof(text) FROM responses"))
    assert kinds == {"a": "text", "b": "blob"}


def test_a_batch_with_one_bad_answer_loses_nothing(tmp_path):
    store = ResponseStore(tmp_path / "r.sqlite")
    for i, text in enumerate(ANSWERS):
        store.put(f"k{i}", "m", _completion(text))
    found = store.get_many([f"k{i}" for i in range(len(ANSWERS))])
    assert {k: c.text for k, c in found.items()} == {f"k{i}": t for i, t in enumerate(ANSWERS)}


def test_cache_key_and_plan_accept_surrogates(tmp_path):
    prompt = Prompt(params=GenerationParams(max_tokens=16), text=f"question {LONE}")
    key = cache_key("m", prompt)
    assert len(key) == 64 and key == cache_key("m", prompt)
    assert key != cache_key("m", Prompt(params=GenerationParams(max_tokens=16), text="question \ufffd"))
    # keys of ordinary prompts are unchanged (pinned from before surrogates were handled), so
    # existing stores stay valid
    assert cache_key("m", Prompt(params=GenerationParams(max_tokens=16), text="question é")) == (
        "104c0313fad18ad9604f9dd8e8f9e7921b1228dcc3cbb377e0f982ad097761c2")
    chat = Prompt(params=GenerationParams(max_tokens=16, stop=("x",)), messages=(Message(role="user", content="中文"),))
    assert cache_key("m", chat) == "e9b8a1a2f74e948bd8db8681f8c049f5be4d56e741c129da75635001e581aaf5"
    store = ResponseStore(tmp_path / "r.sqlite")
    # long enough to be packed: the shared prefix (stored once, in `texts`) and each prompt's own part hold one
    shared = f"instructions {LONE} " * 8
    prompts = [{"text": f"{shared}q1 {LONE}"}, {"text": f"{shared}q2 {LONE}"}]
    rows = [(f"s1{LONE}", key), ("s2", "k2")]
    packer = Packer()
    packer.learn(prompts)
    packed = [json.dumps(packer.pack(p), ensure_ascii=False) for p in prompts]
    write_plan(store, "t", rows, packed, packer.texts)
    assert store.read_plan("t") == [(f"s1{LONE}", key, {}), ("s2", "k2", {})]
    assert store._db.execute("SELECT COUNT(*) FROM texts").fetchone()[0] == 1
    write_plan(store, "t", rows, packed, packer.texts)  # unchanged plan: no rewrite, no error
    assert store.plan_size("t") == 2
    assert store.prompts([key, "k2"]) == {key: prompts[0], "k2": prompts[1]}


def test_samples_jsonl_with_a_lone_surrogate_is_valid_utf8_json(tmp_path):
    run_dir = RunDir(tmp_path / "run")
    record = {"id": "s1", "answer": ANSWERS[0], "diagnostics": {f"k{LONE}": 1}}
    run_dir.write_samples([record])
    raw = run_dir.samples_path().read_bytes()
    raw.decode("utf-8")  # strict: valid UTF-8
    assert "\\udcff" in raw.decode("utf-8")
    assert run_dir.read_samples() == [record]
    run_dir.write_json(tmp_path / "run" / "summary.json", {"note": LONE})
    assert json.loads((tmp_path / "run" / "summary.json").read_text(encoding="utf-8")) == {"note": LONE}


def _default_parsers():
    """Every parser of evalpipe/parsers with arguments that make it do real work."""
    from evalpipe.parsers.choice import parse_choice
    from evalpipe.parsers.icd10 import parse_icd10_codes
    from evalpipe.parsers.nli_label import parse_nli_label
    from evalpipe.parsers.term_list import parse_term_list
    from evalpipe.parsers.triples import parse_triples
    from evalpipe.parsers.xml_tags import parse_tagged_answer, to_prediction
    from evalpipe.parsers.zh_labels import LabelSet, parse_label

    source = f"risk of colon cancer {LONE} in FAP"
    return {
        "choice": lambda a: parse_choice(a, {"A": "colon cancer", "B": f"x{LONE}"}),
        "icd10": parse_icd10_codes,
        "nli_label": parse_nli_label,
        "term_list": lambda a: parse_term_list(a, known_keys={"colon cancer"}),
        "triples": lambda a: parse_triples(a, predicates=["治疗"]),
        "xml_tags": lambda a: to_prediction(parse_tagged_answer(a, source, {"disease": "Disease"})),
        "zh_labels": lambda a: parse_label(a, LabelSet.of(["是", "否"])),
    }


SURROGATE_ANSWERS = [
    LONE,
    f"<response>risk of <disease>colon {LONE} cancer</disease> {LONE} in FAP</response>",
    f"<response>risk of <disease>colon cancer</disease> {LONE} in FAP</response>",
    f"The answer is {LONE} (A)",
    f"I10{LONE} E11.9 {LONE}",
    f"entailment{LONE}",
    f"结肠癌 | 治疗 | {LONE}\n头痛##{LONE}",
    f"是{LONE}",
    f"<think>{LONE}</think>是",
]


@pytest.mark.parametrize("name", sorted(_default_parsers()))
def test_every_parser_copes_with_lone_surrogates(name):
    parser = _default_parsers()[name]
    for answer in SURROGATE_ANSWERS:
        prediction = parser(answer)
        assert isinstance(prediction, Prediction) and isinstance(prediction.failed, bool)
        json.dumps(prediction.value, default=str, ensure_ascii=False)  # writable as a sample


def test_xml_parser_keeps_entities_around_a_surrogate():
    from evalpipe.parsers.xml_tags import parse_tagged_answer

    source = f"risk of colon cancer {LONE} in FAP"
    parsed = parse_tagged_answer(f"<response>risk of <disease>colon cancer</disease> {LONE} in FAP</response>",
                                 source, {"disease": "Disease"})
    assert not parsed.failed
    assert [source[s.start:s.end] for s in parsed.spans] == ["colon cancer"]


def test_ncbi_tasks_parse_and_score_surrogate_answers():
    """Both NCBI scorings (default and evalscope) take a surrogate answer through parse and score."""
    from evalpipe.metrics.options import MetricOptions
    from evalpipe.tasks.base import LoadOptions
    from evalpipe.tasks.registry import get_task

    spec = get_task("ncbi_disease")
    examples = spec.load(LoadOptions()).materialized().examples[:3]
    for scoring in spec.scorings.values():
        predictions = [scoring.parse(answer, ex) for ex, answer in zip(examples, SURROGATE_ANSWERS)]
        assert all(isinstance(p, Prediction) for p in predictions)
        sheet = scoring.score(examples, predictions, MetricOptions())
        assert len(sheet.per_sample) == 3 and all(v == v for v in sheet.corpus.values())


def test_a_run_with_a_surrogate_answer_finishes_and_resumes_without_asking_again(tmp_path):
    """The reported failure: the run stopped at the answer, stored nothing, and every re-run too."""
    import asyncio

    from evalpipe.config import RunConfig
    from evalpipe.rescoring import rescore
    from evalpipe.pipeline.execute import execute
    from tests.support.scripted_backend import ScriptedBackend

    sent = []

    def responder(prompt):  # every second answer holds a lone surrogate
        sent.append(prompt)
        return f"<response>{LONE}</response>" if len(sent) % 2 else "<response>x</response>"

    config = RunConfig(tasks=("ncbi_disease",), model="m", base_url="http://127.0.0.1:1/v1", limit=6)
    backend = ScriptedBackend(responder)
    outcome = asyncio.run(execute(config, lambda _: backend, tmp_path))
    assert outcome.metrics["ncbi_disease"]["n"] == 6 and outcome.metrics["ncbi_disease"]["errors"] == 0
    samples = RunDir(outcome.run_dir.path).read_samples()
    assert sum(LONE in (s["answer"] or "") for s in samples) == 3
    store = ResponseStore(outcome.run_dir.path / "responses.sqlite")
    assert len(store) == 6
    store.close()
    # resume: everything is in the store, nothing is asked again
    again = ScriptedBackend(lambda _: pytest.fail("an answered prompt was sent again"))
    resumed = asyncio.run(execute(config, lambda _: again, tmp_path))
    assert resumed.metrics == outcome.metrics and again.calls == []
    assert rescore(outcome.run_dir.path).metrics == outcome.metrics


# ---- any text at all


@fuzz_settings(150)
@given(texts=st.lists(st.text(st.characters(), max_size=40), min_size=1, max_size=6))
def test_any_text_round_trips_through_the_store(tmp_path_factory, texts):
    store = ResponseStore(tmp_path_factory.mktemp("store") / "r.sqlite")
    for i, text in enumerate(texts):
        store.put(f"k{i}", "m", _completion(text, finish=text[:3]))
    found = store.get_many([f"k{i}" for i in range(len(texts))])
    assert [found[f"k{i}"].text for i in range(len(texts))] == texts
    assert [found[f"k{i}"].finish_reason for i in range(len(texts))] == [t[:3] for t in texts]
    store.close()


@fuzz_settings(150)
@given(record=st.dictionaries(st.text(st.characters(), max_size=5), st.text(st.characters(), max_size=30), max_size=4))
def test_any_text_is_written_as_valid_utf8_json(tmp_path_factory, record):
    run_dir = RunDir(tmp_path_factory.mktemp("run"))
    run_dir.write_samples([record])
    raw = run_dir.samples_path().read_bytes().decode("utf-8")  # strict: valid UTF-8
    (back,) = run_dir.read_samples()

    def units(text: str) -> bytes:  # UTF-16 code units: a split surrogate pair reads back joined
        return text.encode("utf-16-le", "surrogatepass")

    assert raw.endswith("\n")
    assert sorted(map(units, back)) == sorted(map(units, record))
    assert sorted(map(units, back.values())) == sorted(map(units, record.values()))

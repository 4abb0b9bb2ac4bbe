"""Fuzz a whole run: hostile answers and HTTP faults through backend → store → parser → scorer.

Each drawn case gives every sample of a small run — NCBI Disease (NER), KUAKE-QIC (classification),
Huatuo-26M (generation) and MedQA (multiple choice; synthetic files) — an answer (arbitrary Unicode
with lone surrogates and control characters, tag soup, huge repeats, JSON shapes: see
tests/fuzz/strategies.py) and a fault of the loopback server (none, or one of its plans: 429 with
Retry-After, 5xx, a reply slower than the timeout, malformed JSON, empty or null content, a dropped
connection, a lone surrogate, a reply of the wrong shape, a 400, a 401 …) that hits the sample's
first request or all of its requests. The run is ``pipeline.execute.execute`` with the real OpenAI-compatible
backend (small concurrency, a short timeout, one retry, fast backoff). Properties:

* the run finishes, with the exit code the README's table gives (0 done; 3 some requests failed
  for good) — a hostile answer or a faulty server never stops it;
* every sample is in ``samples.jsonl`` exactly once, with an answer or an error (never both, never
  neither); each task's ``n`` is its samples and ``errors`` its samples without an answer; every
  metric is a finite number;
* nothing is lost or altered: each answer in ``samples.jsonl`` is the one in ``responses.sqlite``,
  character for character, and one the server delivered for that prompt;
* re-running the same command (the server now without faults) sends only the prompts of the
  samples that had no answer, and the resumed run accounts for every sample again;
* ``evalpipe score`` (re-scoring the stored answers) writes the same metrics and samples.

Each sample's fate is also predicted from its plan — answered unless its fault is final (400, 401)
or retryable and on every request; an empty, null or lone-surrogate reply is that answer — and a
second test gives every fault plan to some sample, transient and persistent, so each is exercised
whatever hypothesis draws. Fast by default (a module-scoped server, few examples; < 30 s);
``EVALPIPE_FUZZ_EXAMPLES=200`` for a long run.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig
from evalpipe.store.answers import ResponseStore
from evalpipe.cli.evaluate import _report
from evalpipe.config import RunConfig
from evalpipe.rescoring import rescore
from evalpipe.pipeline.execute import execute
from evalpipe.results import RunDir
from tests.cblue import synthetic as cblue_synthetic
from tests.fuzz.strategies import answers, fuzz_settings, short_answers
from tests.support.fake_openai import LONE_SURROGATE, FakeOpenAIServer, FakeRequest, Fault, prompt_key
from tests.tasks import mcqa_synthetic

NCBI = Path(__file__).resolve().parents[2] / "data" / "ncbi_disease"
TASKS = ("ncbi_disease", "kuake_qic", "huatuo_generation", "medqa")
#: the exit codes of `evalpipe run` that mean "the run finished" (README: 0 done, 3 some failed for good)
FINISHED = {0, 3}
#: every fault plan of the fake server that a generation request can meet (status faults as examples)
FAULTS = ("429:retry_after=0.05", "500", "503", "slow:2", "malformed_json", "empty_content", "null_content",
          "drop", "drop_mid", "chunked", "lone_surrogate", "wrong_shape", "400", "echo_auth")
#: faults a retry gets past (the backend retries timeouts, 429, 5xx, broken or odd replies); a 400 or
#: 401 is final at once; the others are answers (empty, a lone surrogate) or no fault at all (chunked)
RETRIED = {"429", "500", "503", "slow", "malformed_json", "drop", "drop_mid", "wrong_shape"}
FINAL = {"400", "echo_auth"}
#: the content an answering fault puts in place of the model's answer
SUBSTITUTED = {"empty_content": "", "null_content": "", "lone_surrogate": LONE_SURROGATE}
LONE_SURROGATES = re.compile("[\ud800-\udfff]")
#: how often a fault hits a sample: its first request only (a retry recovers), or every request
TRANSIENT, PERSISTENT = 1, 1_000


@dataclass(frozen=True)
class SamplePlan:
    """What the server does with one sample's requests: its answer, and a fault on the first
    ``times`` of them."""

    answer: str
    fault: str | None
    times: int

    @property
    def kind(self) -> str | None:
        return None if self.fault is None else self.fault.split(":")[0]

    def answered(self) -> bool:
        """Whether the sample ends the run with an answer (a timeout of 1 s on a loopback server
        whose only slow replies are the planned ones: no other request fails)."""
        return not (self.kind in FINAL or self.kind in RETRIED and self.times == PERSISTENT)


class Script:
    """What the server answers and which fault it injects, per prompt (by :func:`prompt_key`),
    swapped per drawn case; thread-safe (the server runs in its own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.plans: dict[str, SamplePlan] = {}
        self.faults_left: dict[str, int] = {}
        self.faults_on = True

    def use(self, plans: Mapping[str, SamplePlan]) -> None:
        with self._lock:
            self.plans = dict(plans)
            self.faults_left = {k: p.times for k, p in plans.items() if p.fault is not None}
            self.faults_on = True

    def answer(self, body: Mapping) -> str:
        plan = self.plans.get(prompt_key(body))
        return plan.answer if plan is not None else "<response>unplanned</response>"

    def fault(self, request: FakeRequest) -> str | None:
        key = prompt_key(request.body)
        with self._lock:
            if not self.faults_on or self.faults_left.get(key, 0) <= 0:
                return None
            self.faults_left[key] -= 1
            return self.plans[key].fault


@dataclass
class Harness:
    server: FakeOpenAIServer
    script: Script
    config: RunConfig
    #: (task, sample id) → the prompt_key of its request
    keys: dict[tuple[str, str], str]
    root: Path
    runs: itertools.count


def head_of_conll(source: Path, target: Path, sentences: int) -> Path:
    """The first sentences of a CoNLL file (NCBI's full training file costs most of a run to read)."""
    blocks = source.read_text(encoding="utf-8").split("\n\n")[:sentences]
    target.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return target


def fast_backend(config: RunConfig) -> OpenAICompatBackend:
    """The real OpenAI-compatible backend as `evalpipe run` builds it, with a fast backoff (the
    defaults wait seconds between attempts, which a fuzz test cannot afford)."""
    return OpenAICompatBackend(OpenAICompatConfig(
        base_url=config.base_url, model=config.model, concurrency=config.concurrency, timeout_s=config.timeout_s,
        max_retries=config.max_retries, backoff_base_s=0.01, backoff_max_s=0.02, retry_after_max_s=0.1))


def as_received(content: str | None) -> str:
    """What a client makes of a reply's content: null is "" (an empty answer); the JSON escapes of
    a surrogate pair are the one character they encode; a lone surrogate, which no UTF-8 file or
    database holds, is U+FFFD (the backend's documented rule, counted as invalid_unicode_answers)."""
    return LONE_SURROGATES.sub("\ufffd", json.loads(json.dumps(content or "")))


def run_once(harness: Harness, results: Path) -> tuple[int, Path]:
    outcome = asyncio.run(execute(harness.config, fast_backend, results))
    return _report(outcome, None), outcome.run_dir.path


def records_of(path: Path) -> list[dict]:
    # one record a line, split at "\n" only: an answer may hold U+2028, U+0085 … (JSON keeps them raw)
    lines = (path / "samples.jsonl").read_text(encoding="utf-8").split("\n")
    return [json.loads(line) for line in lines if line]


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    data = tmp_path_factory.mktemp("run-fuzz-data")
    script = Script()
    with FakeOpenAIServer(responder=script.answer) as server:
        server.set_fault_policy(script.fault)
        config = RunConfig(
            tasks=TASKS, model="fake-model", base_url=server.url, limit=4, concurrency=4, timeout_s=1.0,
            max_retries=1, data_dir=str(cblue_synthetic.write_cblue(data / "cblue")),
            data={"huatuo_generation": str(cblue_synthetic.write_huatuo(data / "huatuo.jsonl")),
                  "medqa": str(mcqa_synthetic.write_medqa(data / "medqa")),
                  "ncbi_disease": str(head_of_conll(NCBI / "test.tsv", data / "ncbi_test.tsv", 10)),
                  "ncbi_disease:shots": str(head_of_conll(NCBI / "train.tsv", data / "ncbi_train.tsv", 10))},
        )
        # a clean run tells which prompt each sample sends (prompts are deterministic in the options)
        path = asyncio.run(execute(config, fast_backend, tmp_path_factory.mktemp("run-fuzz-warmup"))).run_dir.path
        # samples name their request key; the prompt itself is stored once, in the run's store
        records = RunDir(path).add_prompts(records_of(path))
        keys = {(r["task"], r["id"]): prompt_key({"messages": r["prompt"]["messages"]}) for r in records}
        assert len(set(keys.values())) == len(keys), "each sample sends its own prompt"
        yield Harness(server, script, config, keys, tmp_path_factory.mktemp("run-fuzz"), itertools.count())
        deadline = time.monotonic() + 5  # let slow replies whose client gave up finish before the server stops
        while server.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)


def plans_for(harness: Harness) -> st.SearchStrategy[dict[str, SamplePlan]]:
    def plan(task: str) -> st.SearchStrategy[SamplePlan]:
        # Huatuo's ROUGE-L is an LCS, quadratic in the answer by definition: short answers there
        text = short_answers if task == "huatuo_generation" else answers
        return st.builds(SamplePlan, text, st.one_of(st.none(), st.none(), st.sampled_from(FAULTS)),
                         st.sampled_from((TRANSIENT, PERSISTENT)))

    return st.fixed_dictionaries({key: plan(task) for (task, _), key in sorted(harness.keys.items())})


def check_accounted(harness: Harness, code: int, path: Path, delivered: Mapping[str, set[str]],
                    plans: Mapping[str, SamplePlan] | None) -> dict[tuple[str, str], dict]:
    """Every sample once, answer xor error — the one its plan predicts (``plans``; None: every
    sample answered); n, errors, answered and finite metrics (null only with nothing answered); each answer as stored and as delivered."""
    assert code in FINISHED
    records = records_of(path)
    by_sample = {(r["task"], r["id"]): r for r in records}
    assert len(by_sample) == len(records) and set(by_sample) == set(harness.keys), "every sample exactly once"
    for sample, record in by_sample.items():
        assert (record["answer"] is None) != (record["error"] is None), (sample, record["answer"], record["error"])
        plan = plans[harness.keys[sample]] if plans is not None else None
        assert (record["answer"] is not None) == (plan is None or plan.answered()), (sample, plan, record["error"])
        if plan is not None and plan.kind in SUBSTITUTED:
            assert record["answer"] == as_received(SUBSTITUTED[plan.kind]), sample
    metrics = json.loads((path / "metrics.json").read_text(encoding="utf-8"))
    failed = [s for s, r in by_sample.items() if r["answer"] is None]
    assert code == (3 if failed else 0), "exit code 3 exactly when a sample has no answer"
    for task in TASKS:
        assert metrics[task]["n"] == sum(t == task for t, _ in by_sample)
        assert metrics[task]["errors"] == sum(t == task for t, _ in failed)
        assert metrics[task]["answered"] == metrics[task]["n"] - metrics[task]["errors"]
        for name, value in metrics[task].items():
            if value is None:  # not computed: only when no sample of the task was answered (evalpipe.coverage)
                assert metrics[task]["answered"] == 0, (task, name)
                continue
            assert isinstance(value, (int, float)) and math.isfinite(value), (task, name, value)
    # nothing lost or altered between the server, the store and samples.jsonl
    store = ResponseStore(path / "responses.sqlite")
    try:  # the store's plan: each sample's key in the store
        store_keys = {(task, sid): key for task in TASKS for sid, key, *_ in store.read_plan(task)}
        stored = store.get_many(list(store_keys.values()))
    finally:
        store.close()
    assert set(store_keys) == set(by_sample)
    for sample, record in by_sample.items():
        if record["answer"] is not None:
            assert stored[store_keys[sample]].text == record["answer"], sample
            assert record["answer"] in delivered.get(harness.keys[sample], ()), sample
        else:
            assert store_keys[sample] not in stored, sample
    return by_sample


def drive(harness: Harness, plans: Mapping[str, SamplePlan], name: str) -> tuple[int, dict[str, int]]:
    """Run with ``plans``, check; re-run with a healthy server, check that only the samples without
    an answer were asked again and that every sample has its answer now, the earlier ones unchanged.
    Returns the first run's exit code and the faults the server injected in it."""
    harness.script.use(plans)
    harness.server.reset_counters()
    results = harness.root / name
    delivered: dict[str, set[str]] = {}

    def note_delivered() -> dict[str, set[str]]:
        for key, text in harness.server.delivered():
            delivered.setdefault(key, set()).add(as_received(text))
        return delivered

    code, path = run_once(harness, results)
    first = check_accounted(harness, code, path, note_delivered(), plans)
    outcome = (code, harness.server.stats()["faults_injected"])
    failed = {harness.keys[s] for s, r in first.items() if r["answer"] is None}

    harness.script.faults_on = False
    harness.server.reset_counters()
    code, again = run_once(harness, results)
    assert again == path, "the same command resumes the same run directory"
    assert set(harness.server.per_prompt()) == failed, "only the samples without an answer are asked again"
    assert all(count == 1 for count in harness.server.per_prompt().values())
    second = check_accounted(harness, code, path, note_delivered(), None)
    for sample, record in first.items():
        if record["answer"] is not None:
            assert second[sample]["answer"] == record["answer"], sample
    # re-scoring the stored answers (no server) gives the very same numbers and records
    metrics, samples = (path / "metrics.json").read_bytes(), (path / "samples.jsonl").read_bytes()
    rescore(path)
    assert (path / "metrics.json").read_bytes() == metrics and (path / "samples.jsonl").read_bytes() == samples
    return outcome


@given(data=st.data())
@fuzz_settings(10)
def test_a_hostile_model_behind_a_faulty_server_never_stops_or_loses_a_run(harness, data):
    code, faults = drive(harness, data.draw(plans_for(harness), label="plans"), f"case-{next(harness.runs)}")
    event(f"first run: exit {code}")  # --hypothesis-show-statistics: what the drawn cases exercised
    for fault in faults:
        event(f"fault injected: {fault}")


#: answers for the every-fault test: hostile, but fixed
HOSTILE = ["", "<response>\udcff \ud800\udc00 \x00\x1b[31m</response>", "<disease>" * 3000, "\u2028\u0085\r\n",
           json.dumps({"answer": ["A", None, {"x": 1e308}]}), "<think>C</think>B or C", "答：是\n\n否",
           "\ufeff<response>leukaemia</response>" + " " * 5000]


@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
def test_every_fault_plan_meets_a_sample_and_the_run_accounts_for_it(harness, persistent):
    """Sample i meets fault i (each plan once, first request only or every request) and a fixed
    hostile answer; the predictions of :meth:`SamplePlan.answered` hold sample by sample."""
    keys = [key for _, key in sorted(harness.keys.items())]
    assert len(keys) >= len(FAULTS)
    plans = {key: SamplePlan(HOSTILE[i % len(HOSTILE)], FAULTS[i] if i < len(FAULTS) else None,
                             PERSISTENT if persistent else TRANSIENT) for i, key in enumerate(keys)}
    code, faults = drive(harness, plans, f"every-fault-{'persistent' if persistent else 'transient'}")
    assert code == 3 and sum(faults.values()) >= len(FAULTS)
    assert {label.split(":")[0] for label in faults} == {Fault.parse(f).label for f in FAULTS}

"""The runner's wiring: results on disk, resume, re-scoring, errors before requests."""

import asyncio
import json
import sqlite3
from dataclasses import replace

import pytest

from evalpipe.store.answers import ResponseStore
from evalpipe.store.keys import cache_key
from evalpipe.config import RunConfig
from evalpipe.data.errors import DataError
from evalpipe.store.prompt_pack import Packer
from evalpipe.records import GenerationParams, Message, Prompt
from evalpipe.rescoring import rescore
from evalpipe.outcome import RunError
from evalpipe.pipeline.endpoint_policy import check_endpoint_policy
from evalpipe.pipeline.execute import execute
from evalpipe.config import load_options
from evalpipe.pipeline.prepare import prepare
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task
from tests.support.scripted_backend import ScriptedBackend, query_text
from tests.support.plans import write_plan

SPEC = get_task("ncbi_disease")
GOLD = {ex.inputs["text"]: SPEC.shot_target(ex) for ex in SPEC.load(LoadOptions()).examples}


def perfect(prompt):
    return GOLD[query_text(prompt)]


def run(config, backend, tmp_path):
    return asyncio.run(execute(config, lambda _: backend, tmp_path))


def config(**kw):
    base = dict(tasks=("ncbi_disease",), model="m", base_url="http://127.0.0.1:1/v1", limit=30)
    base.update(kw)
    return RunConfig(**base)


def test_perfect_answers_score_one_and_results_are_complete(tmp_path):
    backend = ScriptedBackend(perfect)
    outcome = run(config(), backend, tmp_path)
    m = outcome.metrics["ncbi_disease"]
    assert m["precision"] == m["recall"] == m["f1"] == m["partial_f1"] == m["accuracy"] == 1.0
    assert m["parse_failure_rate"] == 0.0 and m["n"] == 30 and m["errors"] == 0
    run_dir = outcome.run_dir.path
    assert json.loads((run_dir / "metrics.json").read_text()) == {"ncbi_disease": m}
    cfg = json.loads((run_dir / "config.json").read_text())
    task = cfg["tasks"]["ncbi_disease"]
    assert task["shots"] == [f"train-{i}" for i in range(5)]
    assert len(task["template_sha256"]) == 64 and all(len(v) == 64 for v in task["data_files"].values())
    assert cfg["config"]["model"] == "m" and cfg["evalpipe_version"]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert [s["id"] for s in samples] == [f"test-{i}" for i in range(30)]
    first = samples[0]
    for field in ("key", "answer", "prediction", "gold", "scores", "diagnostics", "error", "usage", "latency_s"):
        assert field in first
    assert first["prediction"] == [{"start": 6, "end": 9, "label": "Disease"}, {"start": 12, "end": 17, "label": "Disease"}]
    assert first["scores"] == {"tp": 2, "fp": 0, "fn": 0, "f1": 1.0,
                               "partial_tp": 2, "partial_fp": 0, "partial_fn": 0}
    # the prompt is stored once, in the store; a sample names its key, and asking for prompts gives it back
    assert "prompt" not in first
    with_prompts = outcome.run_dir.read_samples(prompts=True)
    assert with_prompts[0]["prompt"]["messages"][0]["role"] == "user"
    assert with_prompts[0]["prompt"]["messages"][0]["content"].endswith(
        "Text to process:\nClustering of missense mutations in the ataxia - telangiectasia gene in a sporadic "
        "T - cell leukaemia .\n")
    assert cache_key("m", Prompt(params=GenerationParams(**{**with_prompts[0]["prompt"]["params"], "stop": ()}),
                                 messages=tuple(Message(**m) for m in with_prompts[0]["prompt"]["messages"]))) \
        == first["key"]


def test_resume_sends_only_failed_and_unsent_prompts(tmp_path):
    flaky = ScriptedBackend(lambda p: RuntimeError("HTTP 500 after 3 attempts") if "telangiectasia" in query_text(p) else perfect(p))
    first = run(config(), flaky, tmp_path)
    failed = first.metrics["ncbi_disease"]["errors"]
    assert failed >= 1 and len(flaky.calls) == 30
    samples = first.run_dir.read_samples()
    assert sum(1 for s in samples if s["error"]) == failed
    # the failed samples are left out of every metric (evalpipe.coverage): the perfect answers score 1,
    # over the answered samples, and coverage says how many those are
    m = first.metrics["ncbi_disease"]
    assert m["recall"] == m["f1"] == 1.0 and m["answered"] == 30 - failed and m["coverage"] == (30 - failed) / 30
    second_backend = ScriptedBackend(perfect)
    second = run(config(), second_backend, tmp_path)
    assert len(second_backend.calls) == failed
    assert second.metrics["ncbi_disease"]["f1"] == 1.0
    third_backend = ScriptedBackend(perfect)
    run(config(limit=40), third_backend, tmp_path)
    assert len(third_backend.calls) == 10  # same run directory, only the 10 new samples
    shrunk = run(config(limit=5), ScriptedBackend(perfect), tmp_path)
    assert any("held 40 samples" in note and "now cover 5" in note for note in shrunk.notes)


def test_fully_cached_run_needs_no_endpoint(tmp_path):
    run(config(), ScriptedBackend(perfect), tmp_path)

    def no_backend(_):
        raise AssertionError("backend must not be created when every answer is stored")

    outcome = asyncio.run(execute(config(), no_backend, tmp_path))
    assert outcome.sent == 0 and outcome.cached == 30


def test_rescore_reproduces_metrics_and_compat_writes_beside(tmp_path):
    answers = {}

    def sloppy(prompt):
        text = query_text(prompt)
        answers[text] = GOLD[text].replace("</disease> <disease>", " ")  # merges adjacent entities
        return answers[text]

    outcome = run(config(limit=200), ScriptedBackend(sloppy), tmp_path)
    path = outcome.run_dir.path
    again = rescore(path)
    assert again.metrics == outcome.metrics
    compat = rescore(path, "evalscope")
    assert set(compat.metrics["ncbi_disease"]) >= {"precision", "recall", "f1", "accuracy", "n", "errors"}
    assert (path / "metrics.evalscope.json").is_file() and (path / "samples.evalscope.jsonl").is_file()
    assert json.loads((path / "metrics.json").read_text()) == outcome.metrics  # default left intact


def test_rescore_after_kill_before_results_uses_stored_plan(tmp_path):
    outcome = run(config(limit=10), ScriptedBackend(perfect), tmp_path)
    for name in ("samples.jsonl", "metrics.json", "summary.json"):
        (outcome.run_dir.path / name).unlink()
    assert rescore(outcome.run_dir.path).metrics == outcome.metrics


def test_rescore_refuses_changed_gold(tmp_path):
    data = tmp_path / "mine.tsv"
    data.write_text("Cancer\tB-Disease\nhere\tO\n")
    cfg = config(data={"ncbi_disease": str(data)}, limit=None)
    outcome = run(cfg, ScriptedBackend(lambda p: "<response>Cancer here</response>"), tmp_path / "r")
    data.write_text("Cancer\tO\nhere\tO\n")
    with pytest.raises(DataError, match="changed since the run"):
        rescore(outcome.run_dir.path)


def test_bad_data_fails_before_any_request(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tO\nb\tI-Disease\n")
    created = []
    with pytest.raises(DataError, match="bad.tsv:2"):
        asyncio.run(execute(config(data={"ncbi_disease": str(bad)}), lambda c: created.append(c), tmp_path))
    assert created == []


def test_unknown_compat_and_ids_fail_before_any_request(tmp_path):
    with pytest.raises(ValueError, match="no compatibility mode 'nope'"):
        asyncio.run(execute(config(compat="nope"), lambda c: pytest.fail("no backend"), tmp_path))
    with pytest.raises(RunError, match="unknown sample id"):
        asyncio.run(execute(config(ids=("test-1", "zzz")), lambda c: pytest.fail("no backend"), tmp_path))


def test_ids_select_samples_in_given_order(tmp_path):
    outcome = run(config(ids=("test-5", "test-2"), limit=None), ScriptedBackend(perfect), tmp_path)
    assert [s["id"] for s in outcome.run_dir.read_samples()] == ["test-5", "test-2"]


class CheckingProgress:
    """A progress sink that looks, at every answer the run counts, whether the store already holds it."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.counted = []

    def start(self, total, cached):
        pass

    def advance(self, completion):
        with sqlite3.connect(next(self.tmp_path.glob("*/responses.sqlite"))) as db:  # another connection
            stored = {text for (text,) in db.execute("SELECT text FROM responses")}
        self.counted.append(completion.text in stored)

    def close(self):
        pass


def test_an_answer_is_durable_before_the_run_counts_it(tmp_path):
    """Commits are grouped (evalpipe.pipeline.answer_writer), but every answer is committed — visible to another
    connection — before the run counts it: a run killed at any moment loses only uncounted answers."""
    progress = CheckingProgress(tmp_path)
    outcome = asyncio.run(execute(config(limit=30, concurrency=8), lambda _: ScriptedBackend(perfect), tmp_path,
                                  progress=progress))
    assert outcome.sent == 30 and progress.counted == [True] * 30


def test_credentialed_tasks_stay_on_local_endpoints():
    prepared = prepare(config(limit=1))
    secret = [replace(p, spec=replace(p.spec, credentialed=True)) for p in prepared]
    check_endpoint_policy(secret, config(base_url="http://127.0.0.1:8000/v1"))
    check_endpoint_policy(secret, config(base_url="http://10.1.2.3:8000/v1"))
    with pytest.raises(RunError, match="credentialed"):
        check_endpoint_policy(secret, config(base_url="https://93.184.216.34/v1"))
    check_endpoint_policy(secret, config(base_url="https://93.184.216.34/v1", allow_external_endpoint=True))
    check_endpoint_policy(prepared, config(base_url="https://93.184.216.34/v1"))  # public data may go anywhere


def test_suite_run_skips_tasks_without_data_and_says_why(tmp_path):
    (tmp_path / "nothing-here").mkdir()  # a data folder without this suite's files
    cfg = RunConfig(tasks=("ncbi_disease", "clue_mednli"), suites=("demo-test",), model="m",
                    base_url="http://127.0.0.1:1/v1", limit=3, data_dir=str(tmp_path / "nothing-here"))
    outcome = run(cfg, ScriptedBackend(perfect), tmp_path)
    assert [t.name for t in outcome.tasks] == ["ncbi_disease"]
    assert "mli_test_v1.jsonl" in outcome.skipped["clue_mednli"]
    recorded = json.loads((outcome.run_dir.path / "config.json").read_text())
    assert recorded["config"]["tasks"] == ["ncbi_disease"] and "clue_mednli" in recorded["skipped_tasks"]
    assert rescore(outcome.run_dir.path).metrics == outcome.metrics  # re-scoring ignores the skipped task


def test_task_asked_for_alone_without_data_is_an_error(tmp_path):
    (tmp_path / "nothing-here").mkdir()
    cfg = RunConfig(tasks=("clue_mednli",), model="m", base_url="http://127.0.0.1:1/v1",
                    data_dir=str(tmp_path / "nothing-here"))
    with pytest.raises(DataError, match="mli_test_v1.jsonl"):
        run(cfg, ScriptedBackend(perfect), tmp_path)


def test_every_replica_must_be_local_for_credentialed_tasks():
    prepared = prepare(config(limit=1))
    secret = [replace(p, spec=replace(p.spec, credentialed=True)) for p in prepared]
    with pytest.raises(RunError, match="93.184.216.34"):
        check_endpoint_policy(secret, config(base_url="http://127.0.0.1:8000/v1",
                                             replicas=("https://93.184.216.34/v1",)))
    check_endpoint_policy(secret, config(base_url="http://127.0.0.1:8000/v1", replicas=("http://10.0.0.2:8000/v1",)))


def test_redact_url_removes_user_info_and_query():
    from evalpipe.endpoints import redact_url

    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    redacted = redact_url("https://user:sk-abc@api.example.com/v1?api-key=sk-abc")
    assert "sk-abc" not in redacted and redacted.startswith("https://api.example.com/v1")


def test_a_run_directory_in_use_is_refused(tmp_path):
    from evalpipe.results import RunDirBusy
    from evalpipe.pipeline.execute import run_dir_for

    cfg = config(limit=2)
    with run_dir_for(cfg, tmp_path).lock():
        with pytest.raises(RunDirBusy, match="in use by another evalpipe process"):
            run(cfg, ScriptedBackend(perfect), tmp_path)
    run(cfg, ScriptedBackend(perfect), tmp_path)  # free again once released


def test_the_same_file_as_test_and_shot_file_never_shows_a_test_item_as_its_own_shot(tmp_path):
    data = tmp_path / "one.tsv"
    data.write_text("".join(f"Sentence{i}\tO\ncancer{i}\tB-Disease\n\n" for i in range(8)))
    cfg = config(data={"ncbi_disease": str(data), "ncbi_disease:shots": str(data)}, limit=None, shots=2)
    with pytest.raises(RunError, match="shot pool has only 0"):
        prepare(cfg)  # every pool sentence is also evaluated


def test_aggregates_on_subsets_or_with_failures_are_flagged(monkeypatch, tmp_path):
    from evalpipe import outcome as outcome_module
    from evalpipe.outcome import RunOutcome
    from evalpipe.results import TaskSummary
    from evalpipe.scoring import TaskOutcome
    from evalpipe.tasks.base import SuiteSpec

    suite = SuiteSpec(name="s", tasks=("a",), aggregate=lambda m: {"score": m["a"]["f1"]})
    monkeypatch.setattr(outcome_module, "suites", lambda: {"s": suite})

    def outcome(errors):
        return RunOutcome(run_dir=None, tasks=[TaskOutcome("a", {"f1": 0.5, "errors": errors}, TaskSummary(), [])])

    clean = outcome(0)
    clean.add_aggregates(["s"])
    assert clean.aggregates == {"s": {"score": 0.5}} and clean.incomplete == {}
    subset = outcome(0)
    subset.add_aggregates(["s"], subset=True)
    assert subset.aggregates["s"] == {"score": 0.5} and "subset" in subset.incomplete["s"]
    failed = outcome(2)
    failed.add_aggregates(["s"])
    assert "failed requests: a" in failed.incomplete["s"]


def test_data_option_typos_are_errors_not_silently_ignored(tmp_path):
    real = tmp_path / "x.tsv"
    real.write_text("Cancer\tB-Disease\n")
    with pytest.raises(RunError, match="'ncbi' is not a task of this run"):
        prepare(config(data={"ncbi": str(real)}))
    with pytest.raises(RunError, match="has no data role 'shot'; its roles: eval .*, shots"):
        prepare(config(data={"ncbi_disease:shot": str(real)}))
    with pytest.raises(DataError, match="nope.tsv: file not found"):
        prepare(config(data={"ncbi_disease": str(tmp_path / "nope.tsv")}))


def test_store_keeps_the_answering_endpoint_without_credentials(tmp_path):
    from evalpipe.records import Completion

    store = ResponseStore(tmp_path / "r.sqlite")
    store.put("k", "m", Completion(text="x", endpoint_url="http://user:pw@10.0.0.5:8000/v1/chat/completions?key=s"))
    endpoint = store.get("k").endpoint_url
    assert "pw" not in endpoint and "key=s" not in endpoint and endpoint.startswith("http://10.0.0.5:8000/v1/chat")
    store.close()


def test_a_store_from_before_endpoints_were_kept_still_opens(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, model TEXT NOT NULL, text TEXT NOT NULL, "
               "finish_reason TEXT, prompt_tokens INTEGER, completion_tokens INTEGER, latency_s REAL, "
               "attempts INTEGER, created REAL NOT NULL)")
    db.execute("INSERT INTO responses VALUES ('old', 'm', 'answer', 'stop', 3, 1, 0.5, 1, 0)")
    db.commit()
    db.close()
    from evalpipe.records import Completion

    store = ResponseStore(path)
    old = store.get("old")
    assert old.text == "answer" and old.endpoint_url is None and old.usage.prompt_tokens == 3
    store.put("new", "m", Completion(text="y", endpoint_url="http://127.0.0.1:1/v1/chat/completions"))
    assert store.get("new").endpoint_url == "http://127.0.0.1:1/v1/chat/completions"
    store.close()


def test_get_many_finds_stored_answers_across_chunks(tmp_path):
    from evalpipe.records import Completion

    store = ResponseStore(tmp_path / "r.sqlite")
    for i in range(1200):  # more than two SELECT chunks
        store.put(f"k{i}", "m", Completion(text=f"answer {i}"))
    wanted = [f"k{i}" for i in range(1300)] + ["k5", "k5"]  # 100 absent keys and a repeat
    found = store.get_many(wanted)
    assert len(found) == 1200 and found["k1199"].text == "answer 1199" and "k1200" not in found
    store.close()


def test_an_unchanged_plan_is_not_rewritten_and_a_changed_one_is(tmp_path):
    store = ResponseStore(tmp_path / "r.sqlite")
    rows = [("a", "k1"), ("b", "k2")]
    packer = Packer()
    prompts = [{"text": "shared instructions " * 5 + "one"}, {"text": "shared instructions " * 5 + "two"}]
    packer.learn(prompts)
    packed = [json.dumps(packer.pack(p)) for p in prompts]
    assert not any("shared" in p for p in packed) and len(packer.texts) == 1  # the shared prefix, once
    write_plan(store, "t", rows, packed, packer.texts, [{"truncated_tokens": 0}, {"truncated_tokens": 3}])
    changes = store._db.total_changes
    write_plan(store, "t", rows, packed, packer.texts, [{"truncated_tokens": 0}, {"truncated_tokens": 3}])
    assert store._db.total_changes == changes  # the resume case: nothing written
    write_plan(store, "t", rows[:1], packed[:1], packer.texts, [{"truncated_tokens": 0}])
    assert store.read_plan("t") == [("a", "k1", {"truncated_tokens": 0})]
    # every prompt stays (a plan that shrank keeps its answers and prompts), unpacked whole
    assert store.prompts(["k1", "k2", "absent"]) == {"k1": prompts[0], "k2": prompts[1]}
    store.close()


def test_rescore_checks_the_file_it_reads_not_only_the_recorded_path(tmp_path):
    """The run read a modified copy; re-scoring reads another file (here the shipped data, as when
    the copy moved) — the recorded path is intact, but the file read now has a digest the run
    never recorded, so it is refused."""
    import shutil

    SPEC = get_task("ncbi_disease")

    shipped = SPEC.load(load_options(config(limit=None), "ncbi_disease")).files[0]
    copy = tmp_path / "copy.tsv"
    shutil.copy(shipped, copy)
    with copy.open("a") as handle:
        handle.write("\nExtra\tO\n")
    cfg = config(data={"ncbi_disease": str(copy)}, limit=3)
    outcome = run(cfg, ScriptedBackend(perfect), tmp_path / "r")
    recorded = json.loads((outcome.run_dir.path / "config.json").read_text())
    recorded["config"]["data"] = {}  # as if re-scored without --data: the shipped file is read
    (outcome.run_dir.path / "config.json").write_text(json.dumps(recorded))
    with pytest.raises(DataError, match="changed since the run"):
        rescore(outcome.run_dir.path)


def _as_older_layout(run_dir):
    """Rewrite a run directory as evalpipe wrote it before prompts were stored once: the whole prompt
    JSON in the plan (no `prompts`/`texts` tables) and in every record of samples.jsonl (no `key`)."""
    prompts = run_dir.read_samples(prompts=True)
    with sqlite3.connect(run_dir.store_path) as db:
        for record in prompts:
            db.execute("UPDATE plan SET prompt = ? WHERE key = ?",
                       (json.dumps(record["prompt"], ensure_ascii=False), record["key"]))
        db.execute("DROP TABLE prompts")
        db.execute("DROP TABLE texts")
    lines = []
    for record in prompts:
        record.pop("key")
        prompt = record.pop("prompt")
        items = list(record.items())
        items.insert(3, ("prompt", prompt))
        lines.append(json.dumps(dict(items), ensure_ascii=False))
    run_dir.samples_path().write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {r["id"]: r["prompt"] for r in run_dir.read_samples()}


def test_a_run_directory_written_before_prompts_were_stored_once_is_read_scored_and_resumed(tmp_path):
    first = run(config(limit=10), ScriptedBackend(perfect), tmp_path)
    run_dir = first.run_dir
    prompts = _as_older_layout(run_dir)
    assert len(prompts) == 10 and all(p["messages"] for p in prompts.values())
    # read: the records' own prompts; score: from the older store alone
    assert {r["id"]: r["prompt"] for r in run_dir.read_samples(prompts=True)} == prompts
    assert rescore(run_dir.path).metrics == first.metrics
    # resumed: nothing asked again; the prompts now come from the older plan
    again = ScriptedBackend(perfect)
    assert run(config(limit=10), again, tmp_path).metrics == first.metrics and again.calls == []
    assert {r["id"]: r["prompt"] for r in run_dir.read_samples(prompts=True)} == prompts
    # a plan that changes is written in the new layout; every prompt is still there
    more = ScriptedBackend(perfect)
    run(config(limit=12), more, tmp_path)
    assert len(more.calls) == 2
    records = run_dir.read_samples(prompts=True)
    assert len(records) == 12 and {r["id"]: r["prompt"] for r in records[:10]} == prompts
    assert records[11]["prompt"]["messages"][0]["content"].endswith(f"{records[11]['inputs']['text']}\n")


def test_a_prompt_two_samples_share_is_sent_once_and_counted_once(tmp_path):
    """Three sentences, two of them the same text (one prompt, one key): a fresh run sends two
    requests and says none were stored (its total is taken from the queue when the store holds no
    answer); run again, both come from the store."""
    data = tmp_path / "twice.tsv"
    data.write_text("Breast\tB-Disease\ncancer\tI-Disease\n\nBreast\tB-Disease\ncancer\tI-Disease\n\n"
                    "No\tO\ndisease\tO\n\n", encoding="utf-8")
    conf = config(limit=None, data={"ncbi_disease": str(data)})
    backend = ScriptedBackend(lambda prompt: "")
    fresh = run(conf, backend, tmp_path / "results")
    assert (fresh.sent, fresh.cached, len(backend.calls)) == (2, 0, 2)
    again = run(conf, ScriptedBackend(lambda prompt: ""), tmp_path / "results")
    assert (again.sent, again.cached) == (0, 2)

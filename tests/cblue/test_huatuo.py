"""Huatuo-26M: generation end to end; retrieval ranking, pools, run directory; both embedding backends."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from evalpipe.backends.base import BackendError
from evalpipe.backends.embeddings import (
    HTTPEmbeddingsConfig,
    LocalSentenceTransformer,
    OpenAIEmbeddings,
    default_local_model_path,
    make_embedder,
)
from evalpipe.config import RunConfig
from evalpipe.metrics.chinese_text import bleu4, rouge_l
from evalpipe.records import Example
from evalpipe.pipeline.execute import execute
from evalpipe.backends.ranking import normalised, rank_pool
from evalpipe.rescoring import rescore
from evalpipe.tasks.kinds.retrieval import POOL_NOTE, build_pool
from tests.cblue import synthetic as syn
from tests.support.scripted_backend import ScriptedBackend, last_user_text


def qa(question: str, answer: str, i: int = 0) -> Example:
    return Example(id=f"test-{i}", inputs={"question": question}, gold=answer)


# ---- generation ------------------------------------------------------------------------------

def test_generation_end_to_end(tmp_path):
    path = syn.write_huatuo(tmp_path / "test_datasets.jsonl")
    gold = {f"问题：{r['questions']}\n回答：": r["answers"] for r in syn.HUATUO}
    answers = dict(gold)
    first = next(iter(answers))
    answers[first] = "多喝水，注意休息。"  # a partial answer for the first question
    config = RunConfig(tasks=("huatuo_generation",), model="m", base_url="http://127.0.0.1:1/v1",
                       data={"huatuo_generation": str(path)})
    backend = ScriptedBackend(lambda p: answers[last_user_text(p)])
    outcome = asyncio.run(execute(config, lambda _: backend, tmp_path / "runs"))
    m = outcome.metrics["huatuo_generation"]
    hyps = [answers[q] for q in gold]
    refs = list(gold.values())
    assert m["bleu4"] == pytest.approx(bleu4(hyps, refs)) and 0 < m["bleu4"] < 1
    assert m["rouge_l"] == pytest.approx((rouge_l(hyps[0], refs[0]) + 3) / 4)
    assert backend.calls[0].messages[0].role == "system"


# ---- retrieval: ranking and pools ------------------------------------------------------------

class TableEmbedder:
    """Vectors from a table: a ranking whose answer is known in advance."""

    model = "table"

    def __init__(self, table):
        self.table = table
        self.seen = []

    async def embed(self, texts):
        self.seen.append(list(texts))
        return np.asarray([self.table[t] for t in texts], dtype=np.float32)

    def describe(self):
        return {"kind": "table"}

    async def aclose(self):
        pass


def retrieval_run(tmp_path, records, embedder, **config):
    """A huatuo_retrieval run through ``evalpipe run``'s runner with a given embedder."""
    path = syn.write_huatuo(tmp_path / "test_datasets.jsonl", records)
    options = {"tasks": ("huatuo_retrieval",), "model": embedder.model, "embeddings_model": embedder.model,
               "embeddings_url": "http://127.0.0.1:1/v1", "data": {"huatuo_retrieval": str(path)}, **config}
    return asyncio.run(execute(RunConfig(**options), lambda _: pytest.fail("no generating model is needed"),
                               tmp_path / "runs", embedder_factory=lambda _: embedder))


def test_retrieval_on_a_hand_made_ranking(tmp_path):
    # pool order a0 a1 a3 a2 (the file's answers, in order); queries at angles that rank the gold 1st, 2nd, 4th
    table = {"a0": [1, 0], "a1": [0.8, 0.6], "a2": [0.6, 0.8], "a3": [0, 1],
             "q0": [1, 0.01], "q1": [1, 0.1], "q2": [1, 0], "x": [0, 0]}
    records = [{"questions": q, "answers": a} for q, a in (("q0", "a0"), ("q1", "a1"), ("q2", "a3"), ("x", "a2"))]
    embedder = TableEmbedder(table)
    outcome = retrieval_run(tmp_path, records, embedder, limit=3)
    metrics = outcome.metrics["huatuo_retrieval"]
    samples = outcome.run_dir.read_samples()
    # q0 → a0 first; q1 (angle 5.7°) → a0 (5.7°), a1 (31°): gold a1 rank 2; q2 → a0, a1, a2, a3: rank 4
    assert [s["prediction"]["rank"] for s in samples] == [1, 2, 4]
    # Recall@5 = 1, MRR@10 = (1 + 1/2 + 1/4) / 3
    assert metrics["recall@5"] == 1.0 and metrics["mrr@10"] == pytest.approx(1.75 / 3)
    assert metrics["pool_size"] == 4 and metrics["n"] == 3 and metrics["errors"] == 0
    # the pool is embedded once, the queries in one batch (micro-batched across concurrent requests)
    assert sorted(map(len, embedder.seen)) == [3, 4]
    summary = json.loads((outcome.run_dir.path / "summary.json").read_text())["tasks"]["huatuo_retrieval"]
    assert "pool_size" in summary["no_interval"] and POOL_NOTE in summary["no_interval"]["pool_size"]
    # resume: nothing is embedded again; re-scoring needs no embedder at all
    again = TableEmbedder(table)
    retrieval_run(tmp_path, records, again, limit=3)
    assert again.seen == []
    assert rescore(outcome.run_dir.path).metrics["huatuo_retrieval"]["mrr@10"] == pytest.approx(1.75 / 3)


def test_a_gold_beyond_the_ranking_depth_is_not_in_the_top_and_scores_zero(tmp_path):
    # 12 answers; the query is orthogonal to its own answer and close to all others: rank > 10
    table = {f"a{i}": [1.0, 0.01 * i] for i in range(12)}
    table.update({"a0": [0.0, 1.0], "q": [1.0, 0.0], **{f"q{i}": [0.0, 1.0] for i in range(1, 12)}})
    records = [{"questions": "q", "answers": "a0"}] + [{"questions": f"q{i}", "answers": f"a{i}"} for i in range(1, 12)]
    outcome = retrieval_run(tmp_path, records, TableEmbedder(table), limit=1)
    (sample,) = outcome.run_dir.read_samples()
    assert sample["prediction"]["rank"] is None and sample["prediction"]["depth"] == 10
    assert outcome.metrics["huatuo_retrieval"]["mrr@10"] == 0.0


def test_ties_rank_by_pool_order_and_zero_vectors_are_safe():
    queries = normalised(np.asarray([[1.0, 0.0]]))
    pool = normalised(np.asarray([[0.0, 1.0], [2.0, 0.0], [1.0, 0.0], [0.0, 0.0]]))
    assert rank_pool(queries, pool, depth=4).tolist() == [[1, 2, 0, 3]]


def test_pool_size_keeps_every_gold_and_samples_the_rest_with_the_seed():
    everyone = [qa(f"q{i}", f"a{i}", i) for i in range(10)]
    evaluated = everyone[:2]
    pool = build_pool(evaluated, everyone, 5, seed=1)
    assert len(pool) == 5 and {"a0", "a1"} <= set(pool)
    assert pool == build_pool(evaluated, everyone, 5, seed=1)
    assert pool != build_pool(evaluated, everyone, 5, seed=2) or pool != build_pool(evaluated, everyone, 5, seed=3)
    assert build_pool(evaluated, everyone, None, 0) == tuple(f"a{i}" for i in range(10))
    with pytest.raises(ValueError, match="smaller than"):
        build_pool(evaluated, everyone, 1, 0)
    with pytest.raises(ValueError, match="exceeds"):
        build_pool(evaluated, everyone, 11, 0)
    shared = [qa("q0", "同一个回答", 0), qa("q1", " 同一个回答 ", 1)]
    assert build_pool(shared, shared, None, 0) == ("同一个回答",)  # one gold entry for both


# ---- local sentence-transformers -------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm():
    return LocalSentenceTransformer(default_local_model_path())


def test_local_minilm_real_run_on_a_tiny_pool(minilm, tmp_path):
    # MiniLM is English: Chinese characters are [UNK] to it, so the tiny pool pairs by English terms
    records = [
        {"questions": "发烧 fever 吃什么药", "answers": "fever 发烧 可以用 paracetamol"},
        {"questions": "胃痛 stomach pain 原因", "answers": "stomach pain 胃痛 常见于 gastritis"},
        {"questions": "高血压 blood pressure 饮食", "answers": "high blood pressure 高血压 要 low salt diet"},
        {"questions": "失眠 insomnia 怎么办", "answers": "insomnia 失眠 需要 regular sleep"},
    ]
    outcome = retrieval_run(tmp_path, records, minilm, embeddings_url=None,
                            embeddings_path=str(default_local_model_path()))
    metrics = outcome.metrics["huatuo_retrieval"]
    assert metrics["mrr@10"] == 1.0 and metrics["recall@5"] == 1.0 and metrics["pool_size"] == 4
    config = json.loads((outcome.run_dir.path / "config.json").read_text(encoding="utf-8"))
    (ranker,) = config["rankers"]
    assert ranker["embedder"]["kind"] == "sentence-transformers" and ranker["pool_size"] == 4
    vectors = asyncio.run(minilm.embed(["fever", "fever", "insomnia"]))
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32 and np.allclose(vectors[0], vectors[1])


def test_local_model_folder_must_exist(tmp_path):
    with pytest.raises(BackendError, match="not a sentence-transformers model folder"):
        LocalSentenceTransformer(tmp_path)


# ---- HTTP embeddings against a loopback server -----------------------------------------------

def fake_vector(text: str) -> list[float]:
    vector = [0.0] * 8
    for ch in text:
        vector[ord(ch) % 8] += 1.0
    return vector


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if self.server.fail:
            self._send(400, {"error": {"message": "model not found", "type": "invalid_request_error"}})
            return
        data = [{"object": "embedding", "index": i, "embedding": fake_vector(t)} for i, t in enumerate(body["input"])]
        self._send(200, {"object": "list", "data": data[::-1], "model": body["model"],  # reversed: order by index
                         "usage": {"prompt_tokens": 1, "total_tokens": 1}})

    def _send(self, status, payload):
        blob = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(blob)))
        self.end_headers()
        self.wfile.write(blob)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.requests, httpd.fail = [], False
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def url(httpd):
    return f"http://127.0.0.1:{httpd.server_address[1]}/v1"


def test_http_embeddings_batches_keep_order_and_send_the_key(server, monkeypatch):
    monkeypatch.setenv("TEST_EMB_KEY", "sk-test-secret-123")
    embedder = OpenAIEmbeddings(HTTPEmbeddingsConfig(base_url=url(server), model="bge", api_key_env="TEST_EMB_KEY",
                                                     batch_size=2, max_retries=0))
    texts = ["感冒", "发烧了", "胃痛", "失眠怎么办", "高血压"]

    async def go():
        try:
            return await embedder.embed(texts)
        finally:
            await embedder.aclose()

    vectors = asyncio.run(go())
    assert vectors.tolist() == [fake_vector(t) for t in texts]
    sizes = sorted(len(r["body"]["input"]) for r in server.requests)
    assert sizes == [1, 2, 2] and all(r["path"] == "/v1/embeddings" for r in server.requests)
    assert all(r["body"]["encoding_format"] == "float" and r["body"]["model"] == "bge" for r in server.requests)
    assert server.requests[0]["auth"] == "Bearer sk-test-secret-123"
    assert "sk-test" not in json.dumps(embedder.describe())


def test_http_embeddings_failure_is_one_line_backend_error(server, monkeypatch):
    monkeypatch.setenv("TEST_EMB_KEY", "sk-test-secret-123")
    server.fail = True
    embedder = make_embedder(url=url(server), model="nope", api_key_env="TEST_EMB_KEY")
    with pytest.raises(BackendError) as err:
        asyncio.run(embedder.embed(["感冒"]))
    assert "HTTP 400" in str(err.value) and "sk-test-secret" not in str(err.value)
    with pytest.raises(BackendError, match="either"):
        make_embedder()
    with pytest.raises(BackendError, match="model name"):
        make_embedder(url=url(server))


def test_run_command_evaluates_retrieval_through_an_http_embedder(server, tmp_path):
    from typer.testing import CliRunner

    from evalpipe.cli import app

    path = syn.write_huatuo(tmp_path / "test_datasets.jsonl")
    args = ["run", "--task", "huatuo_retrieval", "--embeddings-url", url(server), "--embeddings-model", "fake",
            "--data", f"huatuo_retrieval={path}", "--limit", "2", "--task-arg", "huatuo_retrieval:pool_size=3",
            "--seed", "7", "--results-dir", str(tmp_path / "runs")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (folder,) = (tmp_path / "runs").iterdir()
    assert folder.name.startswith("huatuo_retrieval__fake__")
    metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))["huatuo_retrieval"]
    assert metrics["n"] == 2 and metrics["pool_size"] == 3 and set(metrics) >= {"recall@5", "mrr@10"}
    samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [s["id"] for s in samples] == ["test-0", "test-1"]
    assert samples[0]["gold"]["answer"] == syn.HUATUO[0]["answers"] and len(samples[0]["prediction"]["top"]) == 3
    config_json = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config_json["config"]["task_args"] == {"huatuo_retrieval:pool_size": "3"}
    assert config_json["rankers"][0]["embedder"]["model"] == "fake"
    assert str(path) in config_json["tasks"]["huatuo_retrieval"]["data_files"]
    # a typo in a task setting is refused before any request
    bad = CliRunner().invoke(app, [*args[:-4], "--task-arg", "huatuo_retrieval:pool=3", "--results-dir",
                                   str(tmp_path / "other")])
    assert bad.exit_code == 1 and "has no setting 'pool'" in bad.output and "pool_size" in bad.output

"""Replica spreading and failover, with in-process stand-in backends."""

import asyncio

import pytest

from evalpipe.backends.base import BackendError
from evalpipe.backends.replicas import ReplicaBackend
from evalpipe.records import Completion, GenerationParams, Message, Prompt

PROMPT = Prompt(params=GenerationParams(max_tokens=5), messages=(Message("user", "hi"),))


class Stub:
    def __init__(self, name, delay=0.01, fail=False, model="m"):
        self.model = model
        self.name = name
        self.delay = delay
        self.fail = fail
        self.calls = 0

    async def preflight(self):
        if self.fail == "preflight":
            raise BackendError("cannot reach")

    async def complete(self, prompt):
        self.calls += 1
        await asyncio.sleep(self.delay)
        if self.fail:
            return Completion(text=None, error="HTTP 503 after 7 attempts")
        return Completion(text=self.name)

    async def aclose(self):
        pass

    def describe(self):
        return {"name": self.name}

    def stats(self):
        return {}


def run_many(backend, n):
    async def go():
        return await asyncio.gather(*(backend.complete(PROMPT) for _ in range(n)))

    return asyncio.run(go())


def test_least_outstanding_spreads_evenly_and_prefers_the_faster_replica():
    fast, slow = Stub("fast", delay=0.001), Stub("slow", delay=0.05)
    backend = ReplicaBackend([fast, slow], ["fast", "slow"])
    results = run_many(backend, 40)
    assert all(r.ok for r in results)
    assert fast.calls + slow.calls == 40 and fast.calls >= 20  # concurrent burst splits evenly
    share = backend.stats()["replicas"]
    assert share["fast"]["share"] + share["slow"]["share"] == pytest.approx(1.0)


def test_a_failing_replica_is_failed_over():
    good, bad = Stub("good"), Stub("bad", fail=True)
    backend = ReplicaBackend([bad, good], ["bad", "good"])
    results = run_many(backend, 10)
    assert all(r.ok and r.text == "good" for r in results)
    assert backend.stats()["failovers"] == bad.calls > 0


def test_all_replicas_failing_returns_the_error():
    backend = ReplicaBackend([Stub("a", fail=True), Stub("b", fail=True)], ["a", "b"])
    (result,) = run_many(backend, 1)
    assert not result.ok and "503" in result.error


def test_preflight_names_the_replica_and_models_must_match():
    backend = ReplicaBackend([Stub("a"), Stub("b", fail="preflight")], ["http://a/v1", "http://b/v1"])
    with pytest.raises(BackendError, match="replica http://b/v1: cannot reach"):
        asyncio.run(backend.preflight())
    with pytest.raises(BackendError, match="same model"):
        ReplicaBackend([Stub("a"), Stub("b", model="other")], ["a", "b"])

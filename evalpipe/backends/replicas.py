"""Several replicas of one model behind one backend: least outstanding requests, failover.

Why on the client: a vLLM deployment that scales by running N independent servers (one per GPU or
node, ``vllm serve`` each) needs no load balancer in front — evalpipe spreads requests itself.
Each request goes to the replica with the fewest requests in flight (ties: the one used least). A
request that fails for good on one replica (after that replica's own retries) is tried once on
each other replica before it is recorded as an error. The summary shows each replica's share.

This is deliberately not a scheduler: no queues per replica, no health probing beyond the
preflight, no weights. For vLLM's own data parallelism (``--data-parallel-size``) a single URL
is enough.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalpipe.backends.base import Backend, BackendError
from evalpipe.records import Completion, Message, Prompt


@dataclass
class _Replica:
    backend: Backend
    name: str
    in_flight: int = 0
    sent: int = 0
    succeeded: int = 0
    failed: int = 0


class ReplicaBackend:
    def __init__(self, backends: Sequence[Backend], names: Sequence[str]) -> None:
        if not backends:
            raise BackendError("no replica given")
        models = {b.model for b in backends}
        if len(models) != 1:
            raise BackendError(f"replicas must serve the same model, got {sorted(models)}")
        self.model = backends[0].model
        self._replicas = [_Replica(b, n) for b, n in zip(backends, names)]
        self._failovers = 0

    def _pick(self, exclude: set[int]) -> int | None:
        candidates = [i for i in range(len(self._replicas)) if i not in exclude]
        if not candidates:
            return None
        return min(candidates, key=lambda i: (self._replicas[i].in_flight, self._replicas[i].sent, i))

    async def preflight(self) -> None:
        for replica in self._replicas:
            try:
                await replica.backend.preflight()
            except BackendError as exc:
                raise BackendError(f"replica {replica.name}: {exc}") from None

    async def check_choice_scoring(self) -> None:
        """Every replica must return prompt log-probabilities (any one may answer any request)."""
        for replica in self._replicas:
            check = getattr(replica.backend, "check_choice_scoring", None)
            if check is None:
                raise BackendError(f"replica {replica.name} cannot score options by log-likelihood")
            try:
                await check()
            except BackendError as exc:
                raise BackendError(f"replica {replica.name}: {exc}") from None

    async def models(self) -> Sequence[Mapping[str, Any]]:
        """The first replica's list (replicas serve the same model; each is checked by preflight)."""
        return await self._replicas[0].backend.models()

    async def context_length(self) -> int | None:
        """The smallest context any replica reports: a prompt fitted to it fits every replica."""
        lengths = [await r.backend.context_length() for r in self._replicas]
        known = [n for n in lengths if n is not None]
        return min(known) if known else None

    async def count_tokens(self, content: str | Sequence[Message]) -> int | None:
        """Counted by the first replica's tokenizer (the same model everywhere)."""
        return await self._replicas[0].backend.count_tokens(content)

    async def complete(self, prompt: Prompt) -> Completion:
        tried: set[int] = set()
        last: Completion | None = None
        while True:
            index = self._pick(tried)
            if index is None:
                assert last is not None
                return last
            replica = self._replicas[index]
            tried.add(index)
            replica.in_flight += 1
            replica.sent += 1
            try:
                completion = await replica.backend.complete(prompt)
            finally:
                replica.in_flight -= 1
            if completion.ok:
                replica.succeeded += 1
                return completion
            replica.failed += 1
            last = completion
            if len(tried) < len(self._replicas):
                self._failovers += 1

    async def aclose(self) -> None:
        for replica in self._replicas:
            await replica.backend.aclose()

    def describe(self) -> Mapping[str, Any]:
        return {"kind": "replicas", "replicas": [dict(r.backend.describe()) for r in self._replicas]}

    def stats(self) -> Mapping[str, Any]:
        total = sum(r.succeeded for r in self._replicas) or 1
        return {
            "failovers": self._failovers,
            "replicas": {
                r.name: {"sent": r.sent, "succeeded": r.succeeded, "failed": r.failed,
                         "share": r.succeeded / total, **dict(r.backend.stats())}
                for r in self._replicas
            },
        }

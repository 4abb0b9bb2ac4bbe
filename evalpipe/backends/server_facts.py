"""What an OpenAI-compatible server says about itself, read from its replies: the models it serves,
their context length, its tokenizer endpoint's counts — and what a failed model list means, in one line.

Pure functions of replies, kept apart from :mod:`evalpipe.backends.openai_compat` (which asks) so
that the reading rules can be tested and changed without a server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from evalpipe.backends.base import BackendError
from evalpipe.backends.retry import RequestFailed

NOT_OPENAI_HINT = "is this an OpenAI-compatible endpoint?"
#: the tokenizer endpoints tried, in order: vLLM's, then llama.cpp's
TOKENIZERS = (("vllm", "/tokenize"), ("llamacpp", "/extras/tokenize/count"))
#: the one-word text a tokenizer endpoint is probed with
PROBE_TEXT = "hello"
#: the most served models an error lists
MAX_MODELS_LISTED = 20


def model_list(data: Any, shown_url: str) -> list[dict[str, Any]]:
    """The entries of a ``GET /models`` reply; a reply that is no model list is a one-line error."""
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise BackendError(f"{shown_url}/models did not return an OpenAI model list; {NOT_OPENAI_HINT}")
    return [item for item in items if isinstance(item, dict)]


def check_served(entries: Sequence[dict[str, Any]], model: str, shown_url: str) -> None:
    """A one-line error naming the models served (the first 20) unless ``model`` is among them."""
    served = [str(entry["id"]) for entry in entries if "id" in entry]
    if model not in served:
        shown = ", ".join(served[:MAX_MODELS_LISTED]) or "no models"
        more = f" (and {len(served) - MAX_MODELS_LISTED} more)" if len(served) > MAX_MODELS_LISTED else ""
        raise BackendError(f"{shown_url} does not serve model {model!r}; it serves: {shown}{more}")


def context_length_of(entries: Sequence[dict[str, Any]], model: str) -> int | None:
    """``max_model_len`` of ``model``'s entry (vLLM), else of any entry; None when none has one."""
    ours = [e for e in entries if e.get("id") == model]
    for entry in [*ours, *entries]:
        value = entry.get("max_model_len")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def token_count_of(data: Any) -> int | None:
    """The ``count`` of a tokenizer endpoint's reply (vLLM's and llama.cpp's both say ``count``)."""
    count = data.get("count") if isinstance(data, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def models_error(failure: RequestFailed, shown_url: str, api_key_env: str, key_set: bool) -> BackendError:
    """Why ``GET /models`` failed, as the one line a user can act on (a key, a URL, a server)."""
    status = failure.status
    if status in (401, 403):
        if not key_set:
            return BackendError(f"{shown_url} refused the request (HTTP {status}) and environment "
                                f"variable {api_key_env} is not set; export the API key as {api_key_env}")
        return BackendError(f"{shown_url} rejected the API key from environment variable {api_key_env} "
                            f"(HTTP {status})")
    if status == 404:
        return BackendError(f"GET {shown_url}/models returned HTTP 404; is the base URL right? "
                            "OpenAI-compatible servers usually serve under .../v1")
    if status is not None:
        detail = f": {failure.detail}" if failure.detail else ""
        return BackendError(f"GET {shown_url}/models returned HTTP {status}{detail}")
    if failure.reason == "malformed JSON response":
        return BackendError(f"{shown_url}/models did not return JSON; {NOT_OPENAI_HINT}")
    why = failure.detail or failure.reason
    return BackendError(f"cannot reach {shown_url} ({why}); is the server running?")


def must_ask_again(future: asyncio.Future[Any]) -> bool:
    """A remembered request that must be asked again: it failed or was cancelled."""
    return future.done() and (future.cancelled() or future.exception() is not None)

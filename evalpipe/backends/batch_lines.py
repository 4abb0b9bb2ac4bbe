"""The Batch API's JSONL lines: one request line per pending prompt, one answer per output line.

The same format serves the OpenAI Batch API (:mod:`evalpipe.backends.batch`), ``vllm run-batch -i
requests.jsonl -o answers.jsonl`` and a provider's web console (``evalpipe batch-export`` /
``batch-import``). A request line is ``{"custom_id": KEY, "method": "POST", "url":
"/v1/chat/completions", "body": {…}}``: the ``custom_id`` is the prompt's cache key, so an answer
line finds its prompt whatever order the runner returns them in, and the body is the one a direct
request sends (:func:`evalpipe.backends.wire.request_body`). An output line is ``{"custom_id": …,
"response": {"status_code": 200, "body": {…completion…}}, "error": null}``; an error-file line has
``error`` set or a non-200 ``status_code``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from evalpipe.backends.retry import RequestFailed
from evalpipe.backends.wire import PATHS, read_answer, request_body
from evalpipe.records import Completion, Prompt

__all__ = ["BatchLineError", "LineResult", "read_output_line", "request_line", "url_of"]


class BatchLineError(ValueError):
    """An answer line that cannot be read at all (not JSON, no custom_id): a one-line message."""


def url_of(endpoint: str) -> str:
    """The ``url`` of a request line for an endpoint kind (``/v1/chat/completions``)."""
    return "/v1" + PATHS[endpoint]


def request_line(key: str, model: str, prompt: Prompt, completion_tokens_field: str = "max_tokens") -> str:
    """One JSONL request line (ASCII escapes: any text is sendable)."""
    return json.dumps({"custom_id": key, "method": "POST", "url": url_of(prompt.endpoint),
                       "body": request_body(model, prompt, completion_tokens_field=completion_tokens_field)})


@dataclass(frozen=True)
class LineResult:
    """What one output (or error-file) line says about its request: an answer, or why there is none."""

    key: str
    completion: Completion
    #: the model the answering server names in the body (None when it does not say)
    model: str | None = None


def read_output_line(line: str, *, batch_id: str | None, where: str) -> LineResult:
    """One output or error-file line as a Completion (``error`` set when it holds no answer).

    ``where`` names the file and line for the message of a line that is not a batch answer at all."""
    try:
        data = json.loads(line)
    except ValueError:
        raise BatchLineError(f"{where}: not a JSON line") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("custom_id"), str):
        raise BatchLineError(f"{where}: no custom_id (is this a Batch API output file?)")
    key = data["custom_id"]
    error = data.get("error")
    given = data.get("response")
    response: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    status = response.get("status_code")
    body = response.get("body")
    if error or status != 200 or not isinstance(body, Mapping):
        return LineResult(key, Completion(text=None, error=_line_error(error, status, body), batch_id=batch_id))
    chat = "/chat/" in str(data.get("url") or "") or ("choices" in body and _is_chat(body))
    try:
        answer = read_answer(body, chat=chat)
    except RequestFailed as failure:
        return LineResult(key, Completion(text=None, error=f"batch answer: {failure}", batch_id=batch_id))
    model = body.get("model") if isinstance(body.get("model"), str) else None
    return LineResult(key, Completion(text=answer.text, finish_reason=answer.finish_reason, usage=answer.usage,
                                      reasoning=answer.reasoning, batch_id=batch_id), model)


def _is_chat(body: Mapping[str, Any]) -> bool:
    choices = body.get("choices")
    if not choices:
        return False
    return isinstance(choices[0], Mapping) and "message" in choices[0]


def _line_error(error: Any, status: Any, body: Any) -> str:
    """A one-line reason for a line without an answer (the server's message where it gives one)."""
    if isinstance(error, Mapping):
        message = error.get("message") or error.get("code") or "error"
        return f"batch line failed: {str(message)[:300]}"
    if error:
        return f"batch line failed: {str(error)[:300]}"
    detail = ""
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        detail = f": {str(body['error'].get('message', ''))[:300]}"
    return f"batch line failed: HTTP {status}{detail}"


def lines_of(text: str) -> Iterable[tuple[int, str]]:
    """The non-blank lines of a JSONL text with their 1-based numbers."""
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield number, line

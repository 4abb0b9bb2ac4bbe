"""An in-process Backend for runner tests: answers come from a Python function, no HTTP.

(Transport behaviour — retries, timeouts, 429s — is tested against the real loopback server in
tests/backends; here only the runner's wiring is under test.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evalpipe.records import Completion, Prompt, Usage


def last_user_text(prompt: Prompt) -> str:
    if prompt.messages is not None:
        return [m.content for m in prompt.messages if m.role == "user"][-1]
    return prompt.text or ""


def query_text(prompt: Prompt) -> str:
    """The sentence being asked about (last 'Text to process:' or 'Input:' block)."""
    text = last_user_text(prompt)
    for marker in ("Text to process:\n", "Input:\n"):
        if marker in text:
            return text.rsplit(marker, 1)[1].split("\n", 1)[0]
    return text


class ScriptedBackend:
    def __init__(self, responder: Callable[[Prompt], str | Exception], model: str = "scripted") -> None:
        self.model = model
        self.responder = responder
        self.calls: list[Prompt] = []
        self.preflights = 0

    async def preflight(self) -> None:
        self.preflights += 1

    async def models(self) -> list[dict[str, Any]]:
        return [{"id": self.model}]

    async def context_length(self) -> int | None:
        return None  # a scripted backend knows no context: budgeting needs --context-length

    async def count_tokens(self, content: Any) -> int | None:
        return None  # no tokenizer: budgeting uses the documented estimate

    async def complete(self, prompt: Prompt) -> Completion:
        self.calls.append(prompt)
        answer = self.responder(prompt)
        if isinstance(answer, Exception):
            return Completion(text=None, error=str(answer), attempts=3, latency_s=0.01)
        return Completion(text=answer, finish_reason="stop", usage=Usage(100, 20), latency_s=0.01)

    async def aclose(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"kind": "scripted", "model": self.model}

    def stats(self) -> dict[str, Any]:
        return {"requests": len(self.calls)}

"""The store's key of a prompt: what can change an answer, and nothing else.

The key is a SHA-256 over everything that can change an answer — model, endpoint kind, rendered
messages or prompt text, generation parameters — and nothing that cannot (the URL of the server:
a restarted server on another port must not invalidate finished work).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

from evalpipe.records import GenerationParams, Prompt, to_jsonable


def cache_key(model: str, prompt: Prompt) -> str:
    payload = {
        "model": model,
        "endpoint": prompt.endpoint,
        "messages": to_jsonable(prompt.messages) if prompt.messages is not None else None,
        "text": prompt.text,
        "params": _params_json(prompt),
    }
    if prompt.choices is not None:  # only then: keys of prompts without choices stay as they were
        payload["choices"] = list(prompt.choices)
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    # surrogatepass: a prompt holding a lone surrogate gets a key too; other text encodes as before
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


#: generation parameters left out of the key when unset (added after keys existed: old keys stay)
_OPTIONAL_PARAMS = ("reasoning_effort", "response_format")


#: the last params object seen and its JSON: a plan's prompts share one params object, and
#: ``asdict`` + ``to_jsonable`` of it was a third of a key's cost (issue 28). Matched by identity,
#: not equality: equal params may still differ in JSON (``temperature`` 0 against 0.0)
_last_params: tuple[GenerationParams, dict[str, Any]] | None = None


def _params_json(prompt: Prompt) -> dict[str, Any]:
    """The params' JSON for the key (the caller only serialises it: the cached dict is never changed)."""
    global _last_params
    last = _last_params
    if last is not None and last[0] is prompt.params:
        return last[1]
    params: dict[str, Any] = to_jsonable(asdict(prompt.params))
    for name in _OPTIONAL_PARAMS:
        if params.get(name) is None:
            params.pop(name, None)
    _last_params = (prompt.params, params)
    return params

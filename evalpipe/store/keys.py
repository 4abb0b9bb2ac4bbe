"""The store's key of a prompt: what can change an answer, and nothing else.

The key is a SHA-256 over everything that can change an answer — model, endpoint kind, rendered
messages or prompt text, generation parameters — and nothing that cannot (the URL of the server:
a restarted server on another port must not invalidate finished work).

The hashed text is the payload's JSON with sorted keys and no spaces (:func:`_payload`). A
plan's prompts are written out directly in that form (:func:`_direct_blob`: the keys in their
sorted order, each string encoded by the same encoder ``json.dumps`` uses, the params' JSON
reused across a plan's prompts) instead of building the payload's dicts and sorting them per
prompt (issue 28); anything the direct form does not expect takes the payload path.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, fields
from typing import Any

from evalpipe.records import GenerationParams, Message, Prompt, to_jsonable

#: the encoder of the key's JSON (what ``json.dumps(..., sort_keys=True, ensure_ascii=False,
#: separators=(",", ":"))`` builds for each call)
_ENCODE = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode
#: a message's JSON is ``{"content": …, "role": …}`` only while these are its fields
_DIRECT_MESSAGES = tuple(f.name for f in fields(Message)) == ("role", "content")


def cache_key(model: str, prompt: Prompt) -> str:
    blob = _direct_blob(model, prompt)
    if blob is None:
        blob = _ENCODE(_payload(model, prompt))
    # surrogatepass: a prompt holding a lone surrogate gets a key too; other text encodes as before
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def _payload(model: str, prompt: Prompt) -> dict[str, Any]:
    payload = {
        "model": model,
        "endpoint": prompt.endpoint,
        "messages": to_jsonable(prompt.messages) if prompt.messages is not None else None,
        "text": prompt.text,
        "params": _params_json(prompt),
    }
    if prompt.choices is not None:  # only then: keys of prompts without choices stay as they were
        payload["choices"] = list(prompt.choices)
    return payload


def _direct_blob(model: str, prompt: Prompt) -> str | None:
    """:func:`_payload`'s JSON written out key by key in sorted order (``choices``, ``endpoint``,
    ``messages``, ``model``, ``params``, ``text``): the same text, since JSON of a nested value is
    the same inside its parent; None unless every string is a plain ``str`` and every message a
    :class:`Message` of role and content."""
    messages, text, choices = prompt.messages, prompt.text, prompt.choices
    if type(model) is not str or not (text is None or type(text) is str) or not _DIRECT_MESSAGES:
        return None
    if messages is None:
        listed = "null"
    elif type(messages) is tuple and all(type(m) is Message and type(m.role) is str and type(m.content) is str
                                         for m in messages):
        listed = "[" + ",".join(f'{{"content":{_ENCODE(m.content)},"role":{_ENCODE(m.role)}}}'
                                for m in messages) + "]"
    else:
        return None
    head = "{"
    if choices is not None:
        if type(choices) is not tuple or not all(type(c) is str for c in choices):
            return None
        head = '{"choices":' + _ENCODE(list(choices)) + ","
    endpoint = "chat" if messages is not None else "completions"
    return (f'{head}"endpoint":"{endpoint}","messages":{listed},"model":{_ENCODE(model)},'
            f'"params":{_params_text(prompt)},"text":{"null" if text is None else _ENCODE(text)}}}')


#: generation parameters left out of the key when unset (added after keys existed: old keys stay)
_OPTIONAL_PARAMS = ("reasoning_effort", "response_format")


#: the last params object seen, its JSON object and that object's text: a plan's prompts share one
#: params object, and ``asdict`` + ``to_jsonable`` of it was a third of a key's cost (issue 28).
#: Matched by identity, not equality: equal params may still differ in JSON (``temperature`` 0
#: against 0.0)
_last_params: tuple[GenerationParams, dict[str, Any], str] | None = None


def _params_json(prompt: Prompt) -> dict[str, Any]:
    """The params' JSON for the key (the caller only serialises it: the cached dict is never changed)."""
    return _params_entry(prompt)[1]


def _params_text(prompt: Prompt) -> str:
    """:func:`_params_json` as the key's JSON text."""
    return _params_entry(prompt)[2]


def _params_entry(prompt: Prompt) -> tuple[GenerationParams, dict[str, Any], str]:
    global _last_params
    last = _last_params
    if last is not None and last[0] is prompt.params:
        return last
    params: dict[str, Any] = to_jsonable(asdict(prompt.params))
    for name in _OPTIONAL_PARAMS:
        if params.get(name) is None:
            params.pop(name, None)
    entry = _last_params = (prompt.params, params, _ENCODE(params))
    return entry

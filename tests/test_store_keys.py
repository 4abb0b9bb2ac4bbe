"""evalpipe.store.keys: the params' JSON is reused across a plan's prompts (issue 28) without ever
giving a prompt another prompt's key."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from evalpipe.records import GenerationParams, Message, Prompt, to_jsonable
from evalpipe.store.keys import cache_key


def reference_key(model: str, prompt: Prompt) -> str:
    """The key as computed before the reuse: everything worked out afresh for each prompt."""
    params = to_jsonable(asdict(prompt.params))
    for name in ("reasoning_effort", "response_format"):
        if params.get(name) is None:
            params.pop(name, None)
    payload = {"model": model, "endpoint": prompt.endpoint,
               "messages": to_jsonable(prompt.messages) if prompt.messages is not None else None,
               "text": prompt.text, "params": params}
    if prompt.choices is not None:
        payload["choices"] = list(prompt.choices)
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def test_keys_match_the_reference_whatever_the_order_of_params():
    """Equal params that serialise differently (0 against 0.0), alternating, and one params object
    shared by many prompts: every key is the one worked out afresh."""
    params = [GenerationParams(max_tokens=5), GenerationParams(max_tokens=5, temperature=0),
              GenerationParams(max_tokens=5, temperature=0.0), GenerationParams(max_tokens=5, stop=("x",)),
              GenerationParams(max_tokens=5, reasoning_effort="low"), GenerationParams(max_tokens=9, seed=3)]
    assert params[1] == params[2]
    prompts = [Prompt(params=p, messages=(Message("user", f"q{i}"),)) for i, p in enumerate(params * 3)]
    prompts += [Prompt(params=params[0], text="t", choices=("a", "b")), Prompt(params=params[0], text="t")]
    prompts += [Prompt(params=params[3], messages=(Message("user", f"same params {i}"),)) for i in range(5)]
    for prompt in prompts + prompts[::-1]:
        assert cache_key("m", prompt) == reference_key("m", prompt)
    assert cache_key("m", prompts[1]) != cache_key("m", prompts[2])


def test_a_pinned_key():
    prompt = Prompt(params=GenerationParams(max_tokens=5, seed=1, stop=("x",)), messages=(Message("user", "hi"),))
    for _ in range(2):  # the second time from the reused params JSON
        assert cache_key("m", prompt) == "ad71beaaade6d99cca1760d53aa382830cc6d5b749b8c6391b48b4cf20b42255"

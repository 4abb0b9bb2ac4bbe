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


class Odd(str):
    """A str that is not a plain str: the direct form leaves it to the payload path."""


def test_the_direct_form_gives_the_reference_key_for_any_text():
    """Keys written out key by key (sorted order, the params' text reused) against the payload
    serialised whole: quotes, escapes, control characters, non-ASCII, lone surrogates, choices,
    completion texts, several messages, str subclasses."""
    import random

    rng = random.Random(5)
    alphabet = ['"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "中", "\u2028", "\ud800", "\U0001f600", "a", " ", "/"]

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))

    params = [GenerationParams(max_tokens=5), GenerationParams(max_tokens=7, temperature=0.7, top_p=0.9, seed=2,
                                                               stop=("</s>", "\n\n", text())),
              GenerationParams(max_tokens=3, reasoning_effort="high", response_format='{"type":"json_object"}')]
    for _ in range(400):
        p = rng.choice(params)
        shape = rng.randrange(4)
        if shape == 0:
            prompt = Prompt(params=p, text=text())
        elif shape == 1:
            prompt = Prompt(params=p, text=text(), choices=tuple(text() for _ in range(rng.randint(1, 3))))
        elif shape == 2:
            prompt = Prompt(params=p, messages=tuple(Message(rng.choice(["system", "user", "assistant"]), text())
                                                     for _ in range(rng.randint(1, 4))))
        else:
            prompt = Prompt(params=p, messages=(Message("user", Odd(text())),), )
        model = rng.choice(["m", "bench-model", text(), Odd("m")])
        assert cache_key(model, prompt) == reference_key(model, prompt)


def test_plain_prompts_take_the_direct_form():
    from evalpipe.store import keys

    params = GenerationParams(max_tokens=5)
    for prompt in (Prompt(params=params, text="t"), Prompt(params=params, text="t", choices=("a",)),
                   Prompt(params=params, messages=(Message("system", "s"), Message("user", "u")))):
        assert keys._direct_blob("m", prompt) is not None
    assert keys._direct_blob(Odd("m"), Prompt(params=params, text="t")) is None

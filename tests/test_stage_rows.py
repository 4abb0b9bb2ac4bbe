"""Staging's direct prompt JSON and its packing against the generic path kept here as the
reference: every staged row (sample id, cache key, packed prompt, info) and every shared text the
same, byte for byte, as ``to_jsonable`` + the generator-based slot walk + ``json.dumps`` gave."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from evalpipe.pipeline import render
from evalpipe.pipeline.render import _PromptJson, stage_all
from evalpipe.records import Example, GenerationParams, Message, Prompt, to_jsonable
from evalpipe.store import prompt_pack
from evalpipe.store.prompt_pack import LEARN, MIN_SHARED, Packer
from tests.test_store_keys import reference_key


def reference_slots(obj: Any, path: tuple[Any, ...] = ()) -> Iterable[tuple[tuple[Any, ...], str]]:
    """The slot walk as it was: a generator per level."""
    if isinstance(obj, str):
        if len(obj) >= MIN_SHARED:
            yield path, obj
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from reference_slots(value, (*path, key))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            yield from reference_slots(value, (*path, index))


class ReferencePacker(Packer):
    """The packer with the slot walk as it was (:func:`reference_slots`) in learning and packing alike."""

    def learn(self, prompts: Iterable[Mapping[str, Any]]) -> None:
        with _reference_slots():
            super().learn(prompts)

    def pack(self, prompt: Mapping[str, Any]) -> Any:
        with _reference_slots():
            return super().pack(prompt)


@contextlib.contextmanager
def _reference_slots() -> Iterator[None]:
    original = prompt_pack._slots
    prompt_pack._slots = lambda obj, path=(): list(reference_slots(obj, path))  # type: ignore[assignment]
    try:
        yield
    finally:
        prompt_pack._slots = original


def reference_rows(model: str, prompts: list[Prompt]) -> tuple[list[tuple[str, str, str]], dict[str, str]]:
    packer = ReferencePacker()
    packer.learn(to_jsonable(p) for p in prompts[:LEARN])
    rows = [(str(i), reference_key(model, p), json.dumps(packer.pack(to_jsonable(p)), ensure_ascii=False))
            for i, p in enumerate(prompts)]
    return rows, packer.texts


class Stage:
    """Takes the rows stage_all writes."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str]] = []

    def write(self, plan: str, rows: Iterator[tuple[str, str, str, str]]) -> int:
        self.rows = list(rows)
        return len(self.rows)


class Odd(str):
    pass


def random_prompts(rng: random.Random) -> list[Prompt]:
    shared = "Here are some examples: " + "x" * 100 + " é \"quoted\" \\ \ud800 "
    tail = " Answer in <response> tags. " + "y" * 80
    params = rng.choice([GenerationParams(max_tokens=5), GenerationParams(max_tokens=9, temperature=0.5,
                                                                          stop=("z" * 70, "\n"), seed=1),
                         GenerationParams(max_tokens=3, response_format='{"type":"json_schema","s":"' + "q" * 80 + '"}')])
    shape = rng.randrange(5)
    prompts = []
    for i in range(rng.randint(1, 90)):
        own = "".join(rng.choice("ab \n\t\"é中") for _ in range(rng.randint(0, 30))) + f"[{i}]"
        body = shared + own + tail if rng.random() < 0.95 else own
        if shape == 0:
            prompts.append(Prompt(params=params, text=body))
        elif shape == 1:
            prompts.append(Prompt(params=params, text=body, choices=(" yes", " no" + "n" * 70)))
        elif shape == 2:
            prompts.append(Prompt(params=params, messages=(Message("system", "s" * 90), Message("user", body))))
        elif shape == 3:
            prompts.append(Prompt(params=params, messages=(Message("user", shared), Message("assistant", "ok"),
                                                           Message("user", body))))
        else:
            prompts.append(Prompt(params=params, messages=(Message("user", Odd(body) if i % 2 else body),)))
    return prompts


def test_staged_rows_are_the_reference_rows():
    rng = random.Random(3)
    for _ in range(60):
        prompts = random_prompts(rng)
        examples = [Example(id=str(i), inputs={}, gold=None) for i in range(len(prompts))]
        stage = Stage()
        size, packer = stage_all(stage, "plan", "m", tuple(examples),  # type: ignore[arg-type]
                                 lambda ex, prompts=prompts: prompts[int(ex.id)])
        rows, texts = reference_rows("m", prompts)
        assert size == len(prompts)
        assert [row[:3] for row in stage.rows] == rows
        assert packer.texts == texts


def test_the_direct_json_is_to_jsonable():
    rng = random.Random(4)
    as_json = _PromptJson()
    for _ in range(40):
        for prompt in random_prompts(rng):
            built = as_json(prompt)
            assert json.dumps(built, ensure_ascii=False) == json.dumps(to_jsonable(prompt), ensure_ascii=False)
            assert render.dumps_packed(built) == json.dumps(built, ensure_ascii=False)

"""Prompts packed for the store: shared text kept once, every prompt given back exactly."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType

import pytest

from evalpipe.store.prompt_pack import MIN_SHARED, PIECES, Packer, is_packed, referenced, text_key, unpack
from evalpipe.records import GenerationParams, Message, Prompt, to_jsonable
from evalpipe.pipeline.prepare import prepare
from evalpipe.config import RunConfig

PREFIX = "Here are some examples:\n" + "Input: a sentence\nOutput: <response>a sentence</response>\n" * 40
SUFFIX = "\nAnswer with the tagged text only, nothing else; keep every character of the input as it is.\n"


def chat(text: str, system: str = "You are a careful annotator of biomedical text. " * 2) -> dict:
    return to_jsonable(Prompt(params=GenerationParams(max_tokens=64, stop=("</response>",)),
                              messages=(Message("system", system), Message("user", PREFIX + text + SUFFIX))))


def stored_size(packer: Packer, prompts: list[dict]) -> int:
    return sum(len(json.dumps(packer.pack(p), ensure_ascii=False)) for p in prompts) + sum(
        len(t) for t in packer.texts.values())


def test_shared_prefix_suffix_and_identical_messages_are_kept_once():
    prompts = [chat(f"Sentence number {i} about the BRCA1 gene .") for i in range(200)]
    packer = Packer()
    packer.learn(prompts[:64])
    packed = [packer.pack(p) for p in prompts]
    # the system message (identical everywhere), the few-shot prefix and the instructions after the input
    assert sorted(packer.texts.values(), key=len) == sorted(
        [prompts[0]["messages"][0]["content"], PREFIX + "Sentence number ", " about the BRCA1 gene ." + SUFFIX],
        key=len)
    user = packed[7]["messages"][1]["content"]
    assert user[PIECES][1] == "7" and referenced(packed[7]) == set(packer.texts)
    assert [unpack(p, packer.texts) for p in packed] == prompts
    whole = sum(len(json.dumps(p, ensure_ascii=False)) for p in prompts)
    assert stored_size(packer, prompts) < whole / 8  # ~2.9 KB a prompt whole, ~0.35 KB packed


def test_a_prompt_that_does_not_share_the_learnt_text_is_kept_whole_and_given_back():
    prompts = [chat(f"sentence {i}") for i in range(10)]
    packer = Packer()
    packer.learn(prompts)
    odd = chat("x", system="Another system prompt entirely, long enough to be a slot of its own here.")
    odd["messages"][1]["content"] = "No shared prefix here. " * 5 + SUFFIX  # shares only the suffix
    packed = packer.pack(odd)
    assert packed["messages"][0]["content"] == odd["messages"][0]["content"]  # not packed
    assert packed["messages"][1]["content"][PIECES][0] == "No shared prefix here. " * 5
    assert unpack(packed, packer.texts) == odd


def test_short_shared_text_stays_inline_and_a_single_prompt_round_trips():
    packer = Packer()
    prompts = [{"params": {"max_tokens": 1}, "text": f"Q: {i} " + "x" * (MIN_SHARED - 10)} for i in range(3)]
    packer.learn(prompts)
    assert packer.texts == {}
    assert [packer.pack(p) for p in prompts] == prompts
    alone = Packer()
    alone.learn(prompts[:1])
    assert unpack(alone.pack(prompts[0]), alone.texts) == prompts[0]


@pytest.mark.parametrize("text", ["\udcff lone surrogate " * 10, "中文的提示 " * 20, "emoji 😀 " * 20])
def test_any_text_round_trips(text):
    prompts = [{"text": text + str(i) + text} for i in range(3)]
    packer = Packer()
    packer.learn(prompts)
    packed = [packer.pack(p) for p in prompts]
    assert packer.texts == {text_key(text): text}  # the same text is both prefix and suffix: stored once
    assert [unpack(p, packer.texts) for p in packed] == prompts


def test_a_rendered_prompt_comes_back_from_its_json_form():
    prepared = prepare(RunConfig(tasks=("ncbi_disease",), model="m", base_url="http://127.0.0.1:1/v1", limit=5))[0]
    for i, example in enumerate(prepared.examples):
        rendered = prepared.make_prompt(example)
        assert prepared.prompt(i) == rendered == Prompt.from_json(to_jsonable(rendered))
        # the 5-shot prefix is one shared text: what is left is the sentence, the parameters and a reference
        assert len(prepared.stage.row(prepared.plan_name, i)[2]) < 250 + len(example.inputs["text"])
        assert len(json.dumps(to_jsonable(rendered))) > 2_500
    scored = Prompt(params=GenerationParams(max_tokens=1, seed=3), text="Q?\nAnswer:", choices=(" A", " B"))
    assert Prompt.from_json(json.loads(json.dumps(to_jsonable(scored)))) == scored


def _unpack_reference(obj, texts):
    """unpack's general rules, kept here to check its fast way against (any input, same output)."""
    if is_packed(obj):
        return "".join(texts[piece[0]] if isinstance(piece, list) else piece for piece in obj[PIECES])
    if isinstance(obj, Mapping):
        return {k: _unpack_reference(v, texts) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unpack_reference(v, texts) for v in obj]
    return obj


def test_unpack_fast_way_gives_the_general_rules_results():
    texts = {"a": "shared A ", "b": " shared B"}
    cases = [
        "text", 3, None, True, 1.5, [], {},
        {PIECES: [["a"], "own", ["b"]]},
        {PIECES: ["only own"]},
        {"messages": [{"role": "user", "content": {PIECES: [["a"], "x"]}}, {"role": "system", "content": "s"}],
         "params": {"max_tokens": 5, "stop": ["\n", {PIECES: [["b"]]}], "seed": None}, "text": None},
        [[{PIECES: [["a"]]}, "s", 2], {"k": [{"j": {PIECES: ["p", ["b"]]}}]}],
        {PIECES: [["a"]], "other": 1},  # two keys: not a packed slot
        MappingProxyType({"m": {PIECES: [["a"]]}}),  # another mapping: the general rules
        (1, {PIECES: [["a"]]}),  # a tuple is a leaf, as it always was
    ]
    for case in cases:
        expected = _unpack_reference(case, texts)
        got = unpack(case, texts)
        assert got == expected and type(got) is type(expected), case

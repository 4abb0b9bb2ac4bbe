"""Context budgeting: the long field is cut from the end until prompt + max_tokens fit."""

from evalpipe.budget import CHAT_OVERHEAD_TOKENS, SAFETY_TOKENS, EstimateCounter, fit_prompt, prompt_tokens
from evalpipe.records import Example, GenerationParams, Message, Prompt


class WordCounter:
    kind = "server"

    def count(self, text: str) -> int:
        return len(text.split())


def render(example: Example) -> Prompt:
    content = f"Read the letter.\nLETTER: {example.inputs['letter']}\nQUESTION: {example.inputs['question']}"
    return Prompt(params=GenerationParams(max_tokens=10), messages=(Message("user", content),))


def make(words: int) -> Example:
    letter = " ".join(f"w{i}" for i in range(words))
    return Example(id="x", inputs={"letter": letter, "question": "what is the diagnosis ?"}, gold=None)


def test_short_prompt_is_untouched():
    fitted = fit_prompt(make(10), render, "letter", 1000, WordCounter())
    assert fitted.truncated_tokens == 0 and fitted.example == make(10)


def test_long_field_is_cut_from_the_end_until_it_fits():
    counter = WordCounter()
    context = 200
    fitted = fit_prompt(make(1000), render, "letter", context, counter)
    limit = context - 10 - SAFETY_TOKENS
    assert prompt_tokens(fitted.prompt, counter) <= limit
    letter = fitted.example.inputs["letter"]
    assert letter.startswith("w0 w1 w2")  # the beginning is kept
    assert fitted.example.inputs["question"] == "what is the diagnosis ?"  # never the question
    assert fitted.truncated_tokens == 1000 - counter.count(letter)
    # it does not cut much more than needed: within a few tokens of the limit
    assert prompt_tokens(fitted.prompt, counter) >= limit - 5
    assert "QUESTION: what is the diagnosis ?" in fitted.prompt.messages[0].content


def test_chat_overhead_and_estimate():
    prompt = Prompt(params=GenerationParams(max_tokens=1), messages=(Message("user", "a b"), Message("assistant", "c")))
    assert prompt_tokens(prompt, WordCounter()) == 3 + 2 * CHAT_OVERHEAD_TOKENS
    assert EstimateCounter().count("x" * 35) == 10 and EstimateCounter().kind == "estimate"

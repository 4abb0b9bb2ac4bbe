from evalpipe.records import Prompt, GenerationParams, Message
import pytest


def test_prompt_needs_exactly_one_form():
    with pytest.raises(ValueError):
        Prompt(params=GenerationParams(max_tokens=1))
    p = Prompt(params=GenerationParams(max_tokens=1), messages=(Message("user", "hi"),))
    assert p.endpoint == "chat"

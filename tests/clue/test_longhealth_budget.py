"""LongHealth sizes its documents by the model's context when it is known."""

import pytest

from evalpipe.data.context_budget import CHARACTERS, CountedMeasure
from evalpipe.data.errors import DataError
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.clue.longhealth import DEFAULT_CONTEXT_CHARS, PROMPT_RESERVE_TOKENS, document_budget


def test_budget_follows_context_length():
    assert document_budget(LoadOptions()) == (DEFAULT_CONTEXT_CHARS, CHARACTERS)
    assert document_budget(LoadOptions(context_length=8192)) == (int((8192 - PROMPT_RESERVE_TOKENS) * 3.5),
                                                                 CHARACTERS)
    with pytest.raises(DataError, match="no room"):
        document_budget(LoadOptions(context_length=512))


def test_budget_is_in_tokens_when_a_tokenizer_answers():
    budget, measure = document_budget(LoadOptions(context_length=8192, token_counter=lambda t: len(t.split())))
    assert budget == 8192 - PROMPT_RESERVE_TOKENS
    assert isinstance(measure, CountedMeasure) and measure.name == "tokens"
    assert measure.length("three short words") == 3
    # a tokenizer alone, without a context length, changes nothing
    assert document_budget(LoadOptions(token_counter=len)) == (DEFAULT_CONTEXT_CHARS, CHARACTERS)

"""LongHealth sizes its documents by the model's context when it is known."""

import pytest

from evalpipe.data.errors import DataError
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.clue_longhealth import DEFAULT_CONTEXT_CHARS, PROMPT_RESERVE_TOKENS, document_budget


def test_budget_follows_context_length():
    assert document_budget(LoadOptions()) == DEFAULT_CONTEXT_CHARS
    assert document_budget(LoadOptions(context_length=8192)) == int((8192 - PROMPT_RESERVE_TOKENS) * 3.5)
    with pytest.raises(DataError, match="no room"):
        document_budget(LoadOptions(context_length=512))

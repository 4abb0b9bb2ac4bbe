"""Shared fixtures for the CLUE tests: the synthetic data folder and a fake concept extractor."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from evalpipe.metrics import concepts

FIXTURES = Path(__file__).parent / "fixtures"


class FakeExtractor:
    """Concepts = the words (lower case, 4+ letters) that are in a tiny 'vocabulary' — enough to
    test the metric's wiring; the real extractor is scispacy + UMLS."""

    tag = "fake"
    VOCABULARY = {"heart", "failure", "kidney", "injury", "pneumonia", "delirium", "urinary", "infection",
                  "cholecystitis", "fibrillation", "hypertension", "thrombosis", "lung", "furosemide", "cast",
                  "clinic", "fluids", "congestive", "acute", "community", "acquired", "atrial", "deep", "vein"}

    def extract(self, texts: Sequence[str]) -> list[frozenset[str]]:
        return [frozenset(w for w in re.findall(r"[a-z]{4,}", t.lower()) if w in self.VOCABULARY) for t in texts]


@pytest.fixture()
def fake_extractor():
    concepts.register_extractor("fake", FakeExtractor)
    yield "fake"
    concepts._FACTORIES.pop("fake", None)
    concepts._LOADED.pop("fake", None)

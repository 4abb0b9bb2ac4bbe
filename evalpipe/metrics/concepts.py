"""UMLS-concept F1: overlap of the medical concepts named in an answer and in the reference.

Definition (CLUE's ``compute_UMLS_F1``): a *concept extractor* turns a text into a set of concept
names; with ``A`` the answer's set and ``G`` the reference's,

* precision = |A ∩ G| / |A| (0.0 when A is empty),
* recall    = |A ∩ G| / |G| (0.0 when G is empty),
* F1        = 2PR / (P + R) (0.0 when P + R = 0),

per sample; the corpus value is the plain mean over samples. An empty answer (or a failed
request) has no concept and scores 0.0 — also when the reference has none (nothing is credited
for saying nothing).

The extractor is pluggable. The built-in ``scispacy`` extractor is the reference's: spaCy model
``en_core_sci_sm`` with scispacy's UMLS linker (abbreviations resolved); for every entity that the
linker links, the canonical name of its top-1 concept. Its metric keys carry the extractor's tag
(``umls[scispacy:en_core_sci_sm]_f1``) so numbers from different extractors never share a column.

**Not computed is not zero.** When no extractor is available (scispacy, its model or the UMLS
linker data not installed — ``MetricOptions.umls_extractor`` left at None = auto-detect) the
metric is *absent* from the results, and :func:`resolve_extractor` returns a
:class:`NotComputed` whose ``reason`` says why, for the run summary. Asking for an extractor by
name that cannot be loaded is an error (:class:`ConceptExtractorUnavailable`); ``"none"`` turns the
metric off on purpose.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.prf import set_prf
from evalpipe.errors import EvalpipeError


class ConceptExtractor(Protocol):
    """Texts → sets of concept identifiers (names or CUIs; only equality matters)."""

    tag: str

    def extract(self, texts: Sequence[str]) -> list[frozenset[str]]: ...


@dataclass(frozen=True)
class NotComputed:
    """A metric that was deliberately not computed, and why (for summary.json and the table)."""

    metric: str
    reason: str


class ConceptExtractorUnavailable(EvalpipeError, RuntimeError):
    """An extractor asked for by name cannot be loaded."""


_FACTORIES: dict[str, Callable[[], ConceptExtractor]] = {}
_LOADED: dict[str, ConceptExtractor] = {}


def register_extractor(name: str, factory: Callable[[], ConceptExtractor]) -> None:
    """Make an extractor selectable as ``umls_extractor=<name>`` (loaded lazily, once)."""
    _FACTORIES[name] = factory
    _LOADED.pop(name, None)


def _load(name: str) -> ConceptExtractor:
    if name not in _LOADED:
        if name not in _FACTORIES:
            raise ConceptExtractorUnavailable(
                f"unknown concept extractor {name!r} (known: {', '.join(sorted(_FACTORIES)) or 'none'})")
        _LOADED[name] = _FACTORIES[name]()
    return _LOADED[name]


# ---- scispacy (the reference's extractor) ------------------------------------------------------

SCISPACY_MODEL = "en_core_sci_sm"


def scispacy_missing() -> str | None:
    """Why the scispacy extractor cannot run here (None when the packages are installed)."""
    needed = (("spacy", "spaCy"), ("scispacy", "scispacy"), (SCISPACY_MODEL, f"the spaCy model {SCISPACY_MODEL}"))
    for module, what in needed:
        if importlib.util.find_spec(module) is None:
            return (f"UMLS-concept F1 not computed: {what} is not installed (needs scispacy, its model "
                    f"{SCISPACY_MODEL} and the UMLS linker data)")
    return None


class ScispacyExtractor:
    """Top-1 UMLS concept (canonical name) of every linked entity, as CLUE computes it."""

    tag = f"scispacy:{SCISPACY_MODEL}"

    def __init__(self) -> None:
        missing = scispacy_missing()
        if missing:
            raise ConceptExtractorUnavailable(missing)
        import spacy
        from scispacy.linking import EntityLinker  # noqa: F401  (registers the pipe)

        self._nlp = spacy.load(SCISPACY_MODEL)
        self._nlp.add_pipe("scispacy_linker", config={"resolve_abbreviations": True, "linker_name": "umls"})
        self._linker = self._nlp.get_pipe("scispacy_linker")

    def extract(self, texts: Sequence[str]) -> list[frozenset[str]]:
        out = []
        for doc in self._nlp.pipe(list(texts)):
            names = {self._linker.kb.cui_to_entity[ent._.kb_ents[0][0]].canonical_name
                     for ent in doc.ents if ent._.kb_ents}
            out.append(frozenset(names))
        return out


register_extractor("scispacy", ScispacyExtractor)


def resolve_extractor(options: MetricOptions) -> ConceptExtractor | NotComputed:
    """The extractor to use, or why the metric is not computed (see the module docstring)."""
    choice = options.umls_extractor
    if choice == "none":
        return NotComputed("umls", "UMLS-concept F1 not computed: turned off (umls_extractor=none)")
    if choice is not None:
        return _load(choice)
    missing = scispacy_missing()
    if missing:
        return NotComputed("umls", missing)
    try:
        return _load("scispacy")
    except Exception as exc:  # linker data not downloadable offline, incompatible versions, …
        return NotComputed("umls", f"UMLS-concept F1 not computed: the scispacy extractor failed to load ({exc})")


# ---- the metric ------------------------------------------------------------------------------

def concept_prf(answer: frozenset[str], reference: frozenset[str]) -> tuple[float, float, float]:
    """(precision, recall, F1) of one answer's concept set against the reference's
    (:func:`evalpipe.metrics.prf.set_prf`: 0.0 on a zero denominator, so an empty answer scores 0)."""
    prf = set_prf(reference, answer)
    return prf.precision, prf.recall, prf.f1


def concept_key(extractor: ConceptExtractor, part: str) -> str:
    return f"umls[{extractor.tag}]_{part}"


def concept_per_sample(
    predictions: Sequence[str], references: Sequence[str], extractor: ConceptExtractor
) -> list[dict[str, float]]:
    """Per-sample ``umls[tag]_precision/_recall/_f1``; empty answers are not sent to the extractor."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
    live = [i for i, p in enumerate(predictions) if p.strip()]
    answers: list[frozenset[str]] = [frozenset()] * len(predictions)
    for i, concepts in zip(live, extractor.extract([predictions[i] for i in live])):
        answers[i] = concepts
    golds = extractor.extract(list(references))
    keys = [concept_key(extractor, part) for part in ("precision", "recall", "f1")]
    return [dict(zip(keys, concept_prf(a, g))) for a, g in zip(answers, golds)]

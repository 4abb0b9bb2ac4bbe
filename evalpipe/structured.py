"""Structured output (``--structured``, issue 25): answers as JSON under the task's schema.

A kind with a natural schema declares it (:class:`~evalpipe.tasks.base.StructuredOutput` in its
``KindParts``: span_ner → a list of entities, code_list → an array of codes, classification and
multiple_choice → an enum); the core names no kind. For such a task a structured run

* asks for ``response_format: {"type": "json_schema", "json_schema": {"name": "answer", "strict":
  true, "schema": …}}`` (OpenAI's structured outputs; vLLM's guided decoding reads the same field) —
  part of every prompt's cache key, and ``structured`` part of the run's identity, so a structured
  run never shares answers with the free-text run of the same model;
* parses an answer by the schema (:func:`parse_structured`: pure, never raises): JSON that validates
  is turned into the text the kind's default parser reads (``to_text``) and parsed by it, so both
  runs are scored by the same parser and metrics; anything else is a parse failure;
* reports ``schema_conformance`` — of the samples with an answer, the share whose answer is JSON
  that validates against the schema (a request that failed is not counted; no answered sample: 0.0).

A task whose kind has no schema (generation, retrieval) is run as free text, with a note.

Validation covers the JSON Schema subset the kinds use (``type`` object/array/string/integer,
``properties``, ``required``, ``additionalProperties: false``, ``items``, ``enum``); the ``jsonschema``
package is not a dependency of evalpipe, and these schemas need nothing more.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from evalpipe.metrics.aggregation import Ratio
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import Scoring, StructuredOutput, TaskSpec

__all__ = ["SCHEMA_CONFORMANCE", "parse_structured", "structured_format", "structured_spec", "validate"]

SCHEMA_CONFORMANCE = "schema_conformance"
DEFINITION = ("share of the answered samples whose answer is JSON that validates against the task's schema "
              "(failed requests not counted; no answered sample: 0)")
_TYPES: dict[str, tuple[type, ...]] = {"object": (dict,), "array": (list,), "string": (str,), "integer": (int,),
                                       "number": (int, float), "boolean": (bool,)}


def structured_format(spec: TaskSpec) -> str | None:
    """The ``response_format`` a structured run sends for ``spec``, as canonical JSON text (the form
    :class:`~evalpipe.records.GenerationParams` keeps); None for a task without a schema."""
    if spec.structured is None:
        return None
    return json.dumps({"type": "json_schema",
                       "json_schema": {"name": "answer", "strict": True, "schema": spec.structured.schema}},
                      sort_keys=True, separators=(",", ":"))


def validate(value: Any, schema: Mapping[str, Any], where: str = "$") -> str | None:
    """Why ``value`` does not validate against ``schema`` (the subset in the module docstring), or None."""
    kind = schema.get("type")
    if kind is not None:
        allowed = _TYPES.get(kind, ())
        if not isinstance(value, allowed) or (kind in ("integer", "number") and isinstance(value, bool)):
            return f"{where}: expected {kind}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where}: {str(value)[:40]!r} is not one of the allowed values"
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        missing = [name for name in schema.get("required", ()) if name not in value]
        if missing:
            return f"{where}: missing {', '.join(missing)}"
        if schema.get("additionalProperties") is False:
            extra = [name for name in value if name not in properties]
            if extra:
                return f"{where}: unexpected {', '.join(map(str, extra[:3]))}"
        for name, sub in properties.items():
            if name in value and (problem := validate(value[name], sub, f"{where}.{name}")):
                return problem
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            if problem := validate(item, schema["items"], f"{where}[{i}]"):
                return problem
    return None


def parse_structured(answer: str, example: Example, structured: StructuredOutput, scoring: Scoring) -> Prediction:
    """An answer parsed by the schema (module docstring); never raises. Its diagnostics carry
    ``schema_valid`` (1 or 0), which :data:`SCHEMA_CONFORMANCE` counts."""
    try:
        value = json.loads(answer)
    except ValueError:
        return _failed(example, scoring, "not_json")
    problem = validate(value, structured.schema)
    if problem is not None:
        return _failed(example, scoring, "schema_violation")
    try:
        text = structured.to_text(value, example)
    except (KeyError, TypeError, ValueError):  # a kind's conversion refusing odd values: a failure, not a crash
        return _failed(example, scoring, "schema_violation")
    parsed = scoring.parse(text, example)
    return replace(parsed, diagnostics={**parsed.diagnostics, "schema_valid": 1})


def _failed(example: Example, scoring: Scoring, why: str) -> Prediction:
    empty = scoring.empty(example)
    return Prediction(empty.value, True, {why: True, "schema_valid": 0})


def structured_scoring(scoring: Scoring, structured: StructuredOutput) -> Scoring:
    """``scoring`` with answers parsed by the schema and :data:`SCHEMA_CONFORMANCE` added (its parts:
    ``schema_valid`` and ``schema_answered`` per sample, summed)."""

    def parse(answer: str, example: Example) -> Prediction:
        return parse_structured(answer, example, structured, scoring)

    def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
        sheet = scoring.score(examples, predictions, options)
        marks = [{"schema_valid": float(p.diagnostics.get("schema_valid", 0)),
                  "schema_answered": float("schema_valid" in p.diagnostics)} for p in predictions]
        valid = sum(m["schema_valid"] for m in marks)
        answered = sum(m["schema_answered"] for m in marks)
        base = sheet.sample_parts()
        parts = [{**(base[i] if i < len(base) else {}), **marks[i]} for i in range(len(predictions))]
        return replace(sheet, corpus={**sheet.corpus, SCHEMA_CONFORMANCE: valid / answered if answered else 0.0},
                       parts=parts,
                       aggregations={**sheet.aggregations,
                                     SCHEMA_CONFORMANCE: Ratio("schema_valid", "schema_answered", 0.0)})

    return replace(scoring, parse=parse, score=score, description=f"{scoring.description} (answers as JSON under "
                   "the task's schema; schema conformance)")


def structured_spec(spec: TaskSpec, structured: bool) -> TaskSpec:
    """The spec as a structured run scores it: its default scoring parses by the schema (compatibility
    modes read free text and are dropped); unchanged when ``structured`` is off or the kind has none."""
    if not structured or spec.structured is None:
        return spec
    return replace(spec, scorings={"default": structured_scoring(spec.scorings["default"], spec.structured)},
                   metrics=(*spec.metrics, SCHEMA_CONFORMANCE),
                   metric_definitions={**spec.metric_definitions, SCHEMA_CONFORMANCE: DEFINITION})

"""A suite's aggregate as data: a small formula language over member tasks' metrics.

A suite such as a CLUE level or CBLUE's average has a score of its own, a function of its member
tasks' metrics. That function used to be Python in the task family, so the report had to import the
task registry to recompute it on bootstrap replicates. Declared as data it is written into
``config.json`` (``suites.<name>.aggregate``) and evaluated from there — by the run for its own
``metrics.json`` and by the report on every replicate — with one evaluator, so both are the same
arithmetic and the report needs nothing but the run directory.

The language has what the shipped suites need and nothing more:

* :class:`Metric` — one task's metric: a key, keys tried in turn when it is absent (``answered``,
  then ``n`` in runs written before coverage was recorded), an optional default, or a *tagged*
  pattern ``family[*]_part`` for keys that name the settings that produced them
  (``bertscore[all-MiniLM-L6-v2@L6]_f1``);
* :class:`Mean` — ``sum(terms) / len(terms)``, the terms summed in declared order;
* :class:`WeightedMean` — ``sum(v·w) / sum(w)`` (micro averages: each sample counts once);
* :class:`Output` — a named result; ``{settings}`` in its name becomes the settings label of the
  group's tagged metrics (``bertscore=…,umls=…``), since a score is only comparable with one made
  with the same settings;
* :class:`OutputGroup` — outputs computed all or none: every metric it reads must be present (else
  :class:`IncompleteSuite` naming each missing task or metric), and its tagged metrics must agree
  on their settings;
* :class:`SuiteAggregate` — the groups of one suite. With several groups the complete ones are
  still reported when others are not (:class:`PartialSuite`, as CLUE reports a complete level).

Evaluation performs the very operations, in the very order, of the Python functions it replaced,
so every recorded number reproduces bit for bit (``tests/golden``). Values are plain floats: the
run passes its point metrics, the report one bootstrap replicate at a time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

__all__ = ["Expression", "IncompleteSuite", "MalformedAggregate", "Mean", "Metric", "Output", "OutputGroup",
           "PartialSuite", "SuiteAggregate", "WeightedMean", "expression_from_json"]

#: task name → metric name → value (None: a metric not computed, which counts as absent)
Metrics = Mapping[str, Mapping[str, Any]]


class IncompleteSuite(ValueError):
    """A suite aggregate cannot be computed because member tasks or metrics are missing."""


class PartialSuite(IncompleteSuite):
    """Some of a suite's aggregate could be computed: ``partial`` holds it, the message says what not."""

    def __init__(self, message: str, partial: Mapping[str, float]) -> None:
        super().__init__(message)
        self.partial = dict(partial)


class MalformedAggregate(ValueError):
    """A recorded declaration this version cannot read (a hand-edited or newer config.json)."""


#: a settings-tagged metric key: ``family[tag]_part``
_TAGGED = re.compile(r"^(?P<family>[a-z0-9_]+)\[(?P<tag>.*)\]_(?P<part>[a-z0-9_]+)$")
_SETTINGS = "{settings}"


@dataclass(frozen=True)
class Metric:
    """One member task's metric value."""

    task: str
    #: a metric key, or ``family[*]_part`` for the one key of that family and part, whatever its settings
    key: str
    #: keys tried in turn when ``key`` is absent
    otherwise: tuple[str, ...] = ()
    #: the value when no key is present (None: the metric is required)
    default: float | None = None
    #: why the metric may be absent, added to the incomplete message (e.g. "UMLS-concept F1 not computed")
    absent: str = ""

    @property
    def tagged(self) -> bool:
        return "[*]_" in self.key

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": "metric", "task": self.task, "key": self.key}
        if self.otherwise:
            out["otherwise"] = list(self.otherwise)
        if self.default is not None:
            out["default"] = self.default
        if self.absent:
            out["absent"] = self.absent
        return out


@dataclass(frozen=True)
class Mean:
    """The plain mean of its terms (each term counts once)."""

    terms: tuple[Expression, ...]

    def __post_init__(self) -> None:
        if not self.terms:
            raise MalformedAggregate("a mean needs at least one term")

    def to_json(self) -> dict[str, Any]:
        return {"op": "mean", "of": [t.to_json() for t in self.terms]}


@dataclass(frozen=True)
class WeightedMean:
    """``Σ value·weight / Σ weight`` — e.g. accuracy pooled over tasks, weighted by their answered samples."""

    values: tuple[Expression, ...]
    weights: tuple[Expression, ...]
    #: the result when the weights sum to zero (None: the group is incomplete)
    if_no_weight: float | None = None

    def __post_init__(self) -> None:
        if len(self.values) != len(self.weights):
            raise MalformedAggregate(f"a weighted mean needs one weight per value ({len(self.values)} values, "
                                     f"{len(self.weights)} weights)")

    def to_json(self) -> dict[str, Any]:
        return {"op": "weighted_mean", "of": [v.to_json() for v in self.values],
                "weights": [w.to_json() for w in self.weights], "if_no_weight": self.if_no_weight}


Expression = Union[Metric, Mean, WeightedMean]


@dataclass(frozen=True)
class Output:
    """A named result of a group; ``{settings}`` in the name becomes the group's settings label."""

    name: str
    value: Expression

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value.to_json()}


@dataclass(frozen=True)
class OutputGroup:
    """Outputs computed together, all or none (a CLUE level, the CBLUE average and its columns)."""

    #: names the group in messages ("clue-level1", "the CBLUE average")
    name: str
    #: what it needs, completing "<name> needs …; missing: …"
    requires: str
    outputs: tuple[Output, ...]

    def metrics(self) -> tuple[Metric, ...]:
        """Every metric the group reads, in order of first use, without repeats."""
        return tuple(dict.fromkeys(m for output in self.outputs for m in _metrics(output.value)))

    def tasks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m.task for m in self.metrics()))

    def evaluate(self, metrics: Metrics) -> dict[str, float]:
        """Output name → value; :class:`IncompleteSuite` when a metric is missing or settings differ."""
        read = self._read_all(metrics)
        label = self._settings_label(read)
        values = {ref: value for ref, (value, _) in read.items()}
        try:
            return {output.name.replace(_SETTINGS, label): _value(output.value, values) for output in self.outputs}
        except IncompleteSuite as exc:
            raise IncompleteSuite(f"{self.name}: {exc}") from None

    def _read_all(self, metrics: Metrics) -> dict[Metric, tuple[float, tuple[str, str] | None]]:
        read: dict[Metric, tuple[float, tuple[str, str] | None]] = {}
        missing: dict[str, list[str]] = {}
        for ref in self.metrics():
            if ref.task not in metrics:
                missing.setdefault(ref.task, [])
                continue
            try:
                found = _read(ref, metrics[ref.task])
            except IncompleteSuite as exc:
                raise IncompleteSuite(f"{self.name}: {exc}") from None
            if found is None:
                missing.setdefault(ref.task, []).append(_describe_absent(ref))
            else:
                read[ref] = found
        if missing:
            items = [f"{task} (no {'; no '.join(keys)})" if keys else task  # no keys: the task was not run
                     for task, keys in missing.items()]
            raise IncompleteSuite(f"{self.name} needs {self.requires}; missing: {', '.join(items)}")
        return read

    def _settings_label(self, read: Mapping[Metric, tuple[float, tuple[str, str] | None]]) -> str:
        tags: dict[str, set[str]] = {}
        for _, tag in read.values():
            if tag:
                tags.setdefault(tag[0], set()).add(tag[1])
        mixed = {family: sorted(found) for family, found in tags.items() if len(found) > 1}
        if mixed:
            raise IncompleteSuite(f"{self.name}: tasks were scored with different settings {mixed}; not averaging them")
        return ",".join(f"{family}={next(iter(found))}" for family, found in sorted(tags.items()))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "requires": self.requires, "outputs": [o.to_json() for o in self.outputs]}


@dataclass(frozen=True)
class SuiteAggregate:
    """A suite's aggregate: its groups, evaluated in order. Called like the Python aggregate it
    replaced: ``aggregate(task → metrics) -> output name → value``."""

    groups: tuple[OutputGroup, ...]

    def __call__(self, metrics: Metrics) -> dict[str, float]:
        """Every group's outputs; with some groups incomplete :class:`PartialSuite` (carrying the
        complete ones), with all incomplete :class:`IncompleteSuite` (the problems joined by "; ")."""
        out: dict[str, float] = {}
        problems = []
        for group in self.groups:
            try:
                out.update(group.evaluate(metrics))
            except IncompleteSuite as exc:
                problems.append(str(exc))
        if problems and out:
            raise PartialSuite("; ".join(problems), out)
        if problems:
            raise IncompleteSuite("; ".join(problems))
        return out

    def tasks(self) -> tuple[str, ...]:
        """The member tasks the aggregate reads, in order of first use."""
        return tuple(dict.fromkeys(t for group in self.groups for t in group.tasks()))

    def to_json(self) -> dict[str, Any]:
        return {"groups": [g.to_json() for g in self.groups]}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> SuiteAggregate:
        """The declaration as ``to_json`` wrote it; :class:`MalformedAggregate` for anything else."""
        try:
            return cls(tuple(_group_from_json(g) for g in _list(record, "groups")))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, MalformedAggregate):
                raise
            raise MalformedAggregate(f"unreadable suite aggregate: {exc!r}") from None


# ---- evaluation ------------------------------------------------------------------------------


def _metrics(expression: Expression) -> Iterator[Metric]:
    if isinstance(expression, Metric):
        yield expression
    elif isinstance(expression, Mean):
        for term in expression.terms:
            yield from _metrics(term)
    else:
        for value, weight in zip(expression.values, expression.weights):
            yield from _metrics(value)
            yield from _metrics(weight)


def _read(ref: Metric, values: Mapping[str, Any]) -> tuple[float, tuple[str, str] | None] | None:
    """The metric's value and, for a tagged key, its (family, settings tag); None when absent."""
    if ref.tagged:
        family, part = ref.key.split("[*]_", 1)
        hits = [(k, m) for k in values if values[k] is not None and (m := _TAGGED.match(k))
                and m["family"] == family and m["part"] == part]
        if len(hits) > 1:
            raise IncompleteSuite(f"{ref.task} has several {family} {part} metrics "
                                  f"({', '.join(k for k, _ in hits)}); cannot choose")
        if hits:
            key, match = hits[0]
            return float(values[key]), (family, match["tag"])
    else:
        for key in (ref.key, *ref.otherwise):
            if values.get(key) is not None:
                return float(values[key]), None
    return (ref.default, None) if ref.default is not None else None


def _describe_absent(ref: Metric) -> str:
    keys = " or ".join((ref.key, *ref.otherwise))
    return f"{keys}: {ref.absent}" if ref.absent else keys


def _value(expression: Expression, read: Mapping[Metric, float]) -> float:
    if isinstance(expression, Metric):
        return read[expression]
    if isinstance(expression, Mean):
        return sum(_value(t, read) for t in expression.terms) / len(expression.terms)
    values = [_value(v, read) for v in expression.values]
    weights = [_value(w, read) for w in expression.weights]
    total = sum(weights)
    if not total:
        if expression.if_no_weight is None:
            raise IncompleteSuite("a weighted mean has no weight (no answered samples)")
        return expression.if_no_weight
    return sum(v * w for v, w in zip(values, weights)) / total


# ---- JSON ------------------------------------------------------------------------------------


def _list(record: Mapping[str, Any], key: str) -> Sequence[Any]:
    value = record[key]
    if not isinstance(value, list) or not value:
        raise MalformedAggregate(f"{key!r} must be a non-empty list")
    return value


def _group_from_json(record: Mapping[str, Any]) -> OutputGroup:
    outputs = tuple(Output(str(o["name"]), expression_from_json(o["value"])) for o in _list(record, "outputs"))
    return OutputGroup(name=str(record["name"]), requires=str(record.get("requires") or ""), outputs=outputs)


def expression_from_json(record: Mapping[str, Any]) -> Expression:
    op = record["op"]
    if op == "metric":
        default = record.get("default")
        return Metric(task=str(record["task"]), key=str(record["key"]),
                      otherwise=tuple(str(k) for k in record.get("otherwise") or ()),
                      default=None if default is None else float(default), absent=str(record.get("absent") or ""))
    if op == "mean":
        return Mean(tuple(expression_from_json(t) for t in _list(record, "of")))
    if op == "weighted_mean":
        if_no_weight = record.get("if_no_weight")
        return WeightedMean(tuple(expression_from_json(v) for v in _list(record, "of")),
                            tuple(expression_from_json(w) for w in _list(record, "weights")),
                            None if if_no_weight is None else float(if_no_weight))
    raise MalformedAggregate(f"unknown operation {op!r} in a suite aggregate")

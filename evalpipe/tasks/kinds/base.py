"""What a task kind is, and the registry of kinds by name.

A **kind** is a reusable unit of task behaviour: how a record's gold is read and checked, how a
shot's answer is written, and how answers are parsed and scored (its ``default`` scoring, made of
parsers in :mod:`evalpipe.parsers` and metrics in :mod:`evalpipe.metrics`, every metric with its
declared aggregation so the report can give it an interval). A task file names its kind; the kind's
pydantic model (a subclass of :class:`~evalpipe.tasks.taskfile.schema.TaskFile`) adds the keys only
that kind has. A kind registers itself on import (:func:`register_kind`); the task-file schema is the
union of the registered kinds' models, chosen by ``kind`` — no if-chain anywhere names a kind.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalpipe.records import Example
from evalpipe.tasks.base import ChoiceScoring, PromptForm, RankingSpec, Scoring, StructuredOutput, TaskArg
from evalpipe.tasks.taskfile.schema import TaskFile


@dataclass(frozen=True)
class Drafted:
    """What a kind reads from one record besides the mapped inputs: its gold and extra inputs
    (a multiple-choice task's options)."""

    gold: Any
    inputs: Mapping[str, Any] = field(default_factory=dict)


#: the chat token budget of kinds with short answers: room for a reasoning model's ``<think>`` block
#: (DeepSeek-R1 / Qwen3 reason for several hundred to a few thousand tokens on a MedQA question)
REASONING_BUDGET = 4096


@dataclass(frozen=True)
class FileReading:
    """What a ``whole_file`` kind may return instead of a plain list of drafts: the drafts and what it
    decided about the file as a whole (MedMCQA's index base and how it was decided), recorded in the
    run's ``config.json`` (``tasks.<name>.data_facts``) and printed, so the decision is never silent."""

    drafts: list[Drafted]
    facts: Mapping[str, Any] = field(default_factory=dict)
    #: one line for the user saying what was decided (printed with the run's notes)
    note: str | None = None


@dataclass(frozen=True)
class KindParts:
    """What a kind contributes to the TaskSpec of one task file."""

    scorings: Mapping[str, Scoring]
    shot_target: Callable[[Example], str]
    #: every metric the kind reports, in its display order (``*`` patterns allowed)
    metrics: tuple[str, ...]
    primary_metric: str
    #: values every render sees as ``task.*`` besides the file's own ``template_vars``
    template_vars: Mapping[str, Any] = field(default_factory=dict)
    #: the task's own settings (``--task-arg TASK:NAME=VALUE``)
    args: tuple[TaskArg, ...] = ()
    #: set by a kind answered by an embedding ranker instead of a generating model
    ranking: RankingSpec | None = None
    #: set by a kind whose options can be scored by log-likelihood (``--mcqa-scoring loglikelihood``)
    choice_scoring: ChoiceScoring | None = None
    #: compatibility modes with their own prompt (``--compat lm-eval``): name → PromptForm
    forms: Mapping[str, PromptForm] = field(default_factory=dict)
    #: new tokens per *chat* answer when the kind's answers are short but a reasoning model writes a
    #: ``<think>`` block first (multiple choice, classification); None = the task's ``max_tokens``
    chat_max_tokens: int | None = None
    #: metric → one line for the report's glossary (``*`` patterns allowed); a task file's own
    #: ``metric_definitions`` win
    definitions: Mapping[str, str] = field(default_factory=dict)
    #: set by a kind whose answers have a natural JSON schema (``--structured``)
    structured: StructuredOutput | None = None


@dataclass(frozen=True)
class Kind:
    """A task kind: its schema model, how it reads records, and what it adds to a TaskSpec.

    ``read(task, records)`` gets the records of one file — a chunk of them at a time, so a file's
    examples can be streamed (memory flat in N), unless the kind declares ``whole_file`` — and
    returns one :class:`Drafted` per record, raising :class:`~evalpipe.data.errors.DataError`
    (``record.error(field, problem)``) for bad gold. A kind whose reading of one record depends on
    the others (which index base a column uses) sets ``whole_file``: it gets every record at once,
    and its task files' examples are held in memory. ``parts(task)`` builds the scorings and the
    rest from the validated task file.
    """

    name: str
    description: str
    model: type[TaskFile]
    #: ``read(task, records)``, or ``read(task, records, args)`` when ``reads_args`` (see below)
    read: Callable[..., list[Drafted] | FileReading]
    parts: Callable[[Any], KindParts]
    #: ``read`` needs every record of a file at once (the file is checked as a whole)
    whole_file: bool = False
    #: ``read`` takes the task's settings (``--task-arg``) as a third argument, and may return a
    #: :class:`FileReading`
    reads_args: bool = False


_KINDS: dict[str, Kind] = {}
_loaded = False


def register_kind(kind: Kind) -> Kind:
    if kind.name in _KINDS and _KINDS[kind.name] is not kind:
        raise ValueError(f"task kind {kind.name!r} registered twice")
    _KINDS[kind.name] = kind
    return kind


def all_kinds() -> dict[str, Kind]:
    """Every kind (importing each module of :mod:`evalpipe.tasks.kinds` once)."""
    global _loaded
    if not _loaded:
        import evalpipe.tasks.kinds as package

        for module in pkgutil.iter_modules(package.__path__, prefix="evalpipe.tasks.kinds."):
            importlib.import_module(module.name)
        _loaded = True
    return dict(sorted(_KINDS.items()))


def get_kind(name: str) -> Kind:
    kinds = all_kinds()
    if name not in kinds:
        raise KeyError(f"unknown task kind {name!r}; kinds: {', '.join(kinds)}")
    return kinds[name]


def select_metrics(task: TaskFile, parts: KindParts) -> tuple[tuple[str, ...], str]:
    """The task's display metrics and primary metric: the file's, checked against the kind's."""
    from evalpipe.tasks.base import metric_matches

    metrics = tuple(task.metrics) if task.metrics else parts.metrics
    for metric in metrics:
        if not any(metric_matches(known, metric) or metric_matches(metric, known) for known in parts.metrics):
            raise ValueError(f"metrics: {metric!r} is not a metric of kind {task.kind} "
                             f"(it reports: {', '.join(parts.metrics)})")
    primary = task.primary_metric or parts.primary_metric
    if not any(metric_matches(known, primary) or metric_matches(primary, known) for known in parts.metrics):
        raise ValueError(f"primary_metric: {primary!r} is not a metric of kind {task.kind} "
                         f"(it reports: {', '.join(parts.metrics)})")
    return metrics, primary

"""What a task is: data, a template, generation settings, and one or more ways to score.

A task is a declarative :class:`TaskSpec`; the runner knows no task by name. Adding a task means
writing a task file and its template (:mod:`evalpipe.tasks.taskfile`, ``docs/tasks.md``), or, for
what no task kind expresses, a module in ``evalpipe/tasks/`` that builds a ``TaskSpec`` and calls
:func:`evalpipe.tasks.registry.register` — never editing the runner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

# re-exported: what TaskData.examples holds, and how to hold it all where random access is needed
from evalpipe.data.stream import Examples as Examples
from evalpipe.data.stream import ExampleStream as ExampleStream
from evalpipe.data.stream import materialize as materialize
from evalpipe.metrics.names import metric_matches as metric_matches  # re-exported: where it was
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.rundir.suite_aggregates import IncompleteSuite as IncompleteSuite  # re-exported: where it was
from evalpipe.rundir.suite_aggregates import PartialSuite as PartialSuite
from evalpipe.rundir.suite_aggregates import SuiteAggregate
from evalpipe.errors import UsageError


@dataclass(frozen=True)
class LoadOptions:
    """What the user said about where data lives and which part of it to evaluate."""

    split: str | None = None
    #: explicit files per data role (``--data TASK=PATH`` fills role "eval")
    paths: Mapping[str, Path] = field(default_factory=dict)
    data_dir: Path | None = None
    #: seed for any sampling a loader does (e.g. LongHealth distractor documents)
    seed: int | None = None
    #: the model's context in tokens, when known (``--context-length``, an engine evalpipe started,
    #: or what the server reports); loaders that choose how much text to include (LongHealth) size by it
    context_length: int | None = None
    #: the model's tokenizer as ``count(text) -> tokens``, when one answers (a server's tokenize
    #: endpoint, an in-process engine's tokenizer); None = size by the characters estimate
    token_counter: Callable[[str], int] | None = None
    #: the task's own settings (``--task-arg TASK:NAME=VALUE``), validated against ``TaskSpec.args``
    args: Mapping[str, Any] = field(default_factory=dict)
    #: shots per prompt the user asked for (``--shots``); None = the task's default. A loader needs it
    #: only to tell whether a missing shot file is a problem
    shots: int | None = None


@dataclass(frozen=True)
class DataRole:
    """A file a task reads, by role: ``--data TASK:ROLE=PATH`` fills it (``--data TASK=PATH`` is role
    ``eval``). Declared by the task so the command line is validated generically: a role the task
    does not read is an error, never a silently ignored file."""

    name: str
    description: str
    #: whether the task cannot run without it (then it is found under --data-dir, shipped, or must be given)
    required: bool = False


@dataclass(frozen=True)
class TaskArg:
    """A setting of the task itself (``--task-arg TASK:NAME=VALUE``): part of the run's identity.

    ``parse`` turns the command-line text into the value the loader sees (``int``, ``float`` …) and
    raises ``ValueError`` with a message for a bad value."""

    name: str
    description: str
    parse: Callable[[str], Any] = str
    default: Any = None


EVAL = DataRole("eval", "the evaluated file", required=True)
SHOTS = DataRole("shots", "the file shots are drawn from")


@dataclass(frozen=True)
class TaskData:
    """The evaluated examples, the pool shots are drawn from, and the files read (for hashing).

    ``examples`` is a tuple or, from a loader that streams, an :class:`ExampleStream` read again on
    each pass (memory flat in the number of samples; :mod:`evalpipe.data.stream`): iterate it, or
    :func:`materialize` it where random access is needed. The shot pool is always a tuple (small)."""

    examples: Examples
    shot_pool: tuple[Example, ...]
    files: tuple[Path, ...]
    split: str
    #: what the loader decided about the evaluated file as a whole (an index base and how it was
    #: decided): recorded in config.json (``data_facts``); ``note`` printed with the run's notes
    facts: Mapping[str, Any] = field(default_factory=dict)
    note: str | None = None

    def materialized(self) -> TaskData:
        """The data with every example in memory (a stream read once, its errors raised here)."""
        return self if isinstance(self.examples, tuple) else replace(self, examples=materialize(self.examples))


@dataclass(frozen=True)
class Scoring:
    """One way of turning raw answers into numbers: a parser plus a corpus scorer.

    ``parse`` is pure and never raises; ``score`` receives the *answered* examples with their
    predictions (an unparseable answer arrives as a failed Prediction, so its gold items still
    count; a sample without an answer is left out, :mod:`evalpipe.coverage`) — all of them, or for a
    samplewise scoring one chunk's at a time (:mod:`evalpipe.scoring.fold`) — and the run's metric
    options, and returns corpus metrics, per-sample values, per-sample parts and, for each metric,
    its aggregation (:class:`~evalpipe.records.ScoreSheet`).
    """

    parse: Callable[[str, Example], Prediction]
    score: Callable[[Sequence[Example], Sequence[Prediction], MetricOptions], ScoreSheet]
    #: the prediction that stands for "no answer" (request failed for good)
    empty: Callable[[Example], Prediction]
    description: str = ""
    #: a sample's prediction, per-sample scores and parts depend on that sample alone, and every
    #: corpus metric is its declared aggregation of the parts summed over samples (with the scorer's
    #: own arithmetic: integer counts, or float sums added in sample order) — so the task can be
    #: scored a chunk at a time, keeping only the summed parts, with the very same numbers
    #: (:func:`evalpipe.scoring.score_chunks`; ``tests/test_chunked_scoring.py`` checks every
    #: scoring that says so, bit for bit). False for anything that looks across samples: BERTScore
    #: (idf over the corpus; bert-score batches 16 samples together), a reference implementation's
    #: corpus arithmetic, a pool, metrics per dataset found in the data.
    samplewise: bool = False
    #: why a scoring that is not samplewise needs the whole corpus at once — required for one: a
    #: metric is a function of summed per-sample parts unless its scoring says why not (recorded in
    #: ``summary.json`` per task as ``valuation``)
    corpus_reason: str = ""

    def __post_init__(self) -> None:
        if not self.samplewise and not self.corpus_reason.strip():
            raise TypeError("a Scoring is samplewise=True or says why it needs the whole corpus (corpus_reason)")
        if self.samplewise and self.corpus_reason:
            raise TypeError("a samplewise Scoring has no corpus_reason")

    def valuation(self) -> dict[str, str]:
        """How this scoring's metrics are valued, for ``summary.json``: from summed parts, or whole and why."""
        if self.samplewise:
            return {"path": "summed parts",
                    "definition": "each metric is its declared aggregation of the per-sample parts summed over samples"}
        return {"path": "whole corpus", "why": self.corpus_reason}


@dataclass(frozen=True)
class RankingPlan:
    """A retrieval task's candidate pool and its examples with their gold bound to pool positions."""

    pool: tuple[str, ...]
    examples: tuple[Example, ...]


@dataclass(frozen=True)
class RankingSpec:
    """What makes a task a *retrieval* task: answered by ranking a pool of candidate texts by
    embedding similarity instead of by generating text (see :mod:`evalpipe.backends.ranking`).

    ``plan(data, examples, options)`` builds the pool for the evaluated examples (deterministically:
    re-scoring calls it again) and returns the examples with whatever their parser needs to find
    the gold among the ranked pool positions; ``query(example)`` is the text embedded for an
    example; the answer is the ``depth`` best pool positions, best first.
    """

    plan: Callable[[TaskData, tuple[Example, ...], LoadOptions], RankingPlan]
    query: Callable[[Example], str]
    depth: int = 10


@dataclass(frozen=True)
class ChoiceScoring:
    """What lets a task be scored by the log-likelihood of its options instead of a generated answer
    (``--mcqa-scoring loglikelihood``, as lm-evaluation-harness scores multiple choice).

    The prompt is the task's completion form; ``continuations(example)`` are the texts whose
    log-probability after it is asked for (a question's option letters, `` A``, `` B`` …), in option
    order; the endpoint's answer is stored as ``{"logprobs": {continuation: log-probability}}`` and
    ``scoring`` parses and scores it (the highest log-probability is the choice).
    """

    continuations: Callable[[Example], tuple[str, ...]]
    scoring: Scoring
    #: also registered as this compatibility mode (``--compat NAME``) when it scores the task
    compat: str | None = None


@dataclass(frozen=True)
class PromptForm:
    """A reference implementation's own prompt and log-likelihood scoring of a task (``--compat lm-eval``).

    A run in this form renders ``template`` (the same macro contract; its ``completion`` form is what
    is scored), defaults to ``default_shots`` (``--shots`` wins), and scores each question by
    ``choice_scoring`` — so the run asks exactly what the reference asks and scores it as it does."""

    template: str
    choice_scoring: ChoiceScoring
    default_shots: int = 0


LOGLIKELIHOOD = "loglikelihood"


@dataclass(frozen=True)
class StructuredOutput:
    """What lets a task be answered as JSON under a schema (``--structured``, issue 25).

    ``schema`` is the JSON Schema of an answer (sent as ``response_format: json_schema``; vLLM's
    guided decoding honours it too); ``to_text(value, example)`` turns an answer that validates into
    the text the task's default parser reads (a tagged sentence, ``A``, a label), so the structured
    run is scored by the very parser and metrics of the free-text run (:mod:`evalpipe.structured`).
    """

    schema: Mapping[str, Any]
    to_text: Callable[[Any, Example], str]


@dataclass(frozen=True)
class QuickGeneration:
    """Generation caps for a quick look at a task (``evalpipe demo``, the main job of ``./run.sh``).

    A small model's answer often runs on to the task's ``max_tokens`` (a 135M model repeats itself
    for 512 tokens); for a quick look the answer is cut where the task's answer format ends
    (``stop``, e.g. NCBI's ``</response>``, which its parser does not need) and capped at a length
    any correct answer of the task fits in. A run with these caps records them (``config.json``:
    ``config.generation``) and is a different run from one without them.
    """

    max_tokens: int
    stop: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"max_tokens": self.max_tokens, "stop": list(self.stop)}


@dataclass(frozen=True)
class TaskSpec:
    name: str
    description: str
    #: template file name under ``prompts/``
    template: str
    load: Callable[[LoadOptions], TaskData]
    #: how a shot's answer is written in the prompt
    shot_target: Callable[[Example], str]
    #: scorings by name; "default" is required, others are compatibility modes
    scorings: Mapping[str, Scoring]
    #: metric names in display order (the scorer may add more; ``*`` patterns allowed)
    metrics: tuple[str, ...]
    max_tokens: int
    default_shots: int = 0
    #: new tokens per chat answer when it differs from ``max_tokens``: room for a reasoning block before a
    #: short answer (None = ``max_tokens``). ``--max-tokens`` overrides both; the plain completion form and
    #: log-likelihood scoring keep ``max_tokens`` (a base model does not reason first)
    chat_max_tokens: int | None = None
    #: the headline metric (suite averages, ranking disagreements in reports); None = first F1-like
    primary_metric: str | None = None
    #: metric name (or ``*`` pattern, as in ``metrics``) → one line saying what it measures, for the
    #: report's glossary: micro or macro, over what units, what an empty answer scores (recorded in
    #: config.json, so a report needs only the run directory)
    metric_definitions: Mapping[str, str] = field(default_factory=dict)
    #: static values every render sees as ``task.*`` (entity descriptions, label lists)
    template_vars: Mapping[str, Any] = field(default_factory=dict)
    #: the input field that may be shortened (from the end) to fit the model's context, e.g. a
    #: discharge letter; never the instructions or the question (see evalpipe.context_fit)
    long_field: str | None = None
    #: the loader itself decides how much text goes in, by ``LoadOptions.context_length`` and
    #: ``token_counter`` (LongHealth picks whole letters): the runner reloads it once the model's
    #: context and tokenizer are known
    sized_by_context: bool = False
    #: stop sequences for the plain completion form (base models)
    completion_stop: tuple[str, ...] = ()
    #: text the completion template primes the answer with (it ends the prompt, so the model's
    #: continuation lacks it); put back in front of completion answers before parsing
    completion_prefix: str = ""
    suites: tuple[str, ...] = ()
    #: data under a credentialed licence (PhysioNet): never sent to a non-local endpoint by default
    credentialed: bool = False
    #: how to cite the data; shown by ``evalpipe tasks``
    citation: str = ""
    #: the data set's published name (a task file's ``data.dataset``), e.g. for the contamination probe's
    #: guided instruction; None = known only by the task's name
    dataset: str | None = None
    #: cheap check without parsing: why ``load`` would fail for want of a file (None = data there).
    #: A suite run skips such a task with this line instead of failing.
    data_problem: Callable[[LoadOptions], str | None] | None = None
    #: the files the task reads, by role (``--data TASK:ROLE=PATH``)
    data_roles: tuple[DataRole, ...] = (EVAL,)
    #: the task's own settings (``--task-arg TASK:NAME=VALUE``)
    args: tuple[TaskArg, ...] = ()
    #: set for a retrieval task: answered by an embedding ranker, not a generating model
    ranking: RankingSpec | None = None
    #: what kind of text an answer is, for LLM judges (``evalpipe judge``): ``"free_text"`` (a summary,
    #: an explanation — what overlap metrics measure poorly) is rated by judges; None (labels, spans,
    #: codes, rankings) is scored, never judged. Recorded in config.json, so judging needs only the run.
    answer_kind: str | None = None
    #: the judge rubric (a template under ``prompts/``) of this task's answers, when it has its own
    #: criteria or shows its reference its own way; None = the default rubric of its ``answer_kind``
    #: (``prompts/judge/<answer_kind>.j2``)
    judge_rubric: str | None = None
    #: the folder ``template`` is found in (a task file's own folder); None = ``prompts/``
    template_dir: Path | None = None
    #: the template's text when it is given inline in a task file (then ``template`` only names it)
    template_source: str | None = None
    #: the task file this spec was built from (recorded with its sha256 in a run's config.json, so
    #: ``evalpipe score`` can build the task again); None for a task written in Python
    task_file: Path | None = None
    #: default seed for drawing shots (``--fewshot-seed`` overrides); None = the first K of the pool
    fewshot_seed: int | None = None
    #: set for a task whose options can be scored by log-likelihood (``--mcqa-scoring loglikelihood``)
    choice_scoring: ChoiceScoring | None = None
    #: set for a task whose kind declares a natural JSON schema for its answers (``--structured``)
    structured: StructuredOutput | None = None
    #: compatibility modes that carry their own prompt (``--compat NAME``): name → :class:`PromptForm`
    forms: Mapping[str, PromptForm] = field(default_factory=dict)

    #: prompt variants: name → template path under ``prompts/`` (the same macro contract as
    #: ``template``), beside those found in ``prompts/<task>/variants/<name>.j2``; the canonical
    #: ``template`` is always variant ``default`` (``run --prompt-variants``, evalpipe.variants.conditions)
    variants: Mapping[str, str] = field(default_factory=dict)

    #: generation caps for a quick look (the demo); None = the task's own settings
    quick: QuickGeneration | None = None

    #: what the task's gold and answers are (recorded in config.json, so readers such as the report's NER
    #: error analysis decide from it instead of guessing from record shapes): a task file's ``kind:``
    #: (``span_ner``, ``classification``, ``multiple_choice``, ``generation``, ``code_list``,
    #: ``retrieval``), or for a task built in Python one of those or of
    #: :data:`evalpipe.rundir.kinds.PYTHON_KINDS` (``custom`` only where no kind fits). Required: a spec
    #: without one is refused
    kind: str = ""

    def scored_by(self, choice_scoring: str) -> TaskSpec:
        """The spec as a run with ``--mcqa-scoring CHOICE_SCORING`` uses it: with ``loglikelihood``, a
        task that has a :class:`ChoiceScoring` is scored by it (its only scoring: compatibility modes
        read generated answers); any other task, and ``generate``, unchanged."""
        if choice_scoring != LOGLIKELIHOOD or self.choice_scoring is None:
            return self
        scoring = self.choice_scoring.scoring
        compat = self.choice_scoring.compat
        return replace(self, scorings={"default": scoring, **({compat: scoring} if compat else {})})

    def in_form(self, form: str | None) -> TaskSpec:
        """The spec as a run in prompt form ``form`` (``--compat lm-eval``) uses it: the form's template,
        default shots and log-likelihood scoring; unchanged for None. A task without that form is an
        error naming the tasks' forms (a run never silently uses evalpipe's own prompt instead)."""
        if form is None:
            return self
        if form not in self.forms:
            known = ", ".join(sorted(self.forms)) or "none"
            raise ValueError(f"task {self.name!r} has no prompt form {form!r} (--compat {form}); its forms: {known}")
        chosen = self.forms[form]
        # the form's template is named relative to the folder of the task's own template
        template = (Path(self.template).parent / chosen.template).as_posix()
        return replace(self, template=template, template_source=None, default_shots=chosen.default_shots,
                       choice_scoring=chosen.choice_scoring, variants={})

    def __post_init__(self) -> None:
        if not self.kind:
            raise ValueError(f"task {self.name!r} declares no kind (TaskSpec.kind: e.g. 'span_ner', or 'custom' "
                             "where no kind fits; see evalpipe.rundir.kinds)")
        if "default" not in self.scorings:
            raise ValueError(f"task {self.name!r} needs a 'default' scoring")

    def scoring(self, compat: str | None) -> Scoring:
        name = compat or "default"
        try:
            return self.scorings[name]
        except KeyError:
            modes = ", ".join(sorted(k for k in self.scorings if k != "default")) or "none"
            raise UsageError(
                f"task {self.name!r} has no compatibility mode {name!r} (it has: {modes})"
            ) from None


@dataclass(frozen=True)
class SuiteSpec:
    """A named group of tasks, optionally with an aggregate score over its members' metrics.

    ``aggregate`` is a declaration (:class:`~evalpipe.rundir.suite_aggregates.SuiteAggregate`), not
    Python: the run writes it into ``config.json`` and the report recomputes it from there on
    bootstrap replicates. Called with task name → metrics for the members that were run, it returns
    the suite's own metrics (e.g. CLUE's level score), or raises ``IncompleteSuite`` naming what is
    missing (``PartialSuite`` with the outputs it could compute).
    """

    name: str
    tasks: tuple[str, ...]
    description: str = ""
    aggregate: SuiteAggregate | None = None

"""The resolved options of a run, as recorded in ``config.json``.

Everything needed to re-render the exact prompts lives here, which is what lets ``evalpipe score``
re-score a run from its stored answers without a model, and lets the same command resume.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Literal

from evalpipe.tasks.base import LoadOptions, TaskSpec
from evalpipe.errors import UsageError


@dataclass(frozen=True)
class RunConfig:
    tasks: tuple[str, ...]
    model: str
    #: suites asked for (their aggregates are computed); their tasks are already in ``tasks``
    suites: tuple[str, ...] = ()
    base_url: str | None = None
    endpoint: Literal["chat", "completions"] = "chat"
    api_key_env: str = "OPENAI_API_KEY"
    #: None = the task's default
    shots: int | None = None
    fewshot_seed: int | None = None
    fewshot_as_turns: bool = False
    system_role: bool = True
    temperature: float = 0.0
    top_p: float | None = None
    seed: int | None = None
    #: None = the task's default
    max_tokens: int | None = None
    split: str | None = None
    limit: int | None = None
    ids: tuple[str, ...] | None = None
    #: ``TASK`` or ``TASK:ROLE`` → file (``--data TASK[:ROLE]=PATH``)
    data: dict[str, str] = field(default_factory=dict)
    data_dir: str | None = None
    #: the model's context length in tokens (None = ask the server, or no budgeting)
    context_length: int | None = None
    #: more replicas of the same model (requests go to the least busy one)
    replicas: tuple[str, ...] = ()
    #: a local engine evalpipe starts itself: "llamacpp", "vllm" (server) or "vllm-inprocess"
    engine: str | None = None
    #: engine settings: vLLM's tensor_parallel_size, dtype, gpu_memory_utilization, revision, and
    #: ``extra``, the ``--engine-arg`` pairs passed through (see evalpipe.engines.launch)
    engine_options: dict[str, Any] = field(default_factory=dict)
    #: identity of local weights (path, sizes, mtimes hashed) when --model is a local file or folder:
    #: two checkpoints with the same file name must never share answers
    model_fingerprint: str | None = None
    concurrency: int = 64
    timeout_s: float = 120.0
    max_retries: int = 6
    #: stop the run when the endpoint accepted no connection for this long, 0 = never
    #: (evalpipe.backends.liveness); how requests are sent, not what they are answered: no identity
    unreachable_after_s: float = 30.0
    #: answer from a store whose answers another endpoint gave (evalpipe.store.endpoint_identity), deliberately
    reuse_answers_from_other_endpoint: bool = False
    #: the largest reply body read from an endpoint (``--max-answer-bytes``; see evalpipe.backends.client)
    max_answer_bytes: int = 16 * 1024 * 1024
    compat: str | None = None
    #: scoring settings (see evalpipe.metrics.options.MetricOptions)
    metric_options: dict[str, Any] = field(default_factory=dict)
    allow_external_endpoint: bool = False
    run_name: str | None = None
    #: ``TASK:NAME`` → value text (``--task-arg``), parsed by the task's declared :class:`TaskArg`
    task_args: dict[str, str] = field(default_factory=dict)
    #: retrieval tasks: the embedding model — at an OpenAI-compatible URL, or a local folder
    embeddings_url: str | None = None
    embeddings_model: str | None = None
    embeddings_path: str | None = None
    embeddings_batch_size: int | None = None
    #: how multiple-choice tasks are answered: "generate" (a generated answer, parsed for its letter)
    #: or "loglikelihood" (the log-probability of each option's continuation; completions endpoints)
    choice_scoring: str = "generate"
    #: a compatibility mode that brings its own prompt (``--compat lm-eval``: lm-eval's prompt, scored by
    #: log-likelihood; :class:`~evalpipe.tasks.base.PromptForm`); part of the run's identity
    prompt_form: str | None = None

    #: prompt conditions (evalpipe.variants.conditions): ``--prompt-variants`` names (or ``all``), ``--shot-orders``
    #: and ``--shots-sweep``. Not part of the run's identity, like ``--limit``: they choose which
    #: prompts are asked, never how a prompt is answered, so adding variants to a command extends its
    #: run directory and reuses every answer already stored
    prompt_variants: tuple[str, ...] = ()
    shot_orders: int = 1
    shots_sweep: tuple[int, ...] = ()

    #: ``TASK`` → ``{"max_tokens": N, "stop": [...]}``: per-task generation settings that replace the
    #: task's own (the demo's caps, :class:`evalpipe.tasks.base.QuickGeneration`)
    generation: dict[str, dict[str, Any]] = field(default_factory=dict)

    #: issue 25 — reasoning models: ``reasoning_effort`` sent with every request (None = not sent)
    reasoning_effort: str | None = None
    #: structured output (``--structured``): kinds with a schema ask for ``response_format: json_schema``
    #: and their answers are parsed by the schema (:mod:`evalpipe.structured`)
    structured: bool = False
    #: ``--batch`` options (:class:`evalpipe.backends.batch.BatchOptions` fields; empty = direct requests).
    #: Not part of the run's identity: a batch answers the very requests a direct run sends
    batch: dict[str, Any] = field(default_factory=dict)
    #: prices in USD per million tokens (:mod:`evalpipe.cost`); recorded, never part of the identity
    prices: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Refuse a config no run can use (:func:`option_problems`), however it is made: by the CLI,
        the Python API or ``from_json`` — so every way in gets the same checks and messages."""
        for problem in option_problems(self):
            raise UsageError(problem, option=problem.split(" ", 1)[0] if problem.startswith("--") else None)

    #: options that change which answers a model gives; they name the run directory
    ANSWER_FIELDS = (
        "tasks", "model", "endpoint", "shots", "fewshot_seed", "fewshot_as_turns", "system_role",
        "temperature", "top_p", "seed", "max_tokens", "split", "data", "data_dir", "context_length",
        "engine", "engine_options", "model_fingerprint", "task_args", "embeddings_model", "embeddings_path",
    )

    def answer_hash(self) -> str:
        payload = {name: getattr(self, name) for name in self.ANSWER_FIELDS}
        if self.choice_scoring != "generate":  # only then, so runs made before the option keep their names
            payload["choice_scoring"] = self.choice_scoring
        if self.prompt_form is not None:  # only when set, so earlier runs keep their names
            payload["prompt_form"] = self.prompt_form
        if self.generation:  # only when set, so runs without per-task settings keep their names
            payload["generation"] = self.generation
        if self.reasoning_effort is not None:  # issue 25: only when set, as above
            payload["reasoning_effort"] = self.reasoning_effort
        if self.structured:
            payload["structured"] = True
        blob = json.dumps(payload, sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    def default_run_name(self) -> str:
        """Deterministic, so re-running the same command finds (and resumes) the same run."""
        label = "+".join(self.tasks) if len(self.tasks) <= 3 else f"{len(self.tasks)}tasks"
        slug = (re.sub(r"[^A-Za-z0-9._-]+", "-", self.model).strip("-") or "model")[-80:]
        return f"{label}__{slug}__{self.answer_hash()}"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["tasks"] = list(self.tasks)
        out["suites"] = list(self.suites)
        out["replicas"] = list(self.replicas)
        out["ids"] = list(self.ids) if self.ids is not None else None
        # the condition and issue-25 options only when used: a run without them records what it always did
        for name, unset in {**_CONDITION_DEFAULTS, **_HOSTED_DEFAULTS}.items():
            if out[name] == unset:
                del out[name]
            else:
                out[name] = list(out[name]) if isinstance(out[name], tuple) else out[name]
        return out

    @property
    def has_conditions(self) -> bool:
        """Whether the run asks for prompt variants, shot orders or a shot-count sweep."""
        return any(getattr(self, name) != unset for name, unset in _CONDITION_DEFAULTS.items())

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunConfig:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["tasks"] = tuple(kwargs.get("tasks", ()))
        kwargs["suites"] = tuple(kwargs.get("suites", ()))
        kwargs["replicas"] = tuple(kwargs.get("replicas", ()))
        if kwargs.get("ids") is not None:
            kwargs["ids"] = tuple(kwargs["ids"])
        for name in ("prompt_variants", "shots_sweep"):
            kwargs[name] = tuple(kwargs.get(name) or ())
        return cls(**kwargs)


#: a run name is one folder name inside --results-dir: no path separators, no "." or "..", printable
_RUN_NAME = re.compile(r"[\w.+=@,-]{1,120}")


def run_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a run directory's name (None when it can): a run name must never lead
    outside ``--results-dir`` (``../x``, an absolute path) or into its root (``.``)."""
    if not _RUN_NAME.fullmatch(name) or name in (".", "..") or name.startswith("."):
        return (f"--run-name {name[:60]!r}: must be a folder name of 1 to 120 letters, digits and ._-+=@, "
                "not starting with a dot (it is created inside --results-dir)")
    return None


def option_problems(config: RunConfig) -> list[str]:
    """What is wrong with the numbers and names of a run's options, each as one line naming the option.

    Checked when the config is made — before a run directory exists or a request is sent — because an
    endpoint may accept ``temperature=-1`` or ``max_tokens=0`` and answer nonsense, and NaN cannot even
    be written to ``config.json`` as JSON."""
    def finite(value: float) -> bool:
        return not (math.isnan(value) or math.isinf(value))

    problems = []
    if config.endpoint not in ("chat", "completions"):
        problems.append(f"--endpoint must be chat or completions, got {config.endpoint!r}")
    if config.choice_scoring not in ("generate", "loglikelihood"):
        problems.append(f"--mcqa-scoring must be generate or loglikelihood, got {config.choice_scoring!r}")
    if not finite(config.temperature) or config.temperature < 0:
        problems.append(f"--temperature must be a finite number >= 0, got {config.temperature}")
    if config.top_p is not None and (not finite(config.top_p) or not 0 < config.top_p <= 1):
        problems.append(f"--top-p must be in (0, 1], got {config.top_p}")
    for option, value in (("--max-tokens", config.max_tokens), ("--context-length", config.context_length),
                          ("--limit", config.limit), ("--concurrency", config.concurrency),
                          ("--max-answer-bytes", config.max_answer_bytes)):
        if value is not None and value < 1:
            problems.append(f"{option} must be at least 1, got {value}")
    if not finite(config.timeout_s) or config.timeout_s <= 0:
        problems.append(f"--timeout must be a finite number of seconds > 0, got {config.timeout_s}")
    if config.max_retries < 0:
        problems.append(f"--max-retries must be >= 0, got {config.max_retries}")
    if not finite(config.unreachable_after_s) or config.unreachable_after_s < 0:
        problems.append(f"--unreachable-after must be a finite number of seconds >= 0, got {config.unreachable_after_s}")
    if config.shots is not None and config.shots < 0:
        problems.append(f"--shots must be >= 0, got {config.shots}")
    if config.shot_orders < 1:
        problems.append(f"--shot-orders must be at least 1, got {config.shot_orders}")
    if any(k < 0 for k in config.shots_sweep):
        problems.append(f"--shots-sweep expects shot counts >= 0 like 0,1,3,5, got {','.join(map(str, config.shots_sweep))}")
    if config.reasoning_effort is not None and config.reasoning_effort not in REASONING_EFFORTS:
        problems.append(f"--reasoning-effort must be one of {', '.join(REASONING_EFFORTS)}, "
                        f"got {config.reasoning_effort!r}")
    if config.engine == "vllm-inprocess" and (config.structured or config.reasoning_effort is not None):
        problems.append("--structured and --reasoning-effort are request fields of an OpenAI-compatible endpoint; "
                        "with vLLM use --engine vllm (its server) instead of --engine vllm-inprocess")
    if config.batch.get("retry") and config.engine is not None:
        problems.append(f"--batch needs a server with the OpenAI Batch API at --base-url; --engine {config.engine} has "
                        "none (use --batch-export FILE and `vllm run-batch` instead)")
    if config.batch and config.choice_scoring == "loglikelihood":
        problems.append("--batch/--batch-export cannot score by log-likelihood (no Batch API returns prompt "
                        "log-probabilities); use --mcqa-scoring generate")
    if config.run_name is not None and (problem := run_name_problem(config.run_name)):
        problems.append(problem)
    return problems


_CONDITION_DEFAULTS: dict[str, Any] = {"prompt_variants": (), "shot_orders": 1, "shots_sweep": ()}
_HOSTED_DEFAULTS: dict[str, Any] = {"reasoning_effort": None, "structured": False, "batch": {}, "prices": {}}
#: the values OpenAI's API takes for ``reasoning_effort``
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def load_options(config: RunConfig, task: str, split: str | None = None,
                 args: Mapping[str, Any] | None = None) -> LoadOptions:
    """What a task's loader is told: split, files given for it (``--data``), data folder, seed, and
    its own settings (``args``: parsed ``--task-arg`` values, see :func:`task_args_for`)."""
    return LoadOptions(
        split=split if split is not None else config.split,
        paths=data_paths_for(config, task),
        data_dir=Path(config.data_dir) if config.data_dir else None,
        seed=config.seed if config.seed is not None else 0,
        context_length=config.context_length,
        args=dict(args or {}),
        shots=config.shots,
    )


def task_args_for(config: RunConfig, spec: TaskSpec) -> dict[str, Any]:
    """The task's settings: its declared defaults, overridden by ``--task-arg TASK:NAME=VALUE``.

    An unknown name or a value the setting cannot parse is a :class:`UsageError` naming the option and
    the settings the task has — a typo must never be silently ignored.
    """
    declared = {a.name: a for a in spec.args}
    values = {a.name: a.default for a in spec.args}
    for key, text in config.task_args.items():
        task, _, name = key.partition(":")
        if task != spec.name:
            continue
        if name not in declared:
            known = ", ".join(f"{a.name} ({a.description})" for a in spec.args) or "none"
            raise UsageError(f"--task-arg {key}={text}: task {spec.name} has no setting {name!r}; its settings: {known}")
        try:
            values[name] = declared[name].parse(text)
        except ValueError as exc:
            raise UsageError(f"--task-arg {key}={text}: {exc}") from None
    return values


def data_paths_for(config: RunConfig, task: str) -> dict[str, Path]:
    """Files for ``task`` from ``--data``: key ``TASK`` is the evaluated file (role "eval"),
    ``TASK:ROLE`` any other file the task reads (e.g. ``clue_mednli:shots``, ``chip_cdn:cdn_terms``)."""
    paths: dict[str, Path] = {}
    for key, value in config.data.items():
        name, _, role = key.partition(":")
        if name == task:
            paths[role or "eval"] = Path(value)
    return paths


def local_model_fingerprint(model: str) -> str | None:
    """A short hash of a local model file or folder (absolute path, file names, sizes, mtimes).

    Cheap (no reading of weights) and enough to tell two checkpoints apart even when their files
    share a name (``ggml-model-Q4_K_M.gguf``). None when ``model`` is not a local path (a hub or
    API model name, whose identity is the name).
    """
    path = Path(model).expanduser()
    if not path.exists():
        return None
    path = path.resolve()
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    listing = [(str(f), f.stat().st_size, int(f.stat().st_mtime)) for f in files]
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:12]


def scoring_method(settings: Mapping[str, Any]) -> str:
    """How a run's answers were obtained, in words, from its recorded ``config`` (config.json):
    ``generated`` (a generated answer, parsed), ``log-likelihood`` (each option's log-probability,
    ``--mcqa-scoring loglikelihood``) or ``log-likelihood, lm-eval prompt`` (``--compat lm-eval``).
    Shown by ``show``, in the report's runs table and in its model labels: a log-likelihood run and a
    generated one of the same model are two different measurements, never one model twice."""
    if settings.get("choice_scoring", "generate") != "loglikelihood":
        return "generated"
    form = settings.get("prompt_form")
    return f"log-likelihood, {form} prompt" if form else "log-likelihood"


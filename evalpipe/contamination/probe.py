"""The probe from data to ``contamination.json``: load, guard, stage, ask (resumably), score, write.

Order of work, as a run's (:mod:`evalpipe.pipeline`), so mistakes cost nothing and nothing is lost:

1. the task's data is loaded (``--limit``: the first N samples in file order) and every sample's
   first input field cut in two (:mod:`evalpipe.contamination.halves`); every prompt is rendered
   before anything is sent (a template error costs nothing);
2. the credentialed-data guard of runs (:func:`evalpipe.pipeline.endpoint_policy.check_specs_endpoint_policy`);
3. under the run directory's lock, the store (``responses.sqlite``) records the probe's plans —
   ``contamination:<task>:guided`` and ``…:general`` (completions), ``…:min_k`` and
   ``…:min_k_reference`` (prompt log-probabilities) — and queues every key it has no answer for;
4. the queued prompts are sent (:func:`evalpipe.pipeline.fetch.fetch_answers`): each answer committed to
   the store on arrival, so a killed probe resumes by asking only what is missing;
5. everything is scored from the store and ``contamination.json`` written.

The run directory is by default the one ``evalpipe run`` gives the same task, model and data
options (the probe's plans sit beside the run's in its store; the report of that run shows the
probe's section); ``--run-name`` names another.
"""

from __future__ import annotations

import functools
import itertools
import json
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe import __version__
from evalpipe.pipeline.answer_writer import AnswerWriter
from evalpipe.backends.base import Backend
from evalpipe.backends.factory import OnceFactory
from evalpipe.store.answers import ResponseStore
from evalpipe.store.keys import cache_key
from evalpipe.config import RunConfig, load_options, task_args_for
from evalpipe.contamination import halves as cut
from evalpipe.contamination import logprobs as lp
from evalpipe.contamination import scoring
from evalpipe.contamination.prompts import GENERAL, GUIDED, Instructions, template_sha256
from evalpipe.contamination.result import RESULT_FILE, read_result
from evalpipe.data.digest import file_sha256
from evalpipe.endpoints import redact_url
from evalpipe.outcome import RunError
from evalpipe.pipeline.stage import PlanStage, info_json
from evalpipe.store.prompt_pack import LEARN, Packer, unpack
from evalpipe.records import Completion, GenerationParams, Prompt, to_jsonable
from evalpipe.results import RunDir
from evalpipe.pipeline.progress import NullProgress, ProgressSink
from evalpipe.pipeline.prepare import check_data_options
from evalpipe.pipeline.endpoint_policy import check_specs_endpoint_policy
from evalpipe.pipeline.fetch import fetch_answers
from evalpipe.tasks.registry import get_task

#: new tokens a completion may have: twice the true second half's whitespace tokens plus this, capped
#: by ``ProbeOptions.max_tokens`` (enough for any tokenizer's words; more only lowers ROUGE-L precision)
SLACK_TOKENS = 16
#: reference windows scored at least (when the reference text is long enough), however few test texts
MIN_REFERENCE_WINDOWS = 50


@dataclass(frozen=True)
class ProbeOptions:
    """The probe's own settings (``evalpipe contamination --help``)."""

    field: str | None = None
    min_tokens: int = cut.MIN_TOKENS
    #: the most new tokens a completion may have
    max_tokens: int = 512
    resamples: int = 1000
    seed: int = 0
    level: float = 0.95
    #: Min-K %'s k (percent of a text's tokens); 0 = no Min-K % requests
    min_k: float = 20.0
    reference_text: Path | None = None

    def __post_init__(self) -> None:
        if self.min_tokens < 2:
            raise ValueError(f"--min-tokens must be at least 2, got {self.min_tokens}")
        if self.max_tokens < 1:
            raise ValueError(f"--max-tokens must be at least 1, got {self.max_tokens}")
        if self.resamples < 1:
            raise ValueError(f"--resamples must be at least 1, got {self.resamples}")
        if not 0 <= self.min_k <= 100:
            raise ValueError(f"--min-k must be a percentage in [0, 100] (0: no Min-K % Prob), got {self.min_k}")


@dataclass(frozen=True)
class ProbeItem:
    """One probed sample: which field, its halves, and the whole text (Min-K %)."""

    id: str
    field: str
    text: str
    halves: cut.Halves


@dataclass(frozen=True)
class Plan:
    """One of the probe's plans in the store: its name and, per sample, (id, key, prompt)."""

    name: str
    model: str
    rows: tuple[tuple[str, str, Prompt], ...]

    @property
    def keys(self) -> list[str]:
        return [key for _, key, _ in self.rows]


@dataclass
class ProbeOutcome:
    run_dir: RunDir
    result: dict[str, Any]
    sent: int = 0
    cached: int = 0
    #: samples without both answers, and texts without log-probabilities (their requests failed for
    #: good; a re-run retries only those)
    failed: int = 0


# ---- 1. load and cut ----------------------------------------------------------------------------

def probe_items(config: RunConfig, options: ProbeOptions) -> tuple[Any, list[ProbeItem], list[str], Any]:
    """The task's spec, its probed items, the ids skipped (field shorter than ``min_tokens`` tokens,
    or no text field) and its data, the examples as the task's loader gives them (``--limit``: the
    first N)."""
    check_data_options(config)
    spec = get_task(config.tasks[0])
    try:
        args = task_args_for(config, spec)
    except ValueError as exc:
        raise RunError(str(exc)) from None
    data = spec.load(load_options(config, spec.name, args=args))
    examples = iter(data.examples)
    if config.limit is not None:
        examples = itertools.islice(examples, config.limit)
    items: list[ProbeItem] = []
    skipped: list[str] = []
    seen_inputs: list[str] = []
    for example in examples:
        seen_inputs = seen_inputs or list(example.inputs)
        name = cut.first_text_field(example.inputs, options.field)
        halves = cut.split_halves(example.inputs[name], options.min_tokens) if name is not None else None
        if halves is None or name is None:
            skipped.append(example.id)
            continue
        items.append(ProbeItem(example.id, name, example.inputs[name], halves))
    if options.field is not None and not items and seen_inputs:
        what = (f"is text of {options.min_tokens} tokens or more in no sample" if options.field in seen_inputs
                else "does not exist")
        raise RunError(f"task {spec.name}: input {options.field!r} (--field) {what}; its inputs: "
                       f"{', '.join(seen_inputs)}")
    return spec, items, skipped, data


def reference_windows(text: str, length: int, most: int) -> list[str]:
    """The reference text as windows of ``length`` whitespace tokens (the test texts' median
    length, so both sides are scored on texts of one size), at most ``most``; a last window shorter
    than half of ``length`` is left out, and a text shorter than ``length`` is one window."""
    words = text.split()
    if not words:
        return []
    length = max(1, length)
    windows = [" ".join(words[i:i + length]) for i in range(0, len(words), length)]
    if len(windows) > 1 and len(words) % length and len(words) % length < length / 2:
        windows.pop()
    return windows[:most]


# ---- 2./3. plans --------------------------------------------------------------------------------

def completion_params(config: RunConfig, options: ProbeOptions, second: str) -> GenerationParams:
    """Greedy unless ``--temperature``; room for twice the true half's words (see SLACK_TOKENS)."""
    budget = min(options.max_tokens, 2 * len(second.split()) + SLACK_TOKENS)
    return GenerationParams(max_tokens=budget, temperature=config.temperature, top_p=config.top_p, seed=config.seed)


def probe_plans(config: RunConfig, options: ProbeOptions, spec: Any, split: str, items: Sequence[ProbeItem],
                references: Sequence[str]) -> list[Plan]:
    """Every request of the probe, rendered (before any is sent), as plans."""
    instructions = Instructions(dataset=spec.dataset or spec.name, split=split, endpoint=config.endpoint)
    plans = []
    for which in (GUIDED, GENERAL):
        rows = []
        for item in items:
            prompt = instructions.prompt(which, item.halves.first,
                                         completion_params(config, options, item.halves.second))
            rows.append((item.id, cache_key(config.model, prompt), prompt))
        plans.append(Plan(f"contamination:{spec.name}:{which}", config.model, tuple(rows)))
    if options.min_k > 0:
        model = lp.logprob_model(config.model)
        tests = [(i.id, lp.logprob_prompt(i.text)) for i in items]
        refs = [(f"reference-{n}", lp.logprob_prompt(t)) for n, t in enumerate(references)]
        for name, pairs in ((f"contamination:{spec.name}:min_k", tests),
                            (f"contamination:{spec.name}:min_k_reference", refs)):
            plans.append(Plan(name, model, tuple((sid, cache_key(model, p), p) for sid, p in pairs)))
    return plans


def _stage(stage: PlanStage, plan: Plan) -> dict[str, str]:
    """Stage ``plan`` (packed prompts, as the runner stages a task's); its packer's shared texts."""
    packer = Packer()
    packer.learn(to_jsonable(p) for _, _, p in plan.rows[:LEARN])
    stage.write(plan.name, ((sid, key, json.dumps(packer.pack(to_jsonable(p)), ensure_ascii=False), info_json(0))
                            for sid, key, p in plan.rows))
    return packer.texts


def _prompt(packed: str, texts: Mapping[str, str]) -> Prompt:
    return Prompt.from_json(unpack(json.loads(packed), texts))


def _queued(store: ResponseStore, queue: str, texts: Mapping[str, str]) -> Iterator[tuple[str, Callable[[], Prompt]]]:
    for page in store.pending_pages(queue):
        for key, packed in page:
            yield key, functools.partial(_prompt, packed, texts)


# ---- 4./5. ask, score, write ---------------------------------------------------------------------

async def execute_probe(
    config: RunConfig,
    options: ProbeOptions,
    backend_factory: Callable[[RunConfig], Backend],
    results_root: Path,
    progress: ProgressSink | None = None,
    on_prepared: Callable[[RunDir, int, int], None] | None = None,
) -> ProbeOutcome:
    """Probe (or resume probing) one task and write ``contamination.json``; RunError/BackendError early."""
    progress = progress or NullProgress()
    if len(config.tasks) != 1:
        raise RunError("the contamination probe takes one task (--task NAME)")
    spec, items, skipped, data = probe_items(config, options)
    references: list[str] = []
    if options.reference_text is not None and options.min_k > 0:
        try:
            reference = Path(options.reference_text).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RunError(f"--reference-text {options.reference_text}: cannot be read as UTF-8 text ({exc})") from None
        length = int(statistics.median(i.halves.tokens for i in items)) if items else 0
        references = reference_windows(reference, length, max(len(items), MIN_REFERENCE_WINDOWS))
        if not references:
            raise RunError(f"--reference-text {options.reference_text}: the file holds no text")
    plans = probe_plans(config, options, spec, data.split, items, references)
    check_specs_endpoint_policy([spec], config)  # before anything is sent anywhere
    run = RunDir(results_root / (config.run_name or config.default_run_name()))
    stage = PlanStage(results_root)
    factory = OnceFactory(backend_factory)
    try:
        texts = {plan.name: _stage(stage, plan) for plan in plans}
        with run.lock():
            previous = read_result(run.path)
            if previous is not None and previous.get("task") != spec.name:
                raise RunError(f"{run.path / RESULT_FILE} holds the probe of task {previous.get('task')}; "
                               "give this one another --run-name")
            store = ResponseStore(run.store_path)
            try:
                return await _probe_locked(config, options, spec, data, items, skipped, references, plans, texts,
                                           stage, store, run, factory, progress, on_prepared, previous)
            finally:
                store.close()
    finally:
        await factory.aclose()
        stage.close()


async def _probe_locked(config: RunConfig, options: ProbeOptions, spec: Any, data: Any, items: list[ProbeItem],
                        skipped: list[str], references: list[str], plans: list[Plan],
                        texts: Mapping[str, Mapping[str, str]], stage: PlanStage, store: ResponseStore, run: RunDir,
                        factory: OnceFactory, progress: ProgressSink,
                        on_prepared: Callable[[RunDir, int, int], None] | None,
                        previous: Mapping[str, Any] | None = None) -> ProbeOutcome:
    for plan in plans:
        store.write_staged_plan(plan.name, stage.path, plan.name, texts[plan.name])
    completions = [p for p in plans if p.model == config.model]
    scored_texts = [p for p in plans if p.model != config.model]
    pending = store.queue_pending("probe_completions", [p.name for p in completions])
    pending_lp = store.queue_pending("probe_logprobs", [p.name for p in scored_texts])
    total = store.distinct_keys([p.name for p in plans]) if plans else 0
    if on_prepared is not None:
        on_prepared(run, total, pending + pending_lp)
    outcome = ProbeOutcome(run_dir=run, result={}, cached=total - pending - pending_lp)
    failures: dict[str, Completion] = {}
    min_k_problem: str | None = None
    workers = 2 * max(config.concurrency, 1) * (1 + len(config.replicas))
    backend = factory(config) if pending or pending_lp else None
    if backend is not None:
        await backend.preflight()
    if backend is not None and pending_lp:  # one short request: can this endpoint give them at all?
        min_k_problem = await lp.unavailable(backend)
    asked_lp = pending_lp if min_k_problem is None else 0
    progress.start(total=total - pending_lp + asked_lp, cached=outcome.cached)
    try:
        if backend is not None and pending:
            await fetch_answers(_queued(store, "probe_completions", _texts(texts, completions)), backend, store,
                                progress, writer=AnswerWriter(store, backend.model), count=pending,
                                failures=failures, workers=workers)
            outcome.sent += pending
        if backend is not None and asked_lp:
            scorer = lp.PromptLogprobs(backend)
            await fetch_answers(_queued(store, "probe_logprobs", _texts(texts, scored_texts)), scorer,  # type: ignore[arg-type]
                                store, progress, writer=AnswerWriter(store, scorer.model), count=asked_lp,
                                failures=failures, workers=workers)
            outcome.sent += asked_lp
    finally:
        progress.close()
    outcome.result = score_probe(config, options, spec, data, items, skipped, references, plans, store, failures,
                                 min_k_problem, backend_info(factory))
    outcome.failed = outcome.result["errors"]["count"] + outcome.result["min_k_prob"].get("unanswered", 0)
    earlier = (previous or {}).get("settings") or {}
    settings = outcome.result["settings"]
    if settings["backend"] is None:  # answered wholly from the store: what answered is what was recorded
        settings["backend"] = earlier.get("backend")
    settings["created"] = earlier.get("created", settings["updated"])
    run.write_json(run.path / RESULT_FILE, outcome.result)
    return outcome


def _texts(texts: Mapping[str, Mapping[str, str]], plans: Sequence[Plan]) -> dict[str, str]:
    return {k: v for p in plans for k, v in texts[p.name].items()}


def backend_info(factory: OnceFactory) -> dict[str, Any] | None:
    return dict(factory.backend.describe()) if factory.backend is not None else None


def score_probe(config: RunConfig, options: ProbeOptions, spec: Any, data: Any, items: Sequence[ProbeItem],
                skipped: Sequence[str], references: Sequence[str], plans: Sequence[Plan], store: ResponseStore,
                failures: Mapping[str, Completion], min_k_problem: str | None,
                backend: Mapping[str, Any] | None) -> dict[str, Any]:
    """The result (see :mod:`evalpipe.contamination.result`) from the answers in the store."""
    by_name = {p.name.rsplit(":", 1)[1]: p for p in plans}
    answers = store.get_many([k for p in plans for k in p.keys])
    guided_keys = {sid: key for sid, key, _ in by_name[GUIDED].rows}
    general_keys = {sid: key for sid, key, _ in by_name[GENERAL].rows}
    min_k_keys = {sid: key for sid, key, _ in by_name["min_k"].rows} if "min_k" in by_name else {}
    samples, guided, general, errors = [], [], [], []
    exact = near = 0
    test_scores: list[float] = []
    for item in items:
        got = answers.get(guided_keys[item.id]), answers.get(general_keys[item.id])
        min_k = _min_k(answers.get(min_k_keys.get(item.id, "")), options.min_k)
        if min_k is not None:
            test_scores.append(min_k)
        if got[0] is None or got[1] is None:
            why = [failures[k].error for k in (guided_keys[item.id], general_keys[item.id]) if k in failures]
            errors.append({"id": item.id, "error": why[0] if why else "no answer"})
            continue
        g_text = cut.completion_text(got[0].text or "", item.halves.first)
        o_text = cut.completion_text(got[1].text or "", item.halves.first)
        truth = cut.normalise(item.halves.second)
        g_score, o_score = scoring.rouge_l(g_text, truth), scoring.rouge_l(o_text, truth)
        is_exact, is_near = g_text == truth, g_score >= scoring.NEAR_EXACT
        exact += is_exact
        near += is_near
        guided.append(g_score)
        general.append(o_score)
        samples.append({"id": item.id, "field": item.field, "tokens": item.halves.tokens,
                        "first_half": item.halves.first, "second_half": item.halves.second,
                        "guided_completion": g_text, "general_completion": o_text,
                        "guided_rougeL": g_score, "general_rougeL": o_score, "difference": g_score - o_score,
                        "exact": is_exact, "near_exact": is_near, "min_k_prob": min_k})
    difference = scoring.paired_difference(guided, general, options.resamples, options.seed, options.level)
    reference_scores = [s for s in (_min_k(answers.get(k), options.min_k) for k in
                                    (by_name["min_k_reference"].keys if "min_k_reference" in by_name else []))
                        if s is not None]
    return {
        "task": spec.name,
        "dataset": spec.dataset or spec.name,
        "split": data.split,
        "verdict": scoring.verdict(difference, exact, near),
        "n": len(samples),
        "guided_rougeL": scoring.mean(guided),
        "general_rougeL": scoring.mean(general),
        "difference": difference.to_json(),
        "exact": exact,
        "near_exact": near,
        "near_exact_threshold": scoring.NEAR_EXACT,
        "skipped": {"count": len(skipped), "min_tokens": options.min_tokens, "ids": list(skipped),
                    "why": f"first input field with fewer than {options.min_tokens} whitespace tokens, or none"},
        "errors": {"count": len(errors), "samples": errors},
        "min_k_prob": _min_k_summary(options, test_scores, reference_scores, min_k_problem, bool(references),
                                     len(items) + len(references)),
        "fields": dict(Counter(i.field for i in items)),
        "samples": samples,
        "settings": _settings(config, options, data, backend),
    }


def _min_k(answer: Completion | None, k: float) -> float | None:
    values = lp.token_logprobs(answer.text) if answer is not None else None
    return scoring.min_k_prob(values, k) if values else None


def _min_k_summary(options: ProbeOptions, test: Sequence[float], reference: Sequence[float], problem: str | None,
                   asked_reference: bool, texts: int) -> dict[str, Any]:
    if options.min_k <= 0:
        return {"available": False, "reason": "not asked for (--min-k 0)"}
    if not test:
        return {"available": False, "reason": problem or "no test text has prompt log-probabilities in the store"}
    test_mean, ref_mean = scoring.mean(test), scoring.mean(reference)
    out: dict[str, Any] = {
        "available": True, "k": options.min_k, "test_mean": test_mean, "reference_mean": ref_mean,
        "difference": test_mean - ref_mean if test_mean is not None and ref_mean is not None else None,
        "n_test": len(test), "n_reference": len(reference),
        # texts whose log-probability request failed for good (a re-run asks them again)
        "unanswered": texts - len(test) - len(reference),
    }
    if not asked_reference:
        out["note"] = "no --reference-text: the test texts' score has nothing to be compared with"
    return out


def _settings(config: RunConfig, options: ProbeOptions, data: Any, backend: Mapping[str, Any] | None) -> dict[str, Any]:
    return {
        "model": config.model, "endpoint": config.endpoint,
        "base_url": redact_url(config.base_url) if config.base_url else None,
        "engine": config.engine, "temperature": config.temperature, "max_tokens": options.max_tokens,
        "max_tokens_rule": f"min(max_tokens, 2 × the true second half's whitespace tokens + {SLACK_TOKENS})",
        "field": options.field or "first text input", "min_tokens": options.min_tokens, "limit": config.limit,
        "min_k": options.min_k,
        "reference_text": ({"path": str(options.reference_text), "sha256": file_sha256(Path(options.reference_text))}
                           if options.reference_text is not None else None),
        "templates_sha256": template_sha256(),
        "data_files": {str(f): file_sha256(Path(f)) for f in data.files},
        "backend": backend, "evalpipe_version": __version__,
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }

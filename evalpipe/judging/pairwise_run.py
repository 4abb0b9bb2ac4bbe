"""Sending the pairwise judging's requests (``evalpipe judge --pairwise``), resumably.

Definitions, storage and outcomes are in :mod:`evalpipe.judging.pairwise`; this module adds what
talks to the judges (kept apart so the report never reaches a backend). Order of work: read both
runs, pair their shared answered samples, the patient-data guard, render every request (a rubric
error fails here), then under the pairwise folder's lock send only what the store has no reply to,
each reply committed on arrival, and write ``pairwise.json`` and ``pairs.jsonl``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe import __version__
from evalpipe.backends.base import Backend
from evalpipe.store.answers import ResponseStore
from evalpipe.store.judgements import StoredJudgement
from evalpipe.judging.pairwise import (
    DEFAULT_RUBRIC, ORDERS, PairwiseOutcome, _Pair, load_pairwise_rubric, pairwise_dir, pairwise_sheet,
    parse_verdict, read_verdicts, request_key, shared_pairs,
)
from evalpipe.judging.panel import Judge, check_panel, check_patient_data
from evalpipe.outcome import RunError
from evalpipe.records import GenerationParams, Prompt
from evalpipe.results import RunDir, record_line

__all__ = ["execute_pairwise"]


async def execute_pairwise(run_a: Path, run_b: Path, judges: Sequence[Judge], *, rubric: str | Path | None = None,
                           allow_external_endpoint: bool = False, params: GenerationParams | None = None,
                           concurrency: int = 8, backend_factory: Any = None) -> PairwiseOutcome:
    """Judge the shared answers of two runs pairwise, both orders, resumably (module docstring)."""
    from evalpipe.judging.run import JudgeOptions, judge_backend

    params = params or GenerationParams(max_tokens=512, temperature=0.0)
    factory = backend_factory or (lambda judge: judge_backend(judge, JudgeOptions(concurrency=concurrency)))
    check_panel(judges)
    a, b = RunDir(Path(run_a)), RunDir(Path(run_b))
    if a.path.resolve() == b.path.resolve():
        raise RunError(f"--pairwise needs two different runs (got {a.path} twice)")
    pairs, tasks, notes, credentialed = shared_pairs(a, b)
    check_patient_data(credentialed, judges, allow_external_endpoint)  # before any connection
    loaded = load_pairwise_rubric(rubric or DEFAULT_RUBRIC)
    requests = [(pair, order, pair.prompt(loaded, order, params)) for pair in pairs for order in ORDERS]
    folder = RunDir(pairwise_dir(a.path, b.path))
    outcome = PairwiseOutcome(folder=folder.path, metrics={}, notes=notes)
    with folder.lock():
        store = ResponseStore(folder.path / "judgements.sqlite")
        backends: list[Backend] = []
        try:
            rows, _ = read_verdicts(store, list(tasks), [j.model for j in judges], loaded, pairs)

            async def ask(judge: Judge, backend: Backend, queue: list[tuple[_Pair, str, Prompt]]) -> None:
                items = iter(queue)

                async def worker() -> None:
                    for pair, order, prompt in items:
                        completion = await backend.complete(prompt)
                        outcome.sent += 1
                        if not completion.ok:
                            outcome.failed_requests += 1
                            continue
                        verdict, problem = parse_verdict(completion.text)
                        store.put_judgement(StoredJudgement(
                            judge=judge.model, rubric_sha256=loaded.sha256, task=pair.task.name,
                            sample_id=pair.sample_id, answer_sha256=pair.answers_sha256(order), attempt=1,
                            request_key=request_key(judge.model, prompt, loaded, pair, order), text=completion.text or "",
                            ratings={"verdict": verdict} if verdict is not None else None, problem=problem,
                            prompt_tokens=completion.usage.prompt_tokens,
                            completion_tokens=completion.usage.completion_tokens, latency_s=completion.latency_s,
                            endpoint=completion.endpoint_url))

                await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(queue))))))

            jobs = []
            for judge in judges:
                pending = []
                for pair, order, prompt in requests:
                    row = rows.get((judge.model, pair.task.name, pair.sample_id, pair.answers_sha256(order)))
                    if row is not None and row.request_key == request_key(judge.model, prompt, loaded, pair, order):
                        outcome.from_store += 1
                    else:
                        pending.append((pair, order, prompt))
                if pending:
                    backend = factory(judge)
                    backends.append(backend)
                    await backend.preflight()
                    jobs.append(ask(judge, backend, pending))
            await asyncio.gather(*jobs)
            _, verdicts = read_verdicts(store, list(tasks), [j.model for j in judges], loaded, pairs)
        finally:
            for backend in backends:
                await backend.aclose()
            store.close()
        sheets = pairwise_sheet(pairs, [j.model for j in judges], verdicts)
        folder.write_json(folder.path / "pairwise.json", {
            "run_a": str(a.path.resolve()), "run_b": str(b.path.resolve()),
            "label_a": a.path.resolve().name, "label_b": b.path.resolve().name,
            "judges": [j.describe() for j in judges], "rubric": loaded.name, "rubric_sha256": loaded.sha256,
            "params": params.sampling_options(), "allow_external_endpoint": allow_external_endpoint,
            "evalpipe_version": __version__, "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "tasks": {name: {k: v for k, v in sheet.items() if k != "records"} for name, sheet in sheets.items()},
        })
        lines = (record_line({"task": name, **record}) for name, sheet in sheets.items() for record in sheet["records"])
        (folder.path / "pairs.jsonl").write_text("".join(lines), encoding="utf-8")
    outcome.metrics = {name: sheet["metrics"] for name, sheet in sheets.items()}
    return outcome

"""``config.json``: what the run was — its options, tasks, templates, data digests, backends, endpoints.

Why written by the pipeline, before any request: everything downstream (``score``, the report,
judging) reads only the run directory, so each task's kind, metrics, template and data must be
recorded there (``docs/architecture.md``, "The run directory is the contract").
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from evalpipe import __version__
from evalpipe.backends.base import Backend
from evalpipe.backends.ranking import RankingBackend, pool_digest
from evalpipe.config import RunConfig
from evalpipe.data.digest import file_sha256
from evalpipe.endpoints import redact_url
from evalpipe.paths import REPO_ROOT
from evalpipe.pipeline.prepared import PreparedTask
from evalpipe.prompting import template_path, template_sha256
from evalpipe.results import RunDir, git_commit
from evalpipe.tasks.registry import boards, suite_records


def _shown_path(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _task_record(p: PreparedTask, config: RunConfig) -> dict[str, Any]:
    template = template_path(p.spec, template=p.template) if p.renderer is not None else None
    return {
        "template": _shown_path(template) if template is not None else None,
        "template_sha256": template_sha256(p.spec, template=p.template) if template is not None else None,
        **({"pool_size": len(p.pool), "pool_digest": pool_digest(p.pool)} if p.pool else {}),
        "data_files": dict(p.data_digests) or {str(f): file_sha256(Path(f)) for f in p.data.files},
        "split": p.data.split,
        # what the loader decided about the file as a whole (an index base, and how): never silent
        **({"data_facts": dict(p.data.facts)} if p.data.facts else {}),
        "n": p.size,
        "shots": [s.id for s in p.shots],
        "fewshot_seed": config.fewshot_seed if config.fewshot_seed is not None else p.spec.fewshot_seed,
        # a task defined by a task file: where, and its sha256 (`evalpipe score` builds it again from there)
        **({"task_file": str(p.spec.task_file), "task_file_sha256": file_sha256(p.spec.task_file)}
           if p.spec.task_file is not None else {}),
        "max_tokens": p.max_tokens,
        "credentialed": p.spec.credentialed,
        # what judges rate (evalpipe.judging reads it from here, so judging needs only the run directory)
        "answer_kind": p.spec.answer_kind,
        "judge_rubric": p.spec.judge_rubric,
        # what a report says about the task, recorded so that the report needs only the run directory
        # (the kind decides e.g. the NER error analysis: docs/architecture.md, "The run directory is the contract")
        "kind": p.spec.kind,
        "description": p.spec.description,
        "metrics": list(p.spec.metrics),
        "primary_metric": p.spec.primary_metric,
        "metric_definitions": dict(p.spec.metric_definitions),
        "citation": p.spec.citation,
    }


def _task_records(prepared: Sequence[PreparedTask], config: RunConfig) -> dict[str, dict[str, Any]]:
    """``config.json``'s ``tasks``: one record per task; a task with prompt conditions records the
    reference condition's as its own, and each condition (template, its sha256, the shots in order)."""
    records: dict[str, dict[str, Any]] = {}
    for p in prepared:
        if p.spec.name not in records:
            records[p.spec.name] = _task_record(p, config)
        if p.condition is not None:
            records[p.spec.name].setdefault("conditions", []).append({
                **p.condition.to_json(), "shot_count": len(p.shots),
                "template": _shown_path(template_path(p.spec, template=p.template)),
                "template_sha256": template_sha256(p.spec, template=p.template),
                "shot_ids": [s.id for s in p.shots], "plan": p.plan_name,
            })
    return records


def write_config(run: RunDir, config: RunConfig, prepared: Sequence[PreparedTask],
                 backends: Sequence[Backend] = (), skipped: Mapping[str, str] | None = None,
                 budget: Any = None, endpoints: Sequence[Mapping[str, Any]] | None = None) -> None:
    previous = run.read_config() if run.exists() else {}
    ran = replace(
        config,
        tasks=tuple(dict.fromkeys(p.spec.name for p in prepared)),
        base_url=redact_url(config.base_url) if config.base_url else None,
        replicas=tuple(redact_url(u) for u in config.replicas),
    )
    run.write_json(run.config_path, {
        "config": ran.to_json(),
        "skipped_tasks": dict(skipped or {}),
        "budget": budget if budget is not None else previous.get("budget"),
        "evalpipe_version": __version__,
        "git_commit": git_commit(REPO_ROOT),
        "tasks": _task_records(prepared, config),
        # the suites and reference boards of the run's tasks, as data: the report reads them from here
        "suites": {name: suite.to_json() for name, suite in suite_records(ran.tasks).items()},
        "boards": [board.to_json() for board in boards() if board.applies(ran.tasks)],
        # the generating model's backend, and each retrieval task's ranker (embedder, pool), as they describe
        # themselves (never an API key); a run answered wholly from the store keeps what was recorded
        "backend": next((dict(b.describe()) for b in backends if not isinstance(b, RankingBackend)),
                        previous.get("backend")),
        "rankers": [dict(b.describe()) for b in backends if isinstance(b, RankingBackend)] or previous.get("rankers"),
        "allow_external_endpoint": config.allow_external_endpoint,
        # what gave the stored answers, as the store records it (evalpipe.store.endpoint_identity)
        "endpoints": list(endpoints) if endpoints else previous.get("endpoints"),
        # the judges and rubrics of `evalpipe judge` (written by evalpipe.judging), kept across re-runs
        **({"judging": previous["judging"]} if previous.get("judging") else {}),
        "created": previous.get("created", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    })

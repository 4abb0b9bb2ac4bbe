"""The "Pairwise judging" section: win / tie / loss of run A against run B, and the judges' position bias.

Reads ``<results>/pairwise/<A>__vs__<B>/`` (``pairwise.json``, ``pairs.jsonl``; written by
``evalpipe judge --pairwise``, :mod:`evalpipe.judging.pairwise`) for every two runs of the report
that have one, and bootstraps each rate over the pairs from their parts and declared aggregations,
like any metric.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evalpipe.judging import pairwise as _pairwise  # noqa: F401 (registers the "share" aggregation)
from evalpipe.judging.pairwise import pairwise_dir
from evalpipe.metrics.aggregation import aggregation_from_json
from evalpipe.report.bootstrap import ResampleTask, bootstrap_task
from evalpipe.report.document import Cell, Paragraph, Section, Table, fmt, fmt_interval
from evalpipe.report.runs import ReportRun

__all__ = ["pairwise_folders", "pairwise_section"]

_RATES = ("win_rate", "tie_rate", "loss_rate", "score", "position_bias", "first_position")


def pairwise_folders(runs: Sequence[ReportRun]) -> list[tuple[ReportRun, ReportRun, Path]]:
    """(run A, run B, folder) for every ordered pair of the report's runs judged pairwise."""
    out = []
    for a in runs:
        for b in runs:
            if a is not b:
                folder = pairwise_dir(a.path, b.path)
                if (folder / "pairwise.json").is_file() and (folder / "pairs.jsonl").is_file():
                    out.append((a, b, folder))
    return out


def _resample_task(name: str, info: dict[str, Any], records: list[dict[str, Any]]) -> ResampleTask:
    aggregations = {m: aggregation_from_json(a) for m, a in (info.get("aggregations") or {}).items()}
    keys = tuple(sorted({k for a in aggregations.values() for k in a.keys()}))
    parts = np.zeros((len(records), len(keys)))
    column = {k: j for j, k in enumerate(keys)}
    for i, record in enumerate(records):
        for key, value in (record.get("parts") or {}).items():
            if key in column:
                parts[i, column[key]] = float(value)
    corpus = {m: v for m, v in (info.get("metrics") or {}).items() if isinstance(v, (int, float))}
    return ResampleTask(name=f"pairwise:{name}", ids=tuple(str(r.get("id")) for r in records), keys=keys, parts=parts,
                        aggregations=aggregations, corpus=corpus, no_interval=info.get("no_interval") or {})


def pairwise_section(runs: Sequence[ReportRun], *, resamples: int, seed: int, level: float = 0.95) -> Section | None:
    """The section, or None when no two runs of the report were judged pairwise."""
    found = pairwise_folders(runs)
    if not found:
        return None
    section = Section("pairwise", "Pairwise judging", [Paragraph(
        "Each shared answered sample of runs A and B was shown to each judge twice, A's answer first and B's first. "
        "Per order, A scores 1 (preferred), 0.5 (tie) or 0; a pair is a win for A when its two scores sum above 1, a "
        "loss below 1, a tie at 1 (two ties, or two verdicts that contradict each other). Score: A's mean preference "
        "share (0.5 = none). Position bias: share of pairs whose verdict flips with the order; first position: share "
        "of decisive verdicts for the answer shown first (0.5 = no preference). Only pairs with a usable verdict in "
        "both orders count; brackets: 95 % bootstrap intervals over pairs.")])
    for run_a, run_b, folder in found:
        data = json.loads((folder / "pairwise.json").read_text(encoding="utf-8"))
        records: dict[str, list[dict[str, Any]]] = {}
        for line in (folder / "pairs.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                records.setdefault(str(record.get("task")), []).append(record)
        judges = [str(j.get("model")) for j in data.get("judges") or []]
        for task, info in (data.get("tasks") or {}).items():
            boot = bootstrap_task(_resample_task(task, info, records.get(task, [])), resamples=resamples, seed=seed,
                                  level=level)
            metrics = info.get("metrics") or {}
            rows = []
            for judge in judges:
                cells = [Cell(judge, numeric=False), Cell(str(metrics.get(f"pairwise[{judge}]_pairs", 0)))]
                for rate in _RATES:
                    name = f"pairwise[{judge}]_{rate}"
                    ci = boot.intervals.get(name)
                    cells.append(Cell(fmt(metrics.get(name)) if name in metrics else "not computed",
                                      sub=fmt_interval(ci.low, ci.high) if ci is not None and ci.available else "",
                                      title=(info.get("not_computed") or {}).get(name, "")))
                cells.append(Cell(str(metrics.get(f"pairwise[{judge}]_failures", 0))))
                rows.append(tuple(cells))
            section.blocks.append(Table(
                id=f"pairwise-{task}-{len(section.blocks)}",
                title=f"{task}: A = {run_a.label} vs B = {run_b.label}",
                columns=("judge", "pairs", "A wins", "ties", "A loses", "A's score", "position bias", "first position",
                         "failures"),
                rows=tuple(rows), note=f"{folder}; rubric {data.get('rubric')}; {resamples} resamples."))
    return section

"""The report's contamination section: what ``evalpipe contamination`` found, per run directory.

Read from ``<run>/contamination.json`` alone (:mod:`evalpipe.contamination.result`; no data file,
no model), registered as a report section (:mod:`evalpipe.report.contributions`) that applies when
some run directory holds a probe result. It shows the verdict beside the numbers it rests on
(guided and general ROUGE-L, their paired difference with its interval, exact and near-exact
completions, Min-K % Prob where the endpoint returned prompt log-probabilities) and the near-exact
completions themselves, so a reader can judge a recital by eye.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalpipe.contamination.result import read_result
from evalpipe.report.contributions import SuiteSection, register_section
from evalpipe.report.document import Cell, Examples, Paragraph, Section, Table, fmt, fmt_interval

#: near-exact completions shown per run
SHOWN = 5

METHOD = (
    "Contamination probe (evalpipe contamination; docs/contamination.md). Each sample's first input field is cut "
    "at half its whitespace tokens; the model continues the first half twice — guided (told the data set and "
    "split, asked for the exact continuation) and general (asked only to complete the text), after Golchin & "
    "Surdeanu, ICLR 2024 — and each completion is scored by ROUGE-L against the true second half. Verdict "
    "likely_contaminated: the paired bootstrap interval of guided − general lies above 0, or ≥ 1 exact or ≥ 2 "
    "near-exact (ROUGE-L ≥ 0.75) guided completions. Min-K % Prob (Shi et al., ICLR 2024): the mean "
    "log-probability of a text's k % least likely tokens, test texts beside a reference text; higher = more "
    "familiar. no_evidence is not evidence of absence: a model may have seen the data without reciting it."
)


def _results(runs: Sequence[Any]) -> list[tuple[Any, dict[str, Any]]]:
    found = []
    for run in runs:
        result = read_result(run.path)
        if result is not None:
            found.append((run, result))
    return found


def has_probe(runs: Sequence[Any]) -> bool:
    return any((run.path / "contamination.json").is_file() for run in runs)


def _min_k_cells(min_k: Mapping[str, Any]) -> tuple[Cell, Cell, Cell]:
    if not min_k.get("available"):
        why = str(min_k.get("reason") or "not available")
        return Cell("not available", title=why, numeric=False), Cell("–"), Cell("–")
    return Cell(fmt(min_k.get("test_mean"))), Cell(fmt(min_k.get("reference_mean"))), Cell(fmt(min_k.get("difference")))


def contamination_section(runs: Sequence[Any], boots: Mapping[str, Any] | None = None, level: float = 0.95) -> Section:
    """The section (``boots`` and ``level`` are the contribution signature's; the probe's interval is its own)."""
    rows: list[tuple[Cell, ...]] = []
    blocks: list[Examples] = []
    for run, result in _results(runs):
        diff = result.get("difference") or {}
        skipped = (result.get("skipped") or {}).get("count", 0)
        errors = (result.get("errors") or {}).get("count", 0)
        rows.append((
            Cell(run.label, numeric=False), Cell(str(result["task"]), numeric=False),
            Cell(f"{result.get('dataset', '')} ({result.get('split', '')})", numeric=False),
            Cell(str(result["n"]), sub=f"{skipped} skipped" + (f", {errors} unanswered" if errors else "")),
            Cell(fmt(result["guided_rougeL"])), Cell(fmt(result["general_rougeL"])),
            Cell(fmt(diff.get("value")), sub=fmt_interval(diff.get("ci_low"), diff.get("ci_high")),
                 title=f"{diff.get('method', '')}, {diff.get('resamples')} resamples, seed {diff.get('seed')}"),
            Cell(str(result["exact"])), Cell(str(result["near_exact"])),
            *_min_k_cells(result.get("min_k_prob") or {}),
            Cell(str(result["verdict"]), bold=result["verdict"] == "likely_contaminated", numeric=False),
        ))
        near = [s for s in result.get("samples", []) if s.get("near_exact")][:SHOWN]
        if near:
            blocks.append(Examples(
                f"contamination-{len(blocks)}", f"{run.label} · {result['task']}: near-exact guided completions",
                tuple((f"{s['id']} — guided ROUGE-L {fmt(s['guided_rougeL'])}",
                       (f"first half: {s['first_half']}", f"true second half: {s['second_half']}",
                        f"guided completion: {s['guided_completion']}")) for s in near)))
    table = Table(
        id="contamination", title="Contamination probe", rows=tuple(rows),
        columns=("model", "task", "data set (split)", "probed", "guided ROUGE-L", "general ROUGE-L",
                 "guided − general", "exact", "near-exact", "Min-K % test", "Min-K % reference",
                 "Min-K % difference", "verdict"),
        note="Interval: the probe's own paired percentile bootstrap (its resamples and seed in contamination.json).")
    return Section("contamination", "Contamination probe", [Paragraph(METHOD), table, *blocks])


SECTION = register_section(SuiteSection(name="contamination", applies=has_probe, section=contamination_section))

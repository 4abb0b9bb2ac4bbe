"""Two runs side by side: paired metric differences and the samples they disagree on most.

Only samples both runs evaluated *and answered* are compared (same task, same sample id; a sample
without an answer is in no metric, evalpipe.coverage), in run A's order; each run's corpus metrics are recomputed on that shared subset, so ``A`` and ``B`` in the output
can differ from the runs' own (full) numbers. Differences are ``A - B`` with the paired
bootstrap interval and two-sided p-value of :func:`evalpipe.report.bootstrap.paired_bootstrap`.

Disagreements, per task: shared samples ranked by the absolute difference of the task's primary
per-sample score (see :func:`evalpipe.report.leaderboard.primary_metric`; the first common
per-sample score when the primary metric has none), then by whether the answers differ at all;
samples with equal scores and equal answers are never shown. Each shows the sample's input (not
the prompt's instructions, which are the same for every sample), the gold, and both answers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table as RichTable

from evalpipe.report.browser import samples_fragment
from evalpipe.report.bootstrap import PairedDifference, ResampleTask, paired_bootstrap, restrict
from evalpipe.report.document import Cell, Examples, Section, Table, fmt, fmt_interval
from evalpipe.report.leaderboard import primary_metric
from evalpipe.report.ner_errors import gold_spans, span_text
from evalpipe.report.runs import ReportRun

__all__ = ["CompareResult", "Disagreement", "TaskComparison", "compare_section", "compare_loaded",
           "render_compare_terminal"]

_EXCERPT = 320
_ANSWER = 600


@dataclass(frozen=True)
class Disagreement:
    task: str
    id: str
    score_key: str | None
    score_a: float | None
    score_b: float | None
    prompt_excerpt: str
    answer_a: str | None
    answer_b: str | None
    gold: str


@dataclass(frozen=True)
class TaskComparison:
    task: str
    #: samples answered in both runs (what is compared); answered only in A, only in B
    shared: int
    only_a: int
    only_b: int
    differences: tuple[PairedDifference, ...]
    disagreements: tuple[Disagreement, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompareResult:
    label_a: str
    label_b: str
    path_a: str
    path_b: str
    resamples: int
    seed: int
    tasks: tuple[TaskComparison, ...]
    #: tasks only one of the runs evaluated
    unmatched: tuple[str, ...] = field(default=())

    @property
    def differences(self) -> list[tuple[str, PairedDifference]]:
        return [(t.task, d) for t in self.tasks for d in t.differences]


def input_excerpt(inputs: Any, limit: int = _EXCERPT) -> str:
    """The sample's input as a reader wants it: its text fields (``key: value``), long ones cut;
    token lists are left out when a text field holds the same sentence."""
    if not isinstance(inputs, Mapping):
        return _cut(json.dumps(inputs, ensure_ascii=False), limit) or ""
    parts = []
    has_text = any(isinstance(v, str) for v in inputs.values())
    for key, value in inputs.items():
        if isinstance(value, str):
            parts.append(f"{key}: {value}" if len(inputs) > 1 else value)
        elif not (has_text and isinstance(value, (list, tuple))):
            parts.append(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    return _cut(" | ".join(parts), limit) or ""


def _text(value: Any) -> str | None:
    """A text cell as str or None (pandas stores a missing string as NaN)."""
    return value if isinstance(value, str) else None


def _cut(text: Any, limit: int = _ANSWER) -> str | None:
    text = _text(text)
    if text is None:
        return None
    return cast("str | None", text if len(text) <= limit else text[:limit] + "…")


def _gold_text(record: Mapping[str, Any]) -> str:
    """Gold entities as ``text (type)`` for span tasks; JSON otherwise (cut to a few lines)."""
    gold = record.get("gold")
    spans = gold_spans(gold)
    given = record.get("inputs")
    inputs: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    if spans is not None:
        if not spans:
            return "(no entity)"
        return "; ".join(f"{span_text(inputs, s)} ({s.label})" for s in spans)
    if isinstance(gold, str):
        return _cut(gold, 400) or ""
    return _cut(json.dumps(gold, ensure_ascii=False), 400) or ""


def _numeric_scores(record: Mapping[str, Any]) -> dict[str, float]:
    scores = record.get("scores") or {}
    return {k: float(v) for k, v in scores.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _score_key(task: str, records_a: Mapping[str, Mapping[str, Any]], records_b: Mapping[str, Mapping[str, Any]],
               primary: str | None, corpus: Sequence[str]) -> str | None:
    keys_a = set().union(*(_numeric_scores(r) for r in records_a.values())) if records_a else set()
    keys_b = set().union(*(_numeric_scores(r) for r in records_b.values())) if records_b else set()
    common = [k for k in (*corpus, *sorted(keys_a)) if k in keys_a and k in keys_b]
    if primary in common:
        return primary
    return common[0] if common else None


def _records(run: ReportRun, task: str) -> tuple[dict[str, Mapping[str, Any]], dict[str, bytes | None]]:
    """The task's records by id (an id's last), and the digest of each one's answer (the records are
    lean: :meth:`~evalpipe.report.runs.ReportRun.answer_digests`)."""
    records: dict[str, Mapping[str, Any]] = {}
    digests: dict[str, bytes | None] = {}
    for record, digest in zip(run.records, run.answer_digests()):
        if record.get("task") == task:
            sample_id = str(record.get("id"))
            records[sample_id], digests[sample_id] = record, digest
    return records, digests


def _disagreements(task: str, a: ResampleTask, run_a: ReportRun, run_b: ReportRun, top: int) -> list[Disagreement]:
    """The samples the two runs score most apart, then those they answer differently at the same score
    (at most ``top``), each with its input, both answers and the gold."""
    (rec_a, digest_a), (rec_b, digest_b) = _records(run_a, task), _records(run_b, task)
    info = run_a.info.get(task)
    primary = primary_metric(info, list(a.corpus))
    key = _score_key(task, rec_a, rec_b, primary, list(a.corpus))
    ranked = []
    for i, sample_id in enumerate(a.ids):
        ra, rb = rec_a.get(sample_id, {}), rec_b.get(sample_id, {})
        sa = _numeric_scores(ra).get(key) if key else None
        sb = _numeric_scores(rb).get(key) if key else None
        gap = abs(sa - sb) if sa is not None and sb is not None else 0.0
        differ = digest_a.get(sample_id) != digest_b.get(sample_id)
        if gap == 0 and not differ:
            continue
        ranked.append((-gap, not differ, i, sample_id, ra, rb, sa, sb))
    ranked.sort(key=lambda r: r[:3])
    out = []
    for _, _, _, sample_id, ra, rb, sa, sb in ranked[:top]:
        ra, rb = run_a.full_record(ra) if ra else ra, run_b.full_record(rb) if rb else rb  # answers, inputs, gold
        out.append(Disagreement(
            task=task, id=sample_id, score_key=key, score_a=sa, score_b=sb,
            prompt_excerpt=input_excerpt(ra.get("inputs") if "inputs" in ra else rb.get("inputs")),
            answer_a=_cut(ra.get("answer")), answer_b=_cut(rb.get("answer")),
            gold=_gold_text(ra or rb),
        ))
    return out


def compare_loaded(run_a: ReportRun, run_b: ReportRun, *, resamples: int = 1000, seed: int = 0,
                   top: int = 10, level: float = 0.95) -> CompareResult:
    """Compare two loaded runs task by task (see the module docstring)."""
    comparisons = []
    unmatched = sorted(set(run_a.tasks) ^ set(run_b.tasks))
    for task in [t for t in run_a.tasks if t in run_b.tasks]:
        a, b = run_a.resample.get(task), run_b.resample.get(task)
        if a is None or b is None:
            unmatched.append(task)
            continue
        positions_b = {sid: i for i, sid in enumerate(b.ids)}
        shared = [(i, positions_b[sid]) for i, sid in enumerate(a.ids) if sid in positions_b]
        notes: list[str] = []
        if not shared:
            comparisons.append(TaskComparison(task, 0, a.n, b.n, (), (), ("no shared samples",)))
            continue
        sub_a = restrict(a, [i for i, _ in shared])
        sub_b = restrict(b, [j for _, j in shared])
        diffs = paired_bootstrap(sub_a, sub_b, resamples=resamples, seed=seed, level=level)
        notes.extend(f"{d.metric}: no interval: {d.reason}" for d in diffs if d.low is None and d.reason)
        comparisons.append(TaskComparison(
            task=task, shared=len(shared), only_a=a.n - len(shared), only_b=b.n - len(shared),
            differences=tuple(diffs),
            disagreements=tuple(_disagreements(task, sub_a, run_a, run_b, top)),
            notes=tuple(dict.fromkeys(notes)),
        ))
    return CompareResult(
        label_a=run_a.label, label_b=run_b.label, path_a=str(run_a.path), path_b=str(run_b.path),
        resamples=resamples, seed=seed, tasks=tuple(comparisons), unmatched=tuple(unmatched),
    )


def _p(p: float | None) -> str:
    if p is None:
        return "–"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _diff(value: float) -> str:
    return f"{value:+.3f}" if abs(value) < 1 or not float(value).is_integer() else f"{int(value):+d}"


def compare_section(result: CompareResult, section_id: str = "compare",
                    sample_links: tuple[str, str] | None = None) -> Section:
    """The comparison as a report section: one table of differences, then the disagreements.

    ``sample_links``: the sample browser's keys of runs A and B, when the page has the browser;
    each disagreement then links to its sample with both runs side by side.
    """
    section = Section(section_id, f"Comparison: A = {result.label_a}, B = {result.label_b}")
    rows = []
    for task, d in result.differences:
        rows.append((
            Cell(task, numeric=False), Cell(d.metric, numeric=False), Cell(fmt(d.a)), Cell(fmt(d.b)),
            Cell(_diff(d.diff), bold=d.p_value is not None and d.p_value < 0.05),
            Cell(fmt_interval(d.low, d.high)), Cell(_p(d.p_value)), Cell(str(d.resamples)),
        ))
    shared = "; ".join(f"{t.task}: {t.shared} shared (answered in both), {t.only_a} answered only in A, "
                       f"{t.only_b} only in B" for t in result.tasks)
    section.blocks.append(Table(
        id=f"{section_id}-differences", title="Paired differences (A - B) on shared samples",
        columns=("task", "metric", "A", "B", "A - B", "95 % CI", "p", "resamples"), rows=tuple(rows),
        note=(f"Paired bootstrap, {result.resamples} resamples, seed {result.seed}; two-sided p = "
              "min(1, 2 (min(#d*≤0, #d*≥0) + 1) / (B + 1)). Bold: p < 0.05. " + shared),
    ))
    entries, hrefs = [], []
    for t in result.tasks:
        for dis in t.disagreements:
            if sample_links is not None:
                hrefs.append(samples_fragment(task=t.task, sample=dis.id, run=sample_links[0], compare=sample_links[1]))
            score = (f"{dis.score_key}: A {fmt(dis.score_a)} vs B {fmt(dis.score_b)}" if dis.score_key else "no per-sample score")
            entries.append((f"{t.task} / {dis.id} — {score}", (
                f"input: {dis.prompt_excerpt}", f"gold: {dis.gold}",
                f"A: {dis.answer_a if dis.answer_a is not None else '(no answer)'}",
                f"B: {dis.answer_b if dis.answer_b is not None else '(no answer)'}",
            )))
    title = "Samples where A and B disagree most" + (
        " (each opens both answers side by side in the sample browser)" if sample_links is not None else "")
    section.blocks.append(Examples(f"{section_id}-disagreements", title, tuple(entries), hrefs=tuple(hrefs)))
    return section


def render_compare_terminal(result: CompareResult, console: Console, *, show: int | None = None) -> None:
    """Print the differences table and (up to ``show`` per task) disagreements with rich."""
    table = RichTable(title=f"A = {_escape(result.label_a)}   B = {_escape(result.label_b)}   "
                            f"(A - B, paired bootstrap, {result.resamples} resamples)")
    for name, justify in (("task", "left"), ("metric", "left"), ("A", "right"), ("B", "right"),
                          ("A - B", "right"), ("95 % CI", "right"), ("p", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for task, d in result.differences:
        significant = d.p_value is not None and d.p_value < 0.05
        style = ("green" if d.diff > 0 else "red") if significant else ""
        # metric keys such as bertscore[encoder]_f1 look like rich markup: escape them
        table.add_row(_escape(task), _escape(d.metric), fmt(d.a), fmt(d.b),
                      f"[{style}]{_diff(d.diff)}[/]" if style else _diff(d.diff),
                      fmt_interval(d.low, d.high) or "–", _p(d.p_value))
    console.print(table)
    for t in result.tasks:
        console.print(f"{t.task}: {t.shared} shared samples (answered in both), {t.only_a} answered only in A, "
                      f"{t.only_b} only in B",
                      highlight=False)
        for note in t.notes:
            console.print(f"  note: {note}", highlight=False)
        for dis in t.disagreements[:show]:
            score = _escape(f"{dis.score_key}: A {fmt(dis.score_a)}  B {fmt(dis.score_b)}") if dis.score_key else ""
            body = (f"[bold]input[/]  {_escape(dis.prompt_excerpt)}\n[bold]gold[/]   {_escape(dis.gold)}\n"
                    f"[bold]A[/]      {_escape(dis.answer_a or '(no answer)')}\n"
                    f"[bold]B[/]      {_escape(dis.answer_b or '(no answer)')}")
            console.print(Panel(body, title=_escape(f"{t.task} / {dis.id}"), subtitle=score, title_align="left"))
    if result.unmatched:
        console.print(f"not compared (in one run only, or no samples): {', '.join(result.unmatched)}",
                      highlight=False)


def _escape(text: str) -> str:
    return escape(text)

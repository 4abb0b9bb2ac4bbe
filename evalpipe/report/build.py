"""Entry points: ``build_report`` (``evalpipe report``) and ``compare_runs`` (``evalpipe compare``).

``build_report`` reads run directories, computes bootstrap intervals, the leaderboard, the
operations table, the NER error analysis of span tasks and — for exactly two runs — the paired
comparison, opens with a plain-language summary, ends with a metric glossary, and writes
``report.md``, ``report.html`` (self-contained, with the sample browser: every answer behind the
numbers, which the numbers link to), ``leaderboard.csv`` and, on request, ``samples.parquet`` into
one folder. Nothing here knows a task by name and nothing loads one: suites and a family's
reference boards (published rows, :mod:`evalpipe.report.boards`) are what the runs recorded in
config.json; each board adds its section and marks its rows in leaderboard.csv.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from evalpipe.config import scoring_method
from evalpipe.heap import frozen_heap, give_back_free_memory
from evalpipe.report.bootstrap import TaskBootstrap, bootstrap_task
from evalpipe.report.browser import iter_sample_browser
from evalpipe.report.browser_beside import Beside
from evalpipe.report.browser_beside import start as start_beside
from evalpipe.report.browser_data import BrowserRows, SampleLinks, run_key
from evalpipe.report.calibration import calibration_section
from evalpipe.report.contributions import sections as contributed_sections
from evalpipe.report import contamination as _contamination  # noqa: F401  (registers the probe's section)
from evalpipe.report.boards import board_reference_frame, board_rows, board_section, recorded_boards, split_label
from evalpipe.report.compare import CompareResult, compare_loaded, compare_section
from evalpipe.report.document import (
    Cell, Document, Examples, Html, Paragraph, Plot, Section, Table, fmt, fmt_interval,
)
from evalpipe.report.glossary import glossary_section
from evalpipe.report.html import render_html, utf8, write_html
from evalpipe.report.judge_humans import human_section
from evalpipe.report.judging import judging_section
from evalpipe.report.leaderboard import BOOKKEEPING, Leaderboard, build_leaderboard, shown_metrics
from evalpipe.report.markdown import render_markdown
from evalpipe.report.ner_errors import CATEGORIES, GOLD_CATEGORIES, PRED_CATEGORIES
from evalpipe.report.operations import operations_table, task_operations
from evalpipe.report import costs as _costs  # noqa: F401  (registers the cost section)
from evalpipe.report.pairwise import pairwise_section
from evalpipe.report.plots import metric_bars, parse_failure_bars, score_vs_length
from evalpipe.report.runs import (ReportRun, TaskInfo, add_report_frames, full_samples_frame, load_report_runs,
                                  read_report_runs)
from evalpipe.report.variants import add_rank_stability, robustness_section
from evalpipe.report.summary import summary_section
from evalpipe.report.ties import TaskTies, add_ties, tied_with_best, ties_section
from evalpipe.report.suites import report_suites
from evalpipe.errors import UsageError

__all__ = ["BuildResult", "build_document", "build_report", "compare_runs", "score_length_plots"]

METHOD_TEXT = (
    "Intervals: 95 % percentile bootstrap over samples ({resamples} resamples, seed {seed}). Each resample "
    "recomputes every metric exactly as its task declared it when the run was scored: the per-sample parts "
    "recorded in samples.jsonl (0/1 correctness, tp/fp/fn, token counts, BLEU n-gram statistics …) are summed "
    "over the drawn samples and the metric's aggregation is applied to the sums — a mean, a ratio of sums, "
    "micro or macro P/R/F1, corpus BLEU, a per-dataset average (the method column names it). Nothing is "
    "re-parsed or re-scored and no data file is read. A metric without an interval says why (the sample "
    "count n is fixed by the run). Suite averages and aggregates combine replicate b of every member task. "
    "Point values are the runs' own metrics.json."
)


@dataclass(frozen=True)
class BuildResult:
    html: Path
    markdown: Path
    csv: Path
    parquet: Path | None
    seconds: float


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


def _endpoint(settings: Mapping[str, Any]) -> str:
    """The endpoint and, for a log-likelihood run, how it answered (``completions (log-likelihood)``)."""
    method = scoring_method(settings)
    if method == "generated":
        return str(settings.get("endpoint", ""))
    return f"completions ({method})"


def _runs_section(runs: Sequence[ReportRun]) -> Section:
    rows = []
    for run in runs:
        recorded = run.config
        cfg = recorded.get("config", {})
        rows.append((
            Cell(run.label, numeric=False), Cell(run.model, numeric=False), Cell(str(run.path), numeric=False),
            Cell(run.compat or "default", numeric=False), Cell(", ".join(run.tasks), numeric=False),
            Cell(_endpoint(cfg), numeric=False),
            Cell(str(recorded.get("created", "")), numeric=False),
            Cell(str(recorded.get("git_commit") or ""), numeric=False),
            Cell(str(recorded.get("evalpipe_version", "")), numeric=False),
        ))
    section = Section("runs", "Runs", [Table(
        id="runs", title="Runs", rows=tuple(rows),
        columns=("model", "model name", "run directory", "scoring", "tasks", "endpoint", "created", "git commit",
                 "evalpipe"),
    )])
    for run in runs:
        for note in run.notes:
            section.blocks.append(Paragraph(f"{run.label}: {note}"))
    return section


def _task_metrics_table(task: str, runs: Sequence[ReportRun], boots: dict[str, dict[str, TaskBootstrap]],
                        spec: TaskInfo | None, links: SampleLinks | None = None) -> tuple[Table, list[str]]:
    present: list[str] = []
    for run in runs:
        present.extend(m for m in run.metrics.get(task, {}) if m not in present and m not in BOOKKEEPING)
    shown = shown_metrics(spec, present)
    metrics = [*shown, *[m for m in present if m not in shown]]
    rows: list[tuple[Cell, ...]] = []
    methods: dict[str, set[str]] = {}
    for index, run in enumerate(runs):
        if task not in run.tasks:
            continue
        boot = boots.get(run.label, {}).get(task)
        cells = [Cell(run.label, numeric=False)]
        if links is not None:
            key = run_key(index)
            cells.append(Cell(f"all {links.count(task, key)}", href=links.all(task, key), numeric=False,
                              links=links.row_links(task, key)))
        for metric in metrics:
            value = run.metrics.get(task, {}).get(metric)
            ci = boot.intervals.get(metric) if boot else None
            if value is None and metric in run.metrics.get(task, {}):  # null: not computed (no answered sample)
                why = run.task_summary(task).not_computed.get(metric) or "not computed"
                cells.append(Cell("not computed", title=why))
            elif value is None:
                cells.append(Cell(fmt(value)))
            elif ci is not None and ci.available:
                cells.append(Cell(fmt(value), sub=fmt_interval(ci.low, ci.high)))
            else:
                why = ci.reason if ci is not None and ci.reason else "no bootstrap for this task"
                cells.append(Cell(fmt(value), sub="no interval", title=why))
            if ci:
                methods.setdefault(metric, set()).add(
                    f"{ci.method} ({ci.resamples})" if ci.available else f"none: {ci.reason}")
        rows.append(tuple(cells))
    note = "Interval method (resamples): " + "; ".join(
        f"{m}: {', '.join(sorted(v))}" for m, v in methods.items()) if methods else ""
    if links is not None:
        note = ("Samples: the run's samples of the task and how many have each kind of error (a sample can have "
                "several), each a link to them in the sample browser. " + note)
    table = Table(id=f"metrics-{_slug(task)}", title=f"{task}: metrics with 95 % intervals",
                  columns=("model", *(("samples",) if links is not None else ()), *metrics), rows=tuple(rows),
                  note=note)
    return table, shown


def score_length_plots(task: str, runs: Sequence[ReportRun]) -> list[Plot]:
    """Per-sample ROUGE / BERTScore vs answer length, for tasks with per-sample ROUGE scores."""
    frames = {r.label: r.samples[r.samples["task"] == task] for r in runs if task in r.tasks}
    columns: list[str] = []
    for frame in frames.values():
        columns.extend(c for c in frame.columns if c.startswith("score.") and frame[c].notna().any()
                       and c not in columns)
    if not any("rouge" in c.lower() for c in columns):
        return []
    # one ROUGE (ROUGE-L preferred) and one BERTScore (F1 preferred) per task
    rouge = sorted((c for c in columns if "rouge" in c.lower()),
                   key=lambda c: (not c.lower().replace("_", "").endswith("rougel"), c))
    bert = sorted((c for c in columns if "bertscore" in c.lower()), key=lambda c: (not c.endswith("f1"), c))
    keys = rouge[:1] + bert[:1]
    plots = []
    for key in keys:
        points = {}
        for label, frame in frames.items():
            if key in frame.columns:
                rows = frame[frame[key].notna() & frame["answer_chars"].notna()]
                points[label] = (rows["answer_chars"].astype(float).tolist(), rows[key].astype(float).tolist())
        name = key[len("score."):]
        plots.append(Plot(id=f"plot-length-{_slug(task)}-{_slug(name)}", title=f"{task}: {name} vs answer length",
                          svg=score_vs_length(task, name, points)))
    return plots


def _ner_blocks(task: str, runs: Sequence[ReportRun], per_category: int,
                links: SampleLinks | None = None) -> list[Table | Examples]:
    blocks: list[Table | Examples] = []
    for i, run in enumerate(runs):
        key = run_key(i)
        analysis = run.ner_analysis(task, per_category)
        if analysis is None:
            continue
        rows = []
        for side, categories in (("gold", GOLD_CATEGORIES), ("pred", PRED_CATEGORIES)):
            for label in [None, *analysis.labels()]:
                counts = {c: analysis.total(side, c, label) for c in categories}
                total = sum(counts.values())
                if label is not None and total == 0:
                    continue
                # the "all types" row links each category to the samples holding such entities
                linked = {c: links.outcome(task, key, c) for c in counts if counts[c]} \
                    if links is not None and label is None else {}
                rows.append((
                    Cell("gold entities" if side == "gold" else "predicted entities", numeric=False),
                    Cell(label or "all types", numeric=False), Cell(str(total)),
                    *(Cell(str(counts[c]), href=linked.get(c, "")) if c in counts else Cell("–") for c in CATEGORIES),
                ))
        slug = f"ner-{_slug(task)}-{i}"
        blocks.append(Table(
            id=slug, title=f"{task} — {run.label}: entity outcomes", rows=tuple(rows),
            columns=("side", "type", "total", *CATEGORIES),
            note="Each entity in exactly one category; precedence correct > type > boundary > boundary+type > "
                 "missed/spurious (see evalpipe.report.ner_errors)."
                 + (" The counts of all types link to the samples holding such entities." if links else ""),
        ))
        entries, hrefs = [], []
        for category, examples in analysis.examples.items():
            for ex in examples:
                other = f" | {'gold' if ex.side == 'pred' else 'pred'}: “{ex.counterpart_text}” ({ex.counterpart.label})" \
                    if ex.counterpart else ""
                entries.append((f"{category} — {ex.sample_id}",
                                (f"{ex.side}: “{ex.text}” ({ex.span.label}){other}", f"context: {ex.context}")))
                hrefs.append(links.sample(task, ex.sample_id, key) if links is not None else "")
        blocks.append(Examples(f"{slug}-examples", f"{task} — {run.label}: examples of each error", tuple(entries),
                               hrefs=tuple(hrefs) if links is not None else ()))
    return blocks


def _timing_table(runs: Sequence[ReportRun], boots: dict[str, dict[str, TaskBootstrap]]) -> Table:
    rows = []
    for run in runs:
        for task, boot in boots.get(run.label, {}).items():
            methods: dict[str, list[str]] = {}
            for interval in boot.intervals.values():
                methods.setdefault(interval.method, []).append(interval.metric)
            reasons = "; ".join(f"{m}: {why}" for m, why in boot.replicates.reasons.items())
            rows.append((
                Cell(run.label, numeric=False), Cell(task, numeric=False), Cell(str(boot.n)),
                Cell("; ".join(f"{k}: {', '.join(v)}" for k, v in methods.items()), numeric=False),
                Cell(f"{boot.seconds:.2f}"), Cell(f"no interval — {reasons}" if reasons else "", numeric=False),
            ))
    return Table(id="bootstrap-timing", title="Bootstrap: method per metric and time", rows=tuple(rows),
                 columns=("model", "task", "n", "method: metrics", "seconds", "notes"))


def _specs(runs: Sequence[ReportRun]) -> dict[str, TaskInfo]:
    """What each task's runs recorded about it (the first run that has the task wins)."""
    out: dict[str, TaskInfo] = {}
    for run in runs:
        for task, info in run.info.items():
            out.setdefault(task, info)
    return out


def _browser_pieces(rows: BrowserRows, start: int = 0, stop: int | None = None) -> Callable[[], Iterable[str]]:
    """The browser's HTML, its rows made (and serialised) as it is written, never held all at once;
    with ``start``/``stop``, only the part of the page for those rows (see iter_sample_browser)."""
    end = len(rows) if stop is None else stop
    return lambda: iter_sample_browser(rows.header, rows.pieces(start, end), len(rows), rows=(start, end))


def _browser_parts(rows: BrowserRows) -> Callable[[int], tuple[Callable[[], Iterable[str]], Callable[[], Iterable[str]]]]:
    """The browser's HTML as two parts, split at a row (for browser_beside.start)."""
    return lambda split: (_browser_pieces(rows, 0, split), _browser_pieces(rows, split))


def _samples_section(runs: Sequence[ReportRun], specs: dict[str, TaskInfo], rows: BrowserRows | None = None,
                     beside: Beside | None = None) -> tuple[Section, SampleLinks]:
    """The sample browser as a section of its own, and the links into it for the other sections;
    its HTML from ``beside`` (:mod:`evalpipe.report.browser_beside`, made from ``rows``) when given."""
    rows = rows if rows is not None else BrowserRows(runs, specs)
    n = len(rows)
    text = (f"The sample browser ({n} samples × {len(runs)} run{'s' if len(runs) > 1 else ''}) is in report.html: "
            "open report.html#samples, or a view such as report.html#samples?task=TASK&outcome=missed.")
    block = Html("", text, pieces=beside.pieces if beside is not None else _browser_pieces(rows))
    return Section("samples", "Samples", [block], own_element=True), rows.links()


def build_document(runs: Sequence[ReportRun], boots: dict[str, dict[str, TaskBootstrap]], board: Leaderboard,
                   *, resamples: int, seed: int, compare: CompareResult | None = None,
                   ner_examples: int = 3, level: float = 0.95, browser: bool = True,
                   ties: dict[str, TaskTies] | None = None,
                   browser_beside: tuple[BrowserRows, Beside] | None = None) -> Document:
    """Every section of the report, as data (see :mod:`evalpipe.report.document`).

    ``browser``: include the sample browser (and the links from numbers into it); ``browser_beside``:
    its rows, and the child writing them (:mod:`evalpipe.report.browser_beside`).
    """
    specs = _specs(runs)
    title = "evalpipe report: " + ", ".join(r.label for r in runs)
    doc = Document(title)
    samples, links = _samples_section(runs, specs, *(browser_beside or ())) if browser else (None, None)
    ops = [task_operations(run, task) for run in runs for task in run.tasks]
    shared = compare if compare is not None and any(t.shared for t in compare.tasks) else None
    doc.sections.append(summary_section(runs, boots, shared, specs, ops))
    doc.sections.append(_runs_section(runs))
    leaderboard = Section("leaderboard", "Leaderboard", [board.to_table()])
    doc.sections.append(leaderboard)
    tied = ties_section(ties or {})
    if tied is not None:
        doc.sections.append(tied)
    for reference in recorded_boards(runs):
        doc.sections.append(board_section(reference, board_rows(reference, runs, boots, level),
                                          split_label(reference, runs)))
    for contribution in contributed_sections():
        if contribution.applies(runs):
            doc.sections.append(contribution.section(runs, boots, level))
    robustness = robustness_section(runs, resamples=resamples, seed=seed, level=level)  # prompt conditions
    if robustness is not None:
        doc.sections.append(robustness)

    tasks: list[str] = []
    for run in runs:
        tasks.extend(t for t in run.tasks if t not in tasks)
    for task in tasks:
        section = Section(f"task-{_slug(task)}", f"Task {task}")
        table, shown = _task_metrics_table(task, runs, boots, specs.get(task), links)
        section.blocks.append(table)
        series = {}
        for run in runs:
            if task in run.tasks:
                boot = boots.get(run.label, {}).get(task)
                series[run.label] = {
                    m: (run.metrics.get(task, {}).get(m),
                        *((boot.intervals[m].low, boot.intervals[m].high) if boot and m in boot.intervals
                          and boot.intervals[m].available else (None, None)))
                    for m in shown
                }
        if any(isinstance(v[0], (int, float)) for values in series.values() for v in values.values()):
            section.blocks.append(Plot(f"plot-metrics-{_slug(task)}", f"{task}: metrics with 95 % intervals",
                                       metric_bars(task, shown, series)))
        else:  # nothing to draw: say why instead of empty axes
            section.blocks.append(Paragraph(f"No metrics plot for {task}: no metric was computed "
                                            "(no answered samples; see the table above)."))
        section.blocks.extend(score_length_plots(task, runs))
        ner = _ner_blocks(task, runs, ner_examples, links)
        if ner:
            section.blocks.append(Paragraph("NER error analysis: every gold and every predicted entity classified."))
            section.blocks.extend(ner)
        doc.sections.append(section)

    calibration = calibration_section(runs, boots)
    if calibration is not None:
        doc.sections.append(calibration)

    judges = judging_section(runs, boots, resamples=resamples, seed=seed, level=level, top=min(ner_examples, 5))
    if judges is not None:
        doc.sections.append(judges)
    humans = human_section(runs, boots, level)
    if humans is not None:
        doc.sections.append(humans)
    pairwise = pairwise_section(runs, resamples=resamples, seed=seed, level=level)
    if pairwise is not None:
        doc.sections.append(pairwise)

    rates = {r.label: {o.task: o.parse_failures / o.n if o.n else None for o in ops if o.run == r.label} for r in runs}
    errors = {r.label: {o.task: o.error_rate for o in ops if o.run == r.label} for r in runs}
    doc.sections.append(Section("operations", "Operations", [
        operations_table(ops),
        Plot("plot-parse-failures", "Parse failures and request errors", parse_failure_bars(rates, errors)),
    ]))
    if shared is not None:
        doc.sections.append(compare_section(shared, sample_links=(run_key(0), run_key(1)) if links else None))
    if samples is not None:
        doc.sections.append(samples)
    doc.sections.append(glossary_section(runs, boots, specs))
    doc.sections.append(Section("method", "Method", [
        Paragraph(METHOD_TEXT.format(resamples=resamples, seed=seed)), _timing_table(runs, boots)]))
    return doc


def _write_text(path: Path, text: str) -> None:
    """A report file as UTF-8; a lone surrogate of a model's answer (kept exactly in the run) is shown
    as U+FFFD — a report is for reading, and UTF-8 cannot hold the surrogate itself."""
    path.write_bytes(utf8(text))


def build_report(runs: Sequence[Path], out: Path, *, resamples: int = 1000, seed: int = 0,
                 compat: str | None = None, parquet: bool = False, level: float = 0.95,
                 top: int = 10) -> BuildResult:
    """Write ``report.md``, ``report.html``, ``leaderboard.csv`` (and ``samples.parquet``) into ``out``.

    Reads only the run directories (see :mod:`evalpipe.report.runs`). With exactly two runs the
    report includes their paired comparison (A = first run) when they share samples. Raises
    ``FileNotFoundError`` for a directory that is not a scored run, and ``RuntimeError`` for
    ``parquet=True`` without pyarrow (before any work).
    """
    start = time.perf_counter()
    if not runs:
        raise UsageError("no run directory given")
    if parquet:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UsageError("--parquet needs the pyarrow package: pip install pyarrow") from None
    loaded = read_report_runs([Path(r) for r in runs], compat)
    # the records live until the end: out of the collector's sight (evalpipe.heap) — in a child too, so
    # that no collection there walks (and copies) the parent's records
    with frozen_heap():
        # the frames first: made after the fork below, the frame values freed and the columns made
        # would be pages this process copies from the child's (26 MB more of the two at 94,000 NCBI
        # samples, bench/memory.py sixth round)
        add_report_frames(loaded, compat)
        # the sample browser written beside the rest where a fork is wanted (evalpipe.report.browser_beside):
        # its child starts before the bootstraps, which it does not need
        rows = BrowserRows(loaded, _specs(loaded))
        rows.links()  # counted here, before the fork: they read every record (see BrowserRows.links)
        for run in loaded:  # so is the NER analysis (ReportRun.ner_analysis)
            for task in run.tasks:
                run.ner_analysis(task, top)
        # the C heap's free pages given back before the fork: kept, the parent's next allocations would
        # reuse them, and the kernel would copy each for the child too (evalpipe.heap)
        give_back_free_memory()
        # rows made of the runs' written texts read no record: the child makes them all, and quickly
        # (evalpipe.report.browser_written); else it makes most, and the parent the rest
        beside = start_beside(_browser_pieces(rows), len(rows), None if rows.written() else _browser_parts(rows))
        try:
            return _build_loaded(loaded, Path(out), (rows, beside), resamples=resamples, seed=seed,
                                 parquet=parquet, level=level, top=top, start=start)
        finally:
            beside.close()


def _build_loaded(loaded: list[ReportRun], out: Path, browser: tuple[BrowserRows, Beside], *, resamples: int,
                  seed: int, parquet: bool, level: float, top: int, start: float) -> BuildResult:
    boots = {
        run.label: {task: bootstrap_task(sample, resamples=resamples, seed=seed, level=level)
                    for task, sample in run.resample.items()}
        for run in loaded
    }
    give_back_free_memory()  # the resamples' blocks (tens of MB at 94,000 samples) are gone
    compare = (compare_loaded(loaded[0], loaded[1], resamples=resamples, seed=seed, top=top, level=level)
               if len(loaded) == 2 else None)
    ties = tied_with_best(loaded, _specs(loaded), resamples=resamples, seed=seed)
    board = add_ties(add_rank_stability(build_leaderboard(loaded, boots, report_suites(loaded), _specs(loaded), level),
                                        loaded), ties)
    doc = build_document(loaded, boots, board, resamples=resamples, seed=seed, compare=compare, level=level,
                         ner_examples=top, ties=ties, browser_beside=browser)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    html_path, md_path, csv_path = out / "report.html", out / "report.md", out / "leaderboard.csv"
    write_html(doc, html_path)  # piece by piece: the page (tens of MB) is never one string
    _write_text(md_path, render_markdown(doc))
    frame = board.to_frame()
    for reference in recorded_boards(loaded):
        frame = pd.concat([frame, board_reference_frame(reference, board_rows(reference, loaded, boots, level))],
                          ignore_index=True)
    # 10 significant digits: 0.771, not 0.7709999999999999 (float noise is not information)
    frame.to_csv(csv_path, index=False, float_format="%.10g")
    parquet_path = None
    if parquet:
        from evalpipe.frames import write_parquet

        parquet_path = write_parquet(pd.concat([full_samples_frame(r) for r in loaded], ignore_index=True),
                                     out / "samples.parquet")
    return BuildResult(html_path, md_path, csv_path, parquet_path, time.perf_counter() - start)


def compare_runs(a: Path, b: Path, *, resamples: int = 1000, seed: int = 0, top: int = 10,
                 out: Path | None = None, compat: str | None = None, level: float = 0.95) -> CompareResult:
    """Paired comparison of run ``a`` against run ``b``; with ``out``, also compare.md/compare.html."""
    run_a, run_b = load_report_runs([Path(a), Path(b)], compat)
    result = compare_loaded(run_a, run_b, resamples=resamples, seed=seed, top=top, level=level)
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        doc = Document(f"evalpipe compare: {result.label_a} vs {result.label_b}", [compare_section(result)])
        _write_text(out / "compare.html", render_html(doc))
        _write_text(out / "compare.md", render_markdown(doc))
    return result

"""The "Calibration" section: is a model's confidence worth anything?

For every task whose runs declare an ``ece`` aggregation (a log-likelihood scoring: option
probabilities exist), per model: ECE and Brier score with their bootstrap intervals, the area under
the accuracy–coverage curve (and AURC = 1 − AUACC), a reliability diagram (per confidence bin:
accuracy against mean confidence, the diagonal is perfect calibration) and the accuracy–coverage
curve (selective prediction). Everything is read from the samples' calibration parts, which are the
very parts the ECE's bootstrap resamples (definitions: :mod:`evalpipe.metrics.calibration`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from evalpipe.metrics.calibration import BINS, PREFIX, CalibrationBin, accuracy_coverage
from evalpipe.report.bootstrap import ResampleTask, TaskBootstrap
from evalpipe.report.document import Cell, Paragraph, Plot, Section, Table, fmt, fmt_interval
from evalpipe.report.plots import figure, to_svg
from evalpipe.report.runs import ReportRun

__all__ = ["calibrated_tasks", "calibration_section", "sample_calibration"]

_PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


def calibrated_tasks(runs: Sequence[ReportRun]) -> list[str]:
    """Tasks (in run order) for which some run declares an ``ece`` aggregation."""
    out: list[str] = []
    for run in runs:
        for task, sample in run.resample.items():
            agg = sample.aggregations.get("ece")
            if agg is not None and agg.kind == "ece" and task not in out:
                out.append(task)
    return out


def _column(task: ResampleTask, key: str) -> np.ndarray:
    return task.parts[:, task.keys.index(key)] if key in task.keys else np.zeros(task.n)


def sample_calibration(task: ResampleTask, prefix: str = PREFIX, bins: int = BINS) -> tuple[np.ndarray, np.ndarray, list[CalibrationBin]]:
    """``(confidences, correct, reliability bins)`` of the samples with option probabilities."""
    scored = _column(task, f"{prefix}scored") > 0
    confidence = sum((_column(task, f"{prefix}conf:{b}") for b in range(bins)), np.zeros(task.n))
    correct = sum((_column(task, f"{prefix}correct:{b}") for b in range(bins)), np.zeros(task.n))
    out = []
    for b in range(bins):
        n = float(_column(task, f"{prefix}n:{b}").sum())
        out.append(CalibrationBin(b / bins, (b + 1) / bins, int(round(n)),
                                  float(_column(task, f"{prefix}correct:{b}").sum()) / n if n else None,
                                  float(_column(task, f"{prefix}conf:{b}").sum()) / n if n else None))
    return confidence[scored], correct[scored], out


def _figures(task: str, curves: Mapping[str, tuple[list[CalibrationBin], list[float], list[float]]]) -> tuple[str, str]:
    reliability = figure(figsize=(4.6, 4.2))
    ax = reliability.add_subplot()
    ax.plot([0, 1], [0, 1], color="#888888", linestyle="--", linewidth=0.8, label="perfect calibration")
    coverage = figure(figsize=(4.6, 4.2))
    cx = coverage.add_subplot()
    for i, (label, (bins, xs, ys)) in enumerate(curves.items()):
        colour = _PALETTE[i % len(_PALETTE)]
        # a bin with samples has both means (only an empty bin has None)
        filled = [(b.confidence, b.accuracy, b.n) for b in bins
                  if b.n and b.confidence is not None and b.accuracy is not None]
        ax.plot([c for c, _, _ in filled], [a for _, a, _ in filled], marker="o", color=colour, label=label)
        for c, a, n in filled:
            ax.annotate(str(n), (c, a), fontsize=6, xytext=(3, -8), textcoords="offset points")
        cx.plot(xs, ys, color=colour, label=label)
    ax.set_xlim(0, 1), ax.set_ylim(0, 1)
    ax.set_xlabel("mean confidence in bin (10 equal-width bins)"), ax.set_ylabel("accuracy in bin")
    ax.set_title(f"{task}: reliability diagram (numbers: samples in bin)", fontsize=9)
    ax.legend(fontsize=7)
    cx.set_xlim(0, 1), cx.set_ylim(0, 1.02)
    cx.set_xlabel("coverage (share of most confident answers kept)"), cx.set_ylabel("accuracy of the kept answers")
    cx.set_title(f"{task}: accuracy–coverage (selective prediction)", fontsize=9)
    cx.legend(fontsize=7)
    return to_svg(reliability, f"reliability-{_slug(task)}"), to_svg(coverage, f"coverage-{_slug(task)}")


def calibration_section(runs: Sequence[ReportRun], boots: Mapping[str, Mapping[str, TaskBootstrap]]) -> Section | None:
    """The section, or None when no run has option probabilities."""
    tasks = calibrated_tasks(runs)
    if not tasks:
        return None
    section = Section("calibration", "Calibration", [Paragraph(
        "Option probabilities are the softmax of the options' summed log-probabilities (log-likelihood scoring); "
        "confidence is the largest. ECE: 10 equal-width confidence bins on [0, 1] (bin b = min(⌊10c⌋, 9)), "
        "Σ_b (n_b/N)·|accuracy_b − mean confidence_b|; Brier: mean over questions of Σ_options (p − 1[gold])². "
        "Both over the questions with option probabilities, lower is better, with 95 % bootstrap intervals "
        "(ECE is resampled from its per-bin counts, correct counts and confidence sums). AUACC: area under the "
        "accuracy–coverage curve, the mean over k = 1…N of the accuracy of the k most confident answers (equal "
        "confidences as one group); AURC = 1 − AUACC. A confidence worth nothing gives AUACC ≈ accuracy.")])
    for task in tasks:
        rows, curves = [], {}
        for run in runs:
            sample = run.resample.get(task)
            if sample is None or "ece" not in sample.aggregations:
                continue
            confidence, correct, bins = sample_calibration(sample)
            xs, ys, area = accuracy_coverage(confidence.tolist(), correct.tolist())
            curves[run.label] = (bins, xs, ys)
            boot = boots.get(run.label, {}).get(task)
            cells = [Cell(run.label, numeric=False), Cell(str(len(confidence)))]
            for metric in ("accuracy", "ece", "brier"):
                ci = boot.intervals.get(metric) if boot else None
                cells.append(Cell(fmt(run.metrics.get(task, {}).get(metric)),
                                  sub=fmt_interval(ci.low, ci.high) if ci is not None and ci.available else ""))
            accuracy = float(correct.mean()) if len(correct) else None
            cells += [Cell(fmt(area if len(confidence) else None)), Cell(fmt(1 - area if len(confidence) else None)),
                      Cell(fmt(None if accuracy is None else area - accuracy))]
            rows.append(tuple(cells))
        section.blocks.append(Table(
            id=f"calibration-{_slug(task)}", title=f"{task}: calibration",
            columns=("model", "scored", "accuracy", "ece", "brier", "AUACC", "AURC", "AUACC − accuracy"),
            rows=tuple(rows),
            note="scored: questions with option probabilities (accuracy counts every question; AUACC − accuracy uses "
                 "the scored ones). Brackets: 95 % bootstrap interval over questions."))
        reliability_svg, coverage_svg = _figures(task, curves)
        section.blocks.append(Plot(f"plot-reliability-{_slug(task)}", f"{task}: Reliability diagram", reliability_svg))
        section.blocks.append(Plot(f"plot-coverage-{_slug(task)}", f"{task}: accuracy–coverage curve", coverage_svg))
    return section

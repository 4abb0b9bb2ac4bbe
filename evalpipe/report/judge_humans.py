"""The "Judges against human ratings" section: do the LLM judges agree with the clinicians?

For each judged task of each run whose judging was given human ratings (``judge --human-ratings``,
:mod:`evalpipe.judging.humans`), per criterion: the humans' own agreement (``human_alpha``), the
agreement of humans and jury together (``judge_human_alpha``) and of humans with each judge, the
jury's bias against the humans, each with its bootstrap interval; and the difference
``judge_human_alpha − human_alpha`` on the same resamples (the same drawn samples for both).

The verdict: the jury agrees with the humans *as well as the humans agree with each other* when the
95 % interval of that difference reaches 0 or above (adding the judges as coders does not lower the
agreement detectably); *less well* when the whole interval is below 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from evalpipe.judging import humans as _humans  # noqa: F401 (registers the "mean_difference" aggregation)
from evalpipe.report.bootstrap import TaskBootstrap, percentile_interval
from evalpipe.report.document import Cell, Paragraph, Section, Table, fmt, fmt_interval
from evalpipe.report.runs import ReportRun

__all__ = ["human_section"]

_ALPHA = re.compile(r"human_alpha_(.+)\Z")


def _criteria(metrics: Mapping[str, object]) -> list[str]:
    return [m.group(1) for name in metrics if (m := _ALPHA.fullmatch(name)) and not name.startswith("judge")]


def _judges(metrics: Mapping[str, object], criterion: str) -> list[str]:
    pattern = re.compile(rf"judge\[(.+)\]_human_alpha_{re.escape(criterion)}\Z")
    return [m.group(1) for name in metrics if (m := pattern.fullmatch(name))]


def _value(metrics: Mapping[str, object], boot: TaskBootstrap | None, name: str) -> Cell:
    value = metrics.get(name)
    ci = boot.intervals.get(name) if boot is not None else None
    sub = fmt_interval(ci.low, ci.high) if ci is not None and ci.available else ""
    return Cell(fmt(value) if isinstance(value, (int, float)) else "not computed", sub=sub)


def _verdict(boot: TaskBootstrap | None, criterion: str, level: float) -> tuple[str, str]:
    """(difference interval text, verdict sentence)."""
    values = boot.replicates.values if boot is not None else {}
    jury, humans = values.get(f"judge_human_alpha_{criterion}"), values.get(f"human_alpha_{criterion}")
    if jury is None or humans is None:
        return "–", "not computed (an alpha has no resamples)"
    ci = percentile_interval(np.asarray(jury) - np.asarray(humans), level)
    if ci is None:
        return "–", "not computed (undefined on every resample)"
    text = fmt_interval(*ci)
    if ci[1] >= 0:
        return text, "the jury agrees with the humans as well as the humans agree with each other"
    return text, "the jury agrees with the humans less well than the humans agree with each other"


def human_section(runs: Sequence[ReportRun], boots: Mapping[str, Mapping[str, TaskBootstrap]],
                  level: float = 0.95) -> Section | None:
    """The section, or None when no judging had human ratings."""
    blocks: list[Table | Paragraph] = []
    for run in runs:
        for task in run.tasks:
            metrics = run.metrics.get(task, {})
            criteria = _criteria(metrics)
            if not criteria:
                continue
            boot = boots.get(run.label, {}).get(task)
            rows, sentences = [], []
            for c in criteria:
                diff, verdict = _verdict(boot, c, level)
                per_judge = "; ".join(
                    f"{j}: {fmt(metrics.get(f'judge[{j}]_human_alpha_{c}'))} (bias "
                    f"{fmt(metrics.get(f'judge[{j}]_human_bias_{c}'))})" for j in _judges(metrics, c))
                rows.append((Cell(c, numeric=False), _value(metrics, boot, f"human_alpha_{c}"),
                             _value(metrics, boot, f"judge_human_alpha_{c}"), Cell(diff),
                             _value(metrics, boot, f"judge_human_bias_{c}"), Cell(per_judge, numeric=False),
                             Cell(verdict, numeric=False)))
                sentences.append(f"{c}: {verdict}.")
            blocks.append(Table(
                id=f"humans-{re.sub(r'[^A-Za-z0-9_-]+', '-', task)}-{len(blocks)}",
                title=f"{task} — {run.label}: judges against human ratings",
                columns=("criterion", "humans' alpha", "humans + jury alpha", "difference (95 % CI)",
                         "jury bias (jury − humans)", "per judge: humans + judge alpha (bias)", "verdict"),
                rows=tuple(rows),
                note="Krippendorff's alpha (ordinal), samples as units, over the samples the humans rated; brackets: "
                     "95 % bootstrap intervals over samples. Difference: humans + jury alpha − humans' alpha on the "
                     "same resamples."))
            blocks.append(Paragraph(f"{task} — {run.label}: " + " ".join(sentences)))
    if not blocks:
        return None
    return Section("judge-humans", "Judges against human ratings", [Paragraph(
        "Human raters (clinicians) rated some of the judged answers on the rubric's criteria and scale. Humans' "
        "alpha is how well they agree among themselves — the ceiling for a judge; humans + jury alpha adds every "
        "judge as a further coder. If the judges rated like one more human, it stays where the humans' alpha is; "
        "the verdict compares the two on the same resamples. Bias: mean over samples of the judges' mean rating "
        "minus the humans' mean rating (above 0: the jury is more lenient)."), *blocks])

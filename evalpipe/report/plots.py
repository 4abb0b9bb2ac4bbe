"""Report figures as inline SVG text (matplotlib, no pyplot, no display, no network).

Figures are built on :class:`matplotlib.figure.Figure` directly, so importing this module never
changes the global backend of a notebook; text is kept as SVG text (smaller than paths) and each
figure gets its own hash salt, so element ids of two figures in one HTML page never collide and
the same data gives the same bytes.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["figure", "metric_bars", "metric_bars_figure", "parse_failure_bars", "parse_failure_figure", "score_vs_length",
           "to_svg"]

_PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
            "#ccb974", "#64b5cd")


def figure(**options: Any) -> Figure:
    """A new :class:`matplotlib.figure.Figure`. matplotlib is imported here, when a report first draws
    (~0.3 s): a report of a large run reads its records first, beside a child that needs none of it
    (evalpipe.report.read_beside), and draws only after the reading."""
    from matplotlib.figure import Figure

    return Figure(**options)


def to_svg(fig: Figure, salt: str) -> str:
    """The figure as an ``<svg>`` element: no XML declaration, DOCTYPE or RDF metadata, and every
    element id prefixed with ``salt`` (with the references to it), so figures sharing one HTML
    page have distinct ids."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buffer.getvalue()
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text[text.index("<svg"):], flags=re.S).strip()
    prefix = _slug(salt)
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}-{m.group(1)}"', text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}-{m.group(1)})" if m.group(1) in ids else m.group(0), text)
    return re.sub(r'href="#([^"]+)"', lambda m: f'href="#{prefix}-{m.group(1)}"' if m.group(1) in ids else m.group(0), text)


def _colour(i: int) -> str:
    return _PALETTE[i % len(_PALETTE)]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text)


def metric_bars(task: str, metrics: Sequence[str],
                series: Mapping[str, Mapping[str, tuple[float | None, float | None, float | None]]]) -> str:
    """:func:`metric_bars_figure` as inline SVG."""
    return to_svg(metric_bars_figure(task, metrics, series), f"bars-{_slug(task)}")


def metric_bars_figure(task: str, metrics: Sequence[str],
                       series: Mapping[str, Mapping[str, tuple[float | None, float | None, float | None]]]) -> Figure:
    """Grouped bars: one group per metric, one bar per model, whiskers = 95 % interval.

    ``series``: model → metric → (value, low, high); a missing value draws no bar. A value without
    an interval (low or high None) is drawn **without** a whisker — never as a zero-width one, which
    would look certain — as a hatched, paler bar marked "no CI" (the table says why).
    """
    models = list(series)
    width = 0.8 / max(1, len(models))
    fig = figure(figsize=(max(4.0, 1.2 * len(metrics) * max(1, len(models)) ** 0.5 + 2), 3.2))
    ax = fig.add_subplot()
    x = np.arange(len(metrics))
    missing_any = False
    for i, model in enumerate(models):
        offsets = x + (i - (len(models) - 1) / 2) * width
        values, has_ci = [], []
        lower, upper = [], []
        for metric in metrics:
            value, low, high = series[model].get(metric, (None, None, None))
            value = np.nan if value is None else float(value)
            known = low is not None and high is not None and value == value
            values.append(value)
            has_ci.append(known)
            lower.append(max(0.0, value - low) if known else 0.0)  # type: ignore[operator]
            upper.append(max(0.0, high - value) if known else 0.0)  # type: ignore[operator]
        with_ci = np.array(has_ci, dtype=bool)
        heights = np.array(values, dtype=float)
        ax.bar(offsets[with_ci], heights[with_ci], width, label=model if with_ci.any() else None, color=_colour(i))
        if with_ci.any():
            ax.errorbar(offsets[with_ci], heights[with_ci], yerr=np.array([lower, upper])[:, with_ci], fmt="none",
                        ecolor="black", elinewidth=1, capsize=3)
        bare = ~with_ci & ~np.isnan(heights)
        if bare.any():
            missing_any = True
            ax.bar(offsets[bare], heights[bare], width, color=_colour(i), alpha=0.45, hatch="//",
                   edgecolor="white", label=None if with_ci.any() else model)
            for xpos, height in zip(offsets[bare], heights[bare]):
                ax.annotate("no CI", (xpos, height), xytext=(0, 2), textcoords="offset points", ha="center",
                            va="bottom", fontsize=7, color="#555")
    ax.set_xticks(x, metrics, rotation=20 if len(metrics) > 4 else 0)
    ax.set_title(task)
    ax.set_ylabel("value (whiskers: 95 % CI)" + ("; hatched: no CI" if missing_any else ""), fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def parse_failure_bars(rates: Mapping[str, Mapping[str, float | None]], errors: Mapping[str, Mapping[str, float | None]]) -> str:
    """:func:`parse_failure_figure` as inline SVG."""
    return to_svg(parse_failure_figure(rates, errors), "parse-failures")


def parse_failure_figure(rates: Mapping[str, Mapping[str, float | None]],
                         errors: Mapping[str, Mapping[str, float | None]]) -> Figure:
    """Per task, one stacked bar per model: parse failures (solid) and request errors (hatched),
    both as shares of *all* samples, so the bar is the share without a usable answer. The axis is
    always 0–100 %, so a small share looks small.

    ``rates`` / ``errors``: model → task → share of all samples (0..1).
    """
    models = list(rates)
    tasks: list[str] = []
    for values in rates.values():
        tasks.extend(t for t in values if t not in tasks)
    width = 0.8 / max(1, len(models))
    fig = figure(figsize=(max(4.0, 1.1 * len(tasks) * max(1, len(models)) ** 0.5 + 2), 3.2))
    ax = fig.add_subplot()
    x = np.arange(len(tasks))
    for i, model in enumerate(models):
        offset = x + (i - (len(models) - 1) / 2) * width
        parse = [100 * (rates[model].get(t) or 0.0) for t in tasks]
        failed = [100 * (errors.get(model, {}).get(t) or 0.0) for t in tasks]
        ax.bar(offset, parse, width, label=f"{model}: parse failures", color=_colour(i))
        ax.bar(offset, failed, width, bottom=parse, label=f"{model}: request errors", color=_colour(i),
               alpha=0.4, hatch="//")
    ax.set_xticks(x, tasks, rotation=20 if len(tasks) > 4 else 0)
    # a fixed 0-100 % axis: 6 % must look like 6 %, not fill the plot as an autoscaled axis would
    ax.set_ylim(0, 100)
    ax.set_ylabel("% of samples")
    ax.set_title("Parse failures and request errors")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def score_vs_length(task: str, score_key: str, points: Mapping[str, tuple[Sequence[float], Sequence[float]]]) -> str:
    """Scatter of a per-sample score against answer length, one colour per model.

    ``points``: model → (answer lengths in characters, per-sample scores).
    """
    fig = figure(figsize=(5.5, 3.4))
    ax = fig.add_subplot()
    for i, (model, (lengths, scores)) in enumerate(points.items()):
        ax.scatter(lengths, scores, s=8, alpha=0.5, color=_colour(i), label=model, linewidths=0)
    ax.set_xlabel("answer length (characters)")
    ax.set_ylabel(score_key)
    ax.set_title(f"{task}: {score_key} vs. answer length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return to_svg(fig, f"length-{_slug(task)}-{_slug(score_key)}")

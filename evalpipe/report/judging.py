"""The report's "Judges" section: who judged with which rubric, the ratings with intervals, agreement,
and the two bias checks a reviewer asks about LLM judges. Reads only the run directories.

**Panels.** Per run and task: the judges (and whether each is local), the rubric with its sha256,
criteria and scale, how many samples were judged, rated, left unanswered by the evaluated model,
and each judge's failures (unusable after a retry / no reply) and retries.

**Ratings.** Per criterion: the jury's mean (``judge_<c>``), Krippendorff's alpha (``judge_alpha_<c>``)
and each judge's mean (``judge[<j>]_<c>``), with the run's 95 % bootstrap intervals — the same
intervals as every metric (resampling samples and recomputing each metric from its declared
aggregation: a mean of summed ratings, alpha from summed coincidences). Judges' means side by side
show their severity: a jury average hides a judge that is systematically harsher.

**Length bias.** Spearman's ρ between a judge's rating (and the jury's mean) and the length of the
judged answer in characters, over the rated samples, with a 95 % percentile bootstrap interval
(samples resampled, ρ recomputed with average ranks; resamples where either side is constant are
left out). ρ > 0 means longer answers get higher ratings — a known tendency of LLM judges. It is
not proof of bias by itself (longer answers can be more complete), so it is shown per criterion:
a clarity rating that rises with length deserves a look.

**Judges vs overlap metrics.** Spearman's ρ between the jury's mean rating and each per-sample
reference-based score of the task (ROUGE, BERTScore, …), with the same bootstrap: how far the judges
and the overlap metrics rank answers alike. The samples where the judges disagree most (largest
range of ratings on a criterion) are listed with each judge's ratings and rationale, for auditing.

**Self-preference.** A judge that is also an evaluated model is flagged — matched by model name
(lower case, last path component, without ``.gguf`` or evalpipe's local fingerprint suffix), by
served model id, or by local weights. With a second run judged by the same judge and at least one
other judge on shared samples, the flag comes with an estimate: per shared sample
``d = (J_own − J_other) − (O_own − O_other)``, where ``J`` is the flagged judge's rating and ``O`` the
mean rating of the other judges, on the judge's own model's answer and the other run's; the mean of
``d`` with a paired bootstrap interval. ``d > 0``: the judge favours its own model by more than the
other judges see a difference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evalpipe.judging import judge_metrics as _aggregate  # noqa: F401  (registers the rating_mean aggregation)
from evalpipe.judging import agreement as _agreement  # noqa: F401  (registers the krippendorff_alpha aggregation)
from evalpipe.judging.panel import model_key
from evalpipe.report.bootstrap import TaskBootstrap, percentile_interval, resample_indices
from evalpipe.report.compare import input_excerpt
from evalpipe.report.document import Cell, Examples, Paragraph, Plot, Section, Table, fmt, fmt_interval
from evalpipe.report.plots import score_vs_length
from evalpipe.report.runs import ReportRun

__all__ = ["JudgedTask", "judged_tasks", "judging_section", "self_preference_matches", "spearman",
           "spearman_interval"]

JURY = "jury (mean)"


@dataclass
class JudgedTask:
    """One task of one run as its judges rated it (from ``samples.jsonl`` and ``summary.json``)."""

    run: ReportRun
    task: str
    judges: tuple[str, ...]
    criteria: tuple[str, ...]
    notes: Mapping[str, Any]
    #: sample id → (answer length in characters, judge → criterion → rating)
    samples: dict[str, tuple[int, dict[str, dict[str, int]]]] = field(default_factory=dict)
    #: sample id → its record in samples.jsonl (scores, inputs, answer, rationales)
    records: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    def ratings(self, rater: str, criterion: str) -> tuple[np.ndarray, np.ndarray]:
        """(answer lengths, ratings) over the samples ``rater`` (a judge, or :data:`JURY`) rated."""
        lengths, values = [], []
        for length, ratings in self.samples.values():
            if rater == JURY:
                if ratings:
                    lengths.append(length)
                    values.append(float(np.mean([r[criterion] for r in ratings.values()])))
            elif rater in ratings:
                lengths.append(length)
                values.append(float(ratings[rater][criterion]))
        return np.asarray(lengths, dtype=float), np.asarray(values, dtype=float)


def judged_tasks(runs: Sequence[ReportRun]) -> list[JudgedTask]:
    """Every judged task of every run, in run and task order."""
    out = []
    for run in runs:
        for task in run.tasks:
            notes = run.task_summary(task).notes.get("judging")
            if not isinstance(notes, Mapping):
                continue
            judged = JudgedTask(run=run, task=task, judges=tuple(notes.get("judges") or ()),
                                criteria=tuple(notes.get("criteria") or ()), notes=notes)
            for record in run.records:
                verdict = record.get("judge")
                if record.get("task") == task and isinstance(verdict, Mapping):
                    judged.samples[str(record.get("id"))] = (int(verdict.get("answer_chars") or 0),
                                                             dict(verdict.get("ratings") or {}))
                    judged.records[str(record.get("id"))] = record
            out.append(judged)
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's ρ of each row pair of ``x`` and ``y`` (``(B, n)`` or ``(n,)``): Pearson's r of
    average ranks; NaN where either row is constant."""
    from scipy.stats import rankdata  # here: scipy.stats takes ~0.4 s to import, and only judged runs need it

    x2, y2 = np.atleast_2d(x).astype(float), np.atleast_2d(y).astype(float)
    rx, ry = rankdata(x2, axis=1), rankdata(y2, axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    denominator = np.sqrt((rx ** 2).sum(axis=1) * (ry ** 2).sum(axis=1))
    out = np.full(rx.shape[0], math.nan)
    ok = denominator > 0
    out[ok] = (rx * ry).sum(axis=1)[ok] / denominator[ok]
    return out


def spearman_interval(x: np.ndarray, y: np.ndarray, *, resamples: int, seed: int, stream: str,
                      level: float = 0.95) -> tuple[float, tuple[float, float] | None]:
    """ρ and its percentile bootstrap interval (samples resampled with replacement)."""
    point = float(spearman(x, y)[0]) if len(x) > 1 else math.nan
    if len(x) < 3:
        return point, None
    idx = resample_indices(len(x), resamples, seed, stream)
    return point, percentile_interval(spearman(x[idx], y[idx]), level)


def _interval_text(boot: TaskBootstrap | None, metric: str) -> str:
    interval = boot.intervals.get(metric) if boot is not None else None
    return fmt_interval(interval.low, interval.high) if interval is not None and interval.available else ""


def _panel_table(judged: Sequence[JudgedTask]) -> Table:
    rows = []
    for jt in judged:
        config = jt.run.config.get("judging") or {}
        judges = {j.get("model"): j for j in config.get("judges") or [] if isinstance(j, Mapping)}
        shown = []
        for name in jt.judges:
            info = judges.get(name) or {}
            where = "local" if info.get("local") else "external"
            shown.append(f"{name} ({info.get('engine') or where})")
        by_judge = jt.notes.get("by_judge") or {}
        failures = "; ".join(
            f"{j}: {c.get('unusable', 0)} unusable, {c.get('missing', 0)} no reply, {c.get('retried', 0)} retried"
            for j, c in by_judge.items())
        usage = jt.notes.get("usage") or {}
        tokens = "; ".join(f"{j}: {u.get('replies', 0)} replies, {u.get('prompt_tokens', 0)}/{u.get('completion_tokens', 0)}"
                           for j, u in usage.items())
        rows.append((
            Cell(jt.run.label, numeric=False), Cell(jt.task, numeric=False), Cell(", ".join(shown), numeric=False),
            Cell(f"{jt.notes.get('rubric')} ({str(jt.notes.get('rubric_sha256') or '')[:12]})", numeric=False),
            Cell(", ".join(jt.criteria), numeric=False),
            Cell("–".join(str(v) for v in jt.notes.get("scale") or ()), numeric=False),
            Cell(str(jt.notes.get("judged_samples", 0))), Cell(str(jt.notes.get("rated_samples", 0))),
            Cell(str(jt.notes.get("unanswered_samples", 0))), Cell(failures, numeric=False),
            Cell("yes" if jt.notes.get("allow_external_endpoint") else "no", numeric=False),
            Cell(tokens, numeric=False),
        ))
    return Table(id="judge-panels", title="Judge panels", rows=tuple(rows),
                 columns=("model", "task", "judges", "rubric (sha256)", "criteria", "scale", "judged", "rated",
                          "not answered", "judge failures", "external judges allowed",
                          "judge replies, prompt/completion tokens"),
                 note="judged: samples with an answer; rated: with at least one usable rating; not answered: the "
                      "evaluated model's request failed (nothing to judge). A failure is never a rating.")


def _ratings_table(judged: Sequence[JudgedTask], boots: Mapping[str, Mapping[str, TaskBootstrap]]) -> Table:
    judges: list[str] = []
    for jt in judged:
        judges.extend(j for j in jt.judges if j not in judges)
    rows = []
    for jt in judged:
        metrics = jt.run.metrics.get(jt.task, {})
        boot = boots.get(jt.run.label, {}).get(jt.task)
        for c in jt.criteria:
            cells = [Cell(jt.run.label, numeric=False), Cell(jt.task, numeric=False), Cell(c, numeric=False)]
            for metric in (f"judge_{c}", f"judge_alpha_{c}", *(f"judge[{j}]_{c}" for j in judges)):
                cells.append(Cell(fmt(metrics.get(metric)), sub=_interval_text(boot, metric)))
            rows.append(tuple(cells))
    return Table(id="judge-ratings", title="Ratings and agreement (95 % bootstrap intervals)", rows=tuple(rows),
                 columns=("model", "task", "criterion", "jury mean", "Krippendorff's α (ordinal)",
                          *(f"{j} mean" for j in judges)),
                 note="jury mean: mean over rated samples of the judges' mean rating; α: judges as coders, samples as "
                      "units (1 perfect agreement, 0 chance level); an empty α cell: one judge, or no variation.")


def _length_table(judged: Sequence[JudgedTask], resamples: int, seed: int, level: float) -> Table:
    rows = []
    for jt in judged:
        for rater in (*jt.judges, JURY):
            for c in jt.criteria:
                lengths, ratings = jt.ratings(rater, c)
                rho, interval = spearman_interval(lengths, ratings, resamples=resamples, seed=seed,
                                                  stream=f"{jt.task}|{rater}|{c}|length", level=level)
                rows.append((
                    Cell(jt.run.label, numeric=False), Cell(jt.task, numeric=False), Cell(rater, numeric=False),
                    Cell(c, numeric=False), Cell(str(len(lengths))),
                    Cell(fmt(None if math.isnan(rho) else rho), sub=fmt_interval(*interval) if interval else
                         ("no interval (fewer than 3 samples or no variation)" if not math.isnan(rho) else "")),
                ))
    return Table(id="judge-length-bias", title="Length bias: Spearman ρ of rating with answer length", rows=tuple(rows),
                 columns=("model", "task", "rater", "criterion", "n", "Spearman ρ [95 % CI]"),
                 note="Answer length in characters of the judged text. ρ > 0: longer answers rated higher. Not proof of "
                      "bias on its own (longer answers can be more complete); compare criteria and judges.")


def _metric_table(judged: Sequence[JudgedTask], resamples: int, seed: int, level: float) -> Table | None:
    """Spearman ρ between the jury's mean rating and each per-sample reference-based score (ROUGE, BERTScore …)."""
    rows = []
    for jt in judged:
        keys: list[str] = []
        for record in jt.records.values():
            keys.extend(k for k, v in (record.get("scores") or {}).items()
                        if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in keys)
        for c in jt.criteria:
            for key in keys:
                pairs = [(float(np.mean([r[c] for r in ratings.values()])), float(jt.records[sid]["scores"][key]))
                         for sid, (_, ratings) in jt.samples.items()
                         if ratings and isinstance((jt.records[sid].get("scores") or {}).get(key), (int, float))]
                if len(pairs) < 3:
                    continue
                jury, score = (np.asarray(v, dtype=float) for v in zip(*pairs))
                rho, interval = spearman_interval(score, jury, resamples=resamples, seed=seed,
                                                  stream=f"{jt.task}|{c}|{key}|metric", level=level)
                rows.append((Cell(jt.run.label, numeric=False), Cell(jt.task, numeric=False), Cell(c, numeric=False),
                             Cell(key, numeric=False), Cell(str(len(pairs))),
                             Cell(fmt(None if math.isnan(rho) else rho), sub=fmt_interval(*interval) if interval else "")))
    if not rows:
        return None
    return Table(id="judge-vs-metrics", title="Jury ratings vs reference-based scores (Spearman ρ per sample)",
                 rows=tuple(rows), columns=("model", "task", "criterion", "per-sample score", "n", "Spearman ρ [95 % CI]"),
                 note="How far the judges agree with the task's overlap metrics sample by sample; low ρ is expected where "
                      "overlap metrics miss correct paraphrases — read it with the examples below.")


def _disagreements(judged: Sequence[JudgedTask], top: int) -> list[Examples]:
    """The samples where the judges disagree most (largest range of ratings on any criterion), with rationales."""
    out = []
    for i, jt in enumerate(judged):
        if len(jt.judges) < 2:
            continue
        spread = []
        for sid, (_, ratings) in jt.samples.items():
            if len(ratings) >= 2:
                gap = max(max(r[c] for r in ratings.values()) - min(r[c] for r in ratings.values()) for c in jt.criteria)
                if gap > 0:
                    spread.append((gap, sid))
        spread.sort(key=lambda x: (-x[0], x[1]))
        entries = []
        for gap, sid in spread[:top]:
            record = jt.run.full_record(jt.records[sid])  # whole: its inputs
            verdict = record.get("judge") or {}
            lines = [f"input: {input_excerpt(record.get('inputs'))}",
                     f"answer: {str(record.get('answer') or '')[:400]}"]
            for judge, ratings in (verdict.get("ratings") or {}).items():
                why = (verdict.get("rationales") or {}).get(judge)
                lines.append(f"{judge}: " + ", ".join(f"{c} {ratings[c]}" for c in jt.criteria)
                             + (f" — {why}" if why else ""))
            entries.append((f"{sid} (range {gap})", tuple(lines)))
        if entries:
            out.append(Examples(f"judge-disagreements-{i}", f"{jt.task} — {jt.run.label}: where the judges disagree most",
                                tuple(entries)))
    return out


def self_preference_matches(judge: Mapping[str, Any], run: ReportRun) -> str | None:
    """How a judge (as recorded in config.json ``judging.judges``) matches a run's evaluated model, or None."""
    name = str(judge.get("model") or "")
    if not name:
        return None
    if model_key(name) == model_key(run.model):
        return "model name"
    served = {str(run.model), str((run.config.get("backend") or {}).get("model") or "")} - {""}
    if str(judge.get("served_model") or name) in served:
        return "served model id"
    weights = judge.get("weights")
    if weights and weights == (run.config.get("config") or {}).get("model_fingerprint"):
        return "model weights"
    return None


def _diff_in_diff(own: JudgedTask, other: JudgedTask, judge: str, criterion: str) -> np.ndarray:
    """Per shared sample: (J_own − J_other) − (O_own − O_other); see the module docstring."""
    out = []
    for sid, (_, ratings_own) in own.samples.items():
        if sid not in other.samples:
            continue
        ratings_other = other.samples[sid][1]
        if judge not in ratings_own or judge not in ratings_other:
            continue
        others_own = [r[criterion] for j, r in ratings_own.items() if j != judge]
        others_other = [r[criterion] for j, r in ratings_other.items() if j != judge]
        if not others_own or not others_other:
            continue
        out.append((ratings_own[judge][criterion] - ratings_other[judge][criterion])
                   - (float(np.mean(others_own)) - float(np.mean(others_other))))
    return np.asarray(out, dtype=float)


def _self_preference_table(judged: Sequence[JudgedTask], runs: Sequence[ReportRun], resamples: int, seed: int,
                           level: float) -> Table | None:
    rows = []
    for jt in judged:
        recorded = {j.get("model"): j for j in (jt.run.config.get("judging") or {}).get("judges") or []
                    if isinstance(j, Mapping)}
        for judge in jt.judges:
            how = self_preference_matches(recorded.get(judge) or {"model": judge}, jt.run)
            if how is None:
                continue
            others = [o for o in judged if o.task == jt.task and o.run is not jt.run and judge in o.judges]
            if not others:
                rows.append((Cell(judge, numeric=False), Cell(jt.run.label, numeric=False), Cell(jt.task, numeric=False),
                             Cell(how, numeric=False), Cell("–", numeric=False), Cell("–", numeric=False),
                             Cell("–", numeric=False),
                             Cell("no other run of this task judged by this judge: no estimate", numeric=False)))
            for other in others:
                for c in jt.criteria:
                    d = _diff_in_diff(jt, other, judge, c)
                    estimate, sub = None, "needs shared samples rated by this judge and another in both runs"
                    if d.size:
                        estimate = float(d.mean())
                        idx = resample_indices(d.size, resamples, seed, f"{jt.task}|{judge}|{c}|self")
                        interval = percentile_interval(d[idx].mean(axis=1), level) if d.size > 1 else None
                        sub = fmt_interval(*interval) if interval else ""
                    rows.append((Cell(judge, numeric=False), Cell(jt.run.label, numeric=False),
                                 Cell(jt.task, numeric=False), Cell(how, numeric=False),
                                 Cell(other.run.label, numeric=False), Cell(c, numeric=False), Cell(str(d.size)),
                                 Cell(fmt(estimate), sub=sub)))
    if not rows:
        return None
    return Table(id="judge-self-preference", title="Self-preference: judges that are also evaluated models",
                 rows=tuple(rows),
                 columns=("judge", "its own run", "task", "matched by", "compared with", "criterion", "shared samples",
                          "self-preference d [95 % CI]"),
                 note="d = mean over shared samples of (J_own − J_other) − (O_own − O_other), J the flagged judge's "
                      "rating, O the other judges' mean; d > 0: the judge favours its own model's answers beyond what "
                      "the other judges see. Paired bootstrap over shared samples.")


def _length_plots(judged: Sequence[JudgedTask]) -> list[Plot]:
    plots = []
    tasks: list[str] = []
    for jt in judged:
        if jt.task not in tasks:
            tasks.append(jt.task)
    for task in tasks:
        members = [jt for jt in judged if jt.task == task]
        criteria: list[str] = []
        for jt in members:
            criteria.extend(c for c in jt.criteria if c not in criteria)
        for c in criteria:
            points = {}
            for jt in members:
                if c in jt.criteria:
                    lengths, ratings = jt.ratings(JURY, c)
                    points[jt.run.label] = (lengths.tolist(), ratings.tolist())
            slug = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in f"{task}-{c}")
            plots.append(Plot(id=f"plot-judge-length-{slug}", title=f"{task}: jury {c} vs answer length",
                              svg=score_vs_length(task, f"jury {c}", points)))
    return plots


def judging_section(runs: Sequence[ReportRun], boots: Mapping[str, Mapping[str, TaskBootstrap]], *,
                    resamples: int, seed: int, level: float = 0.95, top: int = 5) -> Section | None:
    """The "Judges" section, or None when no run was judged."""
    judged = judged_tasks(runs)
    if not judged:
        return None
    section = Section("judges", "Judges", [
        Paragraph("LLM judges rated the free-text answers (evalpipe judge): each judge saw the input, the reference "
                  "when there is one, and the answer — never the evaluated model's name — and replied with JSON "
                  "ratings; an unusable reply was asked again once, then counted as a judge failure (never as a "
                  "rating). Agreement is Krippendorff's alpha (ordinal); intervals resample samples."),
        _panel_table(judged),
        _ratings_table(judged, boots),
        _length_table(judged, resamples, seed, level),
    ])
    preference = _self_preference_table(judged, runs, resamples, seed, level)
    section.blocks.append(preference if preference is not None else Paragraph(
        "Self-preference: no judge is one of the evaluated models (by model name, served model id or weights)."))
    versus = _metric_table(judged, resamples, seed, level)
    if versus is not None:
        section.blocks.append(versus)
    section.blocks.extend(_disagreements(judged, top))
    section.blocks.extend(_length_plots(judged))
    return section

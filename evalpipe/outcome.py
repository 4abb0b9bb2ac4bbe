"""What a run (or a re-scoring) produced, and how it is written into the run directory.

Shared by :mod:`evalpipe.pipeline` and :mod:`evalpipe.rescoring`, which must write the very same
files from the same scored tasks — and re-scoring must never need the runner (or a model).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalpipe.judging.attach import attach_to_outcome
from evalpipe.results import Budget, RunDir, RunInfo, RunSummary
from evalpipe.samples_file import write_samples
from evalpipe.scoring import TaskOutcome
from evalpipe.rundir.suite_aggregates import IncompleteSuite, PartialSuite
from evalpipe.errors import EvalpipeError

if TYPE_CHECKING:
    from evalpipe.tasks.base import SuiteSpec

__all__ = ["RunError", "RunOutcome", "write_outcome"]


class RunError(EvalpipeError, RuntimeError):
    """A user-facing problem that stops a run before (or instead of) sending requests."""


def suites() -> dict[str, SuiteSpec]:
    """The registered suites, imported when aggregates are computed: the report reaches this module
    (through judging) and must never load the task registry."""
    from evalpipe.tasks.registry import suites as registered

    return registered()


@dataclass
class RunOutcome:
    run_dir: RunDir
    tasks: list[TaskOutcome]
    sent: int = 0
    cached: int = 0
    #: suite name → aggregate metrics (e.g. CLUE level scores)
    aggregates: dict[str, dict[str, float]] = field(default_factory=dict)
    #: suite name → why its aggregate was not (fully) computed
    incomplete: dict[str, str] = field(default_factory=dict)
    #: task name → why it was skipped (suite run without its data)
    skipped: dict[str, str] = field(default_factory=dict)
    #: how long inputs were fitted to the context (None: no task has a long field)
    budget: Budget | None = None
    #: things the user should know about this run (printed after the table)
    notes: list[str] = field(default_factory=list)

    @property
    def metrics(self) -> dict[str, Mapping[str, float | None]]:
        return {**{t.name: t.metrics for t in self.tasks}, **self.aggregates}

    def add_aggregates(self, suite_names: Sequence[str], subset: bool = False) -> None:
        """Suite aggregates over the tasks scored; say so when they cannot be compared to a paper.

        An aggregate over a subset (``--limit``/``--ids``) or over tasks with failed requests is
        still computed — it is what was measured — but flagged in ``incomplete``. A metric not
        computed (None: no answered sample) is absent to the aggregate, which then says what it lacks.
        """
        by_task = {t.name: {k: v for k, v in t.metrics.items() if v is not None} for t in self.tasks}
        known = suites()
        for name in suite_names:
            suite = known.get(name)
            if suite is None or suite.aggregate is None:
                continue
            try:
                self.aggregates[name] = suite.aggregate(by_task)
            except PartialSuite as exc:
                self.aggregates[name] = exc.partial
                self.incomplete[name] = str(exc)
                continue
            except IncompleteSuite as exc:
                self.incomplete[name] = str(exc)
                continue
            failed = [t for t in suite.tasks if by_task.get(t, {}).get("errors", 0)]
            caveats = []
            if subset:
                caveats.append("computed on a subset of samples (--limit/--ids)")
            if failed:
                caveats.append(f"tasks with failed requests: {', '.join(failed)}")
            if caveats:
                self.incomplete[name] = "; ".join(caveats) + " — not comparable to published scores"

    def summary(self, info: RunInfo) -> RunSummary:
        return RunSummary(run=info, tasks={t.name: t.summary for t in self.tasks})


def write_outcome(run: RunDir, outcome: RunOutcome, compat: str | None,
                  info: RunInfo | Callable[[], RunInfo]) -> None:
    """``samples.jsonl``, ``metrics.json`` and ``summary.json`` (or their ``.COMPAT`` forms), and
    ``variants.json`` when tasks ran under prompt conditions (evalpipe.variants.robustness) — removed when
    they no longer do, so it never describes another invocation than metrics.json.

    A judged run keeps its judge metrics: they are merged in from the stored judgements first
    (:mod:`evalpipe.judging.attach`), so re-scoring never drops them. ``info`` may be a function,
    called once the samples are written and before the metrics are: what it adds to the tasks'
    metrics is in metrics.json (a run's costs, worked out meanwhile: evalpipe.pipeline.execute).
    """
    attach_to_outcome(run, outcome.tasks)
    _write_samples(run, outcome.tasks, compat)
    if callable(info):
        info = info()
    run.write_json(run.metrics_path(compat), outcome.metrics)
    run.write_summary(outcome.summary(info), compat)
    robustness = {t.name: t.robustness for t in outcome.tasks if t.robustness is not None}
    if robustness:
        run.write_variants(robustness, compat)
    else:
        run.variants_path(compat).unlink(missing_ok=True)


def _write_samples(run: RunDir, tasks: Sequence[TaskOutcome], compat: str | None) -> None:
    """The tasks' records into the samples file, with the report's extract of them beside it: of a task
    folded with a spill, what was taken while it was scored (the scoring child, during the sending)."""
    conditioned = {t.name: t.robustness for t in tasks if t.robustness is not None}
    write_samples(run, [(t.records, _taken(t.records)) for t in tasks], compat,
                  run.read_config() if run.exists() else None, conditioned)


def _taken(records: Sequence[Any]) -> Any:
    """The extract taken of a task's records as they were spilled, where they are copied from the spill."""
    spill = getattr(records, "spill", None)
    return getattr(records, "extract", None) if spill is not None and spill.is_file() else None

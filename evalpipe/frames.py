"""Runs as pandas DataFrames, for notebooks and for the report.

Two shapes, chosen so that any task fits without knowing its name:

* :func:`load_samples` — one row per evaluated sample of one run. Fixed columns (run, model,
  task, id, answer, parse status, usage, latency, truncation) plus one ``score.<name>`` column
  per per-sample score the task's scorer produced (``score.f1``, ``score.rougeL``, …). Nested
  values (prompt, prediction, gold, diagnostics, meta) stay Python objects, so a notebook can
  look inside them; :func:`write_parquet` turns them into JSON text first. The ``prompt`` is the
  JSON form of the prompt as sent; samples.jsonl names only its request ``key`` (column ``key``)
  and the prompt comes from the run's store, where each distinct prompt is kept once
  (``load_samples(run, prompts=False)`` leaves the column empty and does not open the store).
* :func:`load_metrics` — long format, one row per (run, task or suite, metric): the only layout
  in which runs with different tasks and metrics share one frame. Pivot it for a wide view:
  ``load_metrics(runs).pivot_table(index="model", columns=["task", "metric"], values="value")``.

Prompt conditions (``run --prompt-variants/--shot-orders/--shots-sweep``): a run holds one row per
sample *and condition*, with the columns ``condition``, ``variant``, ``shots`` and ``shot_order``
(absent for runs without conditions); :func:`load_conditions` gives every condition's metrics in
long format. ``load_metrics`` holds each task's reference condition and its flat spread numbers
(``f1_variant_std`` …).

Truncation: a sample's ``truncated_tokens`` (input tokens cut to fit the context) is read from
the sample record, or from its diagnostics, when the run recorded it; otherwise the column is
NaN. ``finish_reason`` likewise (``"length"`` = the answer hit ``max_tokens``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalpipe.results import RunDir

if TYPE_CHECKING:  # pandas is imported where a frame is made: writing a run's extract reads _READERS only
    import pandas as pd

__all__ = ["CONDITION_COLUMNS", "NESTED_COLUMNS", "SCORE_PREFIX", "load_conditions", "load_metrics", "load_samples",
           "run_identity", "samples_frame", "write_parquet"]

#: prefix of the per-sample score columns
SCORE_PREFIX = "score."
#: columns holding nested Python values (JSON text in parquet)
NESTED_COLUMNS = ("inputs", "prompt", "prediction", "gold", "parts", "diagnostics", "meta")
_FIXED_COLUMNS = (
    "run", "model", "compat", "task", "id", "answer", "answer_chars", "parse_failed", "error",
    "latency_s", "attempts", "prompt_tokens", "completion_tokens", "truncated_tokens", "finish_reason",
    "endpoint", "key", *NESTED_COLUMNS,
)
#: a sample record's prompt condition (only in runs with prompt conditions)
CONDITION_COLUMNS = ("condition", "variant", "shots", "shot_order")


def run_identity(run: str | Path) -> dict[str, Any]:
    """``run`` (directory name), ``model`` and the raw ``config.json`` of a run directory."""
    run_dir = RunDir(run)
    recorded = run_dir.read_config()
    return {"run": run_dir.path.name, "model": recorded.get("config", {}).get("model", run_dir.path.name),
            "config": recorded}


def _usage(record: Mapping[str, Any], key: str) -> float:
    usage = record.get("usage") or {}
    value = usage.get(key)
    return float(value) if isinstance(value, (int, float)) else float("nan")


def _truncated_tokens(record: Mapping[str, Any]) -> float:
    for source in (record, record.get("diagnostics") or {}):
        value = source.get("truncated_tokens")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return float("nan")


def _text(value: Any) -> Any:
    """A string pandas can hold: a lone surrogate (a model answer may carry one; the store keeps it
    exactly) becomes U+FFFD here, for display; other values unchanged."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return value


def _answer_chars(record: Mapping[str, Any]) -> Any:
    answer = record.get("answer")
    return len(_text(answer)) if isinstance(answer, str) else float("nan")


#: how each fixed column is read from a record (``run``, ``model``, ``compat`` are the run's)
_READERS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "task": lambda r: r.get("task"),
    "id": lambda r: _text(r.get("id")),
    "answer": lambda r: _text(r.get("answer")),
    "answer_chars": _answer_chars,
    # None (no answer) stays missing rather than becoming False
    "parse_failed": lambda r: r.get("parse_failed"),
    "error": lambda r: _text(r.get("error")),
    "latency_s": lambda r: r.get("latency_s"),
    "attempts": lambda r: r.get("attempts"),
    "prompt_tokens": lambda r: _usage(r, "prompt_tokens"),
    "completion_tokens": lambda r: _usage(r, "completion_tokens"),
    "truncated_tokens": _truncated_tokens,
    "finish_reason": lambda r: r.get("finish_reason"),
    "endpoint": lambda r: r.get("endpoint"),
    "key": lambda r: r.get("key"),
    **{column: (lambda name: lambda r: r.get(name))(column) for column in NESTED_COLUMNS},
}


def load_samples(run: str | Path, compat: str | None = None, prompts: bool = True) -> pd.DataFrame:
    """Every sample of a run (its ``samples.jsonl``, or ``samples.COMPAT.jsonl``) as one frame.

    ``prompts``: fill the ``prompt`` column from the run's store (see the module docstring).
    Raises ``FileNotFoundError`` with the command that writes the file when it is missing.
    """
    run_dir = RunDir(run)
    identity = run_identity(run)
    path = run_dir.samples_path(compat)
    if not path.is_file():
        hint = f" --compat {compat}" if compat else ""
        raise FileNotFoundError(f"{path}: no samples (run `evalpipe score {run_dir.path}{hint}` first)")
    return samples_frame(run_dir.read_samples(compat, prompts=prompts), identity, compat)


def samples_frame(records: Iterable[Mapping[str, Any]], identity: Mapping[str, Any],
                  compat: str | None = None, columns: Collection[str] | None = None) -> pd.DataFrame:
    """Sample records (as in ``samples.jsonl``) as the frame :func:`load_samples` returns.

    ``columns``: only these of the fixed and condition columns (the score columns always), for a
    reader that needs a few — the report's frame of 47,000 samples is then a few megabytes.

    Built a column at a time: one row dict per record (the obvious way) held every row's thirty
    keys at once while pandas read them — at 47,000 samples ~85 MB on top of the records — and
    took three times as long.
    """
    import pandas as pd

    records = records if isinstance(records, list) else list(records)
    wanted = [c for c in _FIXED_COLUMNS if columns is None or c in columns]
    run_values = {"run": identity["run"], "model": identity["model"], "compat": compat or "default"}
    data: dict[str, list[Any]] = {}
    for column in wanted:
        if column in run_values:
            data[column] = [run_values[column]] * len(records)
        else:
            read = _READERS[column]
            data[column] = [read(r) for r in records]
    nan = float("nan")
    if any("condition" in r for r in records):  # missing (NaN) in a record without a condition
        for column in CONDITION_COLUMNS:
            if columns is None or column in columns:
                data[column] = [r.get(column) if "condition" in r else nan for r in records]
    scores: dict[str, list[Any]] = {}
    for i, record in enumerate(records):
        for name, value in (record.get("scores") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values = scores.get(name)
                if values is None:
                    values = scores[name] = [nan] * len(records)
                values[i] = float(value)
    data.update((SCORE_PREFIX + name, column) for name, column in scores.items())
    frame = pd.DataFrame(data if records else {})  # no records: object columns, as added below
    for column in wanted:
        if column not in frame.columns:
            frame[column] = pd.Series(dtype=object)
    ordered = sorted(c for c in frame.columns if c.startswith(SCORE_PREFIX))
    conditions = [c for c in CONDITION_COLUMNS if c in frame.columns]
    first = [c for c in _FIXED_COLUMNS[:5] if c in wanted]
    rest = [c for c in _FIXED_COLUMNS[5:] if c in wanted]
    return frame[[*first, *conditions, *rest, *ordered]]


def load_metrics(runs: str | Path | Iterable[str | Path], compat: str | None = None) -> pd.DataFrame:
    """The metrics of one run directory or several, in long format.

    Columns: ``run``, ``model``, ``compat``, ``task`` (a task or suite name), ``kind`` (``task``
    for a task the run evaluated, ``suite`` for a suite aggregate such as a CLUE level score),
    ``metric``, ``value``.
    """
    import pandas as pd

    if isinstance(runs, (str, Path)):  # one run directory, not an iterable of its characters
        runs = [runs]
    rows = []
    for run in runs:
        identity = run_identity(run)
        tasks = set(identity["config"].get("config", {}).get("tasks", []))
        for name, values in RunDir(run).read_metrics(compat).items():
            for metric, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    rows.append({
                        "run": identity["run"], "model": identity["model"], "compat": compat or "default",
                        "task": name, "kind": "task" if name in tasks else "suite",
                        "metric": metric, "value": float(value),
                    })
    return pd.DataFrame(rows, columns=["run", "model", "compat", "task", "kind", "metric", "value"])


def load_conditions(runs: str | Path | Iterable[str | Path], compat: str | None = None) -> pd.DataFrame:
    """Every prompt condition's metrics (``variants.json``), long format: ``run``, ``model``,
    ``compat``, ``task``, ``condition``, ``variant``, ``shots``, ``shot_order``, ``reference`` (the
    condition whose metrics are the task's in metrics.json), ``metric``, ``value``. Empty for runs
    without prompt conditions."""
    import pandas as pd

    if isinstance(runs, (str, Path)):
        runs = [runs]
    rows = []
    for run in runs:
        identity = run_identity(run)
        for task, doc in RunDir(run).read_variants(compat).items():
            for cid, condition in (doc.get("conditions") or {}).items():
                for metric, value in (condition.get("metrics") or {}).items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        rows.append({
                            "run": identity["run"], "model": identity["model"], "compat": compat or "default",
                            "task": task, "condition": cid, "variant": condition.get("variant"),
                            "shots": condition.get("shots"), "shot_order": condition.get("shot_order"),
                            "reference": cid == doc.get("reference"), "metric": metric, "value": float(value),
                        })
    return pd.DataFrame(rows, columns=["run", "model", "compat", "task", "condition", "variant", "shots", "shot_order",
                                       "reference", "metric", "value"])


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


def write_parquet(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write a samples frame as parquet; nested columns become JSON text (parquet needs one type).

    Needs the ``pyarrow`` package; without it this raises ``RuntimeError`` saying so, before
    anything is written.
    """
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise RuntimeError("writing parquet needs the pyarrow package: pip install pyarrow") from None
    out = frame.copy()
    for column in NESTED_COLUMNS:
        if column in out.columns:
            out[column] = out[column].map(_json_text)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out.to_parquet(path, index=False)
    return path

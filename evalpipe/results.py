"""A run directory on disk: ``results/<run>/``.

``config.json``      resolved options, package version, git commit, template and data sha256, seeds
``responses.sqlite`` every answer, committed as it arrives (see :mod:`evalpipe.store.answers`)
``samples.jsonl``    one record per evaluated sample: inputs, request key, answer, prediction, gold, scores, …
                     (the prompt is in the store, once: ``read_samples(prompts=True)`` adds it back)
``metrics.json``     task → metric → number (null: not computed, e.g. no answered sample; see evalpipe.coverage)
``summary.json``     diagnostics, token usage, latency percentiles, backend counters
``variants.json``    only for runs with prompt conditions: per task, every condition's metrics, the
                     spread along each varied axis, per-sample consistency (evalpipe.variants.robustness)

A compatibility scoring (``--compat NAME``) writes ``samples.NAME.jsonl`` / ``metrics.NAME.json``
/ ``summary.NAME.json`` beside the default files, so both views of one run stay available.
Files other than the store are written atomically (temp file + rename): a crash never leaves a
half-written ``metrics.json`` that looks complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import re
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from evalpipe.store.answers import ResponseStore
from evalpipe.errors import InputError, RunDirProblem

DEFAULT_ROOT = Path("results")
#: summary.json layout version: 2 = ``{"format", "run", "tasks"}``; files without ``format`` are the
#: older layout (task names at the top level beside a reserved ``"_run"`` key), still read
SUMMARY_FORMAT = 2
#: variants.json layout version (evalpipe.variants.robustness)
VARIANTS_FORMAT = 1


@dataclass(frozen=True)
class Budget:
    """How long inputs were fitted to the model's context (see :mod:`evalpipe.context_fit`)."""

    context_length: int | None = None
    #: ``server`` (the model's tokenizer), ``estimate`` (characters / 3.5), ``hf`` …
    token_counter: str | None = None
    #: ``template`` when chat prompts were counted with the model's chat template
    chat_counting: str | None = None
    #: counts that fell back to the estimate
    estimated_counts: int = 0
    #: why no budgeting was applied (then the other fields are None)
    not_applied: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, 0)}

    @classmethod
    def from_json(cls, data: Any) -> Budget | None:
        """Also reads the older forms: a plain string ("not applied: …") or a dict."""
        if data is None:
            return None
        if isinstance(data, str):
            return cls(not_applied=data.removeprefix("not applied: "))
        if isinstance(data, Mapping):
            known = {f.name for f in fields(cls)}
            return cls(**{k: v for k, v in data.items() if k in known})
        return None


@dataclass(frozen=True)
class TaskSummary:
    """What ``summary.json`` says about one task of a run (everything but the metric values)."""

    #: ``default`` or a compatibility mode
    scoring: str = "default"
    #: parser diagnostics summed over answered samples (``wrapper_missing``, ``unknown_tags`` …)
    diagnostics: dict[str, float] = field(default_factory=dict)
    parse_failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: p50/p90/p99 latency of answered requests in seconds
    latency_s: dict[str, float | None] = field(default_factory=dict)
    error_kinds: dict[str, int] = field(default_factory=dict)
    #: metric → why it was not computed (never reported as 0)
    not_computed: dict[str, str] = field(default_factory=dict)
    truncated_share: float = 0.0
    truncated_tokens: int = 0
    #: metric → its declared aggregation (:mod:`evalpipe.metrics.aggregation`, as JSON): how the
    #: metric is made from the per-sample ``parts`` in samples.jsonl — what intervals resample
    aggregations: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: metric → why it has no interval (a count fixed by the run, an aggregation that failed its check)
    no_interval: dict[str, str] = field(default_factory=dict)
    #: anything else a task reports about itself (e.g. a retrieval pool's size and definition)
    notes: dict[str, Any] = field(default_factory=dict)
    #: how many samples were answered, and why the others were not (:meth:`evalpipe.coverage.Coverage.to_json`;
    #: empty in a summary written before coverage was recorded)
    coverage: dict[str, Any] = field(default_factory=dict)
    #: how the task's metrics were valued (:mod:`evalpipe.scoring.fold`): ``{"path": "summed parts", …}``
    #: or ``{"path": "whole corpus", "why": …}`` — the scoring's stated reason, or why its samplewise
    #: declaration failed (empty in a summary written before it was recorded)
    valuation: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskSummary:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class RunInfo:
    """What ``summary.json`` says about the run as a whole."""

    #: answers sent to the model in this invocation, and found in the store
    sent: int = 0
    cached: int = 0
    #: suite → why its aggregate is missing or not comparable with published scores
    incomplete_suites: dict[str, str] = field(default_factory=dict)
    #: task → why a suite run skipped it (its data is absent)
    skipped_tasks: dict[str, str] = field(default_factory=dict)
    #: backend counters (requests, retries, per replica …)
    backend: dict[str, Any] = field(default_factory=dict)
    fetch_seconds: float = 0.0
    budget: Budget | None = None
    #: True when written by ``evalpipe score`` (no model involved)
    rescored: bool = False
    #: the metric options these numbers were computed with (``score`` may override the run's)
    metric_options: dict[str, Any] = field(default_factory=dict)
    #: things the user should know (printed after the table)
    notes: list[str] = field(default_factory=list)
    #: what the answers cost and what this invocation cost, with the prices (evalpipe.cost); {} = no prices
    cost: dict[str, Any] = field(default_factory=dict)
    #: how the tasks were scored while sending (evalpipe.pipeline.score_beside); {} = after the sending
    scoring: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["budget"] = self.budget.to_json() if self.budget is not None else None
        for optional in ("cost", "scoring"):  # only when there is one: other summaries read as before
            if not out[optional]:
                del out[optional]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunInfo:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["budget"] = Budget.from_json(data.get("budget"))
        return cls(**kwargs)


@dataclass(frozen=True)
class RunSummary:
    """``summary.json``: the run's facts and one :class:`TaskSummary` per task, typed.

    Written and read only here, so ``run``'s closing output, ``show`` and the report all read one
    shape (older files, with a reserved ``"_run"`` key among task names, are read too).
    """

    run: RunInfo
    tasks: dict[str, TaskSummary]

    def to_json(self) -> dict[str, Any]:
        return {"format": SUMMARY_FORMAT, "run": self.run.to_json(),
                "tasks": {name: asdict(t) for name, t in self.tasks.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSummary:
        if "format" in data:
            run, tasks = data.get("run") or {}, data.get("tasks") or {}
        else:  # older layout: task names beside "_run"
            run = data.get("_run") or {}
            tasks = {k: v for k, v in data.items() if k != "_run" and isinstance(v, Mapping)}
        return cls(run=RunInfo.from_json(run), tasks={k: TaskSummary.from_json(v) for k, v in tasks.items()})


class RunDirBusy(RunDirProblem):
    """Another process holds the run directory."""


class RunDirError(RunDirProblem):
    """The run directory cannot be created or written (a file in the way, no permission, disk full)."""


class NotARunDir(RunDirError, FileNotFoundError):
    """A folder given as a run directory holds no ``config.json`` (a ``FileNotFoundError`` too, as before)."""


def os_problem(exc: OSError) -> str:
    """An OSError as one line: the path and what is wrong with it (no traceback, no errno soup)."""
    where = exc.filename or ""
    what = exc.strerror or str(exc)
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        what += " (a file is in the way: the results directory must be a folder)"
    return f"{where}: {what}" if where else what


class RunDir:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _suffixed(self, stem: str, ext: str, compat: str | None) -> Path:
        return self.path / (f"{stem}.{compat}{ext}" if compat else f"{stem}{ext}")

    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def store_path(self) -> Path:
        return self.path / "responses.sqlite"

    def samples_path(self, compat: str | None = None) -> Path:
        return self._suffixed("samples", ".jsonl", compat)

    def metrics_path(self, compat: str | None = None) -> Path:
        return self._suffixed("metrics", ".json", compat)

    def summary_path(self, compat: str | None = None) -> Path:
        return self._suffixed("summary", ".json", compat)

    def variants_path(self, compat: str | None = None) -> Path:
        return self._suffixed("variants", ".json", compat)

    def exists(self) -> bool:
        return self.config_path.is_file()

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive use of the run directory for one process.

        Two processes running the same command would each send every prompt (and pay for it
        twice), then overwrite each other's results; the second one is refused instead.
        The lock is an advisory ``flock`` that the OS releases if the process dies.
        """
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            handle = open(self.path / ".lock", "w")  # noqa: SIM115 - held for the whole block
        except OSError as exc:
            raise RunDirError(f"cannot create the run directory {self.path}: {os_problem(exc).split(': ', 1)[-1]}") from None
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunDirBusy(
                    f"{self.path} is in use by another evalpipe process; wait for it to finish "
                    "(or give this run another --run-name)"
                ) from None
            yield
        finally:
            handle.close()

    def write_json(self, path: Path, data: Any) -> None:
        _atomic_write(path, _dumps(data, indent=2, sort_keys=False) + "\n")

    def write_samples(self, records: Iterable[Mapping[str, Any]], compat: str | None = None) -> None:
        """Write the records one line each, as they stream by (atomically: temp file + rename)."""
        self.write_sample_lines((record_line(r) for r in records), compat)

    def write_sample_lines(self, lines: Iterable[str], compat: str | None = None) -> None:
        """Write records already made into lines (:func:`record_line`), as they stream by."""
        _atomic_write_lines(self.samples_path(compat), lines)

    def read_json(self, path: Path) -> Any:
        return json.loads(path.read_text(encoding="utf-8"))

    def read_config(self) -> dict[str, Any]:
        if not self.config_path.is_file():
            raise NotARunDir(f"{self.path}: not a run directory (no config.json)")
        return self._read_object(self.config_path)

    def _read_object(self, path: Path, what: str = "a JSON object", fix: str = "") -> dict[str, Any]:
        """A JSON object file; broken JSON or another shape is one ValueError naming the file."""
        try:
            data = self.read_json(path)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: not valid JSON ({exc}){fix}") from None
        if not isinstance(data, dict):
            raise InputError(f"{path}: expected {what}")
        return data

    def read_metrics(self, compat: str | None = None) -> dict[str, dict[str, float]]:
        path = self.metrics_path(compat)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no metrics yet (run `evalpipe score {self.path}`)")
        return self._read_object(path, "a JSON object of task → metric → value",
                                 f"; `evalpipe score {self.path}` writes it again")

    def write_summary(self, summary: RunSummary, compat: str | None = None) -> None:
        self.write_json(self.summary_path(compat), summary.to_json())

    def read_summary(self, compat: str | None = None) -> RunSummary | None:
        """The run's typed summary, or None when the run has none yet (killed before results)."""
        path = self.summary_path(compat)
        if not path.is_file():
            return None
        return RunSummary.from_json(self._read_object(path))

    def write_variants(self, tasks: Mapping[str, Any], compat: str | None = None) -> None:
        self.write_json(self.variants_path(compat), {"format": VARIANTS_FORMAT, "tasks": dict(tasks)})

    def read_variants(self, compat: str | None = None) -> dict[str, dict[str, Any]]:
        """Task → its prompt-conditions view (``variants.json``); empty for a run without conditions."""
        path = self.variants_path(compat)
        if not path.is_file():
            return {}
        try:
            data = self.read_json(path)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: not valid JSON ({exc}); `evalpipe score {self.path}` writes it again") from None
        tasks = data.get("tasks") if isinstance(data, Mapping) else None
        if not isinstance(tasks, Mapping):
            raise InputError(f"{path}: expected {{\"format\": …, \"tasks\": {{task: …}}}}")
        return {str(k): dict(v) for k, v in tasks.items() if isinstance(v, Mapping)}

    def read_samples(self, compat: str | None = None, prompts: bool = False) -> list[dict[str, Any]]:
        """Every sample record; with ``prompts``, each with its ``prompt`` (see :meth:`add_prompts`)."""
        records = list(self.iter_samples(compat))
        return self.add_prompts(records) if prompts else records

    def iter_samples(self, compat: str | None = None, start: int = 0,
                     stop: int | None = None) -> Iterator[dict[str, Any]]:
        """The sample records one at a time (a reader that keeps only what it needs stays small).

        Lines are decoded :data:`DECODE_LINES` at a time as one JSON array: the decoder then makes
        each key string once per batch instead of once per record — records kept in memory are a
        third smaller, and decoding is faster. A batch that does not decode is decoded line by line,
        so an error names the file and its line (a :class:`~evalpipe.data.errors.DataError`).
        ``start``: the byte offset of a line to begin at (the records before it are not read, and
        line numbers count from there); ``stop``: the byte offset of a line to end before (the file
        read as if it ended there), None for the end of the file.
        """
        path = self.samples_path(compat)
        raw = path.open("rb")
        raw.seek(start)
        bounded = io.BufferedReader(_Upto(raw, stop - start), buffer_size=1 << 16) if stop is not None else raw
        with io.TextIOWrapper(bounded, encoding="utf-8") as handle:
            batch: list[str] = []
            first = 1
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    if not batch:
                        first = number
                    batch.append(line)
                    if len(batch) == DECODE_LINES:
                        yield from _decode_lines(batch, path, first)
                        batch = []
                elif batch:  # a blank line inside a batch: decode what came before, keeping lines exact
                    yield from _decode_lines(batch, path, first)
                    batch = []
            yield from _decode_lines(batch, path, first)

    def add_prompts(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Give each record its ``prompt`` (JSON form) from the run's store, by its request ``key``.

        Records written before prompts were stored once carry their prompt already and keep it; a
        record whose key the store does not hold (a store deleted or replaced) gets ``None``.
        """
        wanted = [r["key"] for r in records if "prompt" not in r and isinstance(r.get("key"), str)]
        found: Mapping[str, Any] = {}
        if wanted and self.store_path.is_file():
            store = ResponseStore(self.store_path)
            try:
                found = store.prompts(wanted)
            finally:
                store.close()
        for record in records:
            if "prompt" not in record:
                record["prompt"] = found.get(record.get("key"))  # type: ignore[arg-type]
        return records


class _Upto(io.RawIOBase):
    """The next ``left`` bytes of a binary file, then its end (:meth:`RunDir.iter_samples`' ``stop``)."""

    def __init__(self, raw: io.BufferedReader, left: int) -> None:
        super().__init__()
        self._raw = raw
        self._left = max(left, 0)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            return 0
        with memoryview(buffer) as view:
            got = self._raw.readinto(view[:self._left])
        self._left -= got
        return got

    def close(self) -> None:
        self._raw.close()
        super().close()


#: sample lines decoded as one JSON array (see RunDir.iter_samples)
DECODE_LINES = 512


def _decode_lines(lines: list[str], path: Path, first: int) -> list[dict[str, Any]]:
    """Consecutive lines of ``path`` starting at line ``first``, decoded (see RunDir.iter_samples)."""
    if not lines:
        return []
    try:
        decoded = json.loads("[" + ",".join(lines) + "]")
    except (ValueError, RecursionError):
        decoded = None
    if not isinstance(decoded, list) or len(decoded) != len(lines):  # a line that is no one value
        decoded = [_decode_line(line, path, number) for number, line in enumerate(lines, start=first)]
    return decoded


def _decode_line(line: str, path: Path, number: int) -> Any:
    from evalpipe.data.errors import DataError

    try:
        return json.loads(line)
    except (ValueError, RecursionError) as exc:
        what = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise DataError(path, number, None, f"not valid JSON ({what}): the run's samples file is damaged; "
                        "`evalpipe score RUN` writes it again from the store") from None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _dumps(data: Any, **kwargs: Any) -> str:
    """``json.dumps(ensure_ascii=False)``, but a lone surrogate (which UTF-8 cannot encode; a model
    answer may hold one) is written as its ``\\uXXXX`` escape: valid UTF-8, read back as the same
    string (except that a high surrogate directly followed by a low one is read back as the one
    character the pair encodes). Surrogates can only occur inside JSON strings, so the
    substitution is safe."""
    text = json.dumps(data, ensure_ascii=False, **kwargs)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def record_line(record: Mapping[str, Any]) -> str:
    """One record as its line of ``samples.jsonl`` (the one spelling: see :func:`_dumps`)."""
    return _dumps(record) + "\n"


def _atomic_write(path: Path, text: str) -> None:
    _atomic_write_lines(path, (text,))


def _atomic_write_lines(path: Path, chunks: Iterable[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            handle.writelines(chunks)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def git_commit(repo: Path) -> str | None:
    """The commit of the evalpipe checkout, with ``-dirty`` if it has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5,
        )
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None

"""A run directory on disk: ``results/<run>/``.

``config.json``      resolved options, package version, git commit, template and data sha256, seeds
``responses.sqlite`` every answer, committed as it arrives (see :mod:`evalpipe.cache`)
``samples.jsonl``    one record per evaluated sample: prompt, answer, prediction, gold, scores, …
``metrics.json``     task → metric → number
``summary.json``     diagnostics, token usage, latency percentiles, backend counters

A compatibility scoring (``--compat NAME``) writes ``samples.NAME.jsonl`` / ``metrics.NAME.json``
/ ``summary.NAME.json`` beside the default files, so both views of one run stay available.
Files other than the store are written atomically (temp file + rename): a crash never leaves a
half-written ``metrics.json`` that looks complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

DEFAULT_ROOT = Path("results")


class RunDirBusy(RuntimeError):
    """Another process holds the run directory."""


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

    def exists(self) -> bool:
        return self.config_path.is_file()

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive use of the run directory for one process.

        Two processes running the same command would each send every prompt (and pay for it
        twice), then overwrite each other's results; the second one is refused instead.
        The lock is an advisory ``flock`` that the OS releases if the process dies.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        handle = open(self.path / ".lock", "w")  # noqa: SIM115 - held for the whole block
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
        lines = (_dumps(r) + "\n" for r in records)
        _atomic_write(self.samples_path(compat), "".join(lines))

    def read_json(self, path: Path) -> Any:
        return json.loads(path.read_text(encoding="utf-8"))

    def read_config(self) -> dict[str, Any]:
        if not self.config_path.is_file():
            raise FileNotFoundError(f"{self.path}: not a run directory (no config.json)")
        try:
            data = self.read_json(self.config_path)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{self.config_path}: not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{self.config_path}: expected a JSON object")
        return data

    def read_metrics(self, compat: str | None = None) -> dict[str, dict[str, float]]:
        path = self.metrics_path(compat)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no metrics yet (run `evalpipe score {self.path}`)")
        return self.read_json(path)

    def read_samples(self, compat: str | None = None) -> list[dict[str, Any]]:
        path = self.samples_path(compat)
        with path.open(encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]


def __getattr__(name: str) -> Any:
    """``evalpipe.results.load_samples`` / ``load_metrics`` (DataFrames) without importing pandas
    on every CLI start: they live in :mod:`evalpipe.frames` and are loaded on first use."""
    if name in ("load_samples", "load_metrics", "write_parquet"):
        from evalpipe import frames

        return getattr(frames, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _dumps(data: Any, **kwargs: Any) -> str:
    """``json.dumps(ensure_ascii=False)``, but a lone surrogate (which UTF-8 cannot encode; a model
    answer may hold one) is written as its ``\\uXXXX`` escape: valid UTF-8, read back as the same
    string (except that a high surrogate directly followed by a low one is read back as the one
    character the pair encodes). Surrogates can only occur inside JSON strings, so the
    substitution is safe."""
    text = json.dumps(data, ensure_ascii=False, **kwargs)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
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

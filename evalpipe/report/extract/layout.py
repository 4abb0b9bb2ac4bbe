"""The extract's layout: its files, format and fingerprint, and the segment a writer hands over
(see :mod:`evalpipe.report.extract`)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BATCH", "ENV", "FORMAT", "INDEX_LIMIT", "SUFFIXES", "TAKING_MODULES", "ExtractUnusable", "Segment",
           "extract_folder", "fingerprint", "remove", "wanted"]

#: the extract's layout; an extract of another format is not read
FORMAT = 1
#: a segment's files: what was taken of its records, their parts, their browser texts
SUFFIXES = (".json", ".parts", ".texts")
#: lines taken and written as one document of a segment (decoded as one JSON array, as the report does)
BATCH = 512
#: the modules whose code decides what is taken of a record (:func:`fingerprint`)
TAKING_MODULES = ("evalpipe.report.taking", "evalpipe.report.extract.layout", "evalpipe.report.extract.writing",
                  "evalpipe.report.extract.loading", "evalpipe.report.extract.rows", "evalpipe.report.browser_spool",
                  "evalpipe.report.browser", "evalpipe.report.frame", "evalpipe.frames",
                  "evalpipe.report.ner_errors", "evalpipe.report.reading", "evalpipe.metrics.spans",
                  "evalpipe.records", "evalpipe.jsonfast")
#: index.json larger than this is not an extract's (a segment is a few hundred bytes of it)
INDEX_LIMIT = 16 << 20
def extract_folder(samples: Path) -> Path:
    """The extract's folder of a samples file: ``samples.extract`` beside ``samples.jsonl``."""
    return samples.with_suffix(".extract")


#: the setting: "0" neither writes nor reads extracts (a report reads the samples files, as it always could)
ENV = "EVALPIPE_EXTRACT"


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether extracts are written and read (see :data:`ENV`)."""
    return environ.get(ENV, "").strip() != "0"


@functools.cache
def fingerprint() -> str:
    """A digest of the code that decides what is taken of a record (:data:`TAKING_MODULES`): an extract
    taken by other code — an older or newer evalpipe, a local edit — is not used, so what a report
    shows never depends on whether an extract was there."""
    digest = hashlib.sha256(f"format {FORMAT}".encode())
    for name in TAKING_MODULES:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        digest.update(name.encode() + b"\0")
        digest.update(Path(origin).read_bytes() if origin and os.path.isfile(origin) else b"?")
    return digest.hexdigest()


@dataclass(frozen=True)
class Segment:
    """A consecutive byte range of a samples file and the extract its writer took of it (``NAME`` with
    each of :data:`SUFFIXES`, in ``folder``). Picklable: the scoring child hands its segments to the run."""

    folder: Path
    name: str
    size: int
    lines: int
    sha256: str
    #: the SHA-256 of its own files (:data:`SUFFIXES`: what a report reads of them is what its writer wrote)
    files_sha256: tuple[str, ...]
    #: the tasks its lines belong to, in order of appearance
    tasks: tuple[str, ...]
    #: those the writer took as span tasks, and those with prompt conditions (task → reference condition)
    span_tasks: tuple[str, ...]
    references: Mapping[str, str]
    #: the tasks whose parts were taken (every task without prompt conditions)
    parts_tasks: tuple[str, ...]
    #: task → the kind its rows were written for (:class:`_Texts`): ``N`` (NER), ``P`` (plain), ``NP`` (both)
    written: Mapping[str, str] = field(default_factory=dict)

    def files(self) -> tuple[Path, ...]:
        return tuple(self.folder / f"{self.name}{suffix}" for suffix in SUFFIXES)

    def entry(self, start: int) -> dict[str, Any]:
        return {"name": self.name, "start": start, "size": self.size, "lines": self.lines, "sha256": self.sha256,
                "files_sha256": list(self.files_sha256),
                "tasks": list(self.tasks), "span_tasks": list(self.span_tasks), "references": dict(self.references),
                "parts_tasks": list(self.parts_tasks), "written": dict(self.written)}

    def discard(self) -> None:
        for path in self.files():
            remove(path)


class ExtractUnusable(Exception):
    """Why an extract is not used (the report reads the samples file itself)."""




def remove(path: Path) -> None:
    """``path`` gone, where it can be (an extract is never worth an error)."""
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)

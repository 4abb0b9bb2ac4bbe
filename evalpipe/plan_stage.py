"""The rendered plan of a run, staged on disk before the run directory is locked.

Why a stage: every prompt is rendered — and every template and data error found — before any
request is sent, but the run directory (and its store) may only be touched under its lock, which
is taken after. Holding each sample's cache key and packed prompt in Python until then costs
~400 bytes a sample (47,000 NCBI samples: ~19 MB of strings), so a run's memory would grow with N.
The stage is a SQLite file beside the run directories (same filesystem as the store, never a
``/tmp`` that may be RAM): rendering appends rows to it in batches, and once the lock is held the
store copies a staged plan in one ``INSERT … SELECT`` (:meth:`evalpipe.store.answers.ResponseStore.write_staged_plan`),
so no sample of a plan is a Python object at any time. The stage is deleted when the run ends
(or when it fails: nothing of it is ever read again); a stage left by a killed process (its folder
names its pid) is deleted by the next run in the same results folder.

A staged plan is named by the plan it will become (:func:`evalpipe.variants.conditions.plan_name`); its rows
are ``(position, sample id, key, packed prompt, info)``, in evaluation order. Rows are written in
one transaction per plan: a plan that failed half-way (a bad record at line 40,000) leaves nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path

from evalpipe.store.db_text import from_db_text, to_db_text
from evalpipe.errors import InputError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (
    plan TEXT NOT NULL,
    position INTEGER NOT NULL,
    sample_id TEXT NOT NULL,
    key TEXT NOT NULL,
    packed TEXT NOT NULL,
    info TEXT NOT NULL,
    PRIMARY KEY (plan, position),
    UNIQUE (plan, sample_id)
);
"""

#: a stage's folder: PREFIX + the pid of the process that made it + a random part
PREFIX = ".evalpipe-stage-"
#: rows per executemany while staging and per page when reading back (a few hundred KB of text)
BATCH = 1024


@contextlib.contextmanager
def scratch_folder(where: Path) -> Iterator[Path]:
    """A folder for temporary files beside the run directories, named like a stage (so a killed
    process's is removed by the next run there), deleted at the end of the block."""
    where.mkdir(parents=True, exist_ok=True)
    remove_stale(where)
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=where))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class DuplicateSample(InputError):
    """Two samples of one plan have the same id (the store keeps answers by plan and id)."""

    def __init__(self, sample_id: str, first: int, again: int) -> None:
        super().__init__(f"sample id {sample_id!r} is given twice (samples {first + 1} and {again + 1})")
        self.sample_id, self.first, self.again = sample_id, first, again


class PlanStage:
    """A temporary SQLite file of staged plans (see the module docstring)."""

    def __init__(self, where: str | Path | None = None) -> None:
        if where is not None:
            Path(where).mkdir(parents=True, exist_ok=True)
            remove_stale(Path(where))
        self.folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=where))
        self.path = self.folder / "plan.sqlite"
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        # nothing here must survive a crash: the plan is staged again by the next run
        self._db.execute("PRAGMA journal_mode=OFF")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.executescript(_SCHEMA)
        self._finalizer = weakref.finalize(self, _remove, self._db, self.folder)

    def write(self, plan: str, rows: Iterable[tuple[str, str, str, str]]) -> int:
        """Stage ``plan`` (replacing an earlier one of that name) from ``rows`` of ``(sample id,
        key, packed prompt, info JSON)``, consumed as they are produced; the number of rows.

        One transaction: if ``rows`` raises (bad data, a template error), nothing of the plan is kept.
        """
        count = 0

        def numbered() -> Iterator[tuple[str, int, str | bytes, str, str | bytes, str]]:
            nonlocal count
            for sid, key, packed, info in rows:
                yield plan, count, to_db_text(sid), key, to_db_text(packed), info
                count += 1

        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM rows WHERE plan = ?", (plan,))
            batch: list[tuple[str, int, str | bytes, str, str | bytes, str]] = []
            for row in numbered():
                batch.append(row)
                if len(batch) >= BATCH:
                    self._insert(batch)
                    batch.clear()
            if batch:
                self._insert(batch)
        return count

    def _insert(self, batch: list[tuple[str, int, str | bytes, str, str | bytes, str]]) -> None:
        """Insert a batch; a sample id seen before in the plan is :class:`DuplicateSample` (the
        loader checks ids over a whole file, but ``--limit`` stops a stream before that check)."""
        try:
            self._db.executemany("INSERT INTO rows VALUES (?, ?, ?, ?, ?, ?)", batch)
        except sqlite3.IntegrityError:
            for plan, position, sid, *_ in batch:
                first = self._db.execute("SELECT position FROM rows WHERE plan = ? AND sample_id = ? "
                                         "AND position != ?", (plan, sid, position)).fetchone()
                if first is not None:
                    raise DuplicateSample(from_db_text(sid), first[0], position) from None
            raise

    def update(self, plan: str, changed: Iterable[tuple[int, str, str, str]]) -> None:
        """Replace the key, packed prompt and info of some rows: ``(position, key, packed, info)``."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany("UPDATE rows SET key = ?, packed = ?, info = ? WHERE plan = ? AND position = ?",
                                 ((key, to_db_text(packed), info, plan, position)
                                  for position, key, packed, info in changed))

    def rows(self, plan: str) -> Iterator[tuple[str, str, str, str]]:
        """``(sample id, key, packed prompt, info JSON)`` in evaluation order, read page by page."""
        after = -1
        while True:
            page = self._db.execute(
                "SELECT position, sample_id, key, packed, info FROM rows WHERE plan = ? AND position > ? "
                "ORDER BY position LIMIT ?", (plan, after, BATCH)).fetchall()
            if not page:
                return
            for _, sid, key, packed, info in page:
                yield from_db_text(sid), key, from_db_text(packed), info
            after = page[-1][0]

    def row(self, plan: str, position: int) -> tuple[str, str, str, str]:
        found = self._db.execute("SELECT sample_id, key, packed, info FROM rows WHERE plan = ? AND position = ?",
                                 (plan, position)).fetchone()
        if found is None:
            raise IndexError(position)
        sid, key, packed, info = found
        return from_db_text(sid), key, from_db_text(packed), info

    def close(self) -> None:
        self._finalizer()


def remove_stale(where: Path) -> None:
    """Delete the stages of processes that are gone (a run killed with SIGKILL cannot delete its own)."""
    for folder in where.glob(f"{PREFIX}*"):
        pid = folder.name[len(PREFIX):].partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _remove(db: sqlite3.Connection, folder: Path) -> None:
    db.close()
    shutil.rmtree(folder, ignore_errors=True)


def info_json(truncated_tokens: int) -> str:
    """A row's info as the store spells it (:meth:`evalpipe.store.answers.ResponseStore.read_plan`)."""
    return json.dumps({"truncated_tokens": truncated_tokens})

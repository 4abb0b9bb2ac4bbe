"""Which Batch API batches a run has submitted, kept in the run's store (``responses.sqlite``).

Why in the store: a run killed while it waits for a batch must find that batch again, and must not
submit its requests a second time — the store is what a re-run of the same command opens first.
Table ``batches`` holds one row per batch (its id, endpoint, status, whether its results were read),
``batch_requests`` the cache keys each batch carries. A batch is recorded the moment the API
returns its id (before the first poll); a batch is *open* until its output has been read into the
store (``done``), and the keys of open batches are never submitted again.

Its own connection to the same SQLite file (WAL mode: readers and the answer writer do not block
each other), so the response store's module stays about answers.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY,
    endpoint TEXT NOT NULL,
    created REAL NOT NULL,
    status TEXT NOT NULL,
    requests INTEGER NOT NULL,
    -- 1 once the batch's output and error files were read into the store
    done INTEGER NOT NULL DEFAULT 0,
    info TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS batch_requests (
    batch_id TEXT NOT NULL,
    key TEXT NOT NULL,
    PRIMARY KEY (batch_id, key)
);
"""


@dataclass(frozen=True)
class BatchRow:
    id: str
    endpoint: str
    status: str
    requests: int
    done: bool
    info: dict[str, Any]


class BatchLedger:
    """The batches of one run's store (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._db.executescript(SCHEMA)

    def record(self, batch_id: str, endpoint: str, keys: Sequence[str], status: str, info: dict[str, Any]) -> None:
        """A batch just created, with the keys it carries, in one committed transaction."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("INSERT OR REPLACE INTO batches (id, endpoint, created, status, requests, done, info) "
                             "VALUES (?, ?, ?, ?, ?, 0, ?)",
                             (batch_id, endpoint, time.time(), status, len(keys), json.dumps(info)))
            self._db.executemany("INSERT OR IGNORE INTO batch_requests (batch_id, key) VALUES (?, ?)",
                                 [(batch_id, k) for k in keys])

    def update(self, batch_id: str, status: str, *, done: bool = False, info: dict[str, Any] | None = None) -> None:
        row = self.get(batch_id)
        merged = {**(row.info if row else {}), **(info or {})}
        self._db.execute("UPDATE batches SET status = ?, done = ?, info = ? WHERE id = ?",
                         (status, int(done), json.dumps(merged), batch_id))

    def get(self, batch_id: str) -> BatchRow | None:
        row = self._db.execute("SELECT id, endpoint, status, requests, done, info FROM batches WHERE id = ?",
                               (batch_id,)).fetchone()
        return None if row is None else _row(row)

    def all(self) -> list[BatchRow]:
        return [_row(r) for r in self._db.execute(
            "SELECT id, endpoint, status, requests, done, info FROM batches ORDER BY created")]

    def open(self) -> list[BatchRow]:
        """Batches whose results are not in the store yet, oldest first."""
        return [b for b in self.all() if not b.done]

    def keys(self, batch_id: str) -> list[str]:
        return [k for (k,) in self._db.execute("SELECT key FROM batch_requests WHERE batch_id = ? ORDER BY rowid",
                                               (batch_id,))]

    def waiting_keys(self) -> set[str]:
        """Every key carried by an open batch (never submitted again while it is open)."""
        return {k for (k,) in self._db.execute(
            "SELECT r.key FROM batch_requests r JOIN batches b ON b.id = r.batch_id WHERE b.done = 0")}

    def close(self) -> None:
        self._db.close()


def _row(row: Iterable[Any]) -> BatchRow:
    batch_id, endpoint, status, requests, done, info = row
    return BatchRow(batch_id, endpoint, status, requests, bool(done), json.loads(info))

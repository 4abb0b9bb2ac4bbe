"""A full disk while a run or a judging stores answers: one line that says what was kept.

SQLite reports a full disk as ``sqlite3.OperationalError: database or disk is full`` (``SQLITE_FULL``),
and writing ``samples.jsonl`` or ``summary.json`` as ``OSError`` ``ENOSPC`` (or ``EDQUOT``, a quota).
Either used to end in a traceback. Nothing is lost by it: every answer was committed to the store the
moment it arrived, and the transaction that failed is rolled back whole, so the same command run again
— once there is space — resumes and sends only the prompts without a stored answer.
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

__all__ = ["disk_full_message", "is_disk_full"]

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_SQLITE_FULL = 13


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the user's quota) is full."""
    if isinstance(exc, sqlite3.OperationalError):
        return getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL or "disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS


def _stored(store: Path, table: str) -> int | None:
    """Rows in the store's ``table``, read-only (reading needs no space), or None if unreadable."""
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1.0) as db:
            return int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    except sqlite3.Error:
        return None


def disk_full_message(exc: BaseException, run: Path, what: str = "answers") -> str:
    """One line: the disk is full, how many ``what`` (answers, judgements) the run's store keeps, and
    that the same command resumes."""
    store = run / "responses.sqlite"
    count = _stored(store, "judgements" if what == "judgements" else "responses") if store.is_file() else None
    kept = (f"the {count} {what} stored before are kept in {store}" if count is not None
            else f"every {what[:-1]} stored before is kept in {store}")
    cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return (f"the disk is full ({cause}) while storing {what} of {run}: {kept}; free some space and run the "
            "same command again — it resumes, sending only what has no stored reply")

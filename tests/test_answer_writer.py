"""Group commits: answers that arrive together share a transaction; none is reported before it is durable."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from evalpipe.pipeline.answer_writer import AnswerWriter
from evalpipe.store.answers import ResponseStore
from evalpipe.records import Completion


def stored(path) -> set[str]:
    with sqlite3.connect(path) as db:  # another connection: sees only committed rows
        return {key for (key,) in db.execute("SELECT key FROM responses")}


def test_answers_arriving_together_are_committed_together_and_each_put_returns_once_durable(tmp_path):
    store = ResponseStore(tmp_path / "r.sqlite")
    writer = AnswerWriter(store, "m")
    returned_durable = []

    async def answer(i: int) -> None:
        await asyncio.sleep(0.01 * (i // 50))  # four waves of 50
        await writer.put(f"k{i}", Completion(text=f"answer {i}"))
        returned_durable.append(f"k{i}" in stored(store.path))

    async def main() -> None:
        await asyncio.gather(*(answer(i) for i in range(200)))

    asyncio.run(main())
    assert returned_durable == [True] * 200
    assert writer.stats.answers == 200 and writer.stats.commits <= 8  # ~one per wave, not one per answer
    assert store.get_many([f"k{i}" for i in range(200)])["k199"].text == "answer 199"
    store.close()


def test_a_group_is_committed_at_once_when_it_is_full(tmp_path):
    store = ResponseStore(tmp_path / "r.sqlite")
    writer = AnswerWriter(store, "m", max_group=10)

    async def main() -> None:
        await asyncio.gather(*(writer.put(f"k{i}", Completion(text="a")) for i in range(35)))

    asyncio.run(main())
    assert writer.stats.commits == 4 and len(stored(store.path)) == 35
    store.close()


def test_a_failed_commit_reaches_every_answer_of_its_group_and_none_is_reported_stored(tmp_path):
    store = ResponseStore(tmp_path / "r.sqlite")
    writer = AnswerWriter(store, "m")

    def broken(model, items):
        raise sqlite3.OperationalError("database or disk is full")

    store.put_many = broken  # type: ignore[method-assign]

    async def main() -> list[BaseException | None]:
        return await asyncio.gather(*(writer.put(f"k{i}", Completion(text="a")) for i in range(5)),
                                    return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(r, sqlite3.OperationalError) for r in results)
    assert writer.stats.answers == 0 and stored(store.path) == set()
    store.close()


def test_only_successful_answers_are_stored(tmp_path):
    store = ResponseStore(tmp_path / "r.sqlite")
    with pytest.raises(ValueError, match="only successful"):
        store.put_many("m", [("a", Completion(text="ok")), ("b", Completion(text=None, error="HTTP 500"))])
    assert len(store) == 0  # nothing of the batch
    store.close()


def test_no_checkpoint_between_requests_and_one_at_the_end(tmp_path):
    """While answers are being fetched the write-ahead log is not copied into the database inside a
    commit (that took 7-9 ms every ~6,000 answers, on the event loop); commits stay durable (another
    connection sees them) and the log is checkpointed once the block ends."""
    store = ResponseStore(tmp_path / "r.sqlite")
    with store.checkpoints_deferred():
        for group in range(20):
            store.put_many("m", [(f"k{group}-{i}", Completion(text="x" * 4000)) for i in range(100)])
        assert len(stored(store.path)) == 2000
        wal = (tmp_path / "r.sqlite-wal").stat().st_size
        assert wal > 1500 * 4096  # well past the 1,000 pages at which SQLite would have checkpointed
    assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    busy, log, checkpointed = store._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0 and log == checkpointed  # everything in the log is in the database file
    store.close()

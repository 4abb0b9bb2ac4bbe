"""The sample browser written by a forked child (evalpipe.report.browser_beside): the same report.

Forced on, forced off, and with the child killed before it writes (the parent then writes the
browser itself): report.html, report.md and leaderboard.csv are the same bytes, but for the
bootstrap's measured seconds in the method table.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from evalpipe.report import browser_beside, build_report
from evalpipe.report.browser_beside import ENV
from tests.report.support import recorded_exits

_SECONDS = (re.compile(rb"\| \d+\.\d\d \| no interval"), re.compile(rb'<td class="num">\d+\.\d\d</td><td>no interval'))

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")


@pytest.fixture(autouse=True)
def _no_extract(monkeypatch):
    """Rows made from the records, as for runs without an extract (evalpipe.report.extract), unless a
    test says otherwise: those the child and the parent share."""
    monkeypatch.setenv("EVALPIPE_EXTRACT", "0")


def _files(out: Path) -> dict[str, bytes]:
    found = {}
    for name in ("report.html", "report.md", "leaderboard.csv"):
        data = (out / name).read_bytes()
        for pattern in _SECONDS:
            data = pattern.sub(b"SECONDS", data)
        found[name] = data
    return found


def _report(runs: tuple[Path, Path], out: Path) -> dict[str, bytes]:
    build_report(list(runs), out, resamples=50, seed=0)
    return _files(out)


def test_the_child_s_browser_is_the_parent_s(two_runs, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "0")
    alone = _report(two_runs, tmp_path / "alone")
    forks: list[int] = []
    rests: list[bool] = []
    real_start = browser_beside.start

    def start(make, rows, parts=None):  # type: ignore[no-untyped-def]
        beside = real_start(make, rows, parts)
        forks.append(beside.pid or 0)
        rests.append(beside.rest is not None)
        return beside

    exits = recorded_exits(monkeypatch, browser_beside)
    monkeypatch.setattr("evalpipe.report.build.start_beside", start)
    monkeypatch.setenv(ENV, "1")
    beside = _report(two_runs, tmp_path / "beside")
    assert forks and forks[0] > 0, "the browser was not written by a child"
    assert exits == [0], "the child did not write the browser"
    assert rests == [True], "the parent did not write a part of the rows"
    assert beside == alone
    assert b'id="samples-data"' in beside["report.html"]


def test_a_killed_child_leaves_the_browser_to_the_parent(two_runs, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "0")
    alone = _report(two_runs, tmp_path / "alone")
    real_start = browser_beside.start
    parent = os.getpid()
    exits = recorded_exits(monkeypatch, browser_beside)

    def start(make, rows, parts=None):  # type: ignore[no-untyped-def]
        def late_parts(split):  # type: ignore[no-untyped-def]
            first, rest = parts(split)

            def late():  # type: ignore[no-untyped-def]
                if os.getpid() != parent:  # the child waits to be killed before it writes anything
                    time.sleep(30)
                return first()

            return late, rest

        beside = real_start(make, rows, late_parts)
        assert beside.pid is not None
        os.kill(beside.pid, signal.SIGKILL)
        return beside

    monkeypatch.setattr("evalpipe.report.build.start_beside", start)
    monkeypatch.setenv(ENV, "1")
    assert _report(two_runs, tmp_path / "killed") == alone
    assert exits == [None], "the child was not killed"


def test_a_child_that_fails_leaves_the_browser_to_the_parent(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "1")
    calls: list[str] = []

    def make():  # type: ignore[no-untyped-def]
        calls.append("made")
        if os.getpid() != parent:
            raise RuntimeError("the child fails")
        yield "<section>ok</section>"

    parent = os.getpid()
    beside = browser_beside.start(make, 10)
    assert beside.pid is not None
    assert "".join(beside.pieces()) == "<section>ok</section>"
    assert calls == ["made"]  # the parent's own call (the child's is in its own memory)


def test_no_fork_below_the_minimum_or_when_switched_off(monkeypatch):
    monkeypatch.setenv(ENV, "auto")
    assert browser_beside.start(lambda: ["x"], browser_beside.MINIMUM - 1).pid is None
    monkeypatch.setenv(ENV, "0")
    beside = browser_beside.start(lambda: ["a", "é"], 10 ** 6)
    assert beside.pid is None and "".join(beside.pieces()) == "aé"


def test_the_child_s_text_is_decoded_whole_across_chunks(monkeypatch):
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setattr(browser_beside, "CHUNK", 3)
    text = "é😀ab\u2028" * 7
    beside = browser_beside.start(lambda: [text[:5], text[5:]], 10)
    assert beside.pid is not None
    assert "".join(beside.pieces()) == text


def test_close_stops_and_reaps_a_child_not_waited_for(monkeypatch):
    monkeypatch.setenv(ENV, "1")

    def slow():  # type: ignore[no-untyped-def]
        import time
        time.sleep(30)
        yield "never"

    beside = browser_beside.start(slow, 10)
    pid = beside.pid
    assert pid is not None
    beside.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_the_parent_writes_the_rest_while_the_child_writes_the_first_part(monkeypatch):
    monkeypatch.setenv(ENV, "1")
    parent = os.getpid()
    splits: list[int] = []

    def parts(split):  # type: ignore[no-untyped-def]
        splits.append(split)

        def first():  # type: ignore[no-untyped-def]
            yield "child:" if os.getpid() != parent else "parent:"
            yield "é" * split

        return first, lambda: iter(["|rest", "😀"])

    beside = browser_beside.start(lambda: ["never"], 30, parts)
    assert beside.pid is not None and splits == [round(30 * browser_beside.CHILD_SHARE)]
    assert "".join(beside.pieces()) == "child:" + "é" * splits[0] + "|rest😀"


def test_a_failing_rest_raises_after_the_first_part_s_own_error(monkeypatch):
    monkeypatch.setenv(ENV, "1")

    def rest():  # type: ignore[no-untyped-def]
        raise ValueError("rest")
        yield ""

    def bad_first():  # type: ignore[no-untyped-def]
        raise ValueError("first")
        yield ""

    beside = browser_beside.start(lambda: ["never"], 30, lambda split: (lambda: iter(["a"]), rest))
    with pytest.raises(ValueError, match="rest"):
        "".join(beside.pieces())
    beside = browser_beside.start(lambda: ["never"], 30, lambda split: (bad_first, rest))
    with pytest.raises(ValueError, match="first"):  # the child failed: the parent's first part raises first
        "".join(beside.pieces())


def test_rows_of_written_texts_are_all_the_child_s(two_runs, tmp_path, monkeypatch):
    """Rows made of the runs' extracts read no record: the child writes every one of them (the parent
    has its own work), and the page is the one made from the records."""
    monkeypatch.setenv(ENV, "0")
    alone = _report(two_runs, tmp_path / "alone")
    monkeypatch.setenv("EVALPIPE_EXTRACT", "1")
    rests: list[bool] = []
    real_start = browser_beside.start

    def start(make, rows, parts=None):  # type: ignore[no-untyped-def]
        beside = real_start(make, rows, parts)
        rests.append(beside.rest is not None)
        return beside

    exits = recorded_exits(monkeypatch, browser_beside)
    monkeypatch.setattr("evalpipe.report.build.start_beside", start)
    monkeypatch.setenv(ENV, "1")
    assert _report(two_runs, tmp_path / "extract") == alone
    assert exits == [0] and rests == [False]

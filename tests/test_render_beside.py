"""Rendering a plan in two processes (evalpipe.pipeline.render_beside): the rows, texts and errors of
rendering in one, whoever renders which block."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time

import pytest

from evalpipe.data.stream import ExampleStream
from evalpipe import forking
from evalpipe.pipeline import render_beside
from evalpipe.records import Example

pytestmark = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                                reason="rendering beside the run forks (not on this platform)")

PARENT = os.getpid()


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(render_beside, "START", 64)
    monkeypatch.setattr(render_beside, "BLOCK", 16)
    monkeypatch.setattr(render_beside, "AHEAD", 4)
    monkeypatch.setenv(render_beside.ENV, "1")


def stream(n: int) -> ExampleStream:
    return ExampleStream(lambda: (Example(id=f"e-{i}", inputs={"text": f"sentence {i}"}, gold=None) for i in range(n)))


class Renderer:
    """A deterministic rendering that also teaches the packer a shared text now and then (as
    ``Packer.pack`` does when a prompt first refers to one), optionally slow or failing in the child."""

    def __init__(self, texts: dict[str, str], slow_child: float = 0.0, fails: frozenset[str] = frozenset()) -> None:
        self.texts, self.slow_child, self.fails = texts, slow_child, fails

    def __call__(self, example: Example) -> tuple[str, str]:
        if self.slow_child and os.getpid() != PARENT:
            time.sleep(self.slow_child)
        if example.id in self.fails:
            raise ValueError(f"cannot render {example.id}")
        i = int(example.id.split("-")[1])
        if i % 37 == 0:
            self.texts.setdefault(f"t{i}", f"shared text {i}")
        return f"key-{i}", f'{{"text": "{example.inputs["text"]}", "ref": "t{i - i % 37}"}}'


def render_all(n: int, **kw) -> tuple[list[tuple[str, str, str]], dict[str, str], list[str]]:
    texts: dict[str, str] = {}
    seen: list[str] = []
    rows = [(e.id, k, p) for e, k, p in render_beside.rendered(stream(n), Renderer(texts, **kw), texts,
                                                               lambda e: seen.append(e.id))]
    return rows, texts, seen


def test_two_processes_give_the_rows_and_texts_of_one(monkeypatch):
    two = render_all(1_000)
    monkeypatch.setenv(render_beside.ENV, "0")
    one = render_all(1_000)
    assert two[0] == one[0] and [r[0] for r in two[0]] == [f"e-{i}" for i in range(1_000)]
    assert two[1] == one[1] and len(one[1]) == 28  # the child's shared texts reach the run's packer
    assert two[2] == one[2]  # watch sees every example once, in order
    assert not multiprocessing.active_children()


def test_the_child_claims_free_blocks_and_sends_their_rows_and_texts():
    """The child's side, run here (not forked): it takes the blocks nobody has claimed, skips those
    the run claimed meanwhile, and sends each block's rows with the shared texts its packing added."""
    free = multiprocessing.Value("q", render_beside.START // render_beside.BLOCK + 1)  # the run has block 4
    ours, theirs = multiprocessing.Pipe(duplex=False)
    texts: dict[str, str] = {"t0": "shared text 0"}
    render_beside._child(theirs, stream(130), Renderer(texts), texts, free)
    messages = []
    with contextlib.suppress(EOFError):  # the child closes its end when it is done
        while True:
            messages.append(ours.recv())
    assert [index for index, _, _ in messages] == [5, 6, 7, 8]  # blocks of 16 after 64; block 4 was the run's
    rows = [row for _, block, _ in messages for row in block]
    sequential = {f"e-{i}": Renderer({})(Example(id=f"e-{i}", inputs={"text": f"sentence {i}"}, gold=None))
                  for i in range(130)}
    assert [r[0] for r in rows] == [f"e-{i}" for i in range(80, 130)]
    assert all((key, packed) == sequential[sid] for sid, key, packed in rows)
    added = [text for _, _, block_texts in messages for text in block_texts]
    assert added == [("t111", "shared text 111")]  # 74 is in the run's block: its text is not the child's to send
    assert free.value == 10  # its last claim found the end of the examples


def test_rows_for_other_samples_stop_the_child_and_the_run_renders():
    helper = render_beside._Helper(process=None, conn=None, free=None, render=Renderer({}), texts={})
    block = [Example(id=f"e-{i}", inputs={"text": f"sentence {i}"}, gold=None) for i in range(80, 96)]
    helper.waiting.append(render_beside._Waiting(5, block))

    class Conn:
        def recv(self):
            return 5, [("e-999", "k", "p")] * 16, [("t", "text")]

    helper.conn = Conn()
    helper._take()
    assert not helper.alive and helper.waiting[0].rows is None
    done = list(helper._done(limit=8))  # the child has stopped: the run renders the block at once
    assert [(e.id, k, p) for e, k, p in done] == [(e.id, *Renderer({})(e)) for e in block]


def test_a_slow_child_costs_the_run_nothing_but_its_blocks(monkeypatch):
    rows, texts, _ = render_all(400, slow_child=0.5)
    monkeypatch.setenv(render_beside.ENV, "0")
    assert (rows, texts) == render_all(400)[:2]


def test_an_error_is_the_first_in_sample_order_whoever_renders(monkeypatch):
    # e-70 is in the first block after START (claimed by either process), e-120 in a later one
    with pytest.raises(ValueError, match="cannot render e-70$"):
        render_all(1_000, fails=frozenset({"e-70", "e-120"}), slow_child=0.01)
    with pytest.raises(ValueError, match="cannot render e-500$"):
        render_all(1_000, fails=frozenset({"e-500"}))
    assert not multiprocessing.active_children()


def test_a_small_plan_or_a_one_pass_iterator_never_forks(monkeypatch):
    def no_fork(*args, **kw):
        raise AssertionError("forked")

    monkeypatch.setattr(render_beside._Helper, "start", no_fork)
    texts: dict[str, str] = {}
    assert len(render_all(64)[0]) == 64
    once = iter(list(stream(500)))
    assert len(list(render_beside.rendered(once, Renderer(texts), texts))) == 500


def test_auto_forks_only_with_an_idle_core(monkeypatch):
    monkeypatch.setattr(forking.threading, "active_count", lambda: 1)
    monkeypatch.setattr(forking.sys, "platform", "linux")
    monkeypatch.setattr(forking, "_cores", lambda: 2)
    monkeypatch.setattr(forking, "idle_cores", lambda: 1.5)
    assert forking.fork_wanted("X", 10, 5, {}, idle_needed=0.7)
    monkeypatch.setattr(forking, "idle_cores", lambda: 0.2)
    assert not forking.fork_wanted("X", 10, 5, {}, idle_needed=0.7)
    assert forking.fork_wanted("X", 10, 5, {}, idle_needed=0)  # a helper that takes only what is left
    assert forking.fork_wanted("X", 10, 5, {"X": "1"}, idle_needed=0.7)
    monkeypatch.setattr(forking, "_cores", lambda: 1)
    assert not forking.fork_wanted("X", 10, 5, {}, idle_needed=0)


def test_idle_cores_reads_the_machine():
    idle = forking.idle_cores(0.02)
    assert 0.0 <= idle <= (os.cpu_count() or 1) + 0.01


def test_no_fork_to_be_had_renders_alone(monkeypatch):
    def refused(*args, **kw):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(render_beside._Helper, "start", refused)
    rows, texts, seen = render_all(500)
    monkeypatch.setenv(render_beside.ENV, "0")
    assert (rows, texts, seen) == render_all(500)


class CountingRenderer(Renderer):
    """A Renderer that counts the samples the run itself renders."""

    def __init__(self) -> None:
        super().__init__({})
        self.rendered: list[str] = []

    def __call__(self, example: Example) -> tuple[str, str]:
        self.rendered.append(example.id)
        return super().__call__(example)


class Delivered:
    """A pipe end holding the child's messages, all sent before the run reads anything."""

    def __init__(self, messages: list[tuple[int, list[tuple[str, str, str]], list[tuple[str, str]]]]) -> None:
        self.messages = list(messages)

    def poll(self, timeout: float = 0.0) -> bool:
        return bool(self.messages)

    def recv(self):
        return self.messages.pop(0)


def child_rows(index: int) -> list[tuple[str, str, str]]:
    block = range(index * render_beside.BLOCK, (index + 1) * render_beside.BLOCK)
    return [(f"e-{i}", *Renderer({})(Example(id=f"e-{i}", inputs={"text": f"sentence {i}"}, gold=None)))
            for i in block]


def test_rows_that_come_before_the_run_reads_their_block_are_used():
    """A child ahead of the run sends rows for blocks the run has not read yet: they are held until
    the run reads the block (measured: dropping them, the run rendered a third of the child's blocks
    again), and the run renders only its own blocks."""
    first = render_beside.START // render_beside.BLOCK  # 4: examples 64-79
    free = multiprocessing.Value("q", first + 3)  # the child has claimed blocks 4, 5 and 6
    renderer = CountingRenderer()
    helper = render_beside._Helper(process=None, conn=Delivered([(i, child_rows(i), []) for i in (4, 5, 6)]),
                                   free=free, render=renderer, texts={})
    examples = iter([Example(id=f"e-{i}", inputs={"text": f"sentence {i}"}, gold=None) for i in range(64, 144)])
    done = [(e.id, k, p) for e, k, p in helper.run(examples, None)]
    assert done == [row for i in range(4, 9) for row in child_rows(i)]
    assert renderer.rendered == [f"e-{i}" for i in range(112, 144)]  # blocks 7 and 8: the run's own
    assert helper.alive and not helper.arrived


def test_rows_held_ahead_of_the_reading_are_bounded(monkeypatch):
    """Beyond ARRIVED blocks held, the run leaves the child's messages in the pipe (the child then waits)."""
    monkeypatch.setattr(render_beside, "ARRIVED", 2)
    conn = Delivered([(i, child_rows(i), []) for i in (5, 6, 7, 8)])
    helper = render_beside._Helper(process=None, conn=conn, free=None, render=Renderer({}), texts={})
    helper._drain()
    assert sorted(helper.arrived) == [5, 6] and len(conn.messages) == 2


@pytest.mark.skipif(not hasattr(__import__("fcntl"), "F_GETPIPE_SZ"), reason="Linux pipes only")
def test_the_pipe_is_widened():
    import fcntl

    ours, theirs = multiprocessing.Pipe(duplex=False)
    render_beside._widen(theirs)
    assert fcntl.fcntl(theirs.fileno(), fcntl.F_GETPIPE_SZ) == render_beside.PIPE_BYTES

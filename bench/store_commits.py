"""What grouping the store's commits buys: the runner's fetch loop with answers committed one
transaction each (as before) and in groups (evalpipe.pipeline.answer_writer), side by side.

The loop is the runner's own :func:`evalpipe.pipeline.fetch.fetch_answers` — worker pool, store, progress —
with an in-process backend that answers in *waves*, as a server with a fixed latency does: C
requests in flight, all answered at once every ``--latency`` seconds, each answer a real NCBI
answer (~130 characters, usage, latency, endpoint). So the figures are the client's CPU per answer
for storing and counting, without HTTP. Variants, interleaved over ``--repeat`` rounds:

``per-answer``  one committed transaction per answer, on arrival (``ResponseStore.put`` in the worker)
``grouped``     :class:`~evalpipe.pipeline.answer_writer.AnswerWriter`: the answers that arrive together share
                one transaction; each is counted once its group is committed

Printed per variant: answers/s, CPU per answer, transactions, the longest a commit held the event
loop, and the load average (the machine is shared: compare variants of one run, as ratios).

    .venv/bin/python bench/store_commits.py                    # N=18,800, C=256, 3 rounds
    .venv/bin/python bench/store_commits.py --n 47000 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalpipe.pipeline.answer_writer import AnswerWriter  # noqa: E402
from evalpipe.store.answers import ResponseStore  # noqa: E402
from evalpipe.records import Completion, GenerationParams, Prompt, Usage  # noqa: E402
from evalpipe.pipeline.progress import NullProgress  # noqa: E402
from evalpipe.pipeline.fetch import fetch_answers  # noqa: E402

ANSWER = ("<response>In <disease>colon carcinoma</disease> cells , loss of APC leads to the accumulation of "
          "betacatenin in the nucleus .</response>")
PROMPT = Prompt(params=GenerationParams(max_tokens=512), text="unused")


class WaveBackend:
    """Answers every request of a wave at the same moment, ``latency`` after the wave began; at most
    ``concurrency`` in flight (a freed slot lets the next request into the next wave)."""

    model = "bench"

    def __init__(self, concurrency: int, latency: float) -> None:
        self.slots = asyncio.Semaphore(concurrency)
        self.latency = latency
        self.count = 0

    async def complete(self, prompt: Prompt) -> Completion:
        async with self.slots:
            await asyncio.sleep(self.latency)
            self.count += 1
        await asyncio.sleep(0)  # as the real backend: the freed slot's next request goes out first
        return Completion(text=ANSWER, finish_reason="stop", usage=Usage(700, 40), latency_s=self.latency,
                          endpoint_url="http://127.0.0.1:8000/v1/chat/completions")


class PerAnswer(AnswerWriter):
    """The previous behaviour: each answer its own committed transaction, in the worker."""

    async def put(self, key: str, completion: Completion) -> None:
        started = time.perf_counter()
        self.store.put_many(self.model, [(key, completion)])
        self.stats.longest_commit_s = max(self.stats.longest_commit_s, time.perf_counter() - started)
        self.stats.answers += 1
        self.stats.commits += 1


@dataclass(frozen=True)
class Result:
    variant: str
    n: int
    wall_s: float
    cpu_s: float
    commits: int
    longest_commit_ms: float
    load: float


def one(variant: str, n: int, concurrency: int, latency: float, folder: Path) -> Result:
    store = ResponseStore(folder / f"{variant}-{time.monotonic_ns()}.sqlite")
    writer = (PerAnswer if variant == "per-answer" else AnswerWriter)(store, "bench")
    pending = {f"key-{i:08d}": (lambda: PROMPT) for i in range(n)}

    async def main() -> None:
        await fetch_answers(pending, WaveBackend(concurrency, latency), store, NullProgress(),
                            workers=2 * concurrency, writer=writer)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    asyncio.run(main())
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    assert len(store) == n, (variant, len(store))
    store.close()
    return Result(variant, n, wall, cpu, writer.stats.commits, writer.stats.longest_commit_s * 1e3,
                  os.getloadavg()[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=18_800)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} CPUs, load average at start {os.getloadavg()[0]:.2f}; N={args.n}, C={args.concurrency}, "
          f"waves every {args.latency * 1e3:.0f} ms; {args.repeat} interleaved rounds")
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="commits-bench-") as tmp:
        for _ in range(args.repeat):
            for variant in ("per-answer", "grouped"):
                r = one(variant, args.n, args.concurrency, args.latency, Path(tmp))
                results.append(r)
                print(f"  {variant:10s} {r.n / r.wall_s:8.0f} answers/s  {r.cpu_s / r.n * 1e6:6.1f} µs CPU/answer  "
                      f"{r.commits:6d} transactions  longest commit {r.longest_commit_ms:5.2f} ms  load {r.load:.2f}",
                      flush=True)
    print("\nmedians")
    cpu = {}
    for variant in ("per-answer", "grouped"):
        rs = [r for r in results if r.variant == variant]
        cpu[variant] = statistics.median(r.cpu_s / r.n * 1e6 for r in rs)
        print(f"  {variant:10s} {statistics.median(r.n / r.wall_s for r in rs):8.0f} answers/s  "
              f"{cpu[variant]:6.1f} µs CPU/answer  {statistics.median(r.commits for r in rs):8.0f} transactions  "
              f"longest commit {max(r.longest_commit_ms for r in rs):5.2f} ms")
    print(f"grouped / per-answer CPU per answer: x{cpu['grouped'] / cpu['per-answer']:.2f}; "
          f"load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

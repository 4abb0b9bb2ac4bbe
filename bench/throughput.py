"""HTTP stacks side by side, and whole `evalpipe run` processes, against the loopback test server.

Three measurements, each with the machine's load average beside every figure (other engineers'
processes share the cores; a figure measured at load 2 on 2 cores is not one measured at 0.2):

1. **Stacks** (default). The fake OpenAI server runs as a *subprocess* with a fixed latency L, and
   each stack sends the same N real NCBI Disease chat requests (5-shot prompts from the test
   split, ~2,600 characters) with C requests in flight, in rounds that interleave the stacks
   (``--repeat``), so a change of load hits them alike. Stacks:

   ``evalpipe``        :class:`~evalpipe.backends.openai_compat.OpenAICompatBackend` — the whole
                       request path: AIMD limiter, tenacity policy, aiohttp, answer extraction
   ``aiohttp``         a bare ``aiohttp.ClientSession`` POST + ``json.loads`` (the floor)
   ``openai-aiohttp``  the openai SDK on its aiohttp client, cheap path (``client.post`` with a
                       plain body, ``json.loads`` of the bytes) — needs ``pip install -e '.[bench]'``
   ``openai-httpx2``   the same on the SDK's default httpx2 client

   Per stack: requests/s, client CPU per request, server CPU per request, and from the server's
   own timeline (arrival and reply time of every request): the efficiency ``⌈N/C⌉·L / span``
   (span = first arrival to last reply) and the *slot refill delay* — for each request past the
   first C, its arrival minus the reply that freed its slot; with a prompt client it is well under
   a millisecond. Ratios are against ``evalpipe``.
2. **Runs** (``--runs``). Whole ``python -m evalpipe.cli run`` processes (import, load, render,
   requests, scoring, writing) on the 940 NCBI test sentences at C=256, L=1 s (issue 15's case):
   whole-process wall time against the server's own ideal ``⌈N/C⌉·L`` = 4 s, and the
   server-side efficiency and per-wave re-send spread from its timeline.
3. **Pipeline** (``--pipeline``). CPU per sample for render, parse (perfect and sloppy answers)
   and score, which the runner does before the first and after the last request.

    .venv/bin/python bench/throughput.py                            # stacks: N=18,800, L=50 ms, C=256
    .venv/bin/python bench/throughput.py --n 5000 --repeat 3        # medians of three interleaved rounds
    .venv/bin/python bench/throughput.py --runs --repeat 3 --no-stacks
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere

from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig  # noqa: E402
from evalpipe.records import GenerationParams, Prompt, chat_payload  # noqa: E402
from tests.support.fake_openai import FakeOpenAIProcess  # noqa: E402

MODEL = "bench-model"
STACKS = ("evalpipe", "aiohttp", "openai-aiohttp", "openai-httpx2")


def load() -> float:
    return os.getloadavg()[0]


# --------------------------------------------------------------------------------------------
# The samples


def ncbi_task() -> Any:
    from evalpipe.tasks.registry import get_task

    return get_task("ncbi_disease")


def ncbi_prompts(n: int) -> list[Prompt]:
    """N chat prompts as the runner renders them (5-shot, test split), each made unique by a
    sample number, so no layer can answer one from another."""
    from evalpipe.prompting import PromptRenderer, select_shots
    from evalpipe.tasks.base import LoadOptions

    spec = ncbi_task()
    data = spec.load(LoadOptions(split="test"))
    shots = select_shots(data.shot_pool, spec.default_shots, None, {ex.id for ex in data.examples})
    renderer = PromptRenderer(spec, shots, GenerationParams(max_tokens=spec.max_tokens))
    prompts = []
    for i, example in zip(range(n), itertools.cycle(data.examples)):
        unique = replace(example, id=f"{example.id}#{i}",
                         inputs={**example.inputs, "text": f"{example.inputs['text']} ({i})"})
        prompts.append(renderer.render(unique))
    return prompts


# --------------------------------------------------------------------------------------------
# Stacks: one async "send this prompt" per stack


Send = Callable[[Prompt], Awaitable[bool]]


async def open_stack(name: str, url: str, concurrency: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    """The stack's send function (True when an answer came back) and its close."""
    if name == "evalpipe":
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=url, model=MODEL, concurrency=concurrency,
                                                         timeout_s=60.0))

        async def send_evalpipe(prompt: Prompt) -> bool:
            return (await backend.complete(prompt)).ok

        return send_evalpipe, backend.aclose
    body = lambda prompt: {"model": MODEL, **prompt.params.sampling_options(),  # noqa: E731
                           "messages": chat_payload(prompt.messages or ())}
    if name == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency),
                                        headers={"Authorization": "Bearer EMPTY"})
        target = url + "/chat/completions"

        async def send_aiohttp(prompt: Prompt) -> bool:
            async with session.post(target, data=json.dumps(body(prompt)).encode(),
                                    headers={"Content-Type": "application/json"}) as response:
                return "choices" in json.loads(await response.read())

        return send_aiohttp, session.close
    import httpx2
    import openai

    if name == "openai-aiohttp":
        http_client = openai.DefaultAioHttpClient(timeout=60.0)
    else:
        limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        http_client = openai.DefaultAsyncHttpxClient(timeout=60.0, limits=limits)
    client = openai.AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0, http_client=http_client)

    async def send_sdk(prompt: Prompt) -> bool:
        response = await client.post("/chat/completions", body=body(prompt), cast_to=httpx2.Response)
        return "choices" in json.loads(response.content)

    return send_sdk, client.close


def available_stacks(wanted: Sequence[str]) -> tuple[list[str], list[str]]:
    """The stacks that can run here, and notes on those that cannot."""
    import importlib.util

    ok, notes = [], []
    for name in wanted:
        if name.startswith("openai") and importlib.util.find_spec("openai") is None:
            notes.append(f"{name}: skipped (the openai SDK is not installed: pip install -e '.[bench]')")
        elif name == "openai-aiohttp" and importlib.util.find_spec("aiohttp") is None:
            notes.append(f"{name}: skipped (aiohttp missing)")
        else:
            ok.append(name)
    return ok, notes


# --------------------------------------------------------------------------------------------
# Measuring one pass


@dataclass(frozen=True)
class Timeline:
    """The server's view: (arrival, reply) monotonic times of every request, in arrival order."""

    pairs: tuple[tuple[float, float], ...]

    def efficiency(self, concurrency: int, latency: float) -> float:
        """``⌈N/C⌉·L / span``, span = first arrival to last reply (1.0: the server never waited)."""
        span = max(r for _, r in self.pairs) - min(a for a, _ in self.pairs)
        return math.ceil(len(self.pairs) / concurrency) * latency / span

    def refill_ms(self, concurrency: int) -> list[float]:
        """For each request past the first C: its arrival minus the reply that freed its slot (the
        (i-C)-th reply), in milliseconds."""
        arrivals = sorted(a for a, _ in self.pairs)
        replies = sorted(r for _, r in self.pairs)
        return [(arrivals[i] - replies[i - concurrency]) * 1e3 for i in range(concurrency, len(arrivals))]

    def wave_spreads_ms(self, concurrency: int) -> list[float]:
        """Per wave of C consecutive arrivals: the time from its first to its last arrival (ms)."""
        arrivals = sorted(a for a, _ in self.pairs)
        waves = [arrivals[i:i + concurrency] for i in range(0, len(arrivals), concurrency)]
        return [(w[-1] - w[0]) * 1e3 for w in waves if len(w) == concurrency]


@dataclass(frozen=True)
class Pass:
    stack: str
    n: int
    wall_s: float
    cpu_s: float
    server_cpu_s: float | None
    failures: int
    timeline: Timeline
    load_before: float
    load_after: float

    @property
    def rate(self) -> float:
        return self.n / self.wall_s


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of another process (Linux ``/proc``); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


async def drive(send: Send, prompts: Sequence[Prompt], workers: int) -> tuple[float, float, int]:
    """``workers`` coroutines pull prompts from one iterator, as the runner's worker pool does (it
    runs twice as many workers as requests may be in flight, so a freed slot has a prompt waiting)."""
    queue = iter(prompts)
    failures = 0

    async def worker() -> None:
        nonlocal failures
        for prompt in queue:
            failures += not await send(prompt)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return time.perf_counter() - wall0, time.process_time() - cpu0, failures


def one_pass(stack: str, server: FakeOpenAIProcess, prompts: Sequence[Prompt], concurrency: int) -> Pass:
    async def main() -> tuple[float, float, int]:
        send, close = await open_stack(stack, server.url, concurrency)
        try:
            await drive(send, prompts[:concurrency], concurrency)  # connect: every connection opened
            server.reset()
            server_cpu.append(process_cpu_s(pid) if pid else None)
            return await drive(send, prompts, 2 * concurrency)
        finally:
            await close()

    pid = server.proc.pid if server.proc is not None else None
    server_cpu: list[float | None] = []
    gc.collect()
    before = load()
    wall, cpu, failures = asyncio.run(main())
    after_cpu = process_cpu_s(pid) if pid else None
    used = after_cpu - server_cpu[0] if after_cpu is not None and server_cpu[0] is not None else None
    timeline = Timeline(tuple(server.timeline()))
    return Pass(stack, len(prompts), wall, cpu, used, failures, timeline, before, load())


# --------------------------------------------------------------------------------------------
# Whole runs


@dataclass(frozen=True)
class RunPass:
    wall_s: float
    timeline: Timeline
    load_before: float
    load_after: float
    returncode: int
    #: the run's own account of its store commits (summary.json: answers, commits, longest_commit_ms)
    store: dict[str, Any] | None = None


def one_run(server: FakeOpenAIProcess, concurrency: int, limit: int | None) -> RunPass:
    """One ``evalpipe run`` process, from interpreter start to exit, into a fresh results folder."""
    server.reset()
    with tempfile.TemporaryDirectory() as results:
        command = [sys.executable, "-m", "evalpipe.cli", "run", "--task", "ncbi_disease", "--base-url", server.url,
                   "--model", MODEL, "--concurrency", str(concurrency), "--results-dir", results]
        if limit is not None:
            command += ["--limit", str(limit)]
        env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
        before = load()
        started = time.perf_counter()
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        store = None
        for summary in Path(results).glob("*/summary.json"):
            store = (json.loads(summary.read_text(encoding="utf-8")).get("run") or {}).get("backend", {}).get("store")
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
    return RunPass(wall, Timeline(tuple(server.timeline())), before, load(), done.returncode, store)


# --------------------------------------------------------------------------------------------
# Report


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report_stacks(passes: list[Pass], args: argparse.Namespace) -> None:
    by_stack: dict[str, list[Pass]] = {}
    for p in passes:
        by_stack.setdefault(p.stack, []).append(p)
    print(f"\nstacks: N={args.n} NCBI chat prompts, C={args.concurrency}, L={args.latency:.3f} s, "
          f"{args.repeat} interleaved round(s), medians; {os.cpu_count()} CPUs, server in a subprocess")
    header = (f"{'stack':16s} {'req/s':>7s} {'client ms/req':>13s} {'server ms/req':>13s} {'efficiency':>10s} "
              f"{'refill p50/p99 ms':>17s} {'failed':>6s}  load (before-after, per round)")
    print(header)
    print("-" * len(header))
    medians: dict[str, dict[str, float]] = {}
    for stack, runs in by_stack.items():
        refill = [x for r in runs for x in r.timeline.refill_ms(args.concurrency)]
        server_ms = [r.server_cpu_s / r.n * 1e3 for r in runs if r.server_cpu_s is not None]
        m = {
            "rate": median([r.rate for r in runs]),
            "client_ms": median([r.cpu_s / r.n * 1e3 for r in runs]),
            "server_ms": median(server_ms),
            "efficiency": median([r.timeline.efficiency(args.concurrency, args.latency) for r in runs]),
        }
        medians[stack] = m
        loads = ", ".join(f"{r.load_before:.2f}-{r.load_after:.2f}" for r in runs)
        print(f"{stack:16s} {m['rate']:7.0f} {m['client_ms']:13.3f} {m['server_ms']:13.3f} {m['efficiency']:10.3f} "
              f"{pct(refill, 0.5):8.2f}/{pct(refill, 0.99):<8.2f} {sum(r.failures for r in runs):6d}  {loads}")
    base = medians.get("evalpipe")
    if base:
        print("\nratios against evalpipe (client CPU per request: >1 = that stack costs more; req/s: <1 = slower)")
        for stack, m in medians.items():
            if stack != "evalpipe":
                print(f"  {stack:16s} client CPU x{m['client_ms'] / base['client_ms']:.2f}   "
                      f"req/s x{m['rate'] / base['rate']:.2f}")


def report_runs(runs: list[RunPass], args: argparse.Namespace) -> None:
    n = len(runs[0].timeline.pairs) if runs else 0
    ideal = math.ceil(n / args.run_concurrency) * args.run_latency
    print(f"\nruns: `evalpipe run --task ncbi_disease` whole processes, N={n}, C={args.run_concurrency}, "
          f"L={args.run_latency:.2f} s; the server's ideal ⌈N/C⌉·L = {ideal:.1f} s")
    for i, r in enumerate(runs, 1):
        spreads = r.timeline.wave_spreads_ms(args.run_concurrency)
        refill = r.timeline.refill_ms(args.run_concurrency)
        shown = " ".join(f"{s:.0f}" for s in spreads)
        print(f"run {i}: wall {r.wall_s:.2f} s ({r.wall_s / ideal:.2f}x ideal)  server-side efficiency "
              f"{r.timeline.efficiency(args.run_concurrency, args.run_latency):.3f}  wave spreads [{shown}] ms  "
              f"refill p50 {pct(refill, 0.5):.2f} ms p99 {pct(refill, 0.99):.1f} ms  exit {r.returncode}  "
              f"load {r.load_before:.2f}-{r.load_after:.2f}")
        if r.store:
            print(f"       store: {r.store.get('answers')} answers in {r.store.get('commits')} commits, the longest "
                  f"holding the event loop {r.store.get('longest_commit_ms')} ms")
    print(f"median: wall {median([r.wall_s for r in runs]):.2f} s, efficiency "
          f"{median([r.timeline.efficiency(args.run_concurrency, args.run_latency) for r in runs]):.3f}")


def report_pipeline(n: int) -> None:
    """CPU per sample for render, parse and score (the work around the requests)."""
    from evalpipe.metrics.options import MetricOptions
    from evalpipe.prompting import PromptRenderer, select_shots
    from evalpipe.tasks.base import LoadOptions

    spec = ncbi_task()
    data = spec.load(LoadOptions(split="test"))
    examples = list(itertools.islice(itertools.cycle(data.examples), n))
    shots = select_shots(data.shot_pool, spec.default_shots, None, {ex.id for ex in data.examples})
    renderer = PromptRenderer(spec, shots, GenerationParams(max_tokens=spec.max_tokens))
    scoring = spec.scoring(None)

    def cpu_ms(work: Callable[[], Any]) -> tuple[float, Any]:
        started = time.process_time()
        result = work()
        return (time.process_time() - started) / n * 1e3, result

    render_ms, _ = cpu_ms(lambda: [renderer.render(ex) for ex in examples])
    answers = [spec.shot_target(ex) for ex in examples]
    parse_ms, predictions = cpu_ms(lambda: [scoring.parse(a, ex) for a, ex in zip(answers, examples)])
    score_ms, _ = cpu_ms(lambda: scoring.score(examples, predictions, MetricOptions()))
    print(f"\npipeline (N={n}, load {load():.2f}): render {render_ms:.3f}  parse {parse_ms:.3f}  "
          f"score {score_ms:.3f} ms/sample")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=18_800, help="requests per stack pass (default 18800)")
    parser.add_argument("--latency", type=float, default=0.05, help="server latency for stacks (default 0.05 s)")
    parser.add_argument("--concurrency", type=int, default=256, help="requests in flight (default 256)")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds (default 1)")
    parser.add_argument("--stacks", default=",".join(STACKS), help=f"comma-separated, from {', '.join(STACKS)}")
    parser.add_argument("--no-stacks", action="store_true", help="skip the stack comparison")
    parser.add_argument("--runs", action="store_true", help="also time whole `evalpipe run` processes")
    parser.add_argument("--run-latency", type=float, default=1.0, help="server latency for --runs (default 1 s)")
    parser.add_argument("--run-concurrency", type=int, default=256, help="--concurrency of the runs (default 256)")
    parser.add_argument("--run-limit", type=int, default=None, help="--limit of the runs (default: all 940)")
    parser.add_argument("--pipeline", action="store_true", help="also measure render/parse/score CPU")
    args = parser.parse_args(argv)
    print(f"load average at start {load():.2f} ({os.cpu_count()} CPUs)")
    status = 0
    if not args.no_stacks:
        stacks, notes = available_stacks([s.strip() for s in args.stacks.split(",") if s.strip()])
        for note in notes:
            print(note)
        prompts = ncbi_prompts(args.n)
        passes: list[Pass] = []
        with FakeOpenAIProcess(latency=args.latency, models=(MODEL,)) as server:
            for _ in range(args.repeat):
                for stack in stacks:
                    passes.append(one_pass(stack, server, prompts, args.concurrency))
                    print(f"  {stack}: {passes[-1].rate:.0f} req/s, load {passes[-1].load_after:.2f}", flush=True)
        report_stacks(passes, args)
        status |= any(p.failures for p in passes)
    if args.runs:
        with FakeOpenAIProcess(latency=args.run_latency, models=(MODEL,)) as server:
            runs = [one_run(server, args.run_concurrency, args.run_limit) for _ in range(args.repeat)]
        report_runs(runs, args)
        status |= any(r.returncode for r in runs)
    if args.pipeline:
        report_pipeline(min(args.n, 10_000))
    return int(status)


if __name__ == "__main__":
    sys.exit(main())

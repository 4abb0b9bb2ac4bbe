"""Client throughput bench for OpenAICompatBackend, plus the per-sample pipeline CPU around it.

Two measurements, each against a fixed budget:

1. **Transport.** The fake OpenAI server runs as a *subprocess* with a fixed latency, so its CPU
   does not compete with the client for the GIL, and the bench drives N real NCBI Disease chat
   requests (5-shot prompts rendered from the test split, ~2,600 characters; the echo answer is
   the sentence in ``<response>`` tags) through the backend at a fixed concurrency. With latency L
   and concurrency C the ideal wall time is N*L/C; efficiency = ideal / measured. Below 1, some
   request round trip took longer than L: client CPU (at most C/L requests per second, so ~0.78 ms
   per request at C=256, L=0.2 s), server CPU, or other processes competing for the cores. The
   report shows each: client CPU per request, server CPU per request (Linux), the mean round trip
   minus L, and the load average before and after.
2. **Pipeline.** CPU per sample for what the runner does around the requests: render the prompt
   (:class:`evalpipe.prompting.PromptRenderer`), parse the answer (the task's default scoring
   ``parse``) for perfect answers (the gold tagging) and for sloppy ones (chatter, code fences,
   re-spaced hyphens, upper-case or misspelt tags, a truncated wrapper, a changed word), and score
   the corpus (the scoring's ``score``). The runner renders every prompt before the first request
   and parses and scores after the last (see :mod:`evalpipe.runner`), so this CPU does not slow
   the requests down; it is measured on its own, N samples each.

    .venv/bin/python bench/throughput.py                 # N=10,000, L=0.2 s, C=256
    .venv/bin/python bench/throughput.py --repeat 3      # three timed runs: min / median / max
    .venv/bin/python bench/throughput.py --n 2000 --profile
    .venv/bin/python bench/throughput.py --synthetic     # the older ~1,600-character prompt

Other engineers' processes on the same machine take cores from the client and the server: a
load average above ~0.5 before a run on a 2-core machine makes the efficiency figure pessimistic.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import itertools
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig  # noqa: E402
from evalpipe.metrics.options import MetricOptions  # noqa: E402
from evalpipe.prompting import PromptRenderer, select_shots  # noqa: E402
from evalpipe.records import Example, GenerationParams, Message, Prompt  # noqa: E402
from evalpipe.tasks.base import LoadOptions  # noqa: E402
from evalpipe.tasks.ncbi.disease import SPEC  # noqa: E402
from tests.support.fake_openai import FakeOpenAIProcess  # noqa: E402

MODEL = "bench-model"
T = TypeVar("T")


# --------------------------------------------------------------------------------------------
# The samples


def ncbi_samples(n: int) -> tuple[list[Example], PromptRenderer]:
    """N test-split examples (the 940 sentences, cycled) and a 5-shot renderer as the runner builds it."""
    data = SPEC.load(LoadOptions(split="test"))
    shots = select_shots(data.shot_pool, SPEC.default_shots, None, {ex.id for ex in data.examples})
    renderer = PromptRenderer(SPEC, shots, GenerationParams(max_tokens=SPEC.max_tokens))
    return list(itertools.islice(itertools.cycle(data.examples), n)), renderer


def sloppy_answer(example: Example, i: int) -> str:
    """The gold tagging, damaged in one of the ways models damage it (chosen by ``i``)."""
    perfect = SPEC.shot_target(example)
    kind = i % 5
    if kind == 0:  # chatter and a code fence around the answer
        return f"Sure! Here is the tagged text:\n```xml\n{perfect}\n```\nLet me know if you need more."
    if kind == 1:  # tokeniser spacing undone, tags in another case
        return perfect.replace(" - ", "-").replace(" ,", ",").replace("<disease>", "<Disease>").replace(
            "</disease>", "</Disease>"
        )
    if kind == 2:  # truncated: no closing wrapper, a misspelt closing tag
        return perfect.removesuffix("</response>").replace("</disease>", "</diseases>", 1)
    if kind == 3:  # a word changed: the texts differ, so the aligner has real work
        words = perfect.split(" ")
        words.insert(len(words) // 2, "the")
        return " ".join(words)
    return perfect.replace("<response>", "<response>\n  ").replace("</response>", "\n</response>")


def synthetic_prompt(i: int) -> Prompt:
    """The bench's earlier stand-in: a ~1,600-character few-shot chat prompt, unique per ``i``."""
    shots = "\n\n".join(
        f"Text to process:\n{text}\n\nAnswer:\n<response>{tagged}</response>" for text, tagged in _SYNTHETIC_SHOTS
    )
    sentence = (
        f"Sample {i:05d}: patients with myotonic dystrophy type 1 showed reduced expression of the "
        "DMPK protein compared with healthy controls in this cohort."
    )
    instructions = (
        "You are a biomedical annotator. Mark every disease mention in the text by wrapping it in "
        "<disease> and </disease> tags. Copy the text exactly otherwise, and put the whole answer "
        "between <response> and </response>. Tag specific diseases, disease classes and syndromes; "
        "do not tag genes, proteins, symptoms on their own or anatomical terms."
    )
    return Prompt(
        params=GenerationParams(max_tokens=256, seed=0),
        messages=(Message("system", instructions), Message("user", f"{shots}\n\nText to process:\n{sentence}\n\nAnswer:")),
    )


_SYNTHETIC_SHOTS = (
    ("Germline mutations in BRCA1 are responsible for a large share of hereditary breast and ovarian cancer.",
     "Germline mutations in BRCA1 are responsible for a large share of hereditary "
     "<disease>breast and ovarian cancer</disease>."),
    ("Deficiency of the enzyme causes the lysosomal storage disorder known as Fabry disease in adults.",
     "Deficiency of the enzyme causes the <disease>lysosomal storage disorder</disease> known as "
     "<disease>Fabry disease</disease> in adults."),
    ("The APC gene is mutated in familial adenomatous polyposis and in most sporadic colorectal tumours.",
     "The APC gene is mutated in <disease>familial adenomatous polyposis</disease> and in most "
     "sporadic <disease>colorectal tumours</disease>."),
    ("Carriers of the variant had no signs of ataxia, but two of them developed early-onset dementia.",
     "Carriers of the variant had no signs of <disease>ataxia</disease>, but two of them developed "
     "early-onset <disease>dementia</disease>."),
)


# --------------------------------------------------------------------------------------------
# Pipeline CPU


@dataclass(frozen=True)
class PipelineCost:
    """CPU milliseconds per sample for each step."""

    render_ms: float
    parse_perfect_ms: float
    parse_sloppy_ms: float
    score_ms: float
    sloppy_parse_failures: int

    @property
    def total_ms(self) -> float:
        """Render + parse (the slower, sloppy kind) + score: the per-sample pipeline budget."""
        return self.render_ms + self.parse_sloppy_ms + self.score_ms


def _cpu_ms_per(n: int, work: Callable[[], T]) -> tuple[float, T]:
    """CPU milliseconds per sample that ``work`` (over ``n`` samples) took, and its result."""
    started = time.process_time()
    result = work()
    return (time.process_time() - started) / n * 1e3, result


def measure_pipeline(examples: Sequence[Example], renderer: PromptRenderer) -> tuple[PipelineCost, list[Prompt]]:
    """Render, parse (perfect and sloppy answers) and score ``examples``; returns the cost and the prompts."""
    scoring = SPEC.scoring(None)
    n = len(examples)
    render_ms, prompts = _cpu_ms_per(n, lambda: [renderer.render(ex) for ex in examples])
    perfect = [SPEC.shot_target(ex) for ex in examples]
    sloppy = [sloppy_answer(ex, i) for i, ex in enumerate(examples)]
    parse_perfect_ms, _ = _cpu_ms_per(n, lambda: [scoring.parse(a, ex) for a, ex in zip(perfect, examples)])
    parse_sloppy_ms, predictions = _cpu_ms_per(n, lambda: [scoring.parse(a, ex) for a, ex in zip(sloppy, examples)])
    score_ms, _ = _cpu_ms_per(n, lambda: scoring.score(examples, predictions, MetricOptions()))
    failures = sum(1 for p in predictions if p.failed)
    return PipelineCost(render_ms, parse_perfect_ms, parse_sloppy_ms, score_ms, failures), prompts


# --------------------------------------------------------------------------------------------
# Transport


@dataclass(frozen=True)
class Result:
    n: int
    wall_s: float
    cpu_s: float
    server_cpu_s: float | None
    failures: int
    gc_full_collections: int
    latencies: tuple[float, ...]
    load_before: float
    load_after: float

    def efficiency(self, latency: float, concurrency: int) -> float:
        return self.n * latency / concurrency / self.wall_s


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of another process (Linux ``/proc``); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


async def drive(
    backend: OpenAICompatBackend, prompts: Sequence[Prompt], workers: int, server_pid: int | None = None
) -> Result:
    """Feed the prompts to ``workers`` tasks (as the runner's bounded worker pool does) and time it.

    Bounded on purpose: with one task per prompt, 10,000 suspended tasks make every full garbage
    collection walk them all, which measured ~0.3 ms of extra CPU per request.
    """
    queue = iter(prompts)
    failures = 0
    latencies: list[float] = []

    async def worker() -> None:
        nonlocal failures
        for prompt in queue:
            completion = await backend.complete(prompt)
            latencies.append(completion.latency_s)
            failures += not completion.ok

    load_before = os.getloadavg()[0]
    server0 = process_cpu_s(server_pid) if server_pid else None
    full0 = gc.get_stats()[2]["collections"]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    server1 = process_cpu_s(server_pid) if server_pid else None
    server_cpu = server1 - server0 if server0 is not None and server1 is not None else None
    return Result(
        n=len(prompts),
        wall_s=wall,
        cpu_s=cpu,
        server_cpu_s=server_cpu,
        failures=failures,
        gc_full_collections=gc.get_stats()[2]["collections"] - full0,
        latencies=tuple(latencies),
        load_before=load_before,
        load_after=os.getloadavg()[0],
    )


async def bench(
    url: str, prompts: Sequence[Prompt], args: argparse.Namespace, server_pid: int | None, profiler: cProfile.Profile | None
) -> tuple[list[Result], dict]:
    config = OpenAICompatConfig(base_url=url, model=MODEL, concurrency=args.concurrency, timeout_s=30.0)
    backend = OpenAICompatBackend(config)
    try:
        await backend.preflight()
        await drive(backend, prompts[: args.warmup], args.concurrency)  # connect
        results = []
        for _ in range(args.repeat):
            if profiler is not None:
                profiler.enable()
            results.append(await drive(backend, prompts, args.concurrency, server_pid))
            if profiler is not None:
                profiler.disable()
        return results, dict(backend.stats())
    finally:
        await backend.aclose()


# --------------------------------------------------------------------------------------------
# Report


def report_run(i: int, result: Result, args: argparse.Namespace) -> None:
    lat = sorted(result.latencies)
    overhead_ms = (statistics.fmean(lat) - args.latency) * 1e3
    p99_ms = (lat[int(0.99 * (len(lat) - 1))] - args.latency) * 1e3
    server = f"{result.server_cpu_s / result.n * 1e3:.3f}" if result.server_cpu_s is not None else "n/a"
    print(
        f"run {i}: efficiency {result.efficiency(args.latency, args.concurrency):.3f}  wall {result.wall_s:.2f} s  "
        f"client CPU/req {result.cpu_s / result.n * 1e3:.3f} ms  server CPU/req {server} ms  "
        f"round trip - L: mean {overhead_ms:.1f} ms, p99 {p99_ms:.1f} ms  "
        f"failed {result.failures}  full GCs {result.gc_full_collections}  "
        f"load {result.load_before:.2f} -> {result.load_after:.2f}"
    )


def report(results: list[Result], args: argparse.Namespace, prompts: Sequence[Prompt],
           backend_stats: dict, server_stats: dict, pipeline: PipelineCost | None) -> None:
    ideal = args.n * args.latency / args.concurrency
    budget_ms = args.latency / args.concurrency * 1e3
    sample = prompts[0]
    prompt_chars = sum(len(m.content) for m in sample.messages or ())
    print(f"requests          {args.n} x {len(results)} run(s), {'synthetic' if args.synthetic else 'NCBI test'} "
          f"prompts of ~{prompt_chars} characters")
    print(f"latency/conc.     {args.latency:.3f} s / {args.concurrency}; ideal wall {ideal:.2f} s; "
          f"client CPU budget at the ideal rate {budget_ms:.3f} ms/request")
    print(f"machine           {os.cpu_count()} CPUs")
    for i, result in enumerate(results, 1):
        report_run(i, result, args)
    effs = sorted(r.efficiency(args.latency, args.concurrency) for r in results)
    cpus = sorted(r.cpu_s / r.n * 1e3 for r in results)
    print(f"efficiency        min {effs[0]:.3f}  median {statistics.median(effs):.3f}  max {effs[-1]:.3f}")
    print(f"client CPU/req    min {cpus[0]:.3f}  median {statistics.median(cpus):.3f}  max {cpus[-1]:.3f} ms")
    print(f"server            max in flight {server_stats['max_in_flight']}, requests {server_stats['total_requests']}, "
          f"TCP connections {server_stats.get('connections', 'n/a')}")
    print(f"backend           peak in flight {backend_stats['peak_in_flight']}, retries {backend_stats['retries']}, "
          f"limit min {backend_stats['concurrency_limit_min']}")
    if pipeline is not None:
        print(f"pipeline CPU      render {pipeline.render_ms:.3f}  parse perfect {pipeline.parse_perfect_ms:.3f}  "
              f"parse sloppy {pipeline.parse_sloppy_ms:.3f}  score {pipeline.score_ms:.3f} ms/sample "
              f"({pipeline.sloppy_parse_failures} sloppy parse failures)")
        print(f"render+parse+score {pipeline.total_ms:.3f} ms/sample (sloppy answers; target < 1 ms)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000, help="timed requests per run (default 10000)")
    parser.add_argument("--latency", type=float, default=0.2, help="server latency in seconds (default 0.2)")
    parser.add_argument("--concurrency", type=int, default=256, help="backend concurrency (default 256)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs against one server (default 1)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed requests first (default: concurrency)")
    parser.add_argument("--synthetic", action="store_true", help="send the older ~1,600-character synthetic prompt")
    parser.add_argument("--no-pipeline", action="store_true", help="skip the render/parse/score measurement")
    parser.add_argument("--profile", action="store_true", help="cProfile the timed part and print the top")
    args = parser.parse_args(argv)
    if args.warmup is None:
        args.warmup = args.concurrency
    examples, renderer = ncbi_samples(args.n)
    if args.no_pipeline:
        pipeline, prompts = None, [renderer.render(ex) for ex in examples]
    else:
        pipeline, prompts = measure_pipeline(examples, renderer)
    if args.synthetic:
        prompts = [synthetic_prompt(i) for i in range(args.n)]
    gc.collect()
    profiler = cProfile.Profile() if args.profile else None
    with FakeOpenAIProcess(latency=args.latency, models=(MODEL,)) as server:
        pid = server.proc.pid if server.proc is not None else None
        results, backend_stats = asyncio.run(bench(server.url, prompts, args, pid, profiler))
        server_stats = server.stats()
    report(results, args, prompts, backend_stats, server_stats, pipeline)
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
        print(out.getvalue())
    return 0 if all(r.failures == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

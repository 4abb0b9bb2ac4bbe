"""Client throughput bench for OpenAICompatBackend: how close does it get to the ideal wall time?

The fake OpenAI server runs as a *subprocess* with a fixed latency, so its CPU does not compete
with the client for the GIL, and the bench drives N NCBI-sized chat requests (a ~1,600-character
few-shot prompt around a ~150-character sentence; the echo answer is ~170 characters) through the
backend at a fixed concurrency. With latency L and concurrency C the ideal wall time is N*L/C;
efficiency = ideal / measured. Below 1, the client spends more CPU per request than C/L requests
per second allow (1,280/s at C=256, L=0.2 s means at most ~0.78 ms of client CPU per request).

    .venv/bin/python bench/throughput.py --n 2000
    .venv/bin/python bench/throughput.py --n 10000 --latency 0.2 --concurrency 256 --profile

``sample_work_hook`` is where per-sample pipeline work (render + parse + score) belongs, so the
bench can show how much of the budget that work takes; it does nothing yet.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import pstats
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig  # noqa: E402
from evalpipe.records import Completion, GenerationParams, Message, Prompt  # noqa: E402
from tests.support.fake_openai import FakeOpenAIProcess  # noqa: E402

MODEL = "bench-model"

_INSTRUCTIONS = (
    "You are a biomedical annotator. Mark every disease mention in the text by wrapping it in "
    "<disease> and </disease> tags. Copy the text exactly otherwise, and put the whole answer "
    "between <response> and </response>. Tag specific diseases, disease classes and syndromes; "
    "do not tag genes, proteins, symptoms on their own or anatomical terms."
)
_EXAMPLES = (
    (
        "Germline mutations in BRCA1 are responsible for a large share of hereditary breast and ovarian cancer.",
        "Germline mutations in BRCA1 are responsible for a large share of hereditary "
        "<disease>breast and ovarian cancer</disease>.",
    ),
    (
        "Deficiency of the enzyme causes the lysosomal storage disorder known as Fabry disease in adults.",
        "Deficiency of the enzyme causes the <disease>lysosomal storage disorder</disease> known as "
        "<disease>Fabry disease</disease> in adults.",
    ),
    (
        "The APC gene is mutated in familial adenomatous polyposis and in most sporadic colorectal tumours.",
        "The APC gene is mutated in <disease>familial adenomatous polyposis</disease> and in most "
        "sporadic <disease>colorectal tumours</disease>.",
    ),
    (
        "Carriers of the variant had no signs of ataxia, but two of them developed early-onset dementia.",
        "Carriers of the variant had no signs of <disease>ataxia</disease>, but two of them developed "
        "early-onset <disease>dementia</disease>.",
    ),
)


def build_prompt(i: int) -> Prompt:
    """A few-shot chat prompt of NCBI size; the sentence is unique per ``i`` (no accidental caching)."""
    shots = "\n\n".join(
        f"Text to process:\n{text}\n\nAnswer:\n<response>{tagged}</response>" for text, tagged in _EXAMPLES
    )
    sentence = (
        f"Sample {i:05d}: patients with myotonic dystrophy type 1 showed reduced expression of the "
        "DMPK protein compared with healthy controls in this cohort."
    )
    user = f"{shots}\n\nText to process:\n{sentence}\n\nAnswer:"
    return Prompt(
        params=GenerationParams(max_tokens=256, seed=0),
        messages=(Message("system", _INSTRUCTIONS), Message("user", user)),
    )


def sample_work_hook(prompt: Prompt, completion: Completion) -> None:
    """Per-sample pipeline CPU (render + parse + score) goes here; empty for the transport bench."""


@dataclass(frozen=True)
class Result:
    n: int
    wall_s: float
    cpu_s: float
    failures: int
    gc_full_collections: int


async def drive(backend: OpenAICompatBackend, prompts: list[Prompt], workers: int) -> Result:
    """Feed the prompts to ``workers`` tasks (as a runner with bounded memory would) and time it.

    Bounded on purpose: with one task per prompt, 10,000 suspended tasks make every full garbage
    collection walk them all, which measured ~0.3 ms of extra CPU per request.
    """
    queue = iter(prompts)
    failures = 0

    async def worker() -> None:
        nonlocal failures
        for prompt in queue:
            completion = await backend.complete(prompt)
            sample_work_hook(prompt, completion)
            failures += not completion.ok

    full0 = gc.get_stats()[2]["collections"]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return Result(len(prompts), wall, cpu, failures, gc.get_stats()[2]["collections"] - full0)


async def bench(url: str, args: argparse.Namespace, profiler: cProfile.Profile | None) -> tuple[Result, dict]:
    config = OpenAICompatConfig(base_url=url, model=MODEL, concurrency=args.concurrency, timeout_s=30.0)
    backend = OpenAICompatBackend(config)
    try:
        await backend.preflight()
        await drive(backend, [build_prompt(-1 - i) for i in range(args.warmup)], args.concurrency)  # connect
        prompts = [build_prompt(i) for i in range(args.n)]
        if profiler is not None:
            profiler.enable()
        result = await drive(backend, prompts, args.concurrency)
        if profiler is not None:
            profiler.disable()
        return result, dict(backend.stats())
    finally:
        await backend.aclose()


def report(result: Result, args: argparse.Namespace, backend_stats: dict, server_stats: dict) -> None:
    ideal = result.n * args.latency / args.concurrency
    sample = build_prompt(0)
    prompt_chars = sum(len(m.content) for m in sample.messages or ())
    print(f"requests          {result.n} (failed: {result.failures})")
    print(f"latency/conc.     {args.latency:.3f} s / {args.concurrency}")
    print(f"prompt size       {prompt_chars} characters")
    print(f"wall time         {result.wall_s:.2f} s")
    print(f"ideal time        {ideal:.2f} s  (n * latency / concurrency)")
    print(f"efficiency        {ideal / result.wall_s:.3f}")
    print(f"requests/s        {result.n / result.wall_s:.0f}  (ideal {args.concurrency / args.latency:.0f})")
    budget_ms = args.latency / args.concurrency * 1e3
    print(f"client CPU/req    {result.cpu_s / result.n * 1e3:.3f} ms  (budget at the ideal rate: {budget_ms:.3f} ms)")
    print(f"full GCs          {result.gc_full_collections}")
    print(f"server in flight  max {server_stats['max_in_flight']}, requests {server_stats['total_requests']}")
    print(f"backend           peak in flight {backend_stats['peak_in_flight']}, retries {backend_stats['retries']}, "
          f"limit min {backend_stats['concurrency_limit_min']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000, help="timed requests (default 10000)")
    parser.add_argument("--latency", type=float, default=0.2, help="server latency in seconds (default 0.2)")
    parser.add_argument("--concurrency", type=int, default=256, help="backend concurrency (default 256)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed requests first (default: concurrency)")
    parser.add_argument("--profile", action="store_true", help="cProfile the timed part and print the top")
    args = parser.parse_args(argv)
    if args.warmup is None:
        args.warmup = args.concurrency
    profiler = cProfile.Profile() if args.profile else None
    with FakeOpenAIProcess(latency=args.latency, models=(MODEL,)) as server:
        result, backend_stats = asyncio.run(bench(server.url, args, profiler))
        server_stats = server.stats()
    report(result, args, backend_stats, server_stats)
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
        print(out.getvalue())
    return 0 if result.failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

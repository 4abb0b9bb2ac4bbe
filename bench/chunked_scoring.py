"""What scoring NCBI Disease a chunk at a time costs against scoring it whole, at N samples.

The 940 NCBI test sentences cycled to N (each copy its own id), answered with the gold answer,
or with one entity left out, or with a chatty wrapper, or failed (a fixed pattern). Timed, in one
process, side by side:

- ``whole``          ``score_task`` on every sample at once (today's path);
- ``whole records``  building every record of that outcome (``samples.jsonl``'s lines);
- ``chunked``        ``score_chunks`` in chunks of ``--chunk`` samples (the samplewise pass);
- ``chunked records`` reading every record of the chunked outcome: the chunks are parsed and scored
                     again — the price of not holding predictions and scores.

    .venv/bin/python bench/chunked_scoring.py --n 47000 --chunk 1000
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from dataclasses import replace

from evalpipe.records import Completion, Usage
from evalpipe.scoring import ScoringChunk, score_task, score_chunks
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=47_000)
    parser.add_argument("--chunk", type=int, default=1_000)
    args = parser.parse_args()
    spec = get_task("ncbi_disease")
    base = list(spec.load(LoadOptions()).examples)  # a stream since the loaders read lazily
    examples = [replace(base[i % len(base)], id=f"{base[i % len(base)].id}~{i}") for i in range(args.n)]
    answers = []
    for i, ex in enumerate(examples):
        gold = spec.shot_target(ex)
        text = (gold if i % 4 == 0 else gold.replace("<disease>", "", 1).replace("</disease>", "", 1) if i % 4 == 1
                else f"Sure, here it is:\n{gold}" if i % 4 == 2 else None)
        answers.append(Completion(text, usage=Usage(900, 60), latency_s=0.05)
                       if text is not None else Completion(None, error="HTTP 500"))
    keys = [f"k{i}" for i in range(args.n)]

    def chunks():
        for a in range(0, args.n, args.chunk):
            yield ScoringChunk(examples[a:a + args.chunk], keys[a:a + args.chunk], answers[a:a + args.chunk])

    def timed(label, action):
        gc.collect()
        start = time.perf_counter()
        result = action()
        print(f"{label:18} {time.perf_counter() - start:6.2f} s")
        return result

    print(f"N = {args.n}, chunks of {args.chunk}, load average {os.getloadavg()[0]:.1f}")
    whole = timed("whole", lambda: score_task(spec, examples, keys, answers, None))
    timed("whole records", lambda: sum(1 for _ in whole.records))
    chunked = timed("chunked", lambda: score_chunks(spec, chunks, None))
    timed("chunked records", lambda: sum(1 for _ in chunked.records))
    assert json.dumps(chunked.metrics) == json.dumps(whole.metrics)
    print(f"load average {os.getloadavg()[0]:.1f}; metrics identical: f1 = {chunked.metrics['f1']:.4f}")


if __name__ == "__main__":
    main()

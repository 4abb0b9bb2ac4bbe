"""Issue 28: the CPU before the sending (load, validate, render, stage) of two checkouts side by side.

Each measurement is a fresh child process of this file (``--child``) with ``PYTHONPATH`` set to
the checkout measured (``/work/main/.venv``'s interpreter), on N unique NCBI Disease sentences
(the 940 test sentences cycled, each made unique by a trailing ``[i]`` token, as
``bench/memory.py`` does). A child times, for the chat form and the completion form:

- ``read``     the examples streamed once (the CoNLL file read and validated, the examples built:
               what scoring does again);
- ``prepare``  :func:`evalpipe.pipeline.prepare.prepare` whole (read, shots, render every prompt,
               its cache key and packed JSON into a plan stage);

then the pieces in microseconds a prompt (``render 5 shots``, ``render 0 shots``, ``stage``: the
cache key and packed JSON of already rendered prompts; the first 5,000 sentences, best of 3), and
prints a sha256 over every staged row (sample id, cache key, packed prompt, info) and the
packer's shared texts: the checkouts must stage byte-identical plans, which the parent checks
before it prints a ratio. Rounds interleave the checkouts; best and median of the rounds, the
ratio of the bests, and the load average before and after each child are printed (the machine
is shared: read the ratios of one invocation).

    /work/main/.venv/bin/python bench/prepare_speed.py --repo /work/wt/base --repo . --n 18800 --repeat 3

Findings
========

Branch prepfast against main b0dc6b0 (``/work/wt/base``), 2026-12-03 14:46 UTC, ``--n 18800
--repeat 3``, 2 cores shared with other engineers' benchmarks (load average 5.3-7.0 throughout);
best of 3 interleaved rounds (medians agree within a few per cent but for one disturbed round):

=========================  ==========  ==========  =======
18,800 sentences            base        prepfast    ratio
=========================  ==========  ==========  =======
chat: prepare, whole        6.26 s      4.55 s      x0.73
completions: prepare        5.23 s      3.62 s      x0.69
chat: read (scoring's too)  2.17 s      1.85 s      x0.85
completions: read           1.76 s      1.31 s      x0.74
render, 5 shots             100 us      61 us       x0.61
render, no shots            22 us       17 us       x0.80
stage (key + packed JSON)   58 us       40 us       x0.69
=========================  ==========  ==========  =======

An earlier run at load 1.8-2.3 (before the last CoNLL commit) gave the same picture: chat
prepare 4.62 -> 3.08 s (x0.67), completions 3.63 -> 2.89 s (x0.80). Both forms stage
byte-identical plans in every round (digests ``044eb66a…`` chat, ``e53c25e5…`` completions, 18,800
rows each). ``read`` is the data read that scoring repeats; the first child's ``chat read`` also
pays first-use imports.

Where it came from:

- rendering: the bounded sandbox's ``getattr`` answers a plain ``dict``'s key and a loop's
  counters itself (the sandbox first raised and caught an ``AttributeError`` for every
  ``shot.inputs.text``) and calls a template's own macro without the width/size and
  ``is_safe_callable`` checks that cannot apply to it. Every bound still holds and the clock is
  still read on every hook (``tests/test_template_lookup.py``: every shipped template in every
  form under both, and odd names under three ``Undefined`` kinds);
- span NER gold (``span_ner.read``): 0.30 -> 0.18-0.22 s for 18,800 sentences, a sentence's tags
  checked and decoded as one string of one character per tag (``evalpipe/data/iob2_codes.py``),
  tuples of plain strings no longer copied;
- the CoNLL reader: 0.56 -> 0.49 s alone (x0.88 at load 6): no tag check for ``O``, the
  ``-DOCSTART-`` test only when the token holds it. A reader by regular expressions over whole
  blocks was tried and was *slower* (0.46 against 0.40 s): making a million token and tag strings
  and interning them is most of the cost either way;
- staging: the key's JSON written key by key in sorted order, the prompt's JSON built directly
  (params' JSON once per params object), the slot walk one list instead of a generator per level,
  one encoder object.

Not done: the five shots are still rendered for every sentence (44 of the 61 us): a ``prompt``
macro may use the shots and the example together in any way, so caching their rendering is not
provably byte-identical for every template without a template contract change (a shots macro of
its own). What is left of a render is Jinja's macro machinery and the clock read on each hook.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.memory import load, write_unique_sentences  # noqa: E402  (the same corpus and load reading)

PYTHON = "/work/main/.venv/bin/python"
FORMS = ("chat", "completions")


def child(data: Path, checkout: Path) -> None:
    """Runs inside the checkout measured (its ``evalpipe`` first on ``sys.path``): one JSON line."""
    sys.path.insert(0, str(checkout))
    import evalpipe

    assert Path(evalpipe.__file__).resolve().is_relative_to(checkout), (evalpipe.__file__, checkout)
    from evalpipe.config import RunConfig
    from evalpipe.pipeline.prepare import load_task, prepare
    from evalpipe.pipeline.stage import PlanStage
    from evalpipe.tasks.registry import get_task

    out: dict[str, object] = {}
    for form in FORMS:
        config = RunConfig(tasks=("ncbi_disease",), model="bench-model", base_url="http://127.0.0.1:1/v1",
                           endpoint=form, data={"ncbi_disease": str(data)})  # type: ignore[arg-type]
        start = time.perf_counter()
        _, examples, _ = load_task(get_task("ncbi_disease"), config)
        count = sum(1 for _ in examples)
        out[f"{form} read"] = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as folder:
            stage = PlanStage(Path(folder))
            start = time.perf_counter()
            (prepared,) = prepare(config, stage=stage)
            out[f"{form} prepare"] = time.perf_counter() - start
            digest = hashlib.sha256()
            for row in stage.rows(prepared.plan_name):
                digest.update(json.dumps(row, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n")
            digest.update(json.dumps(sorted(prepared.packer.texts.items())).encode())
            out[f"{form} digest"] = f"{digest.hexdigest()} ({prepared.size} rows, {count} read)"
            stage.close()
    out.update(pieces(data))
    print(json.dumps(out))


class _Counted:
    """A stage that only counts the rows :func:`stage_all` writes."""

    def write(self, plan: str, rows: Iterable[object]) -> int:
        return sum(1 for _ in rows)


def pieces(data: Path, n: int = 5000) -> dict[str, float]:
    """Microseconds a prompt (best of 3 passes over the first ``n`` sentences, chat form): rendering
    with the five shots and with none, and staging (cache key + packed JSON) of rendered prompts."""
    from evalpipe.config import RunConfig
    from evalpipe.pipeline.prepare import load_task
    from evalpipe.pipeline.render import stage_all
    from evalpipe.prompting import PromptRenderer
    from evalpipe.records import GenerationParams
    from evalpipe.tasks.registry import get_task

    spec = get_task("ncbi_disease")
    config = RunConfig(tasks=("ncbi_disease",), model="bench-model", data={"ncbi_disease": str(data)})
    loaded, examples, _ = load_task(spec, config)
    chosen = tuple(itertools.islice(iter(examples), n))
    five = PromptRenderer(spec, tuple(loaded.shot_pool[:5]), GenerationParams(max_tokens=512))
    none = PromptRenderer(spec, (), GenerationParams(max_tokens=512))
    rendered = {ex.id: five.render(ex) for ex in chosen}

    def best(action: Callable[[], object]) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            action()
            times.append(time.perf_counter() - start)
        return min(times) / len(chosen) * 1e6

    return {"render 5 shots us": best(lambda: [five.render(ex) for ex in chosen]),
            "render 0 shots us": best(lambda: [none.render(ex) for ex in chosen]),
            "stage us": best(lambda: stage_all(_Counted(), "p", "bench-model", chosen,  # type: ignore[arg-type]
                                               lambda ex: rendered[ex.id]))}


def measure(repo: Path, data: Path) -> tuple[dict[str, object], float, float]:
    before = load()
    env = dict(os.environ, PYTHONPATH=str(repo), HF_HUB_OFFLINE="1")
    done = subprocess.run([PYTHON, str(Path(__file__).resolve()), "--child", "--data", str(data), "--checkout", str(repo)],
                          cwd=repo, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{repo}: child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), before, load()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repo", action="append", default=[], help="checkouts to measure (first = baseline)")
    parser.add_argument("--n", type=int, default=18800, help="sentences")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", default="", help=argparse.SUPPRESS)
    parser.add_argument("--checkout", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.data), Path(args.checkout).resolve())
        return
    repos = [Path(r).resolve() for r in (args.repo or [str(REPO)])]
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "ncbi.tsv"
        write_unique_sentences(data, args.n, REPO / "data" / "ncbi_disease" / "test.tsv")
        runs: dict[Path, list[dict[str, object]]] = {r: [] for r in repos}
        for round_no in range(args.repeat):
            for repo in repos:
                figures, before, after = measure(repo, data)
                runs[repo].append(figures)
                print(f"round {round_no + 1} {repo}: load {before:.2f} -> {after:.2f}: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in figures.items() if isinstance(v, float)), flush=True)
    report(repos, runs)


def report(repos: list[Path], runs: dict[Path, list[dict[str, object]]]) -> None:
    digests = {r: {k: v for k, v in runs[r][0].items() if k.endswith("digest")} for r in repos}
    for repo in repos:
        assert all({k: v for k, v in f.items() if k.endswith("digest")} == digests[repo] for f in runs[repo])
        if digests[repo] != digests[repos[0]]:
            raise SystemExit(f"{repo}: staged plans differ from {repos[0]}'s: {digests[repo]} != {digests[repos[0]]}")
    print("staged plans identical:", json.dumps(digests[repos[0]]))
    base = repos[0]
    for key in (k for k, v in runs[base][0].items() if isinstance(v, float)):
        best0 = min(float(f[key]) for f in runs[base])  # type: ignore[arg-type]
        for repo in repos:
            values = [float(f[key]) for f in runs[repo]]  # type: ignore[arg-type]
            print(f"{key:22s} {str(repo):28s} best {min(values):.3f}  median {statistics.median(values):.3f}"
                  f"  x{min(values) / best0:.2f}")


if __name__ == "__main__":
    main()

"""Issue 28: the CPU before the sending (load, validate, render, stage) of two checkouts side by side.

Each measurement is a fresh child process of this file (``--child``) with ``PYTHONPATH`` set to
the checkout measured (``/work/main/.venv``'s interpreter), on N unique NCBI Disease sentences
(the 940 test sentences cycled, each made unique by a trailing ``[i]`` token, as
``bench/memory.py`` does). A child times, for the chat form and the completion form:

- ``read``     the examples streamed once (the CoNLL file read and validated, the examples built:
               what scoring does again);
- ``prepare``  :func:`evalpipe.pipeline.prepare.prepare` whole (read, shots, render every prompt,
               its cache key and packed JSON into a plan stage);

and prints a sha256 over every staged row (sample id, cache key, packed prompt, info) and the
packer's shared texts: the checkouts must stage byte-identical plans, which the parent checks
before it prints a ratio. Rounds interleave the checkouts; best and median of the rounds, the
ratio of the bests, and the load average before and after each child are printed (the machine
is shared: read the ratios of one invocation).

    /work/main/.venv/bin/python bench/prepare_speed.py --repo /work/wt/base --repo . --n 18800 --repeat 3

Findings
========

(see the end of this docstring once measured)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
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
    print(json.dumps(out))


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
            print(f"{key:22s} {str(repo):28s} best {min(values):.3f} s  median {statistics.median(values):.3f} s"
                  f"  x{min(values) / best0:.2f}")


if __name__ == "__main__":
    main()

"""How long a report of two 10k-sample runs takes to build, and how long report.html takes to open.

Two NCBI Disease runs of N samples each (the 940 test sentences repeated to N; a perfect and a sloppy
scripted responder, tests/report/support.py) are made once in a temporary folder, then:

- **build**: wall time of :func:`evalpipe.report.build_report` (1,000 bootstrap resamples, the
  default), its parts timed separately — loading the run directories, the bootstrap, the sample
  browser's data (:func:`evalpipe.report.browser_data.browser_data`) and its HTML — and the size of
  report.html;
- **open**: report.html opened from a file:// URL in headless Chromium (``--dump-dom``, real
  clocks): ``performance.now()`` read by a script at the end of the body — navigation start until
  the whole page is parsed, the samples' JSON parsed and indexed and the browser's first page drawn —
  and the wall time of the Chromium process (launch included; a tiny page gives the launch cost);
- **filter**: the same page opened on ``#samples?run=r1&outcome=missed`` (a filter over all rows).

The machine's load average is printed before and after: on a shared 2-core machine other processes
take cores, so compare numbers only at similar load.

    .venv/bin/python bench/report_10k.py              # N = 10,000 per run
    .venv/bin/python bench/report_10k.py --n 2000 --repeat 1

Measured here (2 shared cores, load average 7.3 before and 7.8 after — other engineers' test runs
and a llama.cpp server), N = 10,000::

    made 2 runs of 10000 samples in 23.5 s
    report build: 13.4 s in all (load 4.4 s, bootstrap 1.5 s, browser data 2.7 s, browser HTML 0.9 s);
        report.html 17.4 MB, of which the sample browser 17.4 MB
    open report.html: first page drawn 0.71 s after navigation start; chromium 7.40 s (a tiny page: 1.66 s)
    open report.html#samples?run=r1&outcome=missed: 0.60 s; chromium 7.41 s

The Chromium wall time is mostly ``--dump-dom`` writing the 17 MB document back out (the page is
drawn at 0.7 s); N = 2,000 at the same load: build 3.0 s, 3.6 MB, first page 0.28 s.

Re-measured after the report's loading and bootstrap were made lean (issue 15), at a load average of
0.45–0.58 (a quiet machine, so not comparable with the figures above as a ratio)::

    made 2 runs of 10000 samples in 6.5 s
    report build: 1.9 s in all (load 0.5 s, bootstrap 0.1 s, browser data 1.6 s, browser HTML 0.2 s);
        report.html 17.4 MB, of which the sample browser 17.4 MB
    open report.html: first page drawn 0.32 s after navigation start; chromium 2.38 s (a tiny page: 0.48 s)
    open report.html#samples?run=r1&outcome=missed: 0.32 s; chromium 2.38 s
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalpipe.config import RunConfig  # noqa: E402
from evalpipe.paths import SHIPPED_DATA  # noqa: E402
from evalpipe.report import build_report  # noqa: E402
from evalpipe.report.bootstrap import bootstrap_task  # noqa: E402
from evalpipe.report.browser import render_sample_browser  # noqa: E402
from evalpipe.report.browser_data import browser_data  # noqa: E402
from evalpipe.report.runs import load_report_runs  # noqa: E402
from evalpipe.pipeline.execute import execute  # noqa: E402
from evalpipe.tasks.base import LoadOptions  # noqa: E402
from evalpipe.tasks.registry import get_task  # noqa: E402
from scripts.report_screenshots import chromium_args, find_chromium  # noqa: E402
from tests.report.support import sloppy_responder  # noqa: E402
from tests.support.scripted_backend import ScriptedBackend, query_text  # noqa: E402

PROBE = '<script>document.body.setAttribute("data-ready-ms", performance.now().toFixed(0));</script>'


def make_runs(folder: Path, n: int) -> list[Path]:
    """A CoNLL file of ``n`` test sentences (the test split repeated) and two runs over it."""
    source = (SHIPPED_DATA / "ncbi_disease" / "test.tsv").read_text(encoding="utf-8").strip()
    sentences = source.split("\n\n")
    data = folder / "test10k.tsv"
    data.write_text("\n\n".join(sentences[i % len(sentences)] for i in range(n)) + "\n", encoding="utf-8")
    spec = get_task("ncbi_disease")
    examples = spec.load(LoadOptions(paths={"eval": data})).examples
    gold = {ex.inputs["text"]: spec.shot_target(ex) for ex in examples}
    runs = []
    for model, responder in (("perfect", lambda p: gold[query_text(p)]), ("sloppy", sloppy_responder(gold))):
        config = RunConfig(tasks=("ncbi_disease",), model=model, base_url="http://127.0.0.1:1/v1",
                           data={"ncbi_disease": str(data)}, concurrency=256)
        outcome = asyncio.run(execute(config, lambda _, r=responder, m=model: ScriptedBackend(r, model=m),
                                      folder / "runs"))
        runs.append(outcome.run_dir.path)
    return runs


def time_build(runs: list[Path], out: Path) -> dict[str, float]:
    start = time.perf_counter()
    loaded = load_report_runs(runs)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    for run in loaded:
        for sample in run.resample.values():
            bootstrap_task(sample, resamples=1000)
    boot_s = time.perf_counter() - start
    start = time.perf_counter()
    infos = {t: i for r in loaded for t, i in r.info.items()}
    data = browser_data(loaded, infos)
    data_s = time.perf_counter() - start
    start = time.perf_counter()
    fragment = render_sample_browser(data)
    html_s = time.perf_counter() - start
    start = time.perf_counter()
    built = build_report(runs, out)
    total = time.perf_counter() - start
    return {"total": total, "load": load_s, "bootstrap": boot_s, "browser_data": data_s, "browser_html": html_s,
            "browser_mb": len(fragment.encode()) / 1e6, "html_mb": built.html.stat().st_size / 1e6}


def open_page(chromium: str, page: Path, fragment: str, folder: Path, repeat: int) -> tuple[float, float]:
    in_page, walls = [], []
    for _ in range(repeat):
        args = chromium_args(chromium, folder / "profile", None)  # real clocks
        start = time.perf_counter()
        out = subprocess.run([*args, "--dump-dom", page.as_uri() + fragment], capture_output=True, text=True,
                             timeout=300)
        walls.append(time.perf_counter() - start)
        found = re.search(r'data-ready-ms="(\d+)"', out.stdout)
        if not found:
            raise SystemExit(f"no timing in the page: {out.stderr[-500:]}")
        in_page.append(int(found.group(1)) / 1000)
    return statistics.median(in_page), statistics.median(walls)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000, help="samples per run (two runs)")
    parser.add_argument("--repeat", type=int, default=3, help="page openings per measurement (median)")
    parser.add_argument("--chromium")
    args = parser.parse_args()
    chromium = find_chromium(args.chromium)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="report-bench-") as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        runs = make_runs(folder, args.n)
        print(f"made 2 runs of {args.n} samples in {time.perf_counter() - started:.1f} s")
        build = time_build(runs, folder / "report")
        print(f"report build: {build['total']:.1f} s in all (load {build['load']:.1f} s, bootstrap "
              f"{build['bootstrap']:.1f} s, browser data {build['browser_data']:.1f} s, browser HTML "
              f"{build['browser_html']:.1f} s); report.html {build['html_mb']:.1f} MB, of which the sample browser "
              f"{build['browser_mb']:.1f} MB")
        if chromium is None:
            print("Chromium not found (Debian: apt-get install chromium): page not opened")
            return 0
        page = folder / "report" / "report.html"
        page.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
        tiny = folder / "tiny.html"
        tiny.write_text(f"<!DOCTYPE html><html><body><p>x</p>{PROBE}</body></html>", encoding="utf-8")
        _, launch = open_page(chromium, tiny, "", folder, args.repeat)
        ready, wall = open_page(chromium, page, "", folder, args.repeat)
        print(f"open report.html: first page drawn {ready:.2f} s after navigation start; chromium {wall:.2f} s "
              f"(a tiny page: {launch:.2f} s)")
        ready, wall = open_page(chromium, page, "#samples?run=r1&outcome=missed", folder, args.repeat)
        print(f"open report.html#samples?run=r1&outcome=missed: {ready:.2f} s; chromium {wall:.2f} s")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

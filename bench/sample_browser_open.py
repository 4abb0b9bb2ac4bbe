"""How long the sample browser takes to open with N samples per run × 2 runs, beside a tiny page.

Three numbers per size, each the median of ``--repeat`` runs:

- **render**: Python time of :func:`evalpipe.report.browser.standalone_page` (JSON + escaping);
- **in page**: ``performance.now()`` read by a script placed right after the browser, i.e. the
  time from navigation start until the HTML is parsed, the JSON parsed and indexed and the first
  page of rows drawn (headless Chromium, no virtual time);
- **chromium**: wall time of ``chromium --headless --dump-dom`` on the page, launch included; the
  5-sample page is the launch cost to subtract.

The data is the synthetic set of ``tests/report/test_browser.py`` (NER sentences of 14 tokens with
entities, two runs). Needs Chromium (Debian: ``apt-get install chromium``).

    .venv/bin/python bench/sample_browser_open.py                  # N = 10,000
    .venv/bin/python bench/sample_browser_open.py --n 50000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalpipe.report.browser import standalone_page  # noqa: E402
from scripts.report_screenshots import chromium_args, find_chromium  # noqa: E402
from tests.report.test_browser import make_data  # noqa: E402

PROBE = '<script>document.body.setAttribute("data-ready-ms", performance.now().toFixed(0));</script>'


def measure(chromium: str, n: int, repeat: int, folder: Path) -> dict[str, float]:
    data = make_data(n_ner=n, n_gen=0)
    renders, in_page, walls = [], [], []
    page = folder / f"samples-{n}.html"
    for _ in range(repeat):
        start = time.perf_counter()
        html = standalone_page(data)
        renders.append(time.perf_counter() - start)
    page.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    for _ in range(repeat):
        args = chromium_args(chromium, folder / "profile", None)  # no virtual time: real clocks
        start = time.perf_counter()
        out = subprocess.run([*args, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=300)
        walls.append(time.perf_counter() - start)
        found = re.search(r'data-ready-ms="(\d+)"', out.stdout)
        if not found:
            raise SystemExit(f"no timing in the page for n={n}: {out.stderr[-500:]}")
        in_page.append(int(found.group(1)) / 1000)
    return {"n": n, "mb": len(html.encode()) / 1e6, "render": statistics.median(renders),
            "in_page": statistics.median(in_page), "chromium": statistics.median(walls)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000, help="samples per run (two runs)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--chromium")
    args = parser.parse_args()
    chromium = find_chromium(args.chromium)
    if chromium is None:
        raise SystemExit("Chromium not found (Debian: apt-get install chromium)")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="browser-bench-") as tmp:
        rows = [measure(chromium, n, args.repeat, Path(tmp)) for n in (5, args.n)]
    print(f"{'samples/run':>11} {'rows':>7} {'page MB':>8} {'render s':>9} {'in page s':>10} {'chromium s':>11}")
    for r in rows:
        print(f"{r['n']:>11} {2 * r['n']:>7} {r['mb']:>8.1f} {r['render']:>9.2f} {r['in_page']:>10.2f} {r['chromium']:>11.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

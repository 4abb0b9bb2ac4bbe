"""Peak memory and wall time of whole `evalpipe run`, `score` and `report` processes as N grows.

Issue 15's scale case: N unique NCBI Disease sentences (the 940 test sentences cycled, each made
unique by a trailing ``[i]`` token, so every prompt is distinct — ~2.6 KB, mostly the shared 5-shot
prefix), answered by the loopback fake server (``tests/support/fake_openai.py``, a *subprocess*,
echo answers) at a fixed latency (default 50 ms), C = 256 requests in flight. For each N (default
4,700, 18,800 and 47,000):

- ``run``     ``python -m evalpipe.cli run --task ncbi_disease --data ncbi_disease=FILE …``: wall time,
              peak RSS, and the sending phase's rate (answers sent / ``fetch_seconds`` from
              summary.json: first request to last answer, as the run measured it);
- ``score``   ``evalpipe score RUN`` (re-parse and re-score from the store alone);
- ``report``  ``evalpipe report RUN`` (1,000 bootstrap resamples, the sample browser, …).

Peak RSS is the child's own ``ru_maxrss`` from ``os.wait4`` (the kernel's high-water mark of that one
process — not ``RUSAGE_CHILDREN``, which would also count the server subprocess). The sizes of the
run directory's files are printed too (``responses.sqlite``, ``samples.jsonl``, ``report.html``).

The machine is shared: the load average is printed before and after every process, and ``--repeat``
interleaves rounds over the Ns, so compare figures measured side by side, as ratios, not across days.
``--repo`` (repeatable) measures other checkouts of evalpipe (each with its own ``.venv``) in the
same rounds, interleaved, and prints each one's figures as ratios to the first.

    .venv/bin/python bench/memory.py                          # N = 4700, 18800, 47000
    .venv/bin/python bench/memory.py --n 4700,18800 --steps run,report
    .venv/bin/python bench/memory.py --repo . --repo /work/main   # this checkout and another, side by side
    .venv/bin/python bench/memory.py --n 18800 --steps run,report --keep /tmp/m   # keep the runs and reports

``--keep DIR`` works in DIR and leaves the runs (``results-CHECKOUT-N/bench``) and reports there, to
profile a report or to check two checkouts' reports of one run byte for byte (``bench/report_same.py``).

Findings (issue 28, ``report``; 2 shared CPUs, one round, the old checkout and the new one
interleaved in the same rounds; ``--n 18800,94000 --steps run,report --repo /work/main --repo .``):

=============================  ==========  ===========  =================  ==================
report of N NCBI samples        old (main)   new, first   new, final         final vs old
                                             (c93375c)    (cf2a6b8)
=============================  ==========  ===========  =================  ==================
N = 18,800: peak RSS / wall     286 / 3.5    256 / 4.2    264 / 3.3          x0.92 / x1.02
N = 94,000: peak RSS / wall     512 / 12.7   363 / 15.4   394 / 12.5         x0.77 / x1.02
                                                          (old 515 / 12.2)
load average                    2.3-3.6      2.3-3.6      1.1-1.2            (same rounds)
=============================  ==========  ===========  =================  ==================

(MB and seconds; "old" is main at bb4e430/bc25674, whose report code is that of 7e26b46; the
first column's figures are from the first new version's round, the final column's old figures
in brackets from its own round.) report.html, report.md and leaderboard.csv are byte-identical
to the old ones at 18,800 but for the bootstrap's measured seconds in the method table.

What held the memory (tracemalloc, 18,800 samples): the records, 54 MB after loading — 2.9 KB a
record, of which gold 0.8 KB, inputs 0.76 KB, the ``meta`` dict 0.24 KB, the answer 0.23 KB;
plus, at the peak, the bootstrap's blocks of draws (~64 MB: ``CHUNK_CELLS`` positions, their
offsets, the counts as int and float), which do not grow with N. The runs now hold *slim* records
(:data:`evalpipe.report.runs.ON_DEMAND_FIELDS` left out: 29.7 MB after loading at 18,800, with
the span outcomes) and read a record whole from its line of samples.jsonl where a section needs
it (the sample browser's rows, as they are written; the few NER, disagreement and judge examples).
The first new version classified span outcomes from records read again after the bootstrap
(lowest peak, x1.22 wall); the final one classifies them as the records stream in (wall back to
the old, the outcomes ~30 MB held during the bootstrap's blocks).

Second round (issue 28, "flat and fast"; ``--n 18800,94000 --steps run,report --repo /work/wt/base
--repo /work/wt/reportflat2``, one round, interleaved, 2 shared CPUs under other engineers' load):

=============================  ===============  ===============  ==============
report of N NCBI samples        old (b0dc6b0)    new (d4d7966)    new vs old
=============================  ===============  ===============  ==============
N = 18,800: peak RSS / wall     265 / 4.5        211 / 4.0        x0.80 / x0.89
N = 94,000: peak RSS / wall     394 / 19.1       353 / 14.3       x0.90 / x0.75
N = 94,000: CPU seconds         18.1             14.3             x0.79
load average                    2.8-4.5 (the whole invocation; per process in its output)
=============================  ===============  ===============  ==============

(MB and seconds.) The reports of one run (results-base-18800, and the 94,000 one) by the old and
the new checkout are byte-identical but for the bootstrap's measured seconds in the method table
(``bench/report_same.py OLD_REPORT NEW_REPORT``: report.md and report.html differ in that one cell,
leaderboard.csv not at all).

Where the time went (cProfile, and CPU seconds per phase without the profiler, at 94,000 on the
old code): imports 1.1 s, reading the records 5.8 s (JSON 2-3 s, sharing their values 1.7 s,
classifying the span outcomes 1.6 s), writing report.html 6.8 s — the sample browser decoded each
record's line of samples.jsonl a second time (~30 % of it) and worked each row's entities out again
from the re-decoded gold and prediction —, the bootstrap 3.2 s (counting the draws: 1.9 s), the
frame 0.7 s. What was done, each checked byte for byte:

* the browser's texts of each record (its input already as the page's JSON, the gold and
  prediction texts and entities of a span record, the reasoning) are made as the records are read,
  whole, and kept in a temporary file (``evalpipe.report.browser_spool``); a row reads them back
  and its input is spliced into the page as it is (``browser.SplicedSample``): writing the page
  6.8 → 2.9-3.5 s, reading +2 s (the texts are made there now) — net ~1 s;
* the bootstrap counts its draws row by row (a row's counts stay in cache; the same counts):
  counting twice as fast; a task whose parts are all whole numbers (NER's counts) is resampled in
  blocks of 500,000 draws instead of 2,000,000 (sums exact in any order, so the same numbers), and
  only one block of draws and of counts is alive at a time: the bootstrap 3.2 → 1.5 s CPU, its
  blocks ~64 MB → ~8 MB at 94,000;
* the frame is made a column at a time (``evalpipe.report.frame.report_frame``, the very frame of
  ``frames.samples_frame``): its peak above the records +53 → +17 MB at 94,000;
* span outcomes are slotted objects (~40 B less each).

Tried and dropped: reading the frame's columns (usage, latency …) as the records stream in so
slim records could leave those fields out — a record's dict does not shrink when keys are popped
and the usage dicts were shared already: 25 B a record less held, the peak 30 MB higher.

Left (the issue's goal, <= 300 MB and <= 5 s at 94,000, is still not reached; a redesign, not a
cut): the time is Python work spread over every record — decoding (~25 µs), sharing its values
(~18 µs), classifying its spans (~15 µs), the browser's texts (~20 µs), its row as a dict and its
JSON (~25 µs), the frame, the indexes — ~120 µs a record in all; 5 s at 94,000 needs ~40. What
still grows with N: the slim record (~0.9 KB: its dict 464 B even with five fields popped, the
answer, the id), the span outcomes (~0.3 KB), the frame (~0.1 KB), the two indexes by record
(line offset, spool offset: ~0.15 KB); the fixed part is ~140 MB of imports. Next steps, in order
of what they would save: the slim records rebuilt as dicts of at most ten keys (272 B instead of
464: the frame's and browser's fields read as they stream in, the answer in the spool — compare's
answer check by a digest), the NER analysis counted as the records stream in (no outcomes held),
one index for both files.

Quiet check on the merged main (f1652ad: this round's report with the run's overlap, the prepare
cuts and the shots memo), ``--n 94000 --steps run,report --repo /work/wt/base --repo /work/main``,
one round, load 1.1-1.7 (the benchmark's own processes): report 13.0 s / 395 MB -> 11.9 s / 354 MB
(x0.92 / x0.90; CPU 14.2 -> 12.0 s); run 66.5 s / 125 MB -> 44.8 s / 114 MB (x0.67 / x0.92),
sending 2,946 requests/s.

First round's "left" (kept for the record): what still grows with N
is the slim records (~1.1 KB each: the answer, the scores/parts dicts, the record dict itself),
the span outcomes (~0.37 KB each) and the frame; the fixed part is the interpreter with numpy and
pandas and the bootstrap's ~64 MB of blocks (smaller blocks would change the float summation
order of a float part, so not done here). Time: each sample browser row re-parses its line
(one more JSON pass over samples.jsonl).

Third round (2026-12-03, issue 28's report half, "<= 5 s and <= 300 MB"; the kept 94,000 run,
``--n 94000 --steps report --repeat 2 --repo /work/wt/main0 --repo /work/wt/repfast --repo COPY-OFF
--env repfast:EVALPIPE_REPORT_BESIDE=1 --env COPY-OFF:EVALPIPE_REPORT_BESIDE=0``, COPY-OFF a
``git archive`` of the same commit; 2 shared CPUs, load 1.9-2.8 from other engineers' work; medians
of two interleaved rounds; "tree" is the new :class:`TreePss`, the peak summed PSS of the report
and its child, sampled every 20 ms — a few MB noisy):

=================================  ==============  ===================  ==================
report of 94,000 NCBI samples       old (b348332)   new, browser beside  new, in-process
=================================  ==============  ===================  ==================
wall / CPU (s, CPU of both procs)   13.2 / 12.4     9.7 / 11.3           11.4 / 11.3
peak RSS of one process (MB)        353             356                  356
peak summed PSS of the tree (MB)    345             471                  348
vs old: wall, tree                                  x0.73, x1.37         x0.86, x1.01
=================================  ==============  ===================  ==================

report.html, report.md and leaderboard.csv of the one run (results-main0-94000) by the old
checkout and by the new with the child forced on and off: byte-identical but for the bootstrap's
measured seconds (``bench/report_same.py OLD NEW``, both), the browser's JSON included.

What was done:

* the browser's JSON (its rows, each record's inputs) written by orjson where its text is exactly
  ``json``'s (:mod:`evalpipe.jsonfast`): orjson spells a float below 1e-4 otherwise (``0.00001``,
  ``1e-7``) — a text that may hold one (a digit before ``e-``, or ``0.0000`` and a digit, found by
  a ``bytes.translate`` and substring searches) goes to ``json``, as does what orjson refuses
  (non-string keys, 64-bit overflow, lone surrogates). Encoding the 94,000 rows in batches of 500:
  2.2 -> 0.8 s; each record's inputs 0.7 -> 0.4 s; the CPU of the report 12.4 -> 11.3 s;
* the browser written by a forked child (:mod:`evalpipe.report.browser_beside`) once the runs are
  read, before the frames and bootstraps; the parent splices the child's file into report.html, and
  makes the browser itself when no fork is wanted, the child fails or is killed (tested). On a
  quieter moment (load 1.5) one report's timeline: imports 0.8 s, reading 5.2 s, then the parent
  3.4 s to reach the browser and the child 3.7 s to write it (2.4 s in-process when alone) — the two
  halves are balanced, so what is left on the critical path is the reading.

Tried and dropped: orjson for decoding samples.jsonl — 0.93 -> 0.71 s for the 94,000 lines in
batches, but orjson reads an integer beyond 64 bits as a float, silently, and finding such
integers first (a regular expression: 3.4 s; ``bytes.translate`` and a search: 0.23 s) cost what
was saved; orjson's dicts are also presized (632 B a record dict, 464 B from ``json``: +16 MB).
Making the frames before the fork (so that the parent does not copy the records' pages as it
reads them for the frame): the tree's peak the same (470 vs 472 MB), wall +0.2 s.

Why the child costs ~120 MB: copy-on-write pages are copied when written, and CPython writes a
reference count each time an object is read, so every page of the records and span outcomes the
child's rows touch is copied (the collector is kept off them: the heap is frozen before the fork
and the child disables it). The goal is not reached: the in-process report is CPU-bound at ~11 s
(~120 µs of Python a record), and the fork trades memory for wall time. What would still pay:
cutting the reading (decode 1.4 s, span outcomes 0.8 s, the browser's texts 1.1 s, sharing 0.85 s,
in-process seconds at 94,000), now the critical path; with the fork, a child forked *before*
reading that reads only what the browser needs would overlap the reading too, but would hold its
own records (no sharing of pages) — more memory again.

Quiet check on the merged main (2026-12-03 evening, ``--n 94000 --steps report --repeat 2 --keep
KEPT --repo /work/wt/main0 --repo /work/wt/trial6``, main0 = b348332, trial6 = main with this round
and the run's changes of bench/overlap.py's phase 4; load 1.5-1.6, the benchmark's own processes):
report 12.5 s -> 9.8 s (x0.78), CPU 12.4 -> 11.5 s, peak RSS of one process 353 -> 357 MB, the
tree's summed PSS 345 -> 472 MB (x1.37, the child's copied pages). ``EVALPIPE_REPORT_BESIDE=0``
gives the in-process figures of the table above (11.4 s, 348 MB).

Fourth round (2026-12-04, the records held lean: ``evalpipe/report/reading.py``, frame values and
answer digests taken while each record is whole, equal span outcomes shared, parts taken while
reading), ``--n 94000 --steps report --repeat 2 --repo /work/main --repo /work/wt/lean`` (main =
95acd4b; load 0.4-0.5, medians of two interleaved rounds):
========  =======  ========  ========  ======
checkout  wall     peak      tree PSS  CPU
========  =======  ========  ========  ======
main      7.3 s    356 MB    471 MB    8.7 s
lean      7.4 s    310 MB    389 MB    8.4 s
========  =======  ========  ========  ======
(x1.02, x0.87, x0.83.) report.md, report.html and leaderboard.csv identical but for the bootstrap's
seconds and the run directory's path (the second checkout read the same run through a symlink).
Most of the outcome saving (~29 -> ~1 MB) comes from this corpus repeating its 940 sentences; on
distinct sentences it is smaller, as the parts saving (~20 MB there, none here: the cycled parts
dicts were already shared) is larger. The parent alone, without the sample browser, is 4.7 s and
276 MB; the browser child (forked after reading, its copy-on-write pages and 3.5 s of rows) is now
what stands between this and issue 28's 5 s / 300 MB: next, a child that starts before the
records are read and makes the rows from the samples file itself.

Fifth round (2026-12-06, another machine of this kind: the same main reports ~25 % slower than on
2026-12-04). First a fix of this bench: sampling the tree's PSS every 20 ms read smaps_rollup of
each ~300 MB process (~5.5 ms apiece) and took about half a core from a report of two processes on
2 cores, which hid what a second process gained — samples are now 0.25 s apart (``--pss-interval``).
Then the browser's texts spooled by a child forked before the reading (``report/spool_beside.py``:
the last 90 % of lines; the parent the first 10 %) and the browser's last 10 % of rows written by
the parent (``browser_beside.CHILD_SHARE``). ``--n 94000 --steps report --repeat 2 --repo
/work/base --repo /work/main`` (base = cd52f71; load 1.0-1.2, medians of two interleaved rounds):

========  =======  ========  ========  =======
checkout  wall     peak      tree PSS  CPU
========  =======  ========  ========  =======
base      10.0 s   310 MB    390 MB    11.3 s
main      8.6 s    319 MB    412 MB    14.3 s
packed    8.2 s    299 MB    376 MB    13.8 s
lazy      9.2 s    275 MB    344 MB    15.3 s
========  =======  ========  ========  =======

(x0.86, x1.03, x1.06; unsampled, ``/usr/bin/time``, two rounds: base 9.6-10.2 s, main 8.1-8.7 s.
"packed": then the two indexes every row consults held as arrays searched by bisection — the
adopted spool's (key, offset, size), ~15 MB as a dict at 85,000 records, and RecordLines' (record
identity, line offset), ~9 MB — in its own two rounds beside base (10.4 s, 311 MB, 389 MB there):
x0.79, x0.96, x0.96. "lazy": then matplotlib imported when the report first draws, after the
reading, not with the report's modules — its ~25 MB are not in the process while it reads nor in
the children forked then; its own two rounds beside base, the host busier (load 1.9-2.6; base 11.9 s,
311 MB, 392 MB there): x0.77, x0.88, x0.88. The wall time is the same as before it within this
host's noise — the parent imports matplotlib beside the browser child's rows instead.)

At 18,800 samples (the final main, three interleaved rounds, load 1.3-1.6; "head" is the same
checkout with ``EVALPIPE_REPORT_SPOOL_BESIDE=0``): base 3.8 s / 203 MB / 217 MB, main 3.9 s / 194 MB
/ 188 MB (x1.04, x0.95, x0.86), head 3.9 s / 197 MB / 195 MB; in rounds of main and head alone
(load 1.3) the spool child made it 3.7 -> 3.4 s. So at this size the wall is the old one within
the noise, and the memory lower.
report.md, report.html and leaderboard.csv identical but for the bootstrap's seconds. The timeline
in one process's terms (main): imports 0.9 s; the reading 4.0-4.4 s, both processes busy (the
parent's reading alone 3.6 s, 3.9 s beside the child: the two cores share memory bandwidth); the
frames, the bootstraps and the other sections 1.4 s beside the browser child's rows (1.55 s for
90 % of them); the parent's 10 % and the copy 0.3 s. What is left is CPU on both cores: decoding
and span classification are done by both processes (~2.4 s of the 3 s more CPU), the reading's
other per-record work (~2.3 s) and the rows (~1.7 s) — the 5 s asked needs less work per record,
not more overlap; and the tree's PSS (344 MB) is the parent's ~275 MB and the browser child's pages.
A faster CoNLL reader (whole sentences split in C where a block is plain) was tried for the run's
side and dropped: the regular expressions that prove a block plain cost what the line loop saved.

Sixth round (2026-12-06 evening; the host ~35 % slower than that morning: base reported in 12.5 s
what it had in 9.2). The whole reading in two processes (``report/read_beside.py``, which replaced
the texts-only ``spool_beside.py``: the child reads the last half of each run's lines and takes all
the report takes of them, sent back pickled; every record decoded once), then the frames made
before the browser child forks (its share of rows 90 -> 80 %) and the report's own spool index
packed. ``--n 94000 --steps report --repeat 3 --repo /work/base --repo /work/main`` (base =
38a1e7b, the fifth round's final main; load 1.9-2.0; medians of three interleaved rounds):

========  =======  ========  ========  =======
checkout  wall     peak      tree PSS  CPU
========  =======  ========  ========  =======
base      12.5 s   273 MB    347 MB    21.2 s
read      10.1 s   290 MB    378 MB    16.9 s
main      9.7 s    262 MB    320 MB    15.3 s
========  =======  ========  ========  =======

("read": the two-process reading alone, its own three rounds beside base at load 0.6-1.5 (base
12.2 s, 273 MB, 350 MB there): x0.83, x1.06, x1.08 — faster, but the frames built after the fork
copied pages (PSS traced every 0.25 s: the parent 229 MB and the browser child 148 MB at the peak,
against 222 + 131 for base); "main": then the frames before the fork: x0.77, x0.96, x0.92.) At
18,800 samples (three rounds, load 1.3-1.5): base 4.2 s / 194 MB / 190 MB, main 4.1 s / 192 MB /
181 MB (x0.96, x0.99, x0.95). report.md, report.html and leaderboard.csv identical but for the
bootstrap's seconds (and the run directory's path, base's being a link to main's run). The
reading of 94,000 records in the parent's timeline: 3.4-3.5 s for its half, then 0.1-0.4 s waiting
for the child and 0.1 s joining. What is left for issue 28's 5 s: ~11 s of CPU at this morning's
speed (imports 0.7 s on one core; the reading ~6.8 s; frames, bootstraps and sections ~1.9 s; the
rows ~2.5 s), so even perfectly spread over 2 cores ~6 s — the work per record itself must fall.

Seventh round (issue 28, 2026-12-07: the report's extract, ``evalpipe/report/extract/``; ``--n 94000
--steps run,report --repo <ca8e2ab> --repo .``, interleaved, load 2.0-2.5):

=============================  =====================  =====================  ==============
N = 94,000                      base (ca8e2ab)          main                   main vs base
=============================  =====================  =====================  ==============
report: wall / peak / tree      7.4 s / 263 / 320 MB    4.4 s / 257 / 280 MB   x0.59 / x0.98 / x0.87
report: wall / peak / tree      7.7 s / 262 / 320 MB    5.1 s / 265 / 290 MB   x0.67 / x1.01 / x0.90
report: CPU                     12.0-12.4 s             5.8-6.7 s              ~x0.5
run: wall / peak                46.9-49.0 s / 121 MB    50.1-50.2 s / 121 MB   x1.02-1.07 / x1.0
report, 3 rounds (load 2.0)     7.4 s / 261 / 322 MB    4.0 s / 269 / 282 MB   x0.54 / x1.03 / x0.87
final, 2 rounds (load 2.1-2.6)  9.0 s / 261 / 317 MB    4.9 s / 255 / 264 MB   x0.54 / x0.98 / x0.83
final run, 2 rounds             56.8 s / 121 MB         58.2 s / 121 MB        x1.02 / x1.0
=============================  =====================  =====================  ==============

(The last two rows: the final code, on a slower afternoon; between them the answers' digests were
packed, the NER analysis moved before the browser's fork and the heap trimmed before it.)

The run writes, beside samples.jsonl, what the report takes of each record; the report reads it
instead of decoding every record (the reading 7.0 → 1.3-1.5 s) and the sample browser's child makes
its rows of the texts the extract wrote, reading no record of the report's (the rows 2.4 → 1.1 s,
the child's copied pages ~60 MB → ~15 MB). Where the report's time went, in its own timeline at a
quiet moment: imports 0.7-0.8 s, reading the extract 1.5 s (JSON 0.15-0.3, sharing 0.2, span outcomes
0.3, its hash checks in a thread beside), frames 0.2 s, the rows' plan and links 0.2 s; then the
bootstraps 0.9 s and the other sections 0.55 s (matplotlib's import 0.3 of it) while the child
writes the rows (1.1-1.2 s). The run's peak rose to 188 MB with the first form (the extract's
modules imported pandas into the scoring child) and is 121 MB again since they do not. Reports
identical but for the bootstrap's seconds (``bench/report_same.py``). Single reports at a quieter
moment (load ~0.7): 4.2-4.4 s, tree 267-281 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.fake_openai import FakeOpenAIProcess  # noqa: E402

MODEL = "bench-model"
STEPS = ("run", "score", "report")


def load() -> float:
    return os.getloadavg()[0]


def write_unique_sentences(path: Path, n: int, source: Path) -> None:
    """``n`` CoNLL sentences: the test split cycled, sentence i ending with the token ``[i]`` (tag O)."""
    sentences = source.read_text(encoding="utf-8").strip().split("\n\n")
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            out.write(sentences[i % len(sentences)])
            out.write(f"\n[{i}]\tO\n\n")


@dataclass(frozen=True)
class Measured:
    repo: str
    step: str
    n: int
    wall_s: float
    peak_mb: float
    cpu_s: float
    load_before: float
    load_after: float
    returncode: int
    extra: str = ""
    #: peak summed PSS of the process and its children (TreePss), and the most processes seen at once
    tree_mb: float = 0.0
    processes: int = 1


def _children(pid: int) -> list[int]:
    """The process's children (every thread's), from /proc; none where it cannot be read."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as handle:
                out.extend(int(c) for c in handle.read().split())
    except OSError:
        pass
    return out


def _pss_kb(pid: int) -> int:
    """The process's proportional set size (shared pages split between their users), in KB."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


#: seconds between two samples of a process tree's PSS (--pss-interval). One read of smaps_rollup of
#: a ~300 MB process costs ~5.5 ms of kernel time on this machine: sampled every 20 ms, a report of
#: two such processes lost about half a core to the sampler on 2 cores — which hid what its second
#: process gained (wall x1.0 sampled, x0.85 unsampled, 2026-12-06) — so samples are sparser now
PSS_INTERVAL = 0.25


class TreePss:
    """The peak, over samples every :data:`PSS_INTERVAL` s, of the summed PSS of a process and its
    descendants: a report that forks a helper (evalpipe.report.browser_beside) counts both
    processes, their copy-on-write pages once (ru_maxrss would count one process only)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_kb, self.most = pid, 0, 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(PSS_INTERVAL):
            tree, todo = [], [self.pid]
            while todo:
                pid = todo.pop()
                tree.append(pid)
                todo.extend(_children(pid))
            self.peak_kb = max(self.peak_kb, sum(map(_pss_kb, tree)))
            self.most = max(self.most, len(tree))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


#: checkout name -> environment variables set for its processes only (--env)
EXTRA_ENV: dict[str, dict[str, str]] = {}


def measure(command: list[str], cwd: Path, step: str, n: int) -> tuple[Measured, str]:
    """Run ``command`` to its end; its wall time, its own peak RSS and CPU (os.wait4), and the peak
    summed PSS of its process tree (:class:`TreePss`; the fake server is the bench's, not its child)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(cwd), NO_COLOR="1", COLUMNS="200",
               **EXTRA_ENV.get(cwd.name, {}))
    before = load()
    started = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        tree = TreePss(process.pid)
        _, status, usage = os.wait4(process.pid, 0)
        tree.stop()
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        log.seek(0)
        output = log.read().decode("utf-8", "replace")
    # ru_maxrss is in kilobytes on Linux
    return Measured(cwd.name, step, n, wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, before,
                    load(), process.returncode, tree_mb=tree.peak_kb / 1024, processes=tree.most), output


def evalpipe(repo: Path) -> list[str]:
    python = repo / ".venv" / "bin" / "python"
    return [str(python if python.exists() else sys.executable), "-m", "evalpipe.cli"]


def one_round(repo: Path, server: FakeOpenAIProcess, n: int, data: Path, work: Path, steps: list[str],
              concurrency: int) -> list[Measured]:
    results_dir = work / f"results-{repo.name}-{n}"
    out: list[Measured] = []
    run_dir: Path | None = None
    if "run" in steps or not results_dir.exists():
        server.reset()
        subprocess.run(["rm", "-rf", str(results_dir)], check=True)
        m, log = measure([*evalpipe(repo), "run", "--task", "ncbi_disease", "--data", f"ncbi_disease={data}",
                          "--base-url", server.url, "--model", MODEL, "--concurrency", str(concurrency),
                          "--results-dir", str(results_dir), "--run-name", "bench"], repo, "run", n)
        run_dir = results_dir / "bench"
        extra = ""
        summary_path = run_dir / "summary.json"
        if summary_path.is_file():
            summary = json.loads(summary_path.read_text(encoding="utf-8"))
            info = summary.get("run") or summary.get("_run") or {}
            if info.get("fetch_seconds"):
                extra = f"sending {info['sent'] / info['fetch_seconds']:,.0f} req/s ({info['fetch_seconds']:.1f} s)"
        if m.returncode != 0:
            print(log[-3000:], file=sys.stderr)
        out.append(Measured(**{**m.__dict__, "extra": extra}))
    run_dir = results_dir / "bench"
    if "score" in steps:
        m, log = measure([*evalpipe(repo), "score", str(run_dir)], repo, "score", n)
        if m.returncode != 0:
            print(log[-3000:], file=sys.stderr)
        out.append(m)
    if "report" in steps:
        report = work / f"report-{repo.name}-{n}"
        m, log = measure([*evalpipe(repo), "report", str(run_dir), "--out", str(report)], repo, "report", n)
        if m.returncode != 0:
            print(log[-3000:], file=sys.stderr)
        html = report / "report.html"
        out.append(Measured(**{**m.__dict__, "extra": f"report.html {html.stat().st_size / 1e6:.1f} MB"
                               if html.is_file() else ""}))
    sizes = [f"{name} {(run_dir / name).stat().st_size / 1e6:.1f} MB" for name in ("responses.sqlite", "samples.jsonl")
             if (run_dir / name).is_file()]
    print(f"  {repo.name} N={n}: {', '.join(sizes)}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    global PSS_INTERVAL
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="4700,18800,47000", help="comma-separated sample counts")
    parser.add_argument("--latency", type=float, default=0.05, help="server latency in seconds (default 0.05)")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, from {', '.join(STEPS)}")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds over the Ns (medians)")
    parser.add_argument("--pss-interval", type=float, default=PSS_INTERVAL,
                        help=f"seconds between samples of the tree's PSS (default {PSS_INTERVAL}; each costs the machine ~5 ms)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="work in this folder and keep it (the runs and reports, to diff or profile them)")
    parser.add_argument("--repo", type=Path, action="append",
                        help="an evalpipe checkout to measure, with its .venv (repeatable; default: this one)")
    parser.add_argument("--env", action="append", default=[], metavar="CHECKOUT:NAME=VALUE",
                        help="set NAME=VALUE for that checkout's processes only (e.g. two copies of one "
                             "checkout, a setting on and off, side by side)")
    args = parser.parse_args(argv)
    PSS_INTERVAL = args.pss_interval
    for item in args.env:
        checkout, _, setting = item.partition(":")
        name, _, value = setting.partition("=")
        EXTRA_ENV.setdefault(checkout, {})[name] = value
    ns = [int(x) for x in args.n.split(",") if x.strip()]
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    repos = [r.resolve() for r in (args.repo or [REPO])]
    if len({r.name for r in repos}) != len(repos):
        parser.error("--repo: give checkouts with different folder names (they label the figures)")
    for repo in repos:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        print(f"{repo.name}: {repo} at {commit}")
    print(f"{os.cpu_count()} CPUs, load average at start {load():.2f}; latency {args.latency * 1e3:.0f} ms, "
          f"C={args.concurrency}, server in a subprocess", flush=True)
    measured: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as tmp:
        work = Path(tmp) if args.keep is None else args.keep.resolve()
        work.mkdir(parents=True, exist_ok=True)
        data = {n: work / f"ncbi-{n}.tsv" for n in ns}
        for n, path in data.items():
            write_unique_sentences(path, n, REPO / "data" / "ncbi_disease" / "test.tsv")
        with FakeOpenAIProcess(latency=args.latency, models=(MODEL,)) as server:
            for _ in range(args.repeat):
                for n in ns:
                    for repo in repos:
                        for m in one_round(repo, server, n, data[n], work, steps, args.concurrency):
                            measured.append(m)
                            print(f"  {m.repo} {m.step:6s} N={m.n:6d}: {m.wall_s:6.1f} s  peak {m.peak_mb:6.0f} MB  "
                                  f"tree PSS {m.tree_mb:6.0f} MB ({m.processes} proc)  "
                                  f"cpu {m.cpu_s:6.1f} s  exit {m.returncode}  "
                                  f"load {m.load_before:.2f}-{m.load_after:.2f}  {m.extra}", flush=True)
    print(f"\nmedians over {args.repeat} round(s) ({os.cpu_count()} CPUs; load per process above)")
    first = repos[0].name
    print(f"{'checkout':12s} {'step':6s} {'N':>7s} {'wall s':>7s} {'peak MB':>8s} {'tree MB':>8s} {'cpu s':>7s}"
          + (f"   vs {first}: wall, peak, tree" if len(repos) > 1 else ""))
    status = 0
    for step in steps:
        for n in ns:
            base: Measured | None = None
            for repo in repos:
                ms = [m for m in measured if m.repo == repo.name and m.step == step and m.n == n]
                if not ms:
                    continue
                status |= any(m.returncode for m in ms)
                row = Measured(repo.name, step, n, statistics.median(m.wall_s for m in ms),
                               statistics.median(m.peak_mb for m in ms), statistics.median(m.cpu_s for m in ms),
                               0, 0, 0, tree_mb=statistics.median(m.tree_mb for m in ms))
                base = base or row
                ratio = (f"   x{row.wall_s / base.wall_s:.2f}, x{row.peak_mb / base.peak_mb:.2f}, "
                         f"x{row.tree_mb / max(base.tree_mb, 1e-9):.2f}" if len(repos) > 1 and row is not base else "")
                print(f"{repo.name:12s} {step:6s} {n:7d} {row.wall_s:7.1f} {row.peak_mb:8.0f} {row.tree_mb:8.0f} "
                      f"{row.cpu_s:7.1f}{ratio}")
    print(f"load average at end {load():.2f}")
    return status


if __name__ == "__main__":
    sys.exit(main())

"""Whether two report folders are the same report: byte for byte, but for the bootstrap's seconds.

The method table ("Bootstrap: method per metric and time") shows how long each task's bootstrap
took, which differs from one process to the next; everything else a report writes must not. Used
to check a change to the report's code on one run directory, old checkout against new::

    python bench/report_same.py OLD_REPORT_DIR NEW_REPORT_DIR

Prints each file's verdict (report.md, report.html, leaderboard.csv) and exits 1 unless every
difference is that one cell.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

FILES = ("report.md", "report.html", "leaderboard.csv")
#: the seconds cell of the method table, before its notes cell (markdown and HTML)
_SECONDS = (re.compile(rb"\| \d+\.\d\d \| no interval"), re.compile(rb'<td class="num">\d+\.\d\d</td><td>no interval'))


def _masked(line: bytes) -> bytes:
    for pattern in _SECONDS:
        line = pattern.sub(b"SECONDS", line)
    return line


def compare(old: Path, new: Path, name: str) -> bool:
    a, b = (old / name).read_bytes(), (new / name).read_bytes()
    if a == b:
        print(f"{name}: byte-identical ({len(a):,} bytes)")
        return True
    lines_a, lines_b = a.split(b"\n"), b.split(b"\n")
    differing = [i for i, (x, y) in enumerate(zip(lines_a, lines_b)) if x != y]
    beyond = [i for i in differing if _masked(lines_a[i]) != _masked(lines_b[i])]
    same = not beyond and len(lines_a) == len(lines_b)
    print(f"{name}: {len(differing)} line(s) differ, {len(beyond)} beyond the bootstrap's seconds"
          + ("" if len(lines_a) == len(lines_b) else f"; {len(lines_a)} lines vs {len(lines_b)}"))
    return same


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    old, new = Path(argv[0]), Path(argv[1])
    results = [compare(old, new, name) for name in FILES]
    print("the same report but for the bootstrap's seconds" if all(results) else "DIFFERENT")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

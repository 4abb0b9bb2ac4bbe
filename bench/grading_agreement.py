"""Agreement of evalpipe's answer parsers with a careful human grader, per answer kind and habit.

Reads ``tests/parsers/graded_answers.jsonl`` (hand-labelled answers, see its builder) and prints, per
split (``tune`` / ``heldout``), kind and habit, how many answers the parser reads as the grader does,
and how many hedges/refusals/empty answers it scored as a choice (must be 0).

    python bench/grading_agreement.py [--rules default|strict-v1] [--split tune|heldout|all] [--show]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalpipe.parsers.graded import GRADERS, grade  # noqa: E402

CORPUS = ROOT / "tests" / "parsers" / "graded_answers.jsonl"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", choices=sorted(GRADERS), default="default")
    parser.add_argument("--split", choices=("tune", "heldout", "all"), default="all")
    parser.add_argument("--show", action="store_true", help="print every disagreement")
    args = parser.parse_args()
    rows = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if args.split == "all" or r["split"] == args.split]
    table: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in rows:
        got = grade(row, args.rules)
        cell = table[(row["split"], row["kind"])]
        cell[0] += got == row["label"]
        cell[1] += 1
        cell[2] += row["label"] == "fail" and got != "fail"
        if args.show and got != row["label"]:
            print(f"  [{row['split']}/{row['kind']}/{row['habit']}] want {row['label']} got {got}: {row['answer']!r}")
    print(f"rules: {args.rules}")
    print(f"{'split':8} {'kind':13} {'agree':>7} {'n':>5} {'rate':>7} {'fail→choice':>12}")
    total = [0, 0, 0]
    for (split, kind), (agree, n, bad) in sorted(table.items()):
        print(f"{split:8} {kind:13} {agree:7d} {n:5d} {agree / n:7.1%} {bad:12d}")
        total = [total[0] + agree, total[1] + n, total[2] + bad]
    print(f"{'all':8} {'':13} {total[0]:7d} {total[1]:5d} {total[0] / max(total[1], 1):7.1%} {total[2]:12d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The report does not hold every record whole (issue 28): its memory stays flat in the run's size.

A run of a few thousand samples is made from the 60-sample NCBI run by repeating its records (ids
made unique), each with a large ``meta`` note (the data file's position is all ``meta`` holds in a
real run; no section shows it, so it weighs on what the report holds, not on what it writes). Held
whole, the notes alone would be :data:`PADDING` × :data:`N` bytes; the bounds below are a fraction
of that, with a wide margin for what the report does hold (slim records, the frame, the outcomes)
and for a batch of lines decoded at once (:data:`evalpipe.results.DECODE_LINES`). (A padded input would not do for the peak: the sample browser writes each input, and the page's
writer buffers some rows.)
Memory, not time, is asserted: tracemalloc counts Python's own allocations, the same on any machine.
"""

import json
import shutil
import tracemalloc
from pathlib import Path

import pytest

from evalpipe.report import build_report
from evalpipe.report.runs import load_report_runs

N = 6000
#: characters of meta note per record
PADDING = 6000
WHOLE = N * PADDING


@pytest.fixture(scope="module")
def large_run(two_runs, tmp_path_factory) -> Path:
    source = two_runs[1]
    run = tmp_path_factory.mktemp("large") / source.name
    shutil.copytree(source, run)
    lines = [json.loads(line) for line in (source / "samples.jsonl").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    with (run / "samples.jsonl").open("w", encoding="utf-8") as out:
        for i in range(N):
            record = dict(lines[i % len(lines)], id=f"s{i}")
            record["meta"] = {**(record.get("meta") or {}), "note": f"{i} " + "x" * PADDING}
            out.write(json.dumps(record) + "\n")
    return run


def _traced(work) -> tuple[int, int]:
    """(bytes still held after ``work()``, peak bytes during it), both above what was held before."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = work()
        held, peak = tracemalloc.get_traced_memory()
        del kept
    finally:
        tracemalloc.stop()
    return held - before, peak - before


def test_loaded_runs_hold_slim_records(large_run):
    held, _ = _traced(lambda: load_report_runs([large_run]))
    assert held < WHOLE / 2, f"{held / 1e6:.1f} MB held for {N} records (their notes: {WHOLE / 1e6:.0f} MB)"


def test_a_report_never_holds_every_record_whole(large_run, tmp_path):
    _, peak = _traced(lambda: build_report([large_run], tmp_path / "report", resamples=50))
    assert peak < WHOLE, f"peak {peak / 1e6:.1f} MB for {N} records (their notes: {WHOLE / 1e6:.0f} MB)"
    # the sample browser still shows every sample, its input and gold read again from its line
    html = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    assert f'"s{N - 1}"' in html and "telangiectasia" in html


def test_slim_records_read_back_whole_and_a_file_whose_lines_do_not_pair_is_held_whole(tmp_path):
    from evalpipe.report.reading import ON_DEMAND_FIELDS, read_records
    from evalpipe.results import RunDir

    records = [{"task": "t", "id": f"s{i}", "key": "k", "inputs": {"text": f"input {i}"}, "gold": i,
                "meta": {"row": i}, "scores": {"f1": 1.0}} for i in range(5)]
    lines = [json.dumps(r) for r in records]
    (tmp_path / "samples.jsonl").write_text("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n",
                                            encoding="utf-8")
    slim, where = read_records(RunDir(tmp_path), None, slim=True)
    assert where is not None and not any(name in r for r in slim for name in ON_DEMAND_FIELDS)
    with where.reader() as whole:  # a blank line between records does not shift them
        assert [whole(r) for r in slim] == [{k: v for k, v in r.items() if k != "key"} for r in records]
    # a lone carriage return ends a line for the text reader only: the records are then held whole
    (tmp_path / "samples.jsonl").write_text(lines[0] + "\r" + "\n".join(lines[1:]) + "\n", encoding="utf-8",
                                            newline="")
    held, where = read_records(RunDir(tmp_path), None, slim=True)
    assert where is None and [r["inputs"] for r in held] == [r["inputs"] for r in records]

"""Progress without a terminal: periodic plain lines with done/total, rate, errors, ETA."""

import io

from evalpipe.pipeline.progress import LineProgress
from evalpipe.records import Completion


def test_plain_lines_report_counts_and_errors():
    stream = io.StringIO()
    progress = LineProgress(stream=stream, every_s=0.0)
    progress.start(total=4, cached=1)
    progress.advance(Completion(text="a"))
    progress.advance(Completion(text=None, error="HTTP 500 after 7 attempts"))
    progress.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[evalpipe] start: 1/4 done (1 cached)")
    assert "3/4 done" in lines[-1] and "1 errors" in lines[-1] and "req/s" in lines[-1] and "eta" in lines[-1]

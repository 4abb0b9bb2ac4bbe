"""The report's extract of a samples file: what a report takes of each record, written as the file is.

Why (issue 28): a report reads every record of ``samples.jsonl`` whole once and takes of it what
its sections need (:class:`~evalpipe.report.taking.WhileWhole`: the held slim record, the frame's
values, the answer's digest, the parts, the span outcomes, the sample browser's texts). At 94,000
NCBI samples that was ~7 s of the report's ~11.5 s of CPU — Python work on every record, whose
parts each cost a few microseconds and which two processes could only share. Whoever *writes* a
samples file has every line in hand, and the run writes it while its requests are in flight (the
scoring child, :mod:`evalpipe.pipeline.score_beside`), when a core is otherwise idle behind a remote
model. So the writer takes the same of each line, with the same code (:mod:`.writing`), and keeps it
beside the file; a report reads that back in bulk (:mod:`.loading`) and decodes no record at all.

**What is written** (the folder ``samples.extract/`` beside ``samples.jsonl``; ``samples.COMPAT.extract/``
beside a compatibility scoring's file; :mod:`.layout`):

* ``index.json`` — the format, the fingerprint of the code that took (:func:`fingerprint`), the
  samples file's size, and its *segments*: consecutive byte ranges of the file, each taken by one
  writer (a task's lines spilled by the scoring child, or the lines the run wrote itself), with
  its line count, SHA-256, its own files' SHA-256, the tasks its lines belong to and what the writer
  knew of them (which were span tasks, which ran under prompt conditions and which condition was
  the reference, the kind each task's browser rows were written for);
* per segment, ``NAME.json``: one document per batch of lines (:data:`BATCH`) — the lines' offsets,
  the held slim records, the frame's values, the digests, the span outcomes —; ``NAME.parts``: the
  batches' parts, under every key the records had (an interval's keys are the report's to pick);
  ``NAME.texts``: each reference record's part of a sample-browser row as the page's JSON, read at
  its offset (:mod:`.rows`, :mod:`evalpipe.report.browser_written`).

**Trust.** An extract is a shortcut, never a source: the report uses it only if every check holds —
the format and the taking code's fingerprint are this evalpipe's, the segments tile the samples
file exactly and each one's bytes hash to what its writer wrote (so a samples file changed by any
hand since is read as before), its own files hash to what the index says, and what each writer
knew of its tasks is what the run directory says. Anything else, a damaged or missing file
included, and the report reads the samples file itself, as it always did; the extract changes no
byte of a report (``tests/report/test_extract.py``). It is data read with :mod:`json` and orjson
only; a text put into the page as it is holds none of ``<``, ``>``, ``&``, U+2028, U+2029 (the whole
texts file is checked for them) and is checked to be the JSON the page takes at its place
(:func:`.rows.written_row`): a run directory someone sent you cannot put script into your report
through its extract. ``EVALPIPE_EXTRACT=0`` neither writes nor reads one; deleting the folder loses
nothing.
"""

from evalpipe.report.extract.layout import (BATCH, ENV, FORMAT, SUFFIXES, ExtractUnusable, Segment, extract_folder,
                                            fingerprint, wanted)
from evalpipe.report.extract.loading import Loaded, load
from evalpipe.report.extract.rows import ExtractSpool
from evalpipe.report.extract.writing import ExtractWriter, SegmentBuilder, recorded_span_tasks, taker, writer

__all__ = ["BATCH", "ENV", "FORMAT", "SUFFIXES", "ExtractSpool", "ExtractUnusable", "ExtractWriter", "Loaded",
           "Segment", "SegmentBuilder", "extract_folder", "fingerprint", "load", "recorded_span_tasks", "taker",
           "wanted", "writer"]

"""Task kinds as a run directory records them (``config.json`` ``tasks.<name>.kind``).

A kind says what a task's gold and answers *are*, so readers decide what to show without guessing
from record shapes. A task file's kind is its ``kind:`` (:mod:`evalpipe.tasks.kinds`); a task
built in Python declares one of the same names where its answers are of that sort, or one of
:data:`PYTHON_KINDS` — ``custom`` only where no kind fits (mixed formats, say).
"""

from __future__ import annotations

__all__ = ["CUSTOM", "PYTHON_KINDS", "SPAN_NER"]

#: gold and predictions are entity spans (``{start, end, label}``): the report's NER error analysis
#: and the browser's entity outcomes apply
SPAN_NER = "span_ner"
#: no kind fits: readers show only what every task has (metrics, answers)
CUSTOM = "custom"
#: kinds only tasks written in Python declare (no task-file kind builds them)
PYTHON_KINDS = frozenset({
    "relation_extraction",  # gold: (subject, predicate, object) triples
    "term_normalisation",  # gold: the set of standard terms a mention maps to
    CUSTOM,
})

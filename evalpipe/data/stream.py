"""A task's evaluated examples as a source read again on every pass, instead of a tuple held in memory.

Why: a run's memory must be flat in the number of samples (issue 15). At 47,000 NCBI sentences a
tuple of examples is ~100 MB, and building it held every record, mapped input and draft at once
(+135 MB at load). Reading the file again costs a fraction of a second per pass; the runner needs
two passes (render the prompts into the store, then score chunk by chunk), so re-reading is far
cheaper than holding. A loader that can stream returns an :class:`ExampleStream`; one that cannot
(a whole-file check, random access for held-out shots, a data set read as one JSON document) keeps
returning a tuple, so :data:`Examples` is either.

An :class:`ExampleStream` is deliberately not a ``Sequence``: no ``len``, no indexing — both would
invite materialising it. What needs random access calls :func:`materialize` and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from evalpipe.records import Example


@dataclass(frozen=True, eq=False)
class ExampleStream:
    """Examples read anew on every iteration: ``source()`` returns an iterator over them.

    Every iteration calls ``source`` again and must yield the very same examples in the same order
    (a loader reading an unchanged file does). Bad data raises its :class:`~evalpipe.data.errors.DataError`
    when the iteration reaches it, so whoever must find bad data before sending a request iterates
    the stream once first (the runner does). Equality is identity: two streams are never compared
    by content (that would read both)."""

    source: Callable[[], Iterable[Example]]

    def __iter__(self) -> Iterator[Example]:
        return iter(self.source())

    def map(self, change: Callable[[Example], Example]) -> ExampleStream:
        """The stream whose every example is ``change(example)`` (applied anew on each pass)."""
        source = self.source
        return ExampleStream(lambda: map(change, source()))


#: what ``TaskData.examples`` holds: every example in memory, or a source read again on each pass
Examples = tuple[Example, ...] | ExampleStream


def map_examples(change: Callable[[Example], Example], examples: Examples) -> Examples:
    """``change`` applied to every example, keeping the form: a tuple stays a tuple, a stream a stream."""
    return examples.map(change) if isinstance(examples, ExampleStream) else tuple(map(change, examples))


def materialize(examples: Examples | Iterable[Example]) -> tuple[Example, ...]:
    """Every example in memory, in order (a tuple as it is): for what needs random access or a
    count — held-out shots, ``--ids``/``--limit``, a retrieval pool — at the price of holding them."""
    return examples if isinstance(examples, tuple) else tuple(examples)

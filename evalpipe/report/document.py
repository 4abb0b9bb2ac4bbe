"""The assembled report as plain data, independent of the output format.

Builders (leaderboard, operations, NER analysis, comparison) produce these blocks; the Markdown
and HTML renderers only lay them out. That keeps every number computed once and lets a test
check content without parsing HTML.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = ["Block", "Cell", "Document", "Examples", "Html", "Paragraph", "Plot", "Section", "Table", "fmt",
           "fmt_interval"]


@dataclass(frozen=True)
class Cell:
    text: str
    bold: bool = False
    #: secondary text shown small after the value (a confidence interval)
    sub: str = ""
    numeric: bool = True
    #: in-page link of the value (``#samples?…``: the answers behind the number); HTML only
    href: str = ""
    #: why the value is as it is (a metric without an interval: the reason), shown on hover in HTML
    title: str = ""
    #: more in-page links after the value, as (text, href): "missed", "parse failures" …; HTML only
    links: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Table:
    #: HTML id (``leaderboard``, ``metrics-ncbi_disease``, …): stable, so links and tests can find it
    id: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    #: optional top header row: (group label, number of columns it spans), covering ``columns``
    groups: tuple[tuple[str, int], ...] | None = None
    note: str = ""


@dataclass(frozen=True)
class Plot:
    id: str
    title: str
    #: an inline ``<svg …>…</svg>`` document (no XML declaration, no external references)
    svg: str
    caption: str = ""


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Examples:
    """Pre-formatted entries (label → lines), e.g. NER errors or disagreeing samples."""

    id: str
    title: str
    entries: tuple[tuple[str, tuple[str, ...]], ...]
    #: in-page link of each entry's label (same order as ``entries``; empty = no links)
    hrefs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Html:
    """HTML made elsewhere and placed as it is (the sample browser); Markdown shows ``text``.

    ``pieces``, when given, makes the HTML piece by piece as it is written (``html`` is then empty):
    the sample browser of tens of thousands of samples is tens of megabytes, never held as one string.
    """

    html: str
    text: str = ""
    pieces: Callable[[], Iterable[str]] | None = None

    def chunks(self) -> Iterable[str]:
        """The HTML, in the pieces it is made in."""
        return self.pieces() if self.pieces is not None else (self.html,)


Block = Table | Plot | Paragraph | Examples | Html


@dataclass
class Section:
    id: str
    title: str
    blocks: list[Block] = field(default_factory=list)
    #: the blocks are the section's whole element (an :class:`Html` block with its own
    #: ``<section id="{id}">``, as the sample browser draws itself): HTML writes them without the
    #: usual ``<section id="section-{id}">`` wrapper and its heading, and the contents link to ``#{id}``
    own_element: bool = False

    @property
    def anchor(self) -> str:
        """The in-page anchor of the section in report.html."""
        return self.id if self.own_element else f"section-{self.id}"


@dataclass
class Document:
    title: str
    sections: list[Section] = field(default_factory=list)

    def tables(self) -> list[Table]:
        return [b for s in self.sections for b in s.blocks if isinstance(b, Table)]

    def plots(self) -> list[Plot]:
        return [b for s in self.sections for b in s.blocks if isinstance(b, Plot)]


def fmt(value: float | int | None, digits: int = 3) -> str:
    """A number for a table: ints, and whole floats above 1 (counts), without decimals.

    A whole float of at most 1 (an F1 of 1.0 or 0.0) keeps its decimals so a column of ratios
    stays aligned.
    """
    if value is None or value != value:  # None or NaN
        return "–"
    if isinstance(value, int) or (float(value).is_integer() and abs(value) > 1):
        return str(int(value))
    return f"{value:.{digits}f}"


def fmt_interval(low: float | None, high: float | None, digits: int = 3) -> str:
    """``[low, high]``; one decimal when the interval reaches beyond 1 (counts, not ratios)."""
    if low is None or high is None:
        return ""
    if float(low).is_integer() and float(high).is_integer() and max(abs(low), abs(high)) > 1:
        return f"[{int(low)}, {int(high)}]"  # counts
    if max(abs(low), abs(high)) > 1:
        digits = 1
    return f"[{low:.{digits}f}, {high:.{digits}f}]"

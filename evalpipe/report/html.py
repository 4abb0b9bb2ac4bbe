"""Render a :class:`~evalpipe.report.document.Document` as one self-contained HTML file.

Self-contained means: styles inline in ``<style>``, figures inline as ``<svg>``, no fonts, no
``src``/``href`` pointing anywhere but in-page anchors, and the only script the sample browser's
own inline one (:mod:`evalpipe.report.browser`, placed as an :class:`Html` block) — the file can be
mailed or opened offline from a ``file://`` URL and shows the same thing. All text is escaped
(an :class:`Html` block is HTML its maker escaped).

Numbers link to the answers behind them: a cell's ``href``/``links`` and an example's ``hrefs``
are ``#samples?…`` fragments the sample browser reads (:func:`evalpipe.report.browser.samples_fragment`).
"""

from __future__ import annotations

from collections.abc import Iterator
from html import escape
from pathlib import Path

from evalpipe.report.document import Cell, Document, Examples, Html, Paragraph, Plot, Section, Table

__all__ = ["cell_html", "iter_html", "render_html", "table_html", "utf8", "write_html"]

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1400px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .9em; }
th, td { border: 1px solid #ddd; padding: .25em .5em; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td .ci { color: #777; font-size: .8em; display: block; }
caption { text-align: left; font-weight: bold; padding: .3em 0; }
p.note { color: #555; font-size: .85em; margin-top: -.4em; }
figure { margin: 1em 0; } figcaption { color: #555; font-size: .85em; }
.scroll { overflow-x: auto; }
dl.examples dt { font-weight: bold; margin-top: .8em; }
dl.examples dd { margin-left: 1.2em; white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: .85em; }
nav ul { columns: 2; }
td a, dt a { color: inherit; } td a.more { display: block; font-size: .8em; color: #1a5fb4; white-space: nowrap; }
td abbr { text-decoration: underline dotted; cursor: help; }
.summary li { margin: .3em 0; }
"""


def _link(href: str, text: str, cls: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    return f'<a href="{escape(href)}"{klass}>{text}</a>'


def cell_html(cell: Cell) -> str:
    """One ``<td>``: the value (a link when the cell has ``href``), bold, its interval or "no interval"
    (with the reason on hover when ``title`` says it), then its extra links."""
    text = escape(cell.text)
    if cell.href:
        text = _link(cell.href, text)
    if cell.bold:
        text = f"<strong>{text}</strong>"
    if cell.sub:
        sub = escape(cell.sub)
        if cell.title:
            sub = f'<abbr title="{escape(cell.title)}">{sub}</abbr>'
        text += f'<span class="ci">{sub}</span>'
    elif cell.title:
        text = f'<abbr title="{escape(cell.title)}">{text}</abbr>'
    if cell.links:
        text += "".join(_link(href, escape(label), "more") for label, href in cell.links)
    return f'<td class="num">{text}</td>' if cell.numeric else f"<td>{text}</td>"



def table_html(table: Table) -> str:
    parts = [f'<div class="scroll"><table id="{escape(table.id)}"><caption>{escape(table.title)}</caption><thead>']
    if table.groups:
        parts.append("<tr>" + "".join(
            f'<th colspan="{span}">{escape(group)}</th>' for group, span in table.groups) + "</tr>")
    parts.append("<tr>" + "".join(f"<th>{escape(c)}</th>" for c in table.columns) + "</tr></thead><tbody>")
    for row in table.rows:
        parts.append("<tr>" + "".join(cell_html(cell) for cell in row) + "</tr>")
    parts.append("</tbody></table></div>")
    if table.note:
        parts.append(f'<p class="note">{escape(table.note)}</p>')
    return "".join(parts)


def _examples_html(block: Examples) -> str:
    hrefs = block.hrefs or ("",) * len(block.entries)
    items = "".join(
        f"<dt>{_link(href, escape(label)) if href else escape(label)}</dt>"
        + "".join(f"<dd>{escape(line)}</dd>" for line in body)
        for (label, body), href in zip(block.entries, hrefs)
    ) or "<dd>(none)</dd>"
    return f'<h3>{escape(block.title)}</h3><dl class="examples" id="{escape(block.id)}">{items}</dl>'


def _section_html(section: Section) -> Iterator[str]:
    if section.own_element:
        for block in section.blocks:
            if isinstance(block, Html):
                yield from block.chunks()
        return
    parts = [f'<section id="{escape(section.anchor)}"><h2>{escape(section.title)}</h2>']
    for block in section.blocks:
        if isinstance(block, Table):
            parts.append(table_html(block))
        elif isinstance(block, Plot):
            caption = escape(block.caption or block.title)
            parts.append(f'<figure id="{escape(block.id)}">{block.svg}<figcaption>{caption}</figcaption></figure>')
        elif isinstance(block, Paragraph):
            parts.append(f"<p>{escape(block.text)}</p>")
        elif isinstance(block, Examples):
            parts.append(_examples_html(block))
        elif isinstance(block, Html):
            yield "".join(parts)
            parts = []
            yield from block.chunks()
    parts.append("</section>")
    yield "".join(parts)


def iter_html(document: Document) -> Iterator[str]:
    """The page in pieces (a section, or a piece of a section's :class:`Html` block, at a time): written
    straight into the file by :func:`write_html`, the page is never one string."""
    nav = "".join(f'<li><a href="#{escape(s.anchor)}">{escape(s.title)}</a></li>' for s in document.sections)
    yield (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(document.title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{escape(document.title)}</h1><nav><ul>{nav}</ul></nav>"
    )
    for section in document.sections:
        yield from _section_html(section)
    yield "</body></html>\n"


def render_html(document: Document) -> str:
    return "".join(iter_html(document))


def utf8(text: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate of a model's answer (kept exactly in the run) is written as
    U+FFFD — a report is for reading, and UTF-8 cannot hold the surrogate itself."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace").encode("utf-8")


def write_html(document: Document, path: Path) -> None:
    """Write ``document`` to ``path`` piece by piece (:func:`iter_html`), as UTF-8 (:func:`utf8`)."""
    with path.open("wb") as out:
        for piece in iter_html(document):
            out.write(utf8(piece))

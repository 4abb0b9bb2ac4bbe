"""Render a :class:`~evalpipe.report.document.Document` as one self-contained HTML file.

Self-contained means: styles inline in ``<style>``, figures inline as ``<svg>``, no scripts, no
fonts, no ``src``/``href`` pointing anywhere but in-page anchors — the file can be mailed or
opened offline and shows the same thing. All text is escaped.
"""

from __future__ import annotations

from html import escape

from evalpipe.report.document import Document, Examples, Paragraph, Plot, Section, Table

__all__ = ["render_html", "table_html"]

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
"""


def table_html(table: Table) -> str:
    parts = [f'<div class="scroll"><table id="{escape(table.id)}"><caption>{escape(table.title)}</caption><thead>']
    if table.groups:
        parts.append("<tr>" + "".join(
            f'<th colspan="{span}">{escape(group)}</th>' for group, span in table.groups) + "</tr>")
    parts.append("<tr>" + "".join(f"<th>{escape(c)}</th>" for c in table.columns) + "</tr></thead><tbody>")
    for row in table.rows:
        cells = []
        for cell in row:
            text = escape(cell.text)
            if cell.bold:
                text = f"<strong>{text}</strong>"
            if cell.sub:
                text += f'<span class="ci">{escape(cell.sub)}</span>'
            cells.append(f'<td class="num">{text}</td>' if cell.numeric else f"<td>{text}</td>")
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts.append("</tbody></table></div>")
    if table.note:
        parts.append(f'<p class="note">{escape(table.note)}</p>')
    return "".join(parts)


def _examples_html(block: Examples) -> str:
    items = "".join(
        f"<dt>{escape(label)}</dt>" + "".join(f"<dd>{escape(line)}</dd>" for line in body)
        for label, body in block.entries
    ) or "<dd>(none)</dd>"
    return f'<h3>{escape(block.title)}</h3><dl class="examples" id="{escape(block.id)}">{items}</dl>'


def _section_html(section: Section) -> str:
    parts = [f'<section id="section-{escape(section.id)}"><h2>{escape(section.title)}</h2>']
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
    parts.append("</section>")
    return "".join(parts)


def render_html(document: Document) -> str:
    nav = "".join(f'<li><a href="#section-{escape(s.id)}">{escape(s.title)}</a></li>' for s in document.sections)
    body = "".join(_section_html(s) for s in document.sections)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(document.title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{escape(document.title)}</h1><nav><ul>{nav}</ul></nav>{body}</body></html>\n"
    )

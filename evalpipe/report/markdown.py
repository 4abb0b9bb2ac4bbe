"""Render a :class:`~evalpipe.report.document.Document` as GitHub-flavoured Markdown.

Markdown has no column spans, so a grouped header is flattened to ``group / metric``; bold is
``**…**``; a cell's ``title`` (why a value has no interval) becomes a numbered footnote under its
table; plots, links and the sample browser are left to the HTML report (a line says so).
"""

from __future__ import annotations

from evalpipe.report.document import Document, Examples, Html, Paragraph, Plot, Table

__all__ = ["render_markdown", "table_markdown"]


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _flat_columns(table: Table) -> list[str]:
    if not table.groups:
        return list(table.columns)
    names: list[str] = []
    i = 0
    for group, span in table.groups:
        for column in table.columns[i:i + span]:
            names.append(f"{group} / {column}" if group else column)
        i += span
    return names


def table_markdown(table: Table) -> str:
    header = _flat_columns(table)
    first = table.rows[0] if table.rows else ()
    align = [":---" if i < len(first) and not first[i].numeric else "---:" for i in range(len(header))]
    lines = [
        "| " + " | ".join(_escape(h) for h in header) + " |",
        "| " + " | ".join(align) + " |",
    ]
    footnotes: dict[str, int] = {}  # a cell's title (why it has no interval …) → its footnote number
    for row in table.rows:
        cells = []
        for cell in row:
            text = _escape(cell.text)
            if cell.bold and text not in ("", "–"):
                text = f"**{text}**"
            if cell.sub:
                text = f"{text} {_escape(cell.sub)}"
            if cell.title:
                number = footnotes.setdefault(cell.title, len(footnotes) + 1)
                text = f"{text} [{number}]"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    out = [f"**{table.title}**", "", *lines]
    if footnotes:
        out += ["", *(f"[{number}] {_escape(title)}  " for title, number in footnotes.items())]
    if table.note:
        out += ["", f"_{table.note}_"]
    return "\n".join(out)


def render_markdown(document: Document) -> str:
    parts = [f"# {document.title}"]
    for section in document.sections:
        parts.append(f"## {section.title}")
        for block in section.blocks:
            if isinstance(block, Table):
                parts.append(table_markdown(block))
            elif isinstance(block, Paragraph):
                parts.append(block.text)
            elif isinstance(block, Plot):
                parts.append(f"_Figure “{block.title}”: see report.html._")
            elif isinstance(block, Html):
                if block.text:
                    parts.append(block.text)
            elif isinstance(block, Examples):
                lines = [f"**{block.title}**", ""]
                if not block.entries:
                    lines.append("(none)")
                for label, body in block.entries:
                    lines.append(f"- {_escape(label)}")
                    lines.extend(f"    - {_escape(line)}" for line in body)
                parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"

"""A report as a list of blocks, rendered to Markdown and to one self-contained HTML file.

Why a block list (not Markdown converted to HTML): both files come from the same blocks, so
they cannot disagree, and the HTML needs no Markdown library. Inline markup in text is
limited to ``**bold**`` and ``code`` in backticks. The HTML embeds figures as base64 PNG
data URIs and carries its own CSS: it loads nothing from anywhere (it opens offline).
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from analysis.text import markdown_inline


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...] = ()
    """Right-align these columns (numbers); default left."""


@dataclass(frozen=True)
class Figure:
    path: str
    """Relative to the report folder, e.g. ``figures/isoflop.png``."""
    caption: str


@dataclass(frozen=True)
class Code:
    text: str


Block = Heading | Paragraph | Bullets | Table | Figure | Code

# --------------------------------------------------------------------------- Markdown


def _md_cell(text: str) -> str:
    return markdown_inline(text).replace("|", "\\|").replace("\n", " ")


def _fence(text: str) -> str:
    """A backtick fence longer than any run of backticks inside ``text``."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def to_markdown(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        # Every text through markdown_inline: names from the ledger are in it (the one place
        # they enter report.md; report.html escapes them in inline_html).
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {markdown_inline(block.text).replace(chr(10), ' ')}")
        elif isinstance(block, Paragraph):
            out.append(markdown_inline(block.text))
        elif isinstance(block, Bullets):
            out.append("\n".join(f"- {markdown_inline(item)}" for item in block.items))
        elif isinstance(block, Table):
            align = [("---:" if block.numeric[i] else "---") if i < len(block.numeric)
                     else "---" for i in range(len(block.header))]
            lines = ["| " + " | ".join(map(_md_cell, block.header)) + " |",
                     "| " + " | ".join(align) + " |"]
            lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in block.rows]
            out.append("\n".join(lines))
        elif isinstance(block, Figure):
            caption = markdown_inline(block.caption)
            out.append(f"![{caption}]({block.path})\n\n*{caption}*")
        elif isinstance(block, Code):
            fence = _fence(block.text)
            out.append(f"{fence}text\n{block.text}\n{fence}")
    return "\n\n".join(out) + "\n"


# --------------------------------------------------------------------------- HTML

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       max-width: 70rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.45;
       color: #1a1a1a; }
h1 { font-size: 1.7rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.55rem; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafafa; }
code { background: #f3f3f3; padding: 0 0.2rem; border-radius: 3px; font-size: 0.9em; }
pre { background: #f6f6f6; border: 1px solid #e2e2e2; padding: 0.6rem; overflow-x: auto;
      font-size: 0.85rem; white-space: pre-wrap; }
figure { margin: 1rem 0; } figure img { max-width: 100%; height: auto; }
figcaption { font-size: 0.9rem; color: #444; }
"""


def inline_html(text: str) -> str:
    """Escape ``text`` for HTML, turning `code` and **bold** into tags."""
    parts = re.split(r"(`[^`]+`)", text)
    out = []
    for part in parts:
        if len(part) >= 2 and part.startswith("`") and part.endswith("`"):
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
        else:
            out.append(re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", html.escape(part)))
    return "".join(out)


def _data_uri(png: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def to_html(blocks: Sequence[Block], *, title: str, folder: Path) -> str:
    """One HTML page; figure paths are read from ``folder`` and embedded."""
    body: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{inline_html(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{inline_html(block.text)}</p>")
        elif isinstance(block, Bullets):
            items = "".join(f"<li>{inline_html(item)}</li>" for item in block.items)
            body.append(f"<ul>{items}</ul>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{inline_html(h)}</th>" for h in block.header)
            rows = []
            for row in block.rows:
                cells = []
                for i, cell in enumerate(row):
                    cls = ' class="num"' if i < len(block.numeric) and block.numeric[i] else ""
                    cells.append(f"<td{cls}>{inline_html(cell)}</td>")
                rows.append("<tr>" + "".join(cells) + "</tr>")
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}"
                        "</tbody></table>")
        elif isinstance(block, Figure):
            alt = html.escape(block.caption, quote=True)
            body.append(f'<figure><img alt="{alt}" src="{_data_uri(folder / block.path)}">'
                        f"<figcaption>{inline_html(block.caption)}</figcaption></figure>")
        elif isinstance(block, Code):
            body.append(f"<pre>{html.escape(block.text)}</pre>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")

"""A report as a list of blocks (headings, paragraphs, tables, images), rendered twice: to
Markdown (charts linked as the PNG files beside it) and to one self-contained HTML page (charts
embedded as base64 PNG). Text may mark `code` with backticks and links as [text](path), as in
Markdown. In tables, a column of numbers is right-aligned (digits line up), any other column
left-aligned, in both renderings."""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Table:
    header: list
    rows: list


@dataclass(frozen=True)
class Image:
    filename: str
    png: bytes
    alt: str


def to_markdown(blocks) -> str:
    out = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append("#" * block.level + " " + _no_tags(block.text))
        elif isinstance(block, Paragraph):
            out.append(_no_tags(block.text))
        elif isinstance(block, Table):
            out.append(_markdown_table(block))
        else:
            out.append(f"![{block.alt}]({block.filename})")
    return "\n\n".join(out) + "\n"


def _no_tags(text: str) -> str:
    """Text as Markdown shows it literally, not as HTML: a "<" that could open a tag (a name a
    user gave, e.g. a variant's) is written "&lt;", outside code spans (which show it as it
    is); a "<" before a number or a space stays."""
    return "".join(part if part.startswith("`") else TAG_START.sub("&lt;", part)
                   for part in CODE_SPAN.split(text))


CODE_SPAN = re.compile(r"(`[^`]*`)")
TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
NUMBER = re.compile(r"[+-]?\d[\d,]*(\.\d+)?(e[+-]?\d+)?%?")
MISSING = ("", "n/a")


def numeric_columns(table: Table) -> list[bool]:
    """Per column: True when every cell is a number or missing (empty, "n/a"), and one is a
    number or "n/a" (a figure no request had: every request of a run rejected)."""
    flags = []
    for index in range(len(table.header)):
        cells = [str(row[index]).strip() for row in table.rows]
        flags.append(any(cells) and all(c in MISSING or NUMBER.fullmatch(c) for c in cells))
    return flags


def _markdown_table(table: Table) -> str:
    def cell(text) -> str:  # one line: a line break would end the row
        return " ".join(_no_tags(str(text)).replace("|", "\\|").splitlines())

    lines = ["| " + " | ".join(map(cell, table.header)) + " |",
             "|" + "|".join("---:" if numeric else ":---"
                            for numeric in numeric_columns(table)) + "|"]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in table.rows]
    return "\n".join(lines)


STYLE = """body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto;
  padding: 0 1em; color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.num { text-align: right; font-variant-numeric: tabular-nums; } td.num { white-space: nowrap; }
.table { overflow-x: auto; }
img { max-width: 100%; border: 1px solid #eee; } code { background: #f3f3f3; padding: 0 0.2em; }
"""


def to_html(blocks, title: str) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f"<title>{html.escape(title)}</title>", f"<style>\n{STYLE}</style>", "</head>", "<body>"]
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"<h{block.level}>{_inline(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            out.append(f"<p>{_inline(block.text)}</p>")
        elif isinstance(block, Table):
            out.append(_html_table(block))
        else:
            data = base64.b64encode(block.png).decode("ascii")
            out.append(f'<p><img alt="{html.escape(block.alt)}" '
                       f'src="data:image/png;base64,{data}"></p>')
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"


def _inline(text: str) -> str:
    text = re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(text, quote=False))
    return re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', text)


def _html_table(table: Table) -> str:
    classes = [' class="num"' if numeric else "" for numeric in numeric_columns(table)]
    head = "".join(f"<th{c}>{_inline(str(h))}</th>" for c, h in zip(classes, table.header))
    body = "\n".join("<tr>" + "".join(f"<td{c}>{_inline(str(cell))}</td>"
                                      for c, cell in zip(classes, row)) + "</tr>"
                     for row in table.rows)
    return (f'<div class="table"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n'
            f"</tbody>\n</table></div>")  # a wide table scrolls, never pushes the page wider

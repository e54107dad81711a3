"""How numbers are written in text: one module for the console tables (analysis.render),
the report sections (analysis.reporting) and `python -m analysis.predict`, so the three
never disagree on a digit; and how names from a ledger or a file are written into Markdown and
CSV, so that they stay text. Plain Python: no rich, no pandas.
"""

from __future__ import annotations

import re

from analysis.numerics.bootstrap import Interval


def fmt(value: object) -> str:
    """Numbers to 4 significant digits; None as a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def fmt_interval(iv: Interval | None) -> str:
    return "—" if iv is None else f"[{iv.low:.4g}, {iv.high:.4g}]"


# --------------------------------------------------------------------------- untrusted text
# Sweep, run, family and corpus names come from a ledger or a file someone else wrote: what
# they hold must reach a reader as text, never as markup or a formula.

_CODE_SPAN = re.compile(r"(`[^`\n]+`)")
"""A code span on one line: one that spans lines could hold a line that a renderer reads as
the start of a raw HTML block (a name "x`\n<div ...>`" did)."""
_MARKDOWN_ACTIVE = re.compile(r"[\\`<]|&(?=#?[0-9A-Za-z]+;)|\](?=[(\[:])")
"""What a Markdown renderer acts on in plain text, and nothing more (report.md stays readable
as text, intervals [0.45, 0.46] included): < (a tag, comment or autolink <javascript:...>) and
an & that starts an entity, as entities, which every renderer shows as text (a backslash
before < is CommonMark's, not Markdown.pl's); a ] that closes link or image syntax ([x](url),
[x][ref]) or starts a reference definition ([x]: url); a stray backtick; and the backslash
itself, so that no escape added here is undone. > is inert without <; * and _ are emphasis,
cosmetic, and the report's own **bold** and N_opt need them."""
_MARKDOWN_ESCAPE = {"\\": "\\\\", "`": "\\`", "<": "&lt;", "&": "&amp;", "]": "\\]"}


def markdown_inline(text: str) -> str:
    """``text`` as Markdown that shows what the HTML report shows for it
    (analysis.reporting.document.inline_html): `code` spans as they are (a renderer takes
    their content literally), the rest with what _MARKDOWN_ACTIVE finds escaped."""
    parts = _CODE_SPAN.split(text)
    return "".join(part if i % 2 else
                   _MARKDOWN_ACTIVE.sub(lambda m: _MARKDOWN_ESCAPE[m.group()], part)
                   for i, part in enumerate(parts))


FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")
"""A spreadsheet cell starting with one of these is a formula to Excel, LibreOffice and Google
Sheets (OWASP, "CSV Injection": = + - @ tab and CR; LF too, as CRs become LFs below):
=cmd|' /C calc'!A0 runs a program."""
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def spreadsheet_cell(value: object) -> object:
    """A CSV cell that a spreadsheet shows as text: a string that starts like a formula and is
    not a number (-0.5 stays a number) gets OWASP's leading single quote; other values as
    they are. A CR inside a string becomes an LF: spreadsheets and Python's csv end a row at a
    bare CR, which pandas' writer (lines end in LF) does not quote, so "x\r=cmd..." would put
    its formula at the start of a row of its own; an LF is quoted and stays in the cell."""
    if not isinstance(value, str):
        return value
    text = value.replace("\r\n", "\n").replace("\r", "\n")
    if value.startswith(FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + text
    return text

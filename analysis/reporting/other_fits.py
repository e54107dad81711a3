"""The report's section for the fits of the table that have no sections of their own.

Each entry of ``analysis.fits.table.FITS`` with ``own_report_sections=False`` (a fit added
by one module and one table entry, docs/analysis.md "Adding a fit") gets a table of its
point statistics with their 95% bootstrap intervals, or the reason it was skipped. The
built-in approaches have their own sections and figures (analysis.reporting.sections), so
for them this section is empty and the report is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from analysis.fits.results import Estimate, Skipped
from analysis.fits.table import FITS
from analysis.reporting.document import Block, Heading, Paragraph, Table
from analysis.text import fmt, fmt_interval


def other_fits_section(fits: Mapping[str, Estimate | Skipped]) -> list[Block]:
    """One heading per fit without sections of its own; nothing when there is none."""
    blocks: list[Block] = []
    for name, est in fits.items():
        spec = FITS.get(name)
        if spec is None or spec.own_report_sections:
            continue
        blocks.append(Heading(f"{spec.title} (approach {name})"))
        if isinstance(est, Skipped):
            blocks.append(Paragraph(f"Skipped: {est.reason}."))
            continue
        rows = tuple((key, fmt(value), fmt_interval(est.ci95(key)))
                     for key, value in est.point.items())
        blocks.append(Table(("quantity", "estimate", "95% interval"), rows))
    return blocks

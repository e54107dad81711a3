"""How numbers are written in text: one module for the console tables (analysis.render),
the report sections (analysis.reporting) and `python -m analysis.predict`, so the three
never disagree on a digit. Plain Python: no rich, no pandas.
"""

from __future__ import annotations

from analysis.fits.bootstrap import Interval


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

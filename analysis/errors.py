"""Exceptions of the analysis package.

Why a class of our own: a degenerate input (too few points, a single budget, constant or
non-finite losses, a malformed CSV) must stop with a message that names the problem, never
turn into a bogus fit. Callers (the CLIs, the report) catch ``AnalysisError`` and print it.
Both subclass ``ValueError`` because in every case the *input* is wrong, not the code.
"""

from __future__ import annotations


class AnalysisError(ValueError):
    """Base class: the input cannot be analysed; the message says why."""


class FitError(AnalysisError):
    """A fit cannot be made from these points (too few, degenerate, non-finite, ...)."""


class DataError(AnalysisError):
    """Input data (a CSV file or an MLflow sweep) is missing or malformed; names file/column."""

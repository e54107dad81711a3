"""What an entry of the table of fits is (``FitSpec``), what its fit reads (``FitInput``) and
``estimate``, the fit-then-bootstrap step every entry shares.

Apart from ``analysis.fits.table`` so that a fit module can use them and the table can import
the fit module without a circle (docs/analysis.md, "Adding a fit").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from analysis.errors import FitError
from analysis.fits.bootstrap import Bootstrap
from analysis.fits.results import Estimate, Skipped
from analysis.runs.table import RunsTable

FitT = TypeVar("FitT")


@dataclass(frozen=True)
class FitInput:
    """What every fit of the table reads: the selected runs (one point per cell), their
    training curves, the compute at which allocations are reported and the bootstrap asked
    for (``n_resamples`` 0: no intervals)."""

    runs: RunsTable
    curves: pd.DataFrame | None
    reference_flops: float
    n_resamples: int
    seed: int
    n_jobs: int = 1
    strata: np.ndarray | None = None
    """The budget of every run, to resample within budgets (analysis.fits.bootstrap.BY
    "budget"); None: resample all runs together."""

    def columns(self, *names: str) -> tuple[np.ndarray, ...]:
        return tuple(self.runs.column(k) for k in names)


@dataclass(frozen=True)
class FitSpec:
    """One approach of the table."""

    name: str
    """Its key: in ``Analysis.fits``, fit.json ``approaches`` and ``--approach``."""
    title: str
    """How the console and the report name it."""
    run: Callable[[FitInput], Estimate | Skipped]
    """Fit, summarise and bootstrap on a sweep; Skipped (with the reason) where it cannot."""
    json_fields: Callable[[Any], dict[str, Any]] = lambda fit: {}
    """fit.json fields of a fitted approach beyond its point statistics."""
    own_report_sections: bool = False
    """True: analysis.reporting.sections has sections (and figures) of its own for it; False:
    the report shows it in the generic "Other fits" section (estimates and intervals)."""


def estimate(fit_fn: Callable[[], FitT], stats_fn: Callable[[FitT], Mapping[str, float]],
             boot_fn: Callable[[FitT], Bootstrap] | None) -> Estimate[FitT] | Skipped:
    """Fit, then bootstrap; FitError from the fit or its statistics becomes Skipped with its
    message, from the bootstrap an Estimate without intervals (``bootstrap_error``)."""
    try:
        fit = fit_fn()
        point = stats_fn(fit)  # the allocation along the lines can fail too (minimum on a bound)
    except FitError as err:
        return Skipped(str(err))
    if boot_fn is None:
        return Estimate(fit, point)
    try:
        return Estimate(fit, point, bootstrap=boot_fn(fit))
    except FitError as err:
        return Estimate(fit, point, bootstrap_error=str(err))

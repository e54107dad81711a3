"""What an entry of the table of fits is (``FitSpec``), what its fit reads (``FitInput``) and
``estimate``, the fit-then-bootstrap step every entry shares.

Apart from ``analysis.fits.table`` so that a fit module can use them and the table can import
the fit module without a circle (docs/analysis.md, "Adding a fit").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from analysis.errors import FitError
from analysis.fits.results import Estimate, Skipped
from analysis.numerics.bootstrap import Bootstrap
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
    """The budget of every run, to resample within budgets (analysis.numerics.bootstrap.BY
    "budget"); None: resample all runs together."""
    unique_tokens: float | None = None
    """A corpus size U: the data-constrained laws also report the optimum at the reference
    compute with only U unique tokens (``predict --unique-tokens``); None: not asked."""
    repeats: RunsTable | None = None
    """Repeat variants (analysis.runs.selection rule 4: the same N and D as a run of ``runs``
    on fewer unique tokens), one row per cell: only a law that models U reads them
    (``with_repeats``); None when there are none."""

    def columns(self, *names: str) -> tuple[np.ndarray, ...]:
        return tuple(self.runs.column(k) for k in names)

    def with_repeats(self) -> FitInput:
        """This input with the repeat variants among its runs (and, resampling by budget, in
        their budgets' strata): what a law that models U fits."""
        if self.repeats is None or len(self.repeats) == 0:
            return self
        runs = self.runs.with_frame(pd.concat([self.runs.frame, self.repeats.frame],
                                              ignore_index=True))
        strata = (None if self.strata is None else
                  np.concatenate([self.strata, self.repeats.column("budget")]))
        return replace(self, runs=runs, strata=strata, repeats=None)


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

    # Its roles: which lists of the analysis it is on. Each consumer reads its list off the
    # table, in table order (``analysis.fits.table``: ``judged``, ``headline_candidates``,
    # ``allocations``, ``compared``, ``predictable``), so a law declares them here and nowhere
    # else (docs/analysis.md, "Adding a fit").
    words: str = ""
    """How the verdict and the residual checks name the law (judged laws)."""
    n_params: int = 0
    """Its free parameters: the residual check's degrees of freedom (judged laws)."""
    judged: bool = False
    """A loss law L(N, D) (``fit.loss(N, D)``) that analysis.checks.verdict judges: residuals
    against the noise and the held-out error. Needs ``words`` and ``n_params``."""
    headline_candidate: bool = False
    """A parametric judged law that may be the headline (analysis.checks.verdict); the
    model-free quadratic is judged but never headlined."""
    allocation: bool = False
    """Its point statistics are a compute-optimal allocation (a, b, tokens_per_param at the
    reference C, from the sweep's budgets): the report's table of allocations."""
    agreement: bool = False
    """Compared pairwise on a with the other such approaches (analysis.checks.agreement): it
    bootstraps the same draws of runs. Needs ``allocation``."""
    extrapolates: bool = True
    """With ``allocation``: the allocation may be carried to another budget, so `python -m
    analysis.predict --approach` offers it (False: a local check, never extrapolated)."""

    def __post_init__(self) -> None:
        problems = [why for bad, why in (
            (self.judged and not (self.words and self.n_params > 0),
             "a judged law needs its words and n_params"),
            (self.headline_candidate and not self.judged,
             "a headline candidate must be judged"),
            (self.agreement and not self.allocation,
             "only an allocation can be compared on a"),
        ) if bad]
        if problems:
            raise ValueError(f"fit {self.name!r}: " + "; ".join(problems))


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

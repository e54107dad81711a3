"""A fitted law L(N, D) with the allocation it implies: what the law entries of the table share.

The interaction law (analysis.fits.interaction), Kaplan's joint law on the sweep's N
(analysis.fits.kaplan) and the model-free quadratic surface (analysis.fits.quadratic) are
each a ``Law``: ln L̂(ln N, ln D), its named parameters and their count. ``run_law`` fits one
on the selected runs, reads its allocation off the sweep's IsoFLOP lines with the one
definition of the optimum (analysis.fits.optimum), and bootstraps both over runs: each
resample refits the law and minimises it along the *same* lines (the FLOP convention is a
property of the model shapes, not a random quantity), so the 95% interval of a is the
interval of that a.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from analysis.errors import FitError
from analysis.fits.optimum import Allocation, IsoFlopLines, lines_from_runs, optimal_allocation
from analysis.fits.results import Estimate, Skipped
from analysis.fits.spec import FitInput, estimate
from analysis.numerics.bootstrap import Bootstrap, run_bootstrap
from analysis.runs.table import RunsTable


class Law(Protocol):
    """A fitted L(N, D)."""

    n_params: int

    def log_loss(self, ln_n: np.ndarray, ln_d: np.ndarray) -> np.ndarray: ...

    def parameters(self) -> dict[str, float]: ...


Arrays = tuple[np.ndarray, np.ndarray, np.ndarray]
FitLaw = Callable[[np.ndarray, np.ndarray, np.ndarray, "Law | None"], Law]
"""fit(N, D, loss, start): ``start`` is the full-data fit (a warm start) in a bootstrap."""
BatchFit = Callable[[np.ndarray, np.ndarray, np.ndarray, Law, np.ndarray], "list[Law | str]"]
"""refit(N, D, loss, start, indices): fit(N[idx], D[idx], loss[idx], start) for every row of
indices at once, each a law or its FitError message (e.g. analysis.fits.interaction)."""


@dataclass(frozen=True)
class LawFit:
    """A law and its allocation along the sweep's lines."""

    law: Law
    allocation: Allocation
    lines: IsoFlopLines

    def loss(self, n: float | np.ndarray, d: float | np.ndarray) -> np.ndarray:
        return np.exp(self.law.log_loss(np.log(np.asarray(n, dtype=float)),
                                        np.log(np.asarray(d, dtype=float))))

    @property
    def n_params(self) -> int:
        return self.law.n_params

    def statistics(self) -> dict[str, float]:
        return {**self.law.parameters(), **self.allocation.statistics()}


def predicted_loss(fit: object, runs: RunsTable) -> np.ndarray:
    """Each run's loss as a fitted law predicts it: ``fit.loss_of_runs(runs)`` for a law that
    reads more of a run than N and D (the data-constrained laws read U), else
    ``fit.loss(N, D)``. What the verdict, the residual checks and the backtests compare."""
    own = getattr(fit, "loss_of_runs", None)
    if own is not None:
        return np.asarray(own(runs), dtype=float)
    return np.asarray(fit.loss(runs.column("N"), runs.column("D")), dtype=float)


def fit_law(fit: FitLaw, arrays: Arrays, lines: IsoFlopLines, reference: float,
            start: Law | None = None) -> LawFit:
    law = fit(*arrays, start)
    return LawFit(law, optimal_allocation(law.log_loss, lines, reference), lines)


@dataclass(frozen=True)
class _Refit:
    """One bootstrap refit (module level, so worker processes can unpickle it)."""

    fit: FitLaw
    arrays: Arrays
    lines: IsoFlopLines
    reference: float
    start: Law
    batch_fit: BatchFit | None = None

    def __call__(self, idx: np.ndarray) -> dict[str, float]:
        sample = tuple(a[idx] for a in self.arrays)
        return fit_law(self.fit, sample, self.lines, self.reference, self.start).statistics()

    @property
    def batch(self) -> Callable[[np.ndarray], list[dict[str, float] | str]] | None:
        """Every resample at once (run_bootstrap), where the law has a batched refit."""
        return None if self.batch_fit is None else self._batch

    def _batch(self, indices: np.ndarray) -> list[dict[str, float] | str]:
        out: list[dict[str, float] | str] = []
        for law in self.batch_fit(*self.arrays, self.start, indices):
            if isinstance(law, str):
                out.append(law)
                continue
            try:
                alloc = optimal_allocation(law.log_loss, self.lines, self.reference)
                out.append(LawFit(law, alloc, self.lines).statistics())
            except FitError as err:
                out.append(str(err))
        return out


def run_law(inp: FitInput, fit: FitLaw, batch_fit: BatchFit | None = None) -> Estimate | Skipped:
    """Fit ``fit`` on the selected runs, its allocation, and its bootstrap over runs
    (``batch_fit``: the law's refit of every resample at once, where it has one)."""
    arrays = tuple(inp.runs.column(k) for k in ("N", "D", "loss"))
    lines = lines_from_runs(inp.runs)
    ref = inp.reference_flops
    boot = None
    if inp.n_resamples > 0:
        def boot(f: LawFit) -> Bootstrap:
            return run_bootstrap(len(arrays[0]), _Refit(fit, arrays, lines, ref, f.law, batch_fit),
                                 n_resamples=inp.n_resamples, seed=inp.seed, n_jobs=inp.n_jobs,
                                 strata=inp.strata)
    return estimate(lambda: fit_law(fit, arrays, lines, ref), LawFit.statistics, boot)

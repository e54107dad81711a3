"""Residuals of the fits against the run-to-run noise: does a law explain the data?

A fit's residual RMS (fitted minus observed final loss, in nats/token) means little on its
own; against the noise it says whether the law describes the data down to the seed-to-seed
scatter (ratio ≈ 1) or misses structure (ratio ≫ 1). The noise of a fitted point that
averages n seeds is σ/√n (``analysis.checks.noise``), and a correct model with p parameters fitted
by least squares to k such points leaves residuals of expected RMS

    σ · sqrt(mean(1/n_i)) · sqrt((k − p) / k),

which is what ``expected_rms`` returns and the ratio divides by. (Approach 3 minimises a
Huber loss on ln L, not squares on L; at residuals of a few δ = 1e-3 the two agree closely.)
With k ≤ p the fit interpolates and there is nothing to judge (ratio None).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.fits.approach2 import MIN_SIZES, fit_parabola
from analysis.fits.approach3 import Approach3Fit
from analysis.fits.laws import predicted_loss
from analysis.runs.table import RunsTable

APPROACH3_PARAMS = 5
PARABOLA_PARAMS = 3


@dataclass(frozen=True)
class ResidualCheck:
    """One fit's residual RMS, and its ratio to what the noise alone would leave."""

    what: str
    """"Approach 3" or "Approach 2, budget <C>"."""
    budget: float | None
    n_points: int
    n_params: int
    rms: float
    """RMS of fitted − observed final loss (nats/token)."""
    expected_rms: float | None
    """RMS that run-to-run noise alone would leave (None without a noise estimate, or when
    the fit has no degrees of freedom left)."""

    @property
    def ratio(self) -> float | None:
        """rms / expected_rms: ≈ 1 when the law explains the data down to the noise."""
        if self.expected_rms is None or not self.expected_rms > 0:
            return None
        return self.rms / self.expected_rms


def n_seeds(runs: RunsTable) -> np.ndarray:
    """Seeds averaged into each fitted point (1 for a table that was not collapsed)."""
    if "n_seeds" not in runs.frame.columns:
        return np.ones(len(runs))
    return runs.column("n_seeds")


def expected_rms(sigma: float | None, seeds: np.ndarray, n_params: int) -> float | None:
    """Expected residual RMS of a correct p-parameter model (module docstring)."""
    k = seeds.size
    if sigma is None or k <= n_params:
        return None
    return float(sigma * np.sqrt(np.mean(1.0 / seeds)) * np.sqrt((k - n_params) / k))


def approach3_residuals(runs: RunsTable, fit: Approach3Fit,
                        sigma: float | None) -> ResidualCheck:
    """Residuals of L(N, D) on the points it was fitted to."""
    return law_residuals("Approach 3", runs, fit, APPROACH3_PARAMS, sigma)


def law_residuals(what: str, runs: RunsTable, fit: object, n_params: int,
                  sigma: float | None) -> ResidualCheck:
    """Residuals of any fitted law (``fit``: its loss at each run, analysis.fits.laws
    .predicted_loss) with ``n_params`` parameters."""
    resid = predicted_loss(fit, runs) - runs.column("loss")
    return ResidualCheck(
        what=what, budget=None, n_points=len(runs), n_params=n_params,
        rms=float(np.sqrt(np.mean(resid**2))),
        expected_rms=expected_rms(sigma, n_seeds(runs), n_params))


def approach2_residuals(runs: RunsTable, sigma: float | None) -> tuple[ResidualCheck, ...]:
    """Residuals of each IsoFLOP budget's parabola (budgets with at least MIN_SIZES sizes)."""
    budget = runs.column("budget")
    n, loss, seeds = runs.column("N"), runs.column("loss"), n_seeds(runs)
    out = []
    for label in np.unique(budget[np.isfinite(budget)]):
        sel = budget == label
        if np.unique(np.round(np.log(n[sel]), 9)).size < MIN_SIZES:
            continue
        resid = fit_parabola(n[sel], loss[sel])(n[sel]) - loss[sel]
        out.append(ResidualCheck(
            what=f"Approach 2, budget {label:.4g}", budget=float(label),
            n_points=int(sel.sum()), n_params=PARABOLA_PARAMS,
            rms=float(np.sqrt(np.mean(resid**2))),
            expected_rms=expected_rms(sigma, seeds[sel], PARABOLA_PARAMS)))
    return tuple(out)

"""Chinchilla Approach 1: minimum loss per FLOP from the envelope of training curves.

Hoffmann et al. (2022), Sec. 3.1: for each FLOP count, the run with the lowest loss gives
the compute-optimal N and D at that compute; power laws through those points give
N_opt ∝ C^a and D_opt ∝ C^b. The envelope and its interior rule are in analysis.fits.envelope.

Caveat (Hoffmann et al. 2022, Sec. 3.1 and Fig. A1): an intermediate point of a run whose
cosine schedule is set for a longer horizon is not the loss a run of that length would reach,
so the envelope is only as good as the sweep's range of schedule lengths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from analysis.fits.envelope import DEFAULT_GRID_POINTS, Curve, Envelope, envelope, interior_points
from analysis.fits.powerlaw import PowerLaw, PowerLawAllocation, fit_power_law
from analysis.numerics.bootstrap import Bootstrap, run_bootstrap

WHAT = "Approach 1 (envelope of training curves)"


@dataclass(frozen=True)
class Approach1Fit(PowerLawAllocation):
    """N_opt = k_N·C^a and D_opt = k_D·C^b through the interior envelope points."""

    n_law: PowerLaw
    d_law: PowerLaw
    envelope: Envelope = field(repr=False)
    """The interior envelope points the laws were fitted to."""




def fit_approach1(curves: Sequence[Curve | None], *,
                  grid_points: int = DEFAULT_GRID_POINTS) -> Approach1Fit:
    """Fit N_opt(C), D_opt(C) to the envelope of ``curves`` (None entries are ignored)."""
    env = interior_points(envelope(curves, grid_points=grid_points, what=WHAT), what=WHAT)
    return Approach1Fit(
        n_law=fit_power_law(env.flops, env.n, what=f"{WHAT}: N_opt(C)"),
        d_law=fit_power_law(env.flops, env.tokens, what=f"{WHAT}: D_opt(C)"),
        envelope=env,
    )


@dataclass(frozen=True)
class _Refit:
    curves: tuple[Curve | None, ...]
    flops: float
    grid_points: int

    def __call__(self, idx: np.ndarray) -> dict[str, float]:
        # A run drawn twice adds nothing to a minimum: the unique runs define the envelope.
        chosen = [self.curves[i] for i in np.unique(idx)]
        return fit_approach1(chosen, grid_points=self.grid_points).statistics(self.flops)


def bootstrap_approach1(curves: Sequence[Curve | None], *, flops: float, n_resamples: int,
                        seed: int, grid_points: int = DEFAULT_GRID_POINTS,
                        strata: np.ndarray | None = None) -> Bootstrap:
    """Resample runs (with their curves) with replacement and refit the envelope."""
    refit = _Refit(tuple(curves), float(flops), grid_points)
    return run_bootstrap(len(curves), refit, n_resamples=n_resamples, seed=seed, strata=strata)

"""How far the run-to-run noise alone moves Approach 2: refits on simulated re-runs.

The bootstrap over runs (``analysis.numerics.bootstrap``) asks "what if we had trained other cells":
with 7 sizes per IsoFLOP profile on a coarse ladder, dropping or doubling a size moves a
parabola's vertex a lot, so that interval mixes the noise with the grid design. This module
asks the narrower question the seed replicates can answer: "what if every run were trained
again with another seed". Each simulation adds Gaussian noise of the measured σ (divided by
sqrt(seeds averaged in the cell)) to every fitted point and refits Approach 2; the 95%
percentile interval of a, b and tokens per parameter over the simulations is the noise's
share of the uncertainty. It ignores misfit of the parabolas (their residual/noise ratio says
how much that matters), so it is a lower bound on the uncertainty, not a replacement for the
bootstrap over runs.
"""

from __future__ import annotations

import numpy as np

from analysis.checks.residuals import n_seeds
from analysis.errors import FitError
from analysis.fits.approach2 import fit_approach2
from analysis.numerics.bootstrap import Bootstrap
from analysis.runs.table import RunsTable

MAX_FAILURES_KEPT = 5


def propagate_noise_approach2(runs: RunsTable, sigma: float, *, flops: float,
                              n_simulations: int, seed: int) -> Bootstrap:
    """Approach 2 refitted on ``n_simulations`` noisy copies of the fitted points."""
    if not (np.isfinite(sigma) and sigma > 0):
        raise FitError(f"noise propagation needs a positive σ (got {sigma})")
    n, d, c, loss, budget = (runs.column(k) for k in ("N", "D", "C", "loss", "budget"))
    scale = sigma / np.sqrt(n_seeds(runs))
    rng = np.random.default_rng(seed)
    samples: dict[str, list[float]] = {}
    failures: list[str] = []
    n_failed = 0
    for _ in range(n_simulations):
        noisy = loss + rng.normal(0.0, scale)
        try:
            stats = fit_approach2(n, d, c, noisy, budget).statistics(flops)
        except FitError as err:
            n_failed += 1
            if len(failures) < MAX_FAILURES_KEPT and str(err) not in failures:
                failures.append(str(err))
            continue
        for key, value in stats.items():
            samples.setdefault(key, []).append(value)
    if not samples:
        raise FitError(f"noise propagation: none of {n_simulations} simulations could be "
                       f"fitted ({failures[0] if failures else 'no reason'})")
    return Bootstrap(n_resamples=n_simulations, n_failed=n_failed, seed=seed,
                     samples={k: np.asarray(v) for k, v in samples.items()},
                     failures=tuple(failures))

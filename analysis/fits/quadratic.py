"""A model-free cross-check: a quadratic surface of ln L in (ln N, ln D), cross term included.

    ln L̂ = c0 + c1 x + c2 y + c3 x² + c4 x y + c5 y²,   x = ln N − x̄, y = ln D − ȳ,

by ordinary least squares on ln L over every fitted run. It assumes no scaling form at all,
only that the loss surface is smooth over the range the sweep sampled (a second-order Taylor
expansion), and its cross term c4 measures the N x D interaction that the additive law
cannot have (issue 16). Its allocation is the one definition (analysis.fits.optimum): the
surface minimised along the sweep's own IsoFLOP lines. Along a 6·N·D line its curvature is
c3 − c4 + c5; a surface that does not curve up along the lines has its minimum on the search
bound, which the optimum flags and leaves out.

Use it as a check, not a law: a quadratic must not be extrapolated far beyond the sampled
(N, D) range, so its held-out prediction is shown but it is never the headline law
(analysis.checks.verdict).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.errors import FitError
from analysis.fits.laws import Law, run_law
from analysis.fits.powerlaw import as_positive, require_points, require_varying
from analysis.fits.results import Estimate, Skipped
from analysis.fits.spec import FitInput

WHAT = "Quadratic surface (ln L in ln N, ln D)"
N_PARAMS = 6


def _design(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.stack([np.ones_like(x), x, y, x * x, x * y, y * y], axis=-1)


@dataclass(frozen=True)
class QuadraticSurface:
    """The fitted surface (a ``Law`` of analysis.fits.laws)."""

    coef: tuple[float, ...]
    """(c0, ..., c5) in the centred variables."""
    x_mean: float
    y_mean: float
    rmse_log: float
    n_points: int
    n_params: int = N_PARAMS

    def log_loss(self, ln_n: np.ndarray, ln_d: np.ndarray) -> np.ndarray:
        x = np.asarray(ln_n, dtype=float) - self.x_mean
        y = np.asarray(ln_d, dtype=float) - self.y_mean
        return _design(x, y) @ np.asarray(self.coef)

    def parameters(self) -> dict[str, float]:
        c = self.coef
        return {"c_nn": c[3], "c_nd": c[4], "c_dd": c[5]}


def fit_quadratic(n: object, d: object, loss: object,
                  start: Law | None = None) -> QuadraticSurface:
    """Least squares on ln L (``start`` is ignored: the fit is linear, it has no starts)."""
    ln_n = np.log(as_positive("N", n, what=WHAT))
    ln_d = np.log(as_positive("D", d, what=WHAT))
    ln_l = np.log(as_positive("loss", loss, what=WHAT))
    if not ln_n.size == ln_d.size == ln_l.size:
        raise FitError(f"{WHAT}: N, D and loss differ in length")
    require_points(ln_n.size, N_PARAMS, what=WHAT)
    require_varying("N", ln_n, what=WHAT, distinct=3)
    require_varying("D", ln_d, what=WHAT, distinct=3)
    x_mean, y_mean = float(ln_n.mean()), float(ln_d.mean())
    design = _design(ln_n - x_mean, ln_d - y_mean)
    coef, _, rank, _ = np.linalg.lstsq(design, ln_l, rcond=None)
    if rank < N_PARAMS:
        raise FitError(f"{WHAT}: the runs do not span the surface (rank {rank} of {N_PARAMS}: "
                       "ln N and ln D are collinear, e.g. a single budget)")
    resid = design @ coef - ln_l
    return QuadraticSurface(tuple(float(v) for v in coef), x_mean, y_mean,
                            float(np.sqrt(np.mean(resid**2))), int(ln_n.size))


def run_quadratic(inp: FitInput) -> Estimate | Skipped:
    """The table entry: fit, allocation along the lines, bootstrap (analysis.fits.laws)."""
    return run_law(inp, fit_quadratic)

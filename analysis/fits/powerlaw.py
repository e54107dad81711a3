"""Input checks and straight-line fits in log-log space, shared by every approach.

Why here: all the scaling laws are power laws, fitted as ordinary least squares on logs
(Kaplan et al. 2020; the N_opt ∝ C^a fits of Hoffmann et al. 2022, Approaches 1 and 2).
The checks make every fit refuse degenerate input with a message (``FitError``) instead of
returning numbers that look like a result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.errors import FitError


def as_positive(name: str, values: object, *, what: str) -> np.ndarray:
    """``values`` as a 1-d float array; FitError unless every entry is finite and > 0."""
    arr = np.asarray(values, dtype=float).ravel()
    finite = np.isfinite(arr)
    if not finite.all():
        raise FitError(f"{what}: {int((~finite).sum())} non-finite value(s) in {name}")
    if (arr <= 0).any():
        raise FitError(f"{what}: {int((arr <= 0).sum())} value(s) of {name} are <= 0")
    return arr


def require_points(n: int, n_params: int, *, what: str) -> None:
    """At least one more point than parameters: an exact interpolation is not a fit."""
    if n <= n_params:
        raise FitError(
            f"{what}: {n} point(s) for {n_params} parameters; need at least {n_params + 1}"
        )


def require_varying(name: str, values: np.ndarray, *, what: str, distinct: int = 2) -> None:
    """FitError when ``values`` take fewer than ``distinct`` different values (rel. 1e-9)."""
    scale = np.max(np.abs(values)) if values.size else 0.0
    keys = np.unique(np.round(values / scale, 9)) if scale > 0 else np.unique(values)
    if keys.size < distinct:
        if keys.size == 1:
            raise FitError(f"{what}: {name} is constant ({values[0]:.6g}); nothing to fit")
        raise FitError(
            f"{what}: {name} takes {keys.size} distinct value(s); need at least {distinct}"
        )


@dataclass(frozen=True)
class PowerLaw:
    """y = coefficient · x^exponent, fitted by least squares on (ln x, ln y)."""

    exponent: float
    log_coefficient: float
    """ln of the coefficient (kept in logs: prefactors of FLOP laws span many decades)."""
    n_points: int
    rmse_log: float
    """Root-mean-square residual in ln y: how well a straight line describes the points."""

    @property
    def coefficient(self) -> float:
        return float(np.exp(self.log_coefficient))

    def __call__(self, x: float | np.ndarray) -> float | np.ndarray:
        return np.exp(self.log_coefficient + self.exponent * np.log(x))


def fit_power_law(x: object, y: object, *, what: str, min_points: int = 3) -> PowerLaw:
    """Least-squares line through (ln x, ln y); FitError on too few or degenerate points."""
    xs = as_positive("x", x, what=what)
    ys = as_positive("y", y, what=what)
    if xs.size != ys.size:
        raise FitError(f"{what}: x has {xs.size} values but y has {ys.size}")
    require_points(xs.size, max(min_points - 1, 2), what=what)
    require_varying("x", xs, what=what)
    lx, ly = np.log(xs), np.log(ys)
    # Closed-form simple regression (no LAPACK call for a two-parameter line).
    dx = lx - lx.mean()
    slope = float(np.sum(dx * (ly - ly.mean())) / np.sum(dx * dx))
    intercept = float(ly.mean() - slope * lx.mean())
    resid = ly - (slope * lx + intercept)
    return PowerLaw(
        exponent=float(slope),
        log_coefficient=float(intercept),
        n_points=int(xs.size),
        rmse_log=float(np.sqrt(np.mean(resid**2))),
    )


@dataclass(frozen=True)
class InversePowerLaw:
    """Kaplan's form L(X) = (X_c / X)^alpha (Kaplan et al. 2020, Eqs. 1.1-1.3)."""

    alpha: float
    x_c: float
    n_points: int
    rmse_log: float

    def __call__(self, x: float | np.ndarray) -> float | np.ndarray:
        return np.power(self.x_c / np.asarray(x, dtype=float), self.alpha)


def fit_inverse_power_law(x: object, loss: object, *, what: str) -> InversePowerLaw:
    """Fit L = (X_c/X)^α: ln L = α ln X_c − α ln X. FitError if L does not fall with X."""
    losses = as_positive("loss", loss, what=what)
    require_varying("loss", losses, what=what)
    line = fit_power_law(x, losses, what=what)
    alpha = -line.exponent
    if not alpha > 0:
        raise FitError(f"{what}: loss does not fall with the variable (alpha = {alpha:.4g})")
    # ln L = α ln X_c + slope·ln X, so ln X_c = intercept / α.
    log_x_c = line.log_coefficient / alpha
    if abs(log_x_c) > 700:  # exp() would overflow a float: no finite X_c
        raise FitError(f"{what}: ln X_c = {log_x_c:.4g} is out of range; the fit is degenerate")
    x_c = float(np.exp(log_x_c))
    return InversePowerLaw(alpha=alpha, x_c=x_c, n_points=line.n_points, rmse_log=line.rmse_log)


class PowerLawAllocation:
    """N_opt(C) and D_opt(C) as two power laws (Approaches 1 and 2): a, b and the allocation.

    Subclasses are dataclasses with fields ``n_law`` and ``d_law`` (PowerLaw of C).
    """

    n_law: PowerLaw
    d_law: PowerLaw

    @property
    def a(self) -> float:
        return self.n_law.exponent

    @property
    def b(self) -> float:
        return self.d_law.exponent

    def n_opt(self, flops: float | np.ndarray) -> float | np.ndarray:
        return self.n_law(flops)

    def d_opt(self, flops: float | np.ndarray) -> float | np.ndarray:
        return self.d_law(flops)

    def tokens_per_param(self, flops: float | np.ndarray) -> float | np.ndarray:
        return self.d_opt(flops) / self.n_opt(flops)

    def statistics(self, flops: float) -> dict[str, float]:
        """Exponents, and the allocation at ``flops``: what the bootstrap collects."""
        return {"a": self.a, "b": self.b, "n_opt": float(self.n_opt(flops)),
                "d_opt": float(self.d_opt(flops)),
                "tokens_per_param": float(self.tokens_per_param(flops))}

"""The data-constrained law (Muennighoff et al. 2023): repeated tokens and excess parameters
are worth less than fresh ones, inside Chinchilla's form and inside the interaction form.

Why (issue 52): real corpora are finite and a study on one corpus repeats it. The fresh-data
laws (Approach 3, the interaction law) read a repeated token as a new one: fitted on the
published data-constrained runs (tests/data/muennighoff2023_datablations_runs.csv) they miss
the runs that repeat their data by far more than the noise. This law knows U, the unique
tokens a run trained on (``RunsTable.unique_tokens``), and decays what is repeated
(Muennighoff et al. 2023, "Scaling Data-Constrained Language Models", eqs. 5-7):

    U_D = min(U, D)                         the unique tokens
    R_D = D / U_D − 1                       repetitions beyond the first epoch
    D'  = U_D + U_D·R_D*·(1 − exp(−R_D/R_D*))
    U_N = min(N, N_opt(U_D))                the compute-optimal size for U_D unique tokens
    R_N = N / U_N − 1                       parameters in excess of it
    N'  = U_N + U_N·R_N*·(1 − exp(−R_N/R_N*))
    L   = E + A/N'^α + B/D'^β               form "additive" (Chinchilla's, Approach 3)
    L   = E + (A/N'^α + B/D'^β)^γ           form "interaction" (analysis.fits.interaction)

R_D* is the number of repetitions at which repeated data has given 1 − 1/e ≈ 63% of all it
will ever give: a repeated token is worth exp(−k/R_D*) of a fresh one at repetition k, and at
most R_D*·U_D tokens of value can be added to U_D, however long one trains. R_N* is the same for
parameters. N_opt(U_D) = G·(G·U_D)^(β/α), G = (αA/(βB))^(1/(α+β)), is the size whose
compute-optimal data under C = 6ND is U_D (the paper's ``optimal_N(D_to_C(U))``); (·)^γ is
monotone, so the interaction form has the same. With fresh data (U ≥ D) D' = D, and N' = N for
any N up to N_opt(D): the law is the base law wherever the base law's own optimum lies.

Published fit (the paper's README, "Parametric Fit"): the base law fitted to Chinchilla's C4
IsoFLOP points (A = e^6.255, B = e^7.305, E = e^0.625, α = β = 0.353), then R_D* = 15.39 and
R_N* = 5.31 fitted to the runs with the base law fixed. Here every parameter is fitted at once,
by Approach 3's machinery: Huber δ = 1e-3 on ln L̂ − ln L summed over runs, L-BFGS-B with the
analytic gradient (``huber_objective``; tests/test_data_constrained.py checks it against finite
differences) and Approach 3's tolerances, from starts built on the base law (``_starts``).
R_D* and R_N* are fitted as their logs within ``R_BOUNDS``.

Identified or not: R_D* only matters where runs repeat enough for exp(−R_D/R_D*) to move (with
the base law fixed, issue 52 measured the objective moving 0.2% for R_D* from 10 to 1000 on
the published runs). analysis.checks.repetition profiles each R* and flags it "not identified"
when its 95% profile interval reaches an end of the range tested; the profile is in fit.json.

The table entries (analysis.fits.data_constrained.entry) fit every selected run; their
allocation is analysis.fits.optimum's along the sweep's lines with fresh data (U = ∞), and
``corpus_optimum`` there answers for a fixed corpus.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize

from analysis.errors import DataError, FitError
from analysis.fits import approach3, interaction
from analysis.fits.approach3 import GRADIENT_TOLERANCE, HUBER_DELTA, LBFGS_OPTIONS
from analysis.numerics.threads import single_threaded_blas

FORMS = ("additive", "interaction")
R_BOUNDS = (1e-2, 1e4)
"""R_D* and R_N* are fitted within these (as logs): below 0.01 a repeated token is worth
nothing from the first repetition on; above 1e4 no study repeats enough to tell."""
R_STARTS = (1.0, 5.0, 25.0, 125.0)
"""Start values of R_D* and R_N* (every pair), around the published 15.4 and 5.3."""
KEEP = 4
"""(R_D*, R_N*) start pairs, best first on the objective, that L-BFGS-B runs from per base."""
REPEAT_RTOL = 1e-6
"""A run repeats its data when D > U·(1 + this)."""


# --------------------------------------------------------------------------- the law


def _decayed(ln_u: np.ndarray, ratio_minus_1: np.ndarray, rho: float
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ln X' = ln U + ln(1 + g), g = R*·(1 − exp(−R/R*)), R* = e^ρ; with ∂ln X'/∂ρ and
    ∂ln X'/∂ln U (R = X/U − 1 moves with U at fixed X)."""
    s = math.exp(rho)
    x = ratio_minus_1 / s
    decay = np.exp(-x)
    g = -s * np.expm1(-x)  # R*(1 − e^{−R/R*}), exact for small R/R*
    one_g = 1.0 + g
    d_rho = (g - ratio_minus_1 * decay) / one_g  # s·dg/ds / (1 + g)
    d_ln_u = 1.0 - decay * (ratio_minus_1 + 1.0) / one_g
    return ln_u + np.log1p(g), d_rho, d_ln_u


def ln_n_opt_for(theta: np.ndarray, ln_u: np.ndarray) -> np.ndarray:
    """ln N_opt(U) = (ln α − ln β + a − b + β ln U) / α (module docstring)."""
    a, b, _, alpha, beta = theta[:5]
    return (math.log(alpha) - math.log(beta) + a - b + beta * ln_u) / alpha


def _effective(theta: np.ndarray, ln_n: np.ndarray, ln_d: np.ndarray, ln_u: np.ndarray,
               form: str) -> dict[str, np.ndarray]:
    """ln N', ln D' and what the gradient needs of them."""
    rho_d, rho_n = theta[-2], theta[-1]
    ln_ud = np.minimum(ln_u, ln_d)
    # Ratios capped at e^700 (finite): beyond, every repetition is long worthless anyway.
    ln_dp, dd_rho, _ = _decayed(ln_ud, np.expm1(np.minimum(ln_d - ln_ud, 700.0)), rho_d)
    ln_opt = ln_n_opt_for(theta, ln_ud)
    capped = ln_opt < ln_n  # U_N = N_opt(U_D) < N: N' depends on the base parameters
    ln_un = np.where(capped, ln_opt, ln_n)
    ln_np, dn_rho, dn_ln_un = _decayed(ln_un, np.expm1(np.minimum(ln_n - ln_un, 700.0)), rho_n)
    # ∂ ln N' / ∂ ln U_N where capped (0 elsewhere); ∂ ln U_N / ∂(a, b, α, β) follow from
    # ln_opt and ln_ud (huber_objective).
    j = np.where(capped, dn_ln_un, 0.0)
    return {"ln_np": ln_np, "ln_dp": ln_dp, "dd_rho": dd_rho, "dn_rho": dn_rho, "j": j,
            "ln_opt": ln_opt, "ln_ud": ln_ud}


def _log_loss_parts(theta: np.ndarray, ef: Mapping[str, np.ndarray], form: str
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ln L̂ and its derivatives in u1 = a − α ln N', u2 = b − β ln D', e, and γ."""
    a, b, e, alpha, beta = theta[:5]
    u1, u2 = a - alpha * ef["ln_np"], b - beta * ef["ln_dp"]
    if form == "additive":
        top = np.maximum(np.maximum(u1, u2), e)
        w1, w2, we = np.exp(u1 - top), np.exp(u2 - top), np.exp(e - top)
        total = w1 + w2 + we
        return top + np.log(total), w1 / total, w2 / total, we / total, np.zeros_like(u1)
    gamma = theta[5]
    s, w1 = interaction.lse(u1, u2)
    pred, sig_t = interaction.lse(gamma * s, np.full_like(s, e))
    return pred, sig_t * gamma * w1, sig_t * gamma * (1.0 - w1), 1.0 - sig_t, sig_t * s


def log_loss(theta: np.ndarray, ln_n: np.ndarray, ln_d: np.ndarray, ln_u: np.ndarray,
             form: str) -> np.ndarray:
    """ln L̂ of θ = (a, b, e, α, β, [γ,] ln R_D*, ln R_N*) at each (N, D, U)."""
    return _log_loss_parts(theta, _effective(theta, ln_n, ln_d, ln_u, form), form)[0]


def huber_objective(theta: np.ndarray, ln_n: np.ndarray, ln_d: np.ndarray, ln_u: np.ndarray,
                    ln_loss: np.ndarray, form: str, delta: float = HUBER_DELTA
                    ) -> tuple[float, np.ndarray]:
    """Sum of Huber terms of ln L̂ − ln L and its analytic gradient in θ (chain rule through
    u1 = a − α ln N', u2 = b − β ln D'; ln N' moves with (a, b, α, β) where U_N = N_opt)."""
    alpha, beta = theta[3], theta[4]
    if not (alpha > 0 and beta > 0):  # N_opt needs ln α, ln β: outside the law's domain
        return 1e30, np.zeros_like(theta)
    ef = _effective(theta, ln_n, ln_d, ln_u, form)
    pred, w1, w2, we, wg = _log_loss_parts(theta, ef, form)
    r = pred - ln_loss
    psi = np.clip(r, -delta, delta)
    f = float((psi * (r - 0.5 * psi)).sum())
    p1, p2 = psi * w1, psi * w2  # ∂/∂u1, ∂/∂u2 of the Huber terms, per point
    back = -alpha * p1 * ef["j"]  # ∂/∂ ln U_N through ln N'
    # ∂ ln U_N/∂a = 1/α, ∂/∂b = −1/α, ∂/∂α = 1/α² − ln U_N/α, ∂/∂β = (ln U_D − 1/β)/α.
    total = float(back.sum())
    d_a, d_b = total / alpha, -total / alpha
    d_alpha = total / alpha**2 - float(np.dot(back, ef["ln_opt"])) / alpha
    d_beta = (float(np.dot(back, ef["ln_ud"])) - total / beta) / alpha
    grad = [p1.sum() + d_a, p2.sum() + d_b, float(np.dot(psi, we)),
            -float(np.dot(p1, ef["ln_np"])) + d_alpha, -float(np.dot(p2, ef["ln_dp"])) + d_beta]
    if form == "interaction":
        grad.append(float(np.dot(psi, wg)))
    grad += [-beta * float(np.dot(p2, ef["dd_rho"])), -alpha * float(np.dot(p1, ef["dn_rho"]))]
    return f, np.array(grad, dtype=float)


def _names(form: str) -> tuple[str, ...]:
    base = ("A", "B", "E", "alpha", "beta") + (("gamma",) if form == "interaction" else ())
    return base + ("R_D_star", "R_N_star")


@dataclass(frozen=True)
class DataConstrainedLaw:
    """A fitted data-constrained law (a ``Law`` of analysis.fits.laws: its ``log_loss`` is
    the law with fresh data, U = ∞; ``log_loss_u`` reads U)."""

    form: str
    theta: tuple[float, ...]
    """(ln A, ln B, ln E, α, β, [γ,] ln R_D*, ln R_N*)."""
    objective: float
    converged: bool
    n_points: int
    n_repeated: int
    """Fitted runs that repeat their data (D > U)."""
    backup_starts: tuple[tuple[float, ...], ...] = field(default=(), repr=False)
    identification: object = field(default=(), repr=False, compare=False)
    """The flags of R_D* and R_N* (``identify``) on the table's full-data fit, else ()."""
    profiles: Mapping[str, tuple[tuple[float, float], ...]] = field(
        default_factory=dict, repr=False, compare=False)
    """(R*, deviance) along each R*'s profile, on the table's full-data fit."""

    @property
    def n_params(self) -> int:
        return len(self.theta)

    def log_loss_u(self, ln_n: np.ndarray, ln_d: np.ndarray, ln_u: np.ndarray) -> np.ndarray:
        ln_n, ln_d, ln_u = np.broadcast_arrays(*(np.asarray(v, dtype=float)
                                                 for v in (ln_n, ln_d, ln_u)))
        return log_loss(np.asarray(self.theta), ln_n, ln_d, ln_u, self.form)

    def log_loss(self, ln_n: np.ndarray, ln_d: np.ndarray) -> np.ndarray:
        ln_d = np.asarray(ln_d, dtype=float)
        return self.log_loss_u(ln_n, ln_d, ln_d)  # U = D: every token fresh

    def loss(self, n: object, d: object, u: object | None = None) -> np.ndarray:
        """L(N, D, U); U None: fresh data."""
        ln_n, ln_d = np.log(np.asarray(n, dtype=float)), np.log(np.asarray(d, dtype=float))
        ln_u = ln_d if u is None else np.log(np.asarray(u, dtype=float))
        return np.exp(self.log_loss_u(ln_n, ln_d, ln_u))

    def parameters(self) -> dict[str, float]:
        t = list(self.theta)
        values = [math.exp(t[0]), math.exp(t[1]), math.exp(t[2]), *t[3:-2],
                  math.exp(t[-2]), math.exp(t[-1])]
        return dict(zip(_names(self.form), map(float, values), strict=True))

    def n_opt_for(self, u: float) -> float:
        """N_opt(U): the size beyond which parameters count as excess for U unique tokens."""
        return float(np.exp(ln_n_opt_for(np.asarray(self.theta), np.log(float(u)))))

    def repetition_share(self, n: object, d: object, u: object) -> np.ndarray:
        """L(N, D, U) − L(N, D, fresh): the loss the law puts on repetition (and on
        parameters in excess of N_opt(U)), nats."""
        return self.loss(n, d, u) - self.loss(n, d)


# --------------------------------------------------------------------------- the fit


@dataclass(frozen=True)
class _Points:
    ln_n: np.ndarray
    ln_d: np.ndarray
    ln_u: np.ndarray
    ln_loss: np.ndarray


def what(form: str) -> str:
    return f"Data-constrained law ({form})"


def points(n: object, d: object, u: object, loss: object, form: str) -> _Points:
    """Validated logs; FitError where the law cannot be fitted, DataError for a bad U."""
    data = approach3.prepare(n, d, loss, what=what(form))
    u_arr = np.asarray(u, dtype=float).ravel()
    if u_arr.size != data.ln_n.size:
        raise FitError(f"{what(form)}: {u_arr.size} values of U for {data.ln_n.size} runs")
    bad = ~(np.isfinite(u_arr) & (u_arr > 0))
    if bad.any():
        raise DataError(f"{what(form)}: U (unique tokens) must be known and > 0 for every "
                        f"run; {int(bad.sum())} of {u_arr.size} runs have none")
    return _Points(data.ln_n, data.ln_d, np.log(u_arr), data.ln_loss)


LN_E_MIN = -20.0
"""ln E is bounded below here (E ≥ 2e-9 nats: no loss can tell it from 0). Why: where the runs
do not pin E the optimiser walks ln E toward −∞ at a vanishing gradient, and a bootstrap refit
took ~1 s of L-BFGS-B steps on vit_digits' 25 runs (0.02 s with the bound)."""


def _bounds(form: str) -> list[tuple[float | None, float | None]]:
    lo, hi = math.log(R_BOUNDS[0]), math.log(R_BOUNDS[1])
    gamma = [(interaction.GAMMA_MIN, interaction.GAMMA_MAX)] if form == "interaction" else []
    return ([(None, None)] * 2 + [(LN_E_MIN, None)] + [(1e-4, None)] * 2 + gamma
            + [(lo, hi)] * 2)


def _base_starts(pts: _Points, form: str) -> list[np.ndarray]:
    """Base-law parameters to start from: the base law fitted to the runs that do not
    repeat (when at least 5 do), and to every run with D counted as U_D + (D − U_D)/2 (a
    repeated token worth half a fresh one)."""
    fit_base = (approach3.fit_approach3 if form == "additive"
                else interaction.fit_interaction)
    fresh = pts.ln_d <= np.minimum(pts.ln_u, pts.ln_d) + math.log1p(REPEAT_RTOL)
    ln_ud = np.minimum(pts.ln_u, pts.ln_d)
    half = ln_ud + np.log1p(0.5 * np.expm1(pts.ln_d - ln_ud))
    out = []
    for sel, ln_d in ((fresh, pts.ln_d), (np.ones_like(fresh), half)):
        if sel.sum() < 5:
            continue
        try:
            with single_threaded_blas():
                base = fit_base(np.exp(pts.ln_n[sel]), np.exp(ln_d[sel]),
                                np.exp(pts.ln_loss[sel]))
        except FitError:
            continue
        theta = np.asarray(base.theta, dtype=float)
        if theta[3] > 0 and theta[4] > 0:
            out.append(theta)
    if not out:
        raise FitError(f"{what(form)}: the base law could not be fitted to start from")
    return out


def _starts(pts: _Points, form: str) -> np.ndarray:
    """Every base start times every (R_D*, R_N*) of R_STARTS, the KEEP best per base."""
    rows = []
    for base in _base_starts(pts, form):
        cands = [np.r_[base, math.log(rd), math.log(rn)] for rd in R_STARTS for rn in R_STARTS]
        f0 = [huber_objective(c, *_args(pts, form))[0] for c in cands]
        rows += [cands[i] for i in np.argsort(f0, kind="stable")[:KEEP]]
    return np.array(rows)


def _args(pts: _Points, form: str) -> tuple:
    return (pts.ln_n, pts.ln_d, pts.ln_u, pts.ln_loss, form)


def minimize_from(pts: _Points, form: str, starts: np.ndarray,
                  fixed: tuple[int, float] | None = None):
    """L-BFGS-B from each start (``fixed``: one coordinate held at a value); the best."""
    bounds = _bounds(form)
    if fixed is not None:
        bounds[fixed[0]] = (fixed[1], fixed[1])
    best = None
    with single_threaded_blas():
        for x0 in starts:
            x0 = np.clip(np.asarray(x0, dtype=float),
                         [-np.inf if lo is None else lo for lo, _ in bounds],
                         [np.inf if hi is None else hi for _, hi in bounds])
            res = minimize(huber_objective, x0, args=_args(pts, form), jac=True,
                           method="L-BFGS-B", bounds=bounds, options=LBFGS_OPTIONS)
            if np.all(np.isfinite(res.x)) and np.isfinite(res.fun) and res.fun < 1e29 and (
                    best is None or res.fun < best.fun):
                best = res
    return best


def _law_at(best, pts: _Points, form: str, backups: tuple) -> DataConstrainedLaw:
    if best is None:
        raise FitError(f"{what(form)}: no L-BFGS-B run reached a finite optimum")
    theta = tuple(float(v) for v in best.x)
    if max(theta[:3]) > 700:
        raise FitError(f"{what(form)}: a coefficient overflows; the fit is degenerate")
    repeated = pts.ln_d > np.minimum(pts.ln_u, pts.ln_d) + math.log1p(REPEAT_RTOL)
    grad_ok = np.max(np.abs(best.jac)) < GRADIENT_TOLERANCE
    return DataConstrainedLaw(form, theta, float(best.fun), bool(best.success or grad_ok),
                              int(pts.ln_n.size), int(repeated.sum()), backups)


def fit_data_constrained(n: object, d: object, u: object, loss: object, form: str = "additive",
                         start: DataConstrainedLaw | None = None) -> DataConstrainedLaw:
    """Fit the law (module docstring); ``start``: a previous fit (the bootstrap's warm start)
    whose optimum and backup starts replace the base-law starts."""
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    pts = points(n, d, u, loss, form)
    if start is not None:  # the optimum and the best backup: a third start cost 50% more
        starts = np.array([start.theta, *start.backup_starts[:1]])
        return _law_at(minimize_from(pts, form, starts), pts, form, start.backup_starts)
    starts = _starts(pts, form)
    best = minimize_from(pts, form, starts)
    backups = tuple(tuple(float(v) for v in row) for row in starts[:2])
    return _law_at(best, pts, form, backups)

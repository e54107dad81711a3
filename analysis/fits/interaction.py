"""A parametric law with an N x D interaction: L(N, D) = E + (A/N^α + B/D^β)^γ.

Why: the additive law E + A/N^α + B/D^β (Approach 3) has ∂²L/∂lnN∂lnD = 0, so it cannot
describe runs in which larger models gain more from extra data. At small scale the runs show
exactly that (issue 16: a quadratic surface in ln N, ln D has a clear cross term, the additive
fit's residuals form an inverted U against N/N_opt, and its IsoFLOP profiles are ~2.7x too
flat, which bends β down and a low). Raising the reducible part to a power γ couples the two
terms: for γ ≠ 1 the cross derivative is non-zero; γ = 1 is Chinchilla's law exactly. The form
is the one DESIGN.md ("Fitting") names; Kaplan's joint law ((N_c/N)^(α_N/α_D) + D_c/D)^α_D
is the E = 0 member with one exponent fixed by the other.

Fitted by Approach 3's machinery (analysis.fits.approach3; Hoffmann et al. 2022, App. D.2, as
corrected by Besiroglu et al. 2024): in logs with log-sum-exp,

    ln L̂ = LSE(e, γ · LSE(a − α ln N, b − β ln D)),   A = exp(a), B = exp(b), E = exp(e),

Huber δ = 1e-3 on ln L̂ − ln L, *summed* over points, L-BFGS-B with the analytic gradient and
Approach 3's tolerances, from Approach 3's grid of starts times γ ∈ ``GAMMA_STARTS``, screened
all at once (the best ``DEFAULT_KEEP`` are optimised). γ is bounded to [GAMMA_MIN, GAMMA_MAX]
so the form cannot turn into a law whose loss grows with N or D. Its allocation has no closed
form: it is the one definition of analysis.fits.optimum, like every law's.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize

from analysis.errors import FitError
from analysis.fits.approach3 import (
    DEFAULT_GRID,
    DEFAULT_KEEP,
    GRADIENT_TOLERANCE,
    HUBER_DELTA,
    LBFGS_OPTIONS,
    StartGrid,
    prepare,
)
from analysis.fits.laws import FitLaw, Law, run_law
from analysis.fits.results import Estimate, Skipped
from analysis.fits.spec import FitInput
from analysis.numerics.batched import columns, minimize_batch, resample_counts
from analysis.numerics.threads import single_threaded_blas

WHAT = "Interaction law (L = E + (A/N^alpha + B/D^beta)^gamma)"
GAMMA_STARTS = (0.5, 1.0, 2.0)
GAMMA_MIN, GAMMA_MAX = 0.05, 10.0
BOUNDS: dict[str, tuple[float, float]] = {
    "E": (0.0, np.inf), "A": (0.0, np.inf), "B": (0.0, np.inf),
    "alpha": (0.0, np.inf), "beta": (0.0, np.inf), "gamma": (GAMMA_MIN, GAMMA_MAX)}
"""Each parameter's bounds in the fit (analysis.checks.identification reads them): γ's are
L-BFGS-B's; E, A and B reach 0 only as their log runs to −∞ (the optimiser works with logs);
α, β ≤ 0 is rejected (``_law_at``)."""
BOOTSTRAP_STARTS = 3
"""Screened full-data grid starts each bootstrap refit also runs from (as Approach 3)."""
RESAMPLE_STARTS = 8
"""Grid starts with the lowest objective on the resample itself that a bootstrap refit also
runs from. The law has several minima (γ trades against α, β and E), and a resample's best
may lie in a basin that none of the full-data starts reaches: on 200 resamples of the
chinchilla sweep the full-data starts alone missed a lower minimum in 3 (issue 21)."""
BATCH_MAX_ITER = 2000
"""Iterations of the batched refit (``refit_batch``) before its best end point per resample
is handed to SciPy's L-BFGS-B, which finishes it (99% of problems stop before 1,400)."""
N_PARAMS = 6


def _huber(r: np.ndarray, delta: float) -> np.ndarray:
    clipped = np.clip(r, -delta, delta)  # = ½r² inside ±δ, δ(|r| − δ/2) outside
    return clipped * (r - 0.5 * clipped)


def lse(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ln(e^u + e^v) and u's softmax weight e^u / (e^u + e^v), overflow-free.

    Why not np.logaddexp: numpy evaluates it element by element (~23 ns each here), while
    exp and log run vectorised (~1 ns): the batched bootstrap's objective took 4.6 ms on
    4,800 problems x 12 points, 2.7 ms of it in two logaddexp calls (issue 21). The same
    value to rounding (a relative 1e-15).
    """
    top = np.maximum(u, v)
    eu, ev = np.exp(u - top), np.exp(v - top)
    total = eu + ev
    return top + np.log(total), eu / total


def log_loss(theta: np.ndarray, ln_n: np.ndarray, ln_d: np.ndarray) -> np.ndarray:
    """ln L̂ for θ = (a, b, e, α, β, γ), overflow-free."""
    a, b, e, alpha, beta, gamma = theta
    return lse(e, gamma * lse(a - alpha * ln_n, b - beta * ln_d)[0])[0]


def huber_objective(theta: np.ndarray, ln_n: np.ndarray, ln_d: np.ndarray, ln_loss: np.ndarray,
                    delta: float = HUBER_DELTA) -> tuple[float, np.ndarray]:
    """Sum of Huber terms of ln L̂ − ln L and its analytic gradient in θ.

    With s = LSE(u1, u2), w_i its softmax weights, t = γ s and σ_t, σ_e the weights of t and
    e in the outer LSE: ∂lnL̂/∂a = σ_t γ w1, ∂/∂b = σ_t γ w2, ∂/∂e = σ_e, ∂/∂α = −σ_t γ w1 ln N,
    ∂/∂β = −σ_t γ w2 ln D, ∂/∂γ = σ_t s; the Huber derivative is clip(r, −δ, δ).
    """
    a, b, e, alpha, beta, gamma = theta
    s, w1 = lse(a - alpha * ln_n, b - beta * ln_d)
    t = gamma * s
    pred, sig_t = lse(t, e)
    r = pred - ln_loss
    psi = np.clip(r, -delta, delta)
    pt = psi * sig_t
    g1, g2 = pt * gamma * w1, pt * gamma * (1.0 - w1)
    grad = np.array([g1.sum(), g2.sum(), np.dot(psi, 1.0 - sig_t), -np.dot(g1, ln_n),
                     -np.dot(g2, ln_d), np.dot(pt, s)])
    return float(_huber(r, delta).sum()), grad


def weighted_objective(thetas: np.ndarray, weights: np.ndarray, ln_n: np.ndarray,
                       ln_d: np.ndarray, ln_loss: np.ndarray,
                       delta: float = HUBER_DELTA) -> tuple[np.ndarray, np.ndarray]:
    """huber_objective for k problems at once, one per column: θ (6, k), point i of problem j
    counted weights[i, j] times (a bootstrap resample as counts, (m, k)): f (k,) and its
    gradient (6, k). Points run down the rows, problems along them (analysis.numerics.batched).
    γ's bounds are the solver's (analysis.numerics.batched, ``lower``/``upper``)."""
    a, b, e, alpha, beta, gamma = thetas
    ln_n, ln_d = ln_n[:, None], ln_d[:, None]
    s, w1 = lse(a - alpha * ln_n, b - beta * ln_d)
    pred, sig_t = lse(gamma * s, e)
    r = pred - ln_loss[:, None]
    clipped = np.clip(r, -delta, delta)
    psi = weights * clipped
    pt = psi * sig_t  # ∂/∂t of the weighted Huber terms, per point
    pw = pt * w1
    sum_pt, sum_pw = pt.sum(0), pw.sum(0)
    f = (psi * (r - 0.5 * clipped)).sum(0)
    grad = np.stack([gamma * sum_pw, gamma * (sum_pt - sum_pw), psi.sum(0) - sum_pt,
                     -gamma * (pw * ln_n).sum(0), -gamma * ((pt - pw) * ln_d).sum(0),
                     (pt * s).sum(0)])
    return f, grad


def start_points(grid: StartGrid = DEFAULT_GRID) -> np.ndarray:
    """Approach 3's grid of (a, b, e, α, β) times the γ starts: rows of θ."""
    return np.array(list(itertools.product(grid.a, grid.b, grid.e, grid.alpha, grid.beta,
                                           GAMMA_STARTS)))


def screen(starts: np.ndarray, ln_n: np.ndarray, ln_d: np.ndarray, ln_loss: np.ndarray,
           keep: int, delta: float = HUBER_DELTA) -> np.ndarray:
    """The ``keep`` starts with the lowest objective, evaluated in chunks (bounded memory)."""
    if keep <= 0:
        return starts[:0]
    f0 = np.concatenate([
        _huber(log_loss(chunk.T[:, :, None], ln_n, ln_d) - ln_loss, delta).sum(axis=1)
        for chunk in np.array_split(starts, max(1, len(starts) // 500))])
    return starts[np.argsort(f0, kind="stable")[:keep]]


@dataclass(frozen=True)
class InteractionLaw:
    """Fitted L = E + (A/N^α + B/D^β)^γ (a ``Law`` of analysis.fits.laws)."""

    theta: tuple[float, ...]
    """(ln A, ln B, ln E, α, β, γ)."""
    objective: float
    converged: bool
    n_points: int
    backup_starts: tuple[tuple[float, ...], ...] = field(default=(), repr=False)
    """The screened full-data grid starts a bootstrap refit also tries."""
    n_params: int = N_PARAMS
    identification: object = field(default=(), repr=False, compare=False)
    """The parameters the runs do not identify: on the table's full-data fit, an
    analysis.checks.identification.Pending (read it with its ``flags_of``); () elsewhere."""

    def log_loss(self, ln_n: np.ndarray, ln_d: np.ndarray) -> np.ndarray:
        return log_loss(np.asarray(self.theta), np.asarray(ln_n), np.asarray(ln_d))

    def parameters(self) -> dict[str, float]:
        ln_a, ln_b, ln_e, alpha, beta, gamma = self.theta
        return {"E": float(np.exp(ln_e)), "A": float(np.exp(ln_a)), "B": float(np.exp(ln_b)),
                "alpha": alpha, "beta": beta, "gamma": gamma}


def fit_interaction(n: object, d: object, loss: object, start: Law | None = None, *,
                    keep: int = DEFAULT_KEEP, grid: StartGrid = DEFAULT_GRID,
                    delta: float = HUBER_DELTA) -> InteractionLaw:
    """Fit the law to runs; ``start`` (a previous fit: the bootstrap's warm start) replaces the
    grid's ``keep`` best starts by its optimum, its backup starts and the RESAMPLE_STARTS
    grid starts with the lowest objective on these runs. One SciPy L-BFGS-B run per start:
    the reference that ``refit_batch`` (the bootstrap's path) is tested against."""
    data = prepare(n, d, loss, what=WHAT)
    args = (data.ln_n, data.ln_d, data.ln_loss, delta)
    if isinstance(start, InteractionLaw):
        screened = screen(start_points(grid), *args[:3], keep=RESAMPLE_STARTS, delta=delta)
        starts = np.vstack([np.array([start.theta, *start.backup_starts]), screened])
        backups = start.backup_starts
    else:
        screened = screen(start_points(grid), *args[:3], keep=max(keep, BOOTSTRAP_STARTS),
                          delta=delta)
        starts = screened[:keep]
        backups = tuple(tuple(float(v) for v in row) for row in screened[:BOOTSTRAP_STARTS])
    bounds = [(None, None)] * 5 + [(GAMMA_MIN, GAMMA_MAX)]
    best = None
    with single_threaded_blas():
        for x0 in starts:
            x0 = np.asarray(x0, dtype=float).copy()
            x0[5] = np.clip(x0[5], GAMMA_MIN, GAMMA_MAX)
            res = minimize(huber_objective, x0, args=args, jac=True, method="L-BFGS-B",
                           bounds=bounds, options=LBFGS_OPTIONS)
            if np.all(np.isfinite(res.x)) and np.isfinite(res.fun) and (
                    best is None or res.fun < best.fun):
                best = res
    if best is None:
        raise FitError(f"{WHAT}: no L-BFGS-B run reached a finite optimum")
    return _law_at(best, int(data.ln_n.size), backups)


def _law_at(best, n_points: int, backups: tuple[tuple[float, ...], ...]) -> InteractionLaw:
    """The law at L-BFGS-B's best end point (a SciPy result), or FitError where it is none."""
    ln_a, ln_b, ln_e, alpha, beta, gamma = (float(v) for v in best.x)
    if not (alpha > 0 and beta > 0):
        raise FitError(f"{WHAT}: fitted alpha = {alpha:.4g}, beta = {beta:.4g}; both must be > 0")
    if max(ln_a, ln_b, ln_e) > 700:
        raise FitError(f"{WHAT}: a coefficient overflows; the fit is degenerate")
    interior = GAMMA_MIN < gamma < GAMMA_MAX
    return InteractionLaw(
        theta=tuple(float(v) for v in best.x), objective=float(best.fun),
        converged=bool(best.success or (interior and np.max(np.abs(best.jac)) < GRADIENT_TOLERANCE)),
        n_points=n_points, backup_starts=backups)


def refit_batch(n: np.ndarray, d: np.ndarray, loss: np.ndarray, start: InteractionLaw,
                indices: np.ndarray, *, grid: StartGrid = DEFAULT_GRID,
                delta: float = HUBER_DELTA) -> list[InteractionLaw | str]:
    """fit_interaction(n[idx], d[idx], loss[idx], start) for every row idx of ``indices`` at
    once: each resample's fit or its FitError message, in order.

    Each resample is the full data weighted by how often it drew each point (as Approach 3's
    refit_batch). Its starts are those of fit_interaction: the full-data optimum, its backup
    starts and the RESAMPLE_STARTS grid starts best on the resample (the grid's per-point
    Huber terms are computed once; a resample's objective at every start is then one matrix
    product with its counts). Every (resample, start) runs at once in the batched L-BFGS
    (analysis.numerics.batched, γ bounded) for up to BATCH_MAX_ITER iterations; the best end point
    of each resample is then finished by SciPy's L-BFGS-B on the resample's own points (a few
    iterations: the same stopping rules and bounds as the reference, and its result).
    Not the same algorithm as the reference's, so not always the same minimum of this
    many-minima law: against the reference, resample by resample, the same optimum on 198 of
    200 resamples of the chinchilla sweep (2 higher) and 385 of 400 of the quickstart's 12
    runs (3 lower, 12 higher), where the law is barely identified (BENCHMARKS.md, issue 21).
    The intervals (2026-12-06, seed 0): a, b and tokens per parameter as the reference's to 5
    digits on 200 chinchilla resamples; on the quickstart's 400, a's ends within 0.007, b's
    within 0.005. tests/test_fits_batched.py compares them on a synthetic bootstrap.
    """
    full = prepare(n, d, loss, what=WHAT)
    out: list[InteractionLaw | str]
    out, weights, row_data = resample_counts(  # the same checks (and messages) as a refit
        indices, n.size, lambda idx: prepare(n[idx], d[idx], loss[idx], what=WHAT))
    if not row_data:
        return out
    pts = start_points(grid)
    terms = np.concatenate([  # (starts, points): Huber term of every full-data point
        _huber(log_loss(chunk.T[:, :, None], full.ln_n, full.ln_d) - full.ln_loss, delta)
        for chunk in np.array_split(pts, max(1, len(pts) // 500))])
    f0 = weights @ terms.T  # (resamples, starts)
    best_k = np.argpartition(f0, RESAMPLE_STARTS, axis=1)[:, :RESAMPLE_STARTS + 1]
    chosen = np.empty((len(weights), RESAMPLE_STARTS), dtype=int)
    for j in range(len(weights)):  # in screen()'s order: by objective, the grid's on ties
        cand = np.sort(best_k[j])
        chosen[j] = cand[np.argsort(f0[j, cand], kind="stable")[:RESAMPLE_STARTS]]
    common = np.array([start.theta, *start.backup_starts], dtype=float)
    x0 = np.concatenate([np.repeat(common[None], len(weights), axis=0), pts[chosen]], axis=1)
    n_starts = x0.shape[1]
    x0 = x0.reshape(-1, N_PARAMS)
    x0[:, 5] = np.clip(x0[:, 5], GAMMA_MIN, GAMMA_MAX)
    problem_weights = np.ascontiguousarray(np.repeat(weights, n_starts, axis=0).T)  # problem = (resample, start)

    def fun(x: np.ndarray, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return weighted_objective(x, columns(problem_weights, which), full.ln_n, full.ln_d,
                                  full.ln_loss, delta)

    res = minimize_batch(fun, x0, ftol=LBFGS_OPTIONS["ftol"], gtol=LBFGS_OPTIONS["gtol"],
                         max_iter=BATCH_MAX_ITER, lower=np.r_[[-np.inf] * 5, GAMMA_MIN],
                         upper=np.r_[[np.inf] * 5, GAMMA_MAX])
    ok = np.all(np.isfinite(res.x), axis=1) & np.isfinite(res.fun)
    fun_ok = np.where(ok, res.fun, np.inf).reshape(len(weights), n_starts)
    bounds = [(None, None)] * 5 + [(GAMMA_MIN, GAMMA_MAX)]
    with single_threaded_blas():
        for j, (k, data) in enumerate(row_data):
            if not np.isfinite(fun_ok[j]).any():
                out[k] = f"{WHAT}: no L-BFGS-B run reached a finite optimum"
                continue
            x = res.x[j * n_starts + int(np.argmin(fun_ok[j]))]
            best = minimize(huber_objective, x, args=(data.ln_n, data.ln_d, data.ln_loss, delta),
                            jac=True, method="L-BFGS-B", bounds=bounds, options=LBFGS_OPTIONS)
            if not (np.all(np.isfinite(best.x)) and np.isfinite(best.fun)):
                out[k] = f"{WHAT}: no L-BFGS-B run reached a finite optimum"
                continue
            try:
                out[k] = _law_at(best, int(data.ln_n.size), start.backup_starts)
            except FitError as err:
                out[k] = str(err)
    return out


def run_interaction(inp: FitInput, fit: FitLaw = fit_interaction) -> Estimate | Skipped:
    """The table entry: fit, allocation along the lines, bootstrap (analysis.fits.laws); the
    bootstrap refits every resample at once (``refit_batch``). ``fit``: the full-data fit (the
    table's carries the parameters the runs do not identify, analysis.checks.identification)."""
    return run_law(inp, fit, refit_batch)


"""Chinchilla Approach 3: the parametric law L(N, D) = E + A/N^α + B/D^β.

How it is fitted (Hoffmann et al. 2022, Sec. 3.3 and Appendix D.2; as corrected by
Besiroglu et al. 2024, "Chinchilla Scaling: A replication attempt", arXiv:2404.10102):

* In log space with the log-sum-exp form, so the three terms never overflow:
  log L̂ = LSE(a − α log N, b − β log D, e), with A = exp(a), B = exp(b), E = exp(e).
* Huber loss with δ = 1e-3 on the residual log L̂ − log L, **summed** over points. The mean
  makes the objective and its gradient ~n times smaller, so L-BFGS-B meets its gradient
  tolerance early: Besiroglu et al. trace the implausibly narrow original intervals to this.
* L-BFGS-B with the analytic gradient, from a grid of starts: α, β ∈ {0, 0.5, …, 2};
  e ∈ {−1, −0.5, …, 1}; a, b ∈ {0, 5, …, 25} (4500 starts); the best end point wins.
* Tight stopping tolerances (``LBFGS_OPTIONS``). SciPy's L-BFGS-B stops when
  (f_k − f_k+1) / max(|f_k|, |f_k+1|, 1) ≤ ftol: with the default ftol ≈ 2.2e-9 and a summed
  Huber loss of ~1e-3 (δ = 1e-3) that is an *absolute* test, so most starts stop short of a
  minimum (the same failure as the mean, less severe). We measured it: on resampled
  synthetic IsoFLOP data even 20 screened starts missed the full grid's optimum (objective
  0.00072 vs 0.00039) with the defaults; with ours the full-data optimum alone, 8 screened
  starts and 20 screened starts all ended at the same minimum on every resample tried.

Making the grid fast (documented in docs/analysis.md): the objective of all 4500 starts is
evaluated at once, vectorised; L-BFGS-B then runs from the ``keep`` starts with the lowest
initial objective (``keep=None`` runs all 4500). Converged runs end at the minimum of their
basin, and the 20 best starts include some in the best basin on every data set we tried, so
the screened fit (keep=20) equals the full grid's there. That is checked, not proven:
benchmarks/perf/bench_fits.py checks it on the Epoch data on every run, and tests/test_fits.py
checks it against the full grid on a smaller grid and against the recorded full-grid numbers.

Compute-optimal allocation for C = 6·N·D (Hoffmann et al. 2022, Eq. 4 and Appendix D.2):
a = β/(α+β), b = α/(α+β), G = (αA/(βB))^(1/(α+β)), N_opt = G·(C/6)^a, D_opt = G⁻¹·(C/6)^b.
The table of fits reports instead the one definition every law shares (analysis.fits.optimum:
the law minimised along the sweep's own IsoFLOP lines), which equals this closed form for a
6·N·D sweep and differs from it when the sweep holds exact FLOPs constant (``a_6nd`` keeps it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize

from analysis.errors import FitError
from analysis.fits.optimum import IsoFlopLines, optimal_allocation
from analysis.fits.powerlaw import as_positive, require_points, require_varying
from analysis.numerics.batched import columns, minimize_batch, resample_counts
from analysis.numerics.bootstrap import Bootstrap, run_bootstrap
from analysis.numerics.threads import single_threaded_blas

HUBER_DELTA = 1e-3
LBFGS_OPTIONS = {"ftol": 1e-15, "gtol": 1e-10, "maxiter": 15000}
"""L-BFGS-B stopping rules: see the module docstring for why not SciPy's defaults."""
GRADIENT_TOLERANCE = 1e-6
WHAT = "Approach 3 (L = E + A/N^alpha + B/D^beta)"
DEFAULT_KEEP = 20
"""Screened grid starts that L-BFGS-B runs from (``keep=None``: all of them)."""
BOUNDS: dict[str, tuple[float, float]] = {
    "E": (0.0, np.inf), "A": (0.0, np.inf), "B": (0.0, np.inf),
    "alpha": (0.0, np.inf), "beta": (0.0, np.inf)}
"""Each parameter's bounds in the fit (analysis.checks.identification reads them). L-BFGS-B runs
unbounded in θ = (ln A, ln B, ln E, α, β): E, A and B reach their bound 0 only as their log
runs to −∞, and an end point with α or β ≤ 0 is rejected (``_fit_at``)."""


@dataclass(frozen=True)
class StartGrid:
    """The grid of L-BFGS-B starts (Hoffmann et al. 2022, Appendix D.2)."""

    a: tuple[float, ...] = (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)
    b: tuple[float, ...] = (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)
    e: tuple[float, ...] = (-1.0, -0.5, 0.0, 0.5, 1.0)
    alpha: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0)
    beta: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0)

    def points(self) -> np.ndarray:
        """All starts as rows θ = (a, b, e, alpha, beta), in a fixed order."""
        return np.array(list(itertools.product(self.a, self.b, self.e, self.alpha, self.beta)))

    @property
    def size(self) -> int:
        return len(self.a) * len(self.b) * len(self.e) * len(self.alpha) * len(self.beta)


DEFAULT_GRID = StartGrid()


def huber_objective(
    theta: np.ndarray, ln_n: np.ndarray, ln_d: np.ndarray, ln_loss: np.ndarray,
    delta: float = HUBER_DELTA,
) -> tuple[float, np.ndarray]:
    """Sum of Huber terms of log L̂ − log L, and its analytic gradient in θ.

    log L̂ = LSE(a − α ln N, b − β ln D, e) is computed after subtracting the largest of the
    three terms, so nothing overflows for any θ. Huber(r) = r²/2 for |r| ≤ δ, δ(|r| − δ/2)
    beyond; its derivative is clip(r, −δ, δ), and d LSE / d term = that term's softmax weight.
    This is the hot path of every fit (L-BFGS-B calls it ~100 times per start).
    """
    a, b, e, alpha, beta = theta
    u1 = a - alpha * ln_n
    u2 = b - beta * ln_d
    m = np.maximum(u1, u2)
    np.maximum(m, e, out=m)
    x1, x2, x3 = np.exp(u1 - m), np.exp(u2 - m), np.exp(e - m)
    total = x1 + x2
    total += x3
    r = np.log(total)
    r += m
    r -= ln_loss
    abs_r = np.abs(r)
    f = np.where(abs_r <= delta, 0.5 * r * r, delta * (abs_r - 0.5 * delta)).sum()
    psi = np.clip(r, -delta, delta)
    psi /= total
    g1, g2 = psi * x1, psi * x2
    # 1-d dot products only: level-1 BLAS runs single-threaded. (A 2-d `@` here would start
    # OpenBLAS threads, which cost more than the objective itself on a busy machine.)
    grad = np.array([g1.sum(), g2.sum(), np.dot(psi, x3), -np.dot(g1, ln_n), -np.dot(g2, ln_d)])
    return float(f), grad


def huber_objective_batch(
    thetas: np.ndarray, ln_n: np.ndarray, ln_d: np.ndarray, ln_loss: np.ndarray,
    delta: float = HUBER_DELTA,
) -> np.ndarray:
    """The same objective for k parameter rows at once (shape (k, 5) -> (k,)): screening."""
    a, b, e, alpha, beta = (col[:, None] for col in np.atleast_2d(thetas).T)
    u1 = a - alpha * ln_n
    u2 = b - beta * ln_d
    m = np.maximum(np.maximum(u1, u2), e)
    r = m + np.log(np.exp(u1 - m) + np.exp(u2 - m) + np.exp(e - m)) - ln_loss
    abs_r = np.abs(r)
    return np.where(abs_r <= delta, 0.5 * r * r, delta * (abs_r - 0.5 * delta)).sum(axis=1)


@dataclass(frozen=True)
class Approach3Fit:
    """Fitted L(N, D) = E + A/N^α + B/D^β and the allocation it implies."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    objective: float
    """The summed Huber loss at the optimum."""
    n_points: int
    n_starts: int
    """Size of the start grid."""
    n_optimized: int
    """How many L-BFGS-B runs were made (the screened starts plus any warm starts)."""
    converged: bool
    """The winning run stopped at a stationary point: L-BFGS-B reported convergence, or its
    line search gave up at machine precision with a gradient below GRADIENT_TOLERANCE."""
    delta: float = HUBER_DELTA
    theta: tuple[float, ...] = field(default=(), repr=False)
    """The optimum as (ln A, ln B, ln E, α, β): a warm start for bootstrap refits."""
    identification: object = field(default=(), repr=False, compare=False)
    """The parameters the runs do not identify: on the table's full-data fit, an
    analysis.checks.identification.Pending (read it with its ``flags_of``); () elsewhere."""

    @property
    def a(self) -> float:
        """N_opt ∝ C^a with a = β/(α+β)."""
        return self.beta / (self.alpha + self.beta)

    @property
    def b(self) -> float:
        """D_opt ∝ C^b with b = α/(α+β)."""
        return self.alpha / (self.alpha + self.beta)

    @property
    def G(self) -> float:
        """G = (αA/(βB))^(1/(α+β)), computed in logs."""
        log_g = (np.log(self.alpha * self.A) - np.log(self.beta * self.B)) / (
            self.alpha + self.beta
        )
        return float(np.exp(log_g))

    def n_opt(self, flops: float | np.ndarray) -> float | np.ndarray:
        """Compute-optimal parameters for C = 6·N·D FLOPs."""
        return self.G * np.power(np.asarray(flops, dtype=float) / 6.0, self.a)

    def d_opt(self, flops: float | np.ndarray) -> float | np.ndarray:
        """Compute-optimal tokens for C = 6·N·D FLOPs."""
        return np.power(np.asarray(flops, dtype=float) / 6.0, self.b) / self.G

    def tokens_per_param(self, flops: float | np.ndarray) -> float | np.ndarray:
        return self.d_opt(flops) / self.n_opt(flops)

    def loss(self, n: float | np.ndarray, d: float | np.ndarray) -> float | np.ndarray:
        """Predicted loss of a model with n parameters trained on d tokens."""
        n, d = np.asarray(n, dtype=float), np.asarray(d, dtype=float)
        return self.E + self.A * np.power(n, -self.alpha) + self.B * np.power(d, -self.beta)

    def optimal_loss(self, flops: float | np.ndarray) -> float | np.ndarray:
        return self.loss(self.n_opt(flops), self.d_opt(flops))

    def log_loss(self, ln_n: np.ndarray, ln_d: np.ndarray) -> np.ndarray:
        """ln L̂ = LSE(ln A − α ln N, ln B − β ln D, ln E): what the optimum minimises."""
        if self.theta:  # the fitted logs: exp(e) may have underflowed to E = 0
            ln_a, ln_b, ln_e = self.theta[:3]
        else:
            with np.errstate(divide="ignore"):
                ln_a, ln_b, ln_e = np.log(self.A), np.log(self.B), np.log(self.E)
        return np.logaddexp(np.logaddexp(ln_a - self.alpha * ln_n, ln_b - self.beta * ln_d),
                            ln_e)

    def statistics(self, flops: float, lines: IsoFlopLines | None = None) -> dict[str, float]:
        """The named quantities the bootstrap collects; the allocation and loss at ``flops``.

        With ``lines`` the allocation (a, b, n_opt, d_opt, tokens_per_param, loss_opt) is the
        one definition of analysis.fits.optimum, the law minimised along the sweep's IsoFLOP
        lines; without (direct calls, the convention refits), Hoffmann's closed form for
        C = 6·N·D. The two agree for a 6·N·D sweep; ``a_6nd`` keeps the closed form always.
        """
        out = {
            "E": self.E, "A": self.A, "B": self.B, "alpha": self.alpha, "beta": self.beta,
            "a": self.a, "b": self.b, "G": self.G,
            "n_opt": float(self.n_opt(flops)), "d_opt": float(self.d_opt(flops)),
            "tokens_per_param": float(self.tokens_per_param(flops)),
            "loss_opt": float(self.optimal_loss(flops)),
        }
        if lines is not None:
            out["a_6nd"] = self.a
            out.update(optimal_allocation(self.log_loss, lines, flops).statistics())
        return out


@dataclass(frozen=True)
class _Data:
    ln_n: np.ndarray
    ln_d: np.ndarray
    ln_loss: np.ndarray


def prepare(n: object, d: object, loss: object, what: str = WHAT) -> _Data:
    """Validate and take logs; FitError for anything the law cannot be fitted to (also used
    by analysis.fits.interaction, whose law needs the same of its points)."""
    n_arr = as_positive("N", n, what=what)
    d_arr = as_positive("D", d, what=what)
    l_arr = as_positive("loss", loss, what=what)
    if not n_arr.size == d_arr.size == l_arr.size:
        raise FitError(f"{what}: N, D and loss have {n_arr.size}, {d_arr.size}, {l_arr.size} values")
    require_points(n_arr.size, 5, what=what)
    require_varying("loss", l_arr, what=what)
    ln_n, ln_d = np.log(n_arr), np.log(d_arr)
    dn, dd = ln_n - ln_n.mean(), ln_d - ln_d.mean()
    var_n, var_d, cov = np.mean(dn * dn), np.mean(dd * dd), np.mean(dn * dd)
    if var_n <= 1e-18 or var_d <= 1e-18 or 1.0 - cov * cov / (var_n * var_d) < 1e-10:
        raise FitError(
            f"{what}: log N and log D are collinear (a single compute budget, or one model "
            "size, or D ∝ N), so A/N^alpha and B/D^beta cannot be told apart"
        )
    return _Data(ln_n, ln_d, np.log(l_arr))


_prepare = prepare  # the name the tests and older callers use


def screen_starts(data: _Data, grid: StartGrid, keep: int | None,
                  delta: float = HUBER_DELTA) -> np.ndarray:
    """Grid starts ordered by their initial objective (all at once); the best ``keep``."""
    starts = grid.points()
    if keep is None or keep >= len(starts):
        return starts
    if keep <= 0:
        return starts[:0]
    f0 = np.concatenate([
        huber_objective_batch(chunk, data.ln_n, data.ln_d, data.ln_loss, delta)
        for chunk in np.array_split(starts, max(1, len(starts) // 500))  # bounded memory
    ])
    order = np.argsort(f0, kind="stable")
    return starts[order[:keep]]


def _minimize(data: _Data, starts: np.ndarray, delta: float):
    """L-BFGS-B from each start; the lowest finite end point (first one on ties)."""
    args = (data.ln_n, data.ln_d, data.ln_loss, delta)
    best = None
    with single_threaded_blas():
        for x0 in starts:
            res = minimize(huber_objective, x0, args=args, jac=True, method="L-BFGS-B",
                           options=LBFGS_OPTIONS)
            if np.all(np.isfinite(res.x)) and np.isfinite(res.fun) and (
                best is None or res.fun < best.fun
            ):
                best = res
    if best is None:
        raise FitError(f"{WHAT}: no L-BFGS-B run reached a finite optimum")
    return best


def fit_approach3(
    n: object, d: object, loss: object, *,
    grid: StartGrid = DEFAULT_GRID, keep: int | None = DEFAULT_KEEP,
    warm_starts: np.ndarray | None = None, delta: float = HUBER_DELTA,
) -> Approach3Fit:
    """Fit L = E + A/N^α + B/D^β to runs (N parameters, D tokens, final loss).

    ``keep`` screened grid starts are optimised (None: the whole grid); ``warm_starts``
    (rows of θ) are optimised too, e.g. the full-data optimum in a bootstrap refit.
    """
    data = prepare(n, d, loss)
    starts = screen_starts(data, grid, keep, delta)
    if warm_starts is not None:
        starts = np.vstack([np.atleast_2d(warm_starts), starts])
    best = _minimize(data, starts, delta)
    return _fit_at(best.x, float(best.fun), best.jac, bool(best.success), data, grid,
                   len(starts), delta)


def _fit_at(theta: np.ndarray, objective: float, jac: np.ndarray, success: bool, data: _Data,
            grid: StartGrid, n_optimized: int, delta: float) -> Approach3Fit:
    """The fit at L-BFGS's best end point θ, or FitError where θ is not a usable law."""
    ln_a, ln_b, ln_e, alpha, beta = (float(v) for v in theta)
    if not (alpha > 0 and beta > 0):
        raise FitError(
            f"{WHAT}: fitted alpha = {alpha:.4g}, beta = {beta:.4g}; both must be > 0 "
            "for loss to fall with N and D (the points do not constrain the law)"
        )
    if max(ln_a, ln_b, ln_e) > 700:
        raise FitError(f"{WHAT}: a coefficient overflows (ln A, ln B, ln E = "
                       f"{ln_a:.4g}, {ln_b:.4g}, {ln_e:.4g}); the fit is degenerate")
    if min(ln_a, ln_b) < -700:  # exp underflows: A or B = 0, G = (αA/(βB))^(1/(α+β)) = 0 or ∞
        raise FitError(f"{WHAT}: the {'N' if ln_a < ln_b else 'D'} term vanishes (ln A = "
                       f"{ln_a:.4g}, ln B = {ln_b:.4g}): the fitted loss does not depend on "
                       f"{'N' if ln_a < ln_b else 'D'}, so it has no compute-optimal allocation")
    return Approach3Fit(
        E=float(np.exp(ln_e)), A=float(np.exp(ln_a)), B=float(np.exp(ln_b)),
        alpha=alpha, beta=beta, objective=objective, n_points=int(data.ln_n.size),
        n_starts=grid.size, n_optimized=n_optimized,
        converged=bool(success or np.max(np.abs(jac)) < GRADIENT_TOLERANCE),
        delta=delta, theta=tuple(float(v) for v in theta),
    )


def weighted_objective(thetas: np.ndarray, weights: np.ndarray, ln_n: np.ndarray,
                       ln_d: np.ndarray, ln_loss: np.ndarray,
                       delta: float = HUBER_DELTA) -> tuple[np.ndarray, np.ndarray]:
    """huber_objective for k problems at once, one per column: θ (5, k), each point i of
    problem j counted weights[i, j] times (a bootstrap resample as counts, (m, k)): f (k,)
    and its gradient (5, k). Points run down the rows (analysis.numerics.batched)."""
    a, b, e, alpha, beta = thetas
    ln_n, ln_d = ln_n[:, None], ln_d[:, None]
    u1 = a - alpha * ln_n
    u2 = b - beta * ln_d
    m = np.maximum(np.maximum(u1, u2), e)
    x1, x2, x3 = np.exp(u1 - m), np.exp(u2 - m), np.exp(e - m)
    total = x1 + x2 + x3
    r = np.log(total) + m - ln_loss[:, None]
    abs_r = np.abs(r)
    f = (weights * np.where(abs_r <= delta, 0.5 * r * r, delta * (abs_r - 0.5 * delta))).sum(0)
    psi = weights * np.clip(r, -delta, delta) / total
    g1, g2 = psi * x1, psi * x2
    grad = np.stack([g1.sum(0), g2.sum(0), (psi * x3).sum(0), -(g1 * ln_n).sum(0),
                     -(g2 * ln_d).sum(0)])
    return f, grad


def refit_batch(n: np.ndarray, d: np.ndarray, loss: np.ndarray, starts: np.ndarray,
                indices: np.ndarray, delta: float = HUBER_DELTA) -> list[Approach3Fit | str]:
    """fit_approach3(n[idx], d[idx], loss[idx], keep=0, warm_starts=starts) for every row idx
    of ``indices`` at once (analysis.numerics.batched): each resample is the full data weighted by
    how often it drew each point, from every start; a resample's fit or its FitError message.

    The same law, objective, starts and stopping rules as the one-at-a-time refit, so each
    resample ends at the same optimum up to rounding (tests/test_fits_batched.py compares
    them resample by resample); ~15x less CPU on the chinchilla sweep's 30 runs.
    """
    full = prepare(n, d, loss)
    out: list[Approach3Fit | str]
    out, rows, row_data = resample_counts(  # the same checks (and messages) as a refit
        indices, n.size, lambda idx: prepare(n[idx], d[idx], loss[idx]))
    if not row_data:
        return out
    n_starts = len(starts)
    weights = np.ascontiguousarray(np.repeat(rows, n_starts, axis=0).T)  # (points, problems)
    x0 = np.tile(np.asarray(starts, dtype=float), (len(rows), 1))

    def fun(x: np.ndarray, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return weighted_objective(x, columns(weights, which), full.ln_n, full.ln_d, full.ln_loss, delta)

    res = minimize_batch(fun, x0, ftol=LBFGS_OPTIONS["ftol"], gtol=LBFGS_OPTIONS["gtol"],
                         max_iter=LBFGS_OPTIONS["maxiter"])
    ok = np.all(np.isfinite(res.x), axis=1) & np.isfinite(res.fun)
    fun_ok = np.where(ok, res.fun, np.inf).reshape(len(rows), n_starts)
    for j, (k, data) in enumerate(row_data):
        if not np.isfinite(fun_ok[j]).any():
            out[k] = f"{WHAT}: no L-BFGS-B run reached a finite optimum"
            continue
        best = j * n_starts + int(np.argmin(fun_ok[j]))  # the first of equal minima
        try:
            out[k] = _fit_at(res.x[best], float(res.fun[best]), res.jac[best],
                             bool(res.success[best]), data, DEFAULT_GRID, n_starts, delta)
        except FitError as err:
            out[k] = str(err)
    return out


BOOTSTRAP_STARTS = 3
"""Grid starts per bootstrap refit, besides the full-data optimum (see below)."""


@dataclass(frozen=True)
class _Refit:
    """One bootstrap refit (a module-level class, so worker processes can unpickle it)."""

    n: np.ndarray
    d: np.ndarray
    loss: np.ndarray
    starts: np.ndarray
    delta: float
    flops: float
    lines: IsoFlopLines | None = None

    def __call__(self, idx: np.ndarray) -> dict[str, float]:
        sample = fit_approach3(self.n[idx], self.d[idx], self.loss[idx], keep=0,
                               warm_starts=self.starts, delta=self.delta)
        return sample.statistics(self.flops, self.lines)

    def batch(self, indices: np.ndarray) -> list[dict[str, float] | str]:
        """Every row of ``indices`` at once (refit_batch), as run_bootstrap collects them."""
        out: list[dict[str, float] | str] = []
        for sample in refit_batch(self.n, self.d, self.loss, self.starts, indices, self.delta):
            if isinstance(sample, str):
                out.append(sample)
                continue
            try:
                out.append(sample.statistics(self.flops, self.lines))
            except FitError as err:
                out.append(str(err))
        return out


def refit_starts(n: np.ndarray, d: np.ndarray, loss: np.ndarray, fit: Approach3Fit, *,
                 grid: StartGrid = DEFAULT_GRID, keep: int = BOOTSTRAP_STARTS) -> np.ndarray:
    """Starts of a bootstrap refit: the full-data optimum, then the ``keep`` grid starts with
    the lowest objective on the full data (see bootstrap_approach3)."""
    data = prepare(n, d, loss)
    return np.vstack([np.asarray(fit.theta), screen_starts(data, grid, keep, fit.delta)])


def bootstrap_approach3(
    n: object, d: object, loss: object, fit: Approach3Fit, *,
    flops: float, n_resamples: int, seed: int, n_jobs: int = 1,
    grid: StartGrid = DEFAULT_GRID, starts_per_refit: int = BOOTSTRAP_STARTS,
    lines: IsoFlopLines | None = None, strata: np.ndarray | None = None,
) -> Bootstrap:
    """Resample runs (within ``strata`` when given), refit, and collect every parameter and
    derived quantity.

    Each refit runs L-BFGS-B from the full-data optimum and from the ``starts_per_refit``
    grid starts with the lowest objective on the full data (in case a resample's optimum
    lies in another basin). The refits run all at once (``refit_batch``: the same optima,
    resample by resample, for ~1/10 of the CPU on a 30-run sweep). A full grid per resample would cost ~1000x more; on 10 resampled
    synthetic IsoFLOP sets the full-data optimum alone already reached the same minimum as
    20 screened starts. ``flops``: the compute at which tokens per parameter is reported;
    ``lines``: the sweep's IsoFLOP lines, for the allocation of every refit along them.
    """
    n_arr, d_arr, l_arr = (np.asarray(v, dtype=float) for v in (n, d, loss))
    starts = refit_starts(n_arr, d_arr, l_arr, fit, grid=grid, keep=starts_per_refit)
    refit = _Refit(n_arr, d_arr, l_arr, starts, fit.delta, float(flops), lines)
    return run_bootstrap(len(n_arr), refit, n_resamples=n_resamples, seed=seed, n_jobs=n_jobs,
                         strata=strata)

"""Many small unconstrained minimisations at once: L-BFGS vectorised over problems.

Why: a bootstrap refits one law to ~1000 resamples from ~4 starts each. SciPy's L-BFGS-B
solves them one at a time, and on a few dozen points its ~30 µs of interpreter overhead per
evaluation costs more than the objective (issue 21: Approach 3's 1000 refits of the 30-run
chinchilla sweep took 39 s of CPU). Here every problem advances one iteration per step, each
numpy call covering all of them, and a problem leaves the batch when it stops.

The method is textbook L-BFGS (Nocedal & Wright 2006, "Numerical Optimization", Algorithms
7.4 and 7.5): the two-loop recursion over the last ``MEMORY`` pairs (s, y), the initial
Hessian scaled by sᵀy / yᵀy of the newest pair, a backtracking line search on the Armijo
condition (c1 = 1e-4) from the unit step (the first step is scaled to unit length, as
SciPy's), and pairs with sᵀy <= eps·yᵀy skipped so the approximation stays positive
definite. The stopping rules are SciPy L-BFGS-B's, so the tolerances of
analysis.fits.approach3.LBFGS_OPTIONS mean the same here: the relative decrease
(f_k − f_k+1) / max(|f_k|, |f_k+1|, 1) <= ftol, or max |g| <= gtol, or ``max_iter``
iterations; a problem whose line search finds no decrease in ``MAX_HALVINGS`` halvings stops
where it is (SciPy's ABNORMAL_TERMINATION_IN_LNSRCH), and its caller judges the gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

MEMORY = 10
"""(s, y) pairs kept: SciPy L-BFGS-B's default (its ``maxcor``)."""
ARMIJO = 1e-4
MAX_HALVINGS = 60
"""Step halvings before a line search gives up (a step of 2^-60 ~ 1e-18 of the first)."""

FunGrad = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""fun(x, rows) -> (f, g): problems ``rows`` (k,) evaluated at x (k, p): f (k,), g (k, p)."""


@dataclass(frozen=True)
class BatchResult:
    x: np.ndarray
    """End points (B, p)."""
    fun: np.ndarray
    """Objective at the end points (B,)."""
    jac: np.ndarray
    """Gradient at the end points (B, p)."""
    success: np.ndarray
    """Stopped by the ftol or gtol rule (B,), as SciPy's ``success``."""
    n_iter: np.ndarray


def minimize_batch(fun: FunGrad, x0: np.ndarray, *, ftol: float, gtol: float,
                   max_iter: int) -> BatchResult:
    """Minimise B independent problems from the rows of ``x0`` (B, p) (module docstring)."""
    x = np.array(x0, dtype=float)
    n_prob, p = x.shape
    everyone = np.arange(n_prob)
    f, g = fun(x, everyone)
    S = np.zeros((n_prob, MEMORY, p))
    Y = np.zeros((n_prob, MEMORY, p))
    rho = np.zeros((n_prob, MEMORY))
    success = np.zeros(n_prob, dtype=bool)
    n_iter = np.zeros(n_prob, dtype=int)
    first = np.ones(n_prob, dtype=bool)
    # Problems that start at a non-finite point or at a stationary one do not move.
    active = np.isfinite(f) & np.all(np.isfinite(g), axis=1)
    stationary = active & (np.max(np.abs(g), axis=1) <= gtol)
    success[stationary] = True
    active &= ~stationary
    for _ in range(max_iter):
        act = np.flatnonzero(active)
        if act.size == 0:
            break
        d = -_two_loop(g[act], S[act], Y[act], rho[act])
        slope = np.einsum("kp,kp->k", g[act], d)
        bad = ~(slope < 0)  # not a descent direction (rounding): restart from steepest descent
        if bad.any():
            d[bad] = -g[act][bad]
            slope[bad] = -np.einsum("kp,kp->k", g[act][bad], g[act][bad])
            S[act[bad]], Y[act[bad]], rho[act[bad]] = 0.0, 0.0, 0.0
        step = np.ones(act.size)
        new = first[act]
        step[new] = 1.0 / np.maximum(np.linalg.norm(d[new], axis=1), 1e-300)
        x_new, f_new, g_new, moved = _line_search(fun, act, x[act], f[act], d, slope, step)
        n_iter[act] += 1
        first[act] = False
        stuck = act[~moved]  # no decrease found: stop where it is
        active[stuck] = False
        went = act[moved]
        x_m, f_m, g_m = x_new[moved], f_new[moved], g_new[moved]
        s, y = x_m - x[went], g_m - g[went]
        sy, yy = np.einsum("kp,kp->k", s, y), np.einsum("kp,kp->k", y, y)
        keep = sy > np.finfo(float).eps * yy
        upd = went[keep]
        S[upd, :-1], Y[upd, :-1], rho[upd, :-1] = S[upd, 1:], Y[upd, 1:], rho[upd, 1:]
        S[upd, -1], Y[upd, -1], rho[upd, -1] = s[keep], y[keep], 1.0 / sy[keep]
        f_old = f[went]
        x[went], f[went], g[went] = x_m, f_m, g_m
        rel = (f_old - f_m) / np.maximum(np.maximum(np.abs(f_old), np.abs(f_m)), 1.0)
        done = (rel <= ftol) | (np.max(np.abs(g_m), axis=1) <= gtol)
        success[went[done]] = True
        active[went[done]] = False
    return BatchResult(x=x, fun=f, jac=g, success=success, n_iter=n_iter)


def _two_loop(g: np.ndarray, S: np.ndarray, Y: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """H·g by the two-loop recursion; empty slots (rho 0) contribute nothing."""
    q = g.copy()
    alpha = np.zeros(rho.shape)
    for j in range(MEMORY - 1, -1, -1):  # newest first
        alpha[:, j] = rho[:, j] * np.einsum("kp,kp->k", S[:, j], q)
        q -= alpha[:, j, None] * Y[:, j]
    sy = np.einsum("kp,kp->k", S[:, -1], Y[:, -1])
    yy = np.einsum("kp,kp->k", Y[:, -1], Y[:, -1])
    gamma = np.where(rho[:, -1] > 0, sy / np.where(yy > 0, yy, 1.0), 1.0)
    r = gamma[:, None] * q
    for j in range(MEMORY):  # oldest first
        beta = rho[:, j] * np.einsum("kp,kp->k", Y[:, j], r)
        r += S[:, j] * (alpha[:, j] - beta)[:, None]
    return r


def _line_search(fun: FunGrad, rows: np.ndarray, x: np.ndarray, f: np.ndarray,
                 d: np.ndarray, slope: np.ndarray, step: np.ndarray):
    """Backtracking on the Armijo condition; ``moved`` False where no step decreased f."""
    x_new, f_new, g_new = x.copy(), f.copy(), np.zeros_like(x)
    moved = np.zeros(rows.size, dtype=bool)
    trying = np.arange(rows.size)
    t = step.copy()
    for _ in range(MAX_HALVINGS):
        xt = x[trying] + t[trying, None] * d[trying]
        with np.errstate(over="ignore", invalid="ignore"):
            ft, gt = fun(xt, rows[trying])
        ok = (np.isfinite(ft) & np.all(np.isfinite(gt), axis=1)
              & (ft <= f[trying] + ARMIJO * t[trying] * slope[trying]))
        took = trying[ok]
        x_new[took], f_new[took], g_new[took] = xt[ok], ft[ok], gt[ok]
        moved[took] = True
        trying = trying[~ok]
        if trying.size == 0:
            break
        t[trying] *= 0.5
    return x_new, f_new, g_new, moved

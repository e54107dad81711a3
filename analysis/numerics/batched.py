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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

MEMORY = 10
"""(s, y) pairs kept: SciPy L-BFGS-B's default (its ``maxcor``)."""
ARMIJO = 1e-4
MAX_HALVINGS = 60
"""Step halvings before a line search gives up (a step of 2^-60 ~ 1e-18 of the first)."""
WIDTHS = (1, 2, 4, 16)
"""Trial steps a line search evaluates in its first, second, ... call (the last repeats): the
unit step, then t/2 and t/4 together, then the next 4, then 16 at a time. On the quickstart's
interaction refit 78% of line searches take the unit step, 12% t/2, 5% t/4, 2% t/8; against
1, 4, 16 this evaluates 19% fewer trial points (5.8M against 7.1M) in 28% more calls, and
takes the same steps (issue 21)."""

Box = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Bounds as the solver keeps them: lower (p, 1), upper (p, 1), and the rows that have one."""
FunGrad = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""fun(x, rows) -> (f, g): problems ``rows`` (k,) evaluated at x (p, k), one problem per
*column*: f (k,), g (p, k)."""


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
                   max_iter: int, lower: np.ndarray | None = None,
                   upper: np.ndarray | None = None) -> BatchResult:
    """Minimise B independent problems from the rows of ``x0`` (B, p) (module docstring).

    Inside, and for ``fun``, the problems are the columns: x is (p, k), so every numpy call
    runs along rows of thousands of problems. With the problems as rows, (k, p) arrays of
    p = 5-6 values per row, each reduction, broadcast or strided slice ran an inner loop of
    5-12 elements per problem: the interaction law's 400 quickstart refits spent 1.7 µs per
    problem and iteration outside its objective, and took 8.2-8.5 s of CPU against 5.8-5.9 s
    now (issue 21; BENCHMARKS.md).

    ``lower``, ``upper`` (p,): bounds on the variables (±inf where none). With bounds the
    method is projected L-BFGS: a variable on a bound whose gradient points out of the box is
    held there (its direction component zeroed), steps are projected onto the box, and the
    gradient rule reads the projected gradient clip(x − g, lower, upper) − x, as SciPy's
    L-BFGS-B's does. Without bounds nothing of this runs (the unbounded path is unchanged).
    """
    x = np.array(np.asarray(x0, dtype=float).T)  # (p, B), a copy in this layout
    p, n_prob = x.shape
    box = None
    if lower is not None or upper is not None:
        lo = np.full(p, -np.inf) if lower is None else np.asarray(lower, dtype=float)
        hi = np.full(p, np.inf) if upper is None else np.asarray(upper, dtype=float)
        box = (lo[:, None], hi[:, None], np.flatnonzero(np.isfinite(lo) | np.isfinite(hi)))
        x = np.clip(x, box[0], box[1])
    everyone = np.arange(n_prob)
    f, g = _evaluate(fun, x, everyone)
    success = np.zeros(n_prob, dtype=bool)
    n_iter = np.zeros(n_prob, dtype=int)
    # Problems that start at a non-finite point or at a stationary one do not move.
    active = np.isfinite(f) & np.all(np.isfinite(g), axis=0)
    stationary = active & (np.max(np.abs(_projected(x, g, box)), axis=0) <= gtol)
    success[stationary] = True
    active &= ~stationary
    # The state of the problems still running, compacted: column i is problem live[i].
    # Columns leave when their problem stops (written back to x, f, g), so an iteration
    # touches contiguous arrays and never gathers or scatters the (MEMORY, p, problems)
    # history.
    live = np.flatnonzero(active)
    xs, fs, gs = columns(x, live), f[live], columns(g, live)
    S = np.zeros((MEMORY, p, live.size))
    Y = np.zeros((MEMORY, p, live.size))
    rho = np.zeros((MEMORY, live.size))
    first = np.ones(live.size, dtype=bool)
    for _ in range(max_iter):
        if live.size == 0:
            break
        g_act = gs
        held = None
        if box is not None:  # variables on a bound, pushed outwards, stay there
            held = _held(xs, gs, box)
            if held is not None:
                g_act = np.where(held, 0.0, gs)
        d = -_two_loop(g_act, S, Y, rho)
        if held is not None:
            d[held] = 0.0
        slope = _dot(g_act, d)
        bad = ~(slope < 0)  # not a descent direction (rounding): restart from steepest descent
        if bad.any():
            d[:, bad] = -g_act[:, bad]
            slope[bad] = -_dot(g_act[:, bad], g_act[:, bad])
            S[:, :, bad], Y[:, :, bad], rho[:, bad] = 0.0, 0.0, 0.0
        step = np.ones(live.size)
        if first.any():
            d_first = columns(d, first)
            step[first] = 1.0 / np.maximum(np.sqrt(_dot(d_first, d_first)), 1e-300)
        x_new, f_new, g_new, moved = _line_search(fun, live, xs, fs, d, slope, step, gs, box)
        n_iter[live] += 1
        first[:] = False
        s, y = x_new - xs, g_new - gs  # zero where not moved
        sy, yy = _dot(s, y), _dot(y, y)
        keep = moved & (sy > np.finfo(float).eps * yy)
        if keep.all():  # the usual case: every history shifts by one
            S[:-1], Y[:-1], rho[:-1] = S[1:], Y[1:], rho[1:]
            S[-1], Y[-1], rho[-1] = s, y, 1.0 / sy
        elif keep.any():  # np.where, not masked assignment: a masked column write is slow
            S[:-1], Y[:-1] = np.where(keep, S[1:], S[:-1]), np.where(keep, Y[1:], Y[:-1])
            rho[:-1] = np.where(keep, rho[1:], rho[:-1])
            S[-1], Y[-1] = np.where(keep, s, S[-1]), np.where(keep, y, Y[-1])
            with np.errstate(divide="ignore"):
                rho[-1] = np.where(keep, 1.0 / sy, rho[-1])
        rel = (fs - f_new) / np.maximum(np.maximum(np.abs(fs), np.abs(f_new)), 1.0)
        done = moved & ((rel <= ftol) | (np.max(np.abs(_projected(x_new, g_new, box)), axis=0)
                                         <= gtol))
        xs, fs, gs = x_new, f_new, g_new
        success[live[done]] = True
        stop = done | ~moved  # ~moved: no decrease found, it stops where it is
        if stop.any():
            gone = live[stop]
            x[:, gone], f[gone], g[:, gone] = xs[:, stop], fs[stop], gs[:, stop]
            go = ~stop
            live, xs, fs, gs = live[go], columns(xs, go), fs[go], columns(gs, go)
            S, Y, rho, first = columns(S, go), columns(Y, go), columns(rho, go), first[go]
    x[:, live], f[live], g[:, live] = xs, fs, gs
    return BatchResult(x=x.T.copy(), fun=f, jac=g.T.copy(), success=success, n_iter=n_iter)


def columns(a: np.ndarray, which: np.ndarray) -> np.ndarray:
    """a[..., which] (a boolean mask or indices), C-contiguous. Why not a[..., which]: numpy
    returns that in a strided layout (the selected axis outermost in memory), and every later
    operation on it walks memory in steps of a row; np.compress and np.take copy in order."""
    if which.dtype == bool:
        return np.compress(which, a, axis=-1)
    return np.take(a, which, axis=-1)


def _evaluate(fun: FunGrad, x: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fun(x, rows), the same to the last bit for a problem whatever other problems share the
    call. Why: numpy sums the rows of an (m, k) array column by column in order, but a
    lone column, (m, 1), is one contiguous block that it sums pairwise, in another order;
    the last bits then differ, and on a flat valley the end point with them (a bootstrap
    split over 1 or 2 processes gave other intervals). So a lone column is evaluated beside
    a copy of itself."""
    if x.shape[1] != 1:
        return fun(x, rows)
    f, g = fun(np.tile(x, 2), np.tile(rows, 2))
    return f[:1], g[:, :1]


def _dot(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Column by column dot products of two (p, k) arrays: (k,); a lone column beside a copy
    of itself, as in ``_evaluate``."""
    if u.shape[-1] == 1:
        return _dot(np.tile(u, 2), np.tile(v, 2))[:1]
    return np.einsum("pk,pk->k", u, v)


def _two_loop(g: np.ndarray, S: np.ndarray, Y: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """H·g by the two-loop recursion, g (p, k), S and Y (MEMORY, p, k), rho (MEMORY, k);
    empty slots (rho 0) contribute nothing."""
    q = g.copy()
    alpha = np.zeros(rho.shape)
    for j in range(MEMORY - 1, -1, -1):  # newest first
        alpha[j] = rho[j] * _dot(S[j], q)
        q -= alpha[j] * Y[j]
    sy, yy = _dot(S[-1], Y[-1]), _dot(Y[-1], Y[-1])
    gamma = np.where(rho[-1] > 0, sy / np.where(yy > 0, yy, 1.0), 1.0)
    r = gamma * q
    for j in range(MEMORY):  # oldest first
        beta = rho[j] * _dot(Y[j], r)
        r += S[j] * (alpha[j] - beta)
    return r


def _held(x: np.ndarray, g: np.ndarray, box: Box) -> np.ndarray | None:
    """Where a variable sits on a bound with its gradient pointing out of the box (p, k), or
    None where none does. Only the rows with a bound are compared: an unbounded variable is
    never held (the interaction law bounds γ alone, 1 row of 6)."""
    lo, hi, bounded = box
    xb, gb = x[bounded], g[bounded]
    out = ((xb <= lo[bounded]) & (gb > 0)) | ((xb >= hi[bounded]) & (gb < 0))
    if not out.any():
        return None
    held = np.zeros(x.shape, dtype=bool)
    held[bounded] = out
    return held


def _projected(x: np.ndarray, g: np.ndarray, box: Box | None):
    """The gradient the stopping rule reads: g itself, or with bounds clip(x − g) − x."""
    return g if box is None else np.clip(x - g, box[0], box[1]) - x


def _line_search(fun: FunGrad, rows: np.ndarray, x: np.ndarray, f: np.ndarray,
                 d: np.ndarray, slope: np.ndarray, step: np.ndarray, g: np.ndarray,
                 box: Box | None):
    """Backtracking on the Armijo condition; ``moved`` False where no step decreased f.
    With bounds each trial point is projected onto the box and the Armijo condition reads
    the slope of the projected step, g·(x_t − x). x, d, g: (p, k).

    Each problem takes the first of t, t/2, t/4, ... that satisfies the condition, as one
    halving at a time would; the problems still searching after a round try the next few
    halvings in one call (``WIDTHS``): the few problems that need many halvings cost a few
    calls, not one call per halving (issue 21: the calls' overhead, not the arithmetic, was
    most of a batched refit). Halving is exact in
    floating point, so the steps, and the points taken, are those of one at a time.
    """
    # The first round tries every problem's unit step: no gather, and where every problem takes
    # it (most iterations, late in a refit), no copy of the state either.
    xt = x + step * d
    if box is None:
        decrease = step * slope
    else:
        xt = _clip(xt, box)
        decrease = _dot(g, xt - x)
    with np.errstate(over="ignore", invalid="ignore"):
        ft, gt = _evaluate(fun, xt, rows)
    moved = np.isfinite(ft) & np.all(np.isfinite(gt), axis=0) & (ft <= f + ARMIJO * decrease)
    if moved.all():
        return xt, ft, gt, moved
    x_new, f_new, g_new = np.where(moved, xt, x), np.where(moved, ft, f), np.where(moved, gt, g)
    trying = np.flatnonzero(~moved)
    t = step * 0.5
    tried, round_ = 1, 1
    while tried < MAX_HALVINGS and trying.size:
        k = min(WIDTHS[min(round_, len(WIDTHS) - 1)], MAX_HALVINGS - tried)
        m = trying.size
        ts = (t[trying] * 0.5 ** np.arange(k)[:, None]).ravel()  # (k·m,): halving-major
        x0 = _tile(columns(x, trying), k)
        xt = x0 + ts * _tile(columns(d, trying), k)
        if box is None:
            decrease = ts * _tile(slope[trying], k)
        else:
            xt = _clip(xt, box)
            decrease = _dot(_tile(columns(g, trying), k), xt - x0)
        with np.errstate(over="ignore", invalid="ignore"):
            ft, gt = _evaluate(fun, xt, _tile(rows[trying], k))
        ok = (np.isfinite(ft) & np.all(np.isfinite(gt), axis=0)
              & (ft <= _tile(f[trying], k) + ARMIJO * decrease)).reshape(k, m)
        hit = ok.any(axis=0)
        first = np.argmax(ok, axis=0)[hit] * m + np.flatnonzero(hit)  # flat index
        took = trying[hit]
        x_new[:, took], f_new[took], g_new[:, took] = columns(xt, first), ft[first], columns(gt, first)
        moved[took] = True
        trying = trying[~hit]
        t[trying] *= 0.5 ** k
        tried += k
        round_ += 1
    return x_new, f_new, g_new, moved


def _clip(x: np.ndarray, box: Box) -> np.ndarray:
    """x projected onto the box, in place: only the rows with a bound are clipped (clipping
    by ±inf leaves a value as it is, to the bit)."""
    lo, hi, bounded = box
    x[bounded] = np.clip(x[bounded], lo[bounded], hi[bounded])
    return x


def _tile(a: np.ndarray, k: int) -> np.ndarray:
    """k copies of a side by side along its last axis (a itself for k = 1)."""
    return a if k == 1 else np.tile(a, k)


def resample_counts(indices: Sequence[np.ndarray], size: int, check: Callable[[np.ndarray], object]
                    ) -> tuple[list[str], np.ndarray, list[tuple[int, object]]]:
    """The resamples a batched refit can take, as weights on the full data.

    ``check(idx)`` validates one resample as its own refit would (raising FitError with that
    refit's message). Returns (one entry per resample: "" if it goes on, else the message;
    the counts of every resample that goes on, (m, size); (draw index, check's result) of
    each of those, in the same order)."""
    from analysis.errors import FitError

    messages: list[str] = []
    counts: list[np.ndarray] = []
    kept: list[tuple[int, object]] = []
    for k, idx in enumerate(indices):
        try:
            kept.append((k, check(idx)))
        except FitError as err:
            messages.append(str(err))
            continue
        messages.append("")
        counts.append(np.bincount(idx, minlength=size).astype(float))
    return messages, np.array(counts).reshape(len(counts), size), kept


ResJac = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""res(x, rows) -> (r, J): problems ``rows`` (k,) at x (k, p): residuals (k, m), Jacobian
(k, m, p)."""
LM_LAMBDA0 = 1e-3
"""Initial damping of Levenberg-Marquardt, relative to the diagonal of JᵀWJ."""
LM_LAMBDA_MAX = 1e16
"""Damping beyond which a problem whose steps all fail stops where it is."""


@dataclass(frozen=True)
class LeastSquaresBatch:
    x: np.ndarray
    """End points (B, p)."""
    cost: np.ndarray
    """½ Σ w r² at the end points (B,), as SciPy's least_squares ``cost``."""
    success: np.ndarray
    """Stopped by a tolerance rule (B,); False: out of iterations, or no step decreased."""
    n_iter: np.ndarray


def least_squares_batch(res: ResJac, x0: np.ndarray, weights: np.ndarray, *, ftol: float,
                        xtol: float, gtol: float, max_iter: int,
                        lower: np.ndarray | None = None) -> LeastSquaresBatch:
    """Minimise ½ Σ_i w_i r_i(x)² for B problems at once by Levenberg-Marquardt.

    Why: a bootstrap of Kaplan's joint law makes one SciPy ``least_squares`` call per resample
    (~4 ms each, mostly its own overhead on ~12 points: 400 resamples, 3.3 s of CPU; issue 21).
    Here every problem takes one damped Gauss-Newton step per iteration, all in a few numpy
    calls: (JᵀWJ + λ·diag(JᵀWJ)) δ = −JᵀWr (Marquardt 1963's scaling), λ divided by 3 after a
    step that lowers the cost and multiplied by 4 (the step retried) after one that does not.
    ``weights`` (B, m): point i of problem j counted w_ji times (a resample as counts).
    ``lower`` (p,): bounds below (steps are clipped to them). Stopping rules as SciPy's
    least_squares: a decrease of the cost below ftol·cost, a step below xtol·(xtol + |x|),
    or max |JᵀWr| below gtol.
    """
    x = np.array(x0, dtype=float)
    n_prob, p = x.shape
    w = np.asarray(weights, dtype=float)
    lo = None if lower is None else np.asarray(lower, dtype=float)
    if lo is not None:
        x = np.maximum(x, lo)
    everyone = np.arange(n_prob)
    r, jac = res(x, everyone)
    cost = 0.5 * (w * r * r).sum(1)
    lam = np.full(n_prob, LM_LAMBDA0)
    success = np.zeros(n_prob, dtype=bool)
    n_iter = np.zeros(n_prob, dtype=int)
    active = np.isfinite(cost) & np.all(np.isfinite(jac), axis=(1, 2))
    eye = np.eye(p)
    for _ in range(max_iter):
        act = np.flatnonzero(active)
        if act.size == 0:
            break
        wj = w[act, :, None] * jac[act]
        a = np.einsum("kmp,kmq->kpq", jac[act], wj)
        g = np.einsum("kmp,km->kp", wj, r[act])
        small = np.max(np.abs(g), axis=1) <= gtol
        success[act[small]] = True
        active[act[small]] = False
        act, a, g = act[~small], a[~small], g[~small]
        if act.size == 0:
            break
        diag = np.maximum(np.einsum("kpp->kp", a), np.finfo(float).tiny)
        step = -np.linalg.solve(a + lam[act, None, None] * diag[:, :, None] * eye,
                                g[:, :, None])[:, :, 0]
        x_new = x[act] + step
        if lo is not None:
            x_new = np.maximum(x_new, lo)
        with np.errstate(over="ignore", invalid="ignore"):
            r_new, jac_new = res(x_new, act)
            cost_new = 0.5 * (w[act] * r_new * r_new).sum(1)
        n_iter[act] += 1
        better = np.isfinite(cost_new) & (cost_new < cost[act]) & np.all(
            np.isfinite(jac_new), axis=(1, 2))
        went = act[better]
        dx = x_new[better] - x[went]
        decrease = cost[went] - cost_new[better]
        x[went], cost[went] = x_new[better], cost_new[better]
        r[went], jac[went] = r_new[better], jac_new[better]
        lam[went] = np.maximum(lam[went] / 3.0, 1e-12)
        done = ((decrease <= ftol * cost[went])
                | (np.linalg.norm(dx, axis=1) <= xtol * (xtol + np.linalg.norm(x[went], axis=1))))
        success[went[done]] = True
        active[went[done]] = False
        failed = act[~better]
        lam[failed] *= 4.0
        stuck = failed[lam[failed] > LM_LAMBDA_MAX]
        active[stuck] = False
    return LeastSquaresBatch(x=x, cost=cost, success=success, n_iter=n_iter)

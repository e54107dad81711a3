"""The one definition of the compute-optimal allocation, shared by every law and approach.

N_opt(C) = argmin over N of L(N, D(N; C)), where D(N; C) is the token count that spends C on
a model of N parameters *along the sweep's own IsoFLOP lines, in the sweep's FLOP convention*
(Hoffmann et al. 2022, Sec. 3: "given a FLOP budget, how should one trade off model size and
number of training tokens"). a and b are the slopes of ln N_opt and ln D_opt against ln C over
the sweep's budgets; tokens per parameter is D_opt / N_opt at the report's reference compute.

Why not β/(α+β): that closed form holds for the additive law with C = 6·N·D exactly. A sweep
may hold *exact* FLOPs (attention and logits included) constant on its IsoFLOP lines, where
C/(6·N·D) falls with N, and laws with an N x D interaction (Kaplan's joint law,
(A N^-α + B D^-β)^γ + E, a quadratic surface) have no closed form at all. Minimising each
fitted law numerically along the same lines makes every approach answer the same question
(issue 16: Approach 3's 6ND closed form and Approach 2's exact-FLOP profiles did not).

The lines (``IsoFlopLines``): each run's cost in the sweep's convention is its planned budget
label (what the sweep held constant on that line) or, for a run that is not an IsoFLOP cell,
its C column. ln(cost / (6·N·D)) is fitted as a quadratic in ln N over the runs (least
squares; exactly 0 for a 6·N·D sweep), so D(N; C) = C / (6·N·exp(g(ln N))). Outside the
sampled sizes g is held at its edge value, not extrapolated as a parabola.

The minimisation: ln N over [ln N_min − ln SEARCH_FACTOR, ln N_max + ln SEARCH_FACTOR] (a
decade beyond the sampled sizes each way), a vectorised grid first (so a law with two dips
cannot trap a local search), then bounded Brent around the best grid point. A minimum within
``BOUND_TOLERANCE`` of the search bound is flagged (``on_bound``) and left out of the a, b
regression: it is the edge of the search, not an optimum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from analysis.errors import FitError
from analysis.runs.table import RunsTable

LogLoss = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""ln L̂ as a function of (ln N, ln D), vectorised."""
SEARCH_FACTOR = 10.0
"""The search for N_opt reaches this factor below the smallest and above the largest size."""
GRID_POINTS = 241
BOUND_TOLERANCE = 1e-3
"""|ln N_opt − bound| below this: the minimum is on the search bound (flagged)."""
MIN_BUDGETS = 2
"""Budgets with an interior minimum needed for the a, b regression."""
FALLBACK_BUDGETS = 8
"""Log-spaced budgets over the runs' C range when the runs have no IsoFLOP budgets."""


@dataclass(frozen=True)
class IsoFlopLines:
    """D(N; C) along the sweep's IsoFLOP lines and the budgets to evaluate them at."""

    coef: tuple[float, ...]
    """g(x) = Σ coef[k] x^k with x = ln N: ln(C / (6·N·D)) on the lines."""
    x_min: float
    x_max: float
    """ln N range of the runs (g is held constant beyond it)."""
    budgets: tuple[float, ...]
    """The sweep's budgets (its IsoFLOP labels, in its convention), ascending."""
    rmse: float = 0.0
    """RMS residual of g in ln(C/(6·N·D)): how well the smooth form holds the lines."""

    def g(self, x: np.ndarray) -> np.ndarray:
        return np.polynomial.polynomial.polyval(np.clip(x, self.x_min, self.x_max), self.coef)

    def ln_d(self, x: np.ndarray, ln_c: float | np.ndarray) -> np.ndarray:
        """ln D of a model of ln N = x spending ln C along the lines."""
        return ln_c - np.log(6.0) - x - self.g(x)

    @property
    def bounds(self) -> tuple[float, float]:
        pad = np.log(SEARCH_FACTOR)
        return self.x_min - pad, self.x_max + pad


def fit_lines(n: object, d: object, cost: object, budgets: object | None = None) -> IsoFlopLines:
    """The lines through runs of N params and D tokens costing ``cost`` each (any convention).

    ``budgets``: where to evaluate the optimum (default: FALLBACK_BUDGETS log-spaced over the
    costs). g is a quadratic in ln N from 4 distinct sizes, a line from 2, 0 otherwise.
    """
    n_a, d_a, c_a = (np.asarray(v, dtype=float).ravel() for v in (n, d, cost))
    ok = np.isfinite(n_a) & np.isfinite(d_a) & np.isfinite(c_a) & (n_a > 0) & (d_a > 0) & (c_a > 0)
    if not ok.any():
        raise FitError("IsoFLOP lines: no run with finite, positive N, D and C")
    x, y = np.log(n_a[ok]), np.log(c_a[ok] / (6.0 * n_a[ok] * d_a[ok]))
    sizes = np.unique(np.round(x, 9)).size
    degree = 2 if sizes >= 4 else (1 if sizes >= 2 else 0)
    coef = np.polynomial.polynomial.polyfit(x, y, degree) if sizes >= 2 else np.array([y.mean()])
    resid = y - np.polynomial.polynomial.polyval(x, coef)
    if budgets is None:
        budgets = np.geomspace(c_a[ok].min(), c_a[ok].max(), FALLBACK_BUDGETS)
    b = np.unique(np.asarray(budgets, dtype=float))
    b = b[np.isfinite(b) & (b > 0)]
    return IsoFlopLines(tuple(float(v) for v in coef), float(x.min()), float(x.max()),
                        tuple(float(v) for v in b), float(np.sqrt(np.mean(resid**2))))


def line_costs(runs: RunsTable) -> np.ndarray:
    """Each run's cost on its IsoFLOP line: its budget label, else its C (module docstring)."""
    budget, c = runs.column("budget"), runs.column("C")
    return np.where(np.isfinite(budget) & (budget > 0), budget, c)


def lines_from_runs(runs: RunsTable) -> IsoFlopLines:
    """The sweep's lines and budgets from a runs table (its budget labels where it has any)."""
    budget = runs.column("budget")
    labels = np.unique(budget[np.isfinite(budget) & (budget > 0)])
    return fit_lines(runs.column("N"), runs.column("D"), line_costs(runs),
                     labels if labels.size >= MIN_BUDGETS else None)


@dataclass(frozen=True)
class Allocation:
    """N_opt, D_opt at each budget and at the reference compute; a, b from the budgets."""

    budgets: tuple[float, ...]
    n_opt: tuple[float, ...]
    d_opt: tuple[float, ...]
    on_bound: tuple[bool, ...]
    a: float
    b: float
    reference: float
    n_ref: float
    d_ref: float
    loss_ref: float
    ref_on_bound: bool

    @property
    def tokens_per_param(self) -> float:
        return self.d_ref / self.n_ref

    def statistics(self) -> dict[str, float]:
        """The allocation quantities every law reports (and its bootstrap collects)."""
        return {"a": self.a, "b": self.b, "n_opt": self.n_ref, "d_opt": self.d_ref,
                "tokens_per_param": self.tokens_per_param, "loss_opt": self.loss_ref,
                "budgets_on_bound": float(sum(self.on_bound))}


def _minimise(log_loss: LogLoss, lines: IsoFlopLines, ln_c: float) -> tuple[float, float, bool]:
    """(ln N_opt, ln L at it, on the bound?) for one budget."""
    lo, hi = lines.bounds
    grid = np.linspace(lo, hi, GRID_POINTS)
    values = log_loss(grid, lines.ln_d(grid, ln_c))
    if not np.isfinite(values).any():
        raise FitError(f"optimum: the law is not finite anywhere on the line C = {np.exp(ln_c):.3g}")
    values = np.where(np.isfinite(values), values, np.inf)
    k = int(np.argmin(values))
    step = grid[1] - grid[0]
    left, right = max(lo, grid[k] - step), min(hi, grid[k] + step)

    def along(x: float) -> float:
        v = float(log_loss(np.array([x]), lines.ln_d(np.array([x]), ln_c))[0])
        return v if np.isfinite(v) else np.inf

    res = minimize_scalar(along, bounds=(left, right), method="bounded",
                          options={"xatol": 1e-7})
    x = float(res.x) if res.fun <= values[k] else float(grid[k])
    on_bound = min(x - lo, hi - x) < BOUND_TOLERANCE
    return x, min(float(res.fun), float(values[k])), on_bound


def optimum_along(log_loss: LogLoss, lines: IsoFlopLines,
                  flops: float) -> tuple[float, float, bool]:
    """(N_opt, L at it, on the search bound?) of ``log_loss`` along the line of cost
    ``flops``: the allocation at one compute, as ``optimal_allocation`` finds it."""
    x, ln_loss, edge = _minimise(log_loss, lines, float(np.log(flops)))
    return float(np.exp(x)), float(np.exp(ln_loss)), edge


def n_opt_along(log_loss: LogLoss, lines: IsoFlopLines, flops: float) -> tuple[float, bool]:
    """(N_opt, on the search bound?): ``optimum_along`` without the loss."""
    n, _, edge = optimum_along(log_loss, lines, flops)
    return n, edge


def optimal_allocation(log_loss: LogLoss, lines: IsoFlopLines, reference: float) -> Allocation:
    """Minimise ``log_loss`` along the lines at every budget and at ``reference``.

    FitError when fewer than MIN_BUDGETS budgets have a minimum inside the search bounds.
    """
    xs, on = [], []
    ln_b = np.log(np.asarray(lines.budgets, dtype=float))
    for ln_c in ln_b:
        x, _, edge = _minimise(log_loss, lines, float(ln_c))
        xs.append(x)
        on.append(edge)
    x_arr, inside = np.array(xs), ~np.array(on, dtype=bool)
    if inside.sum() < MIN_BUDGETS:
        raise FitError(f"optimum: {int(inside.sum())} of {len(xs)} budgets have a minimum inside "
                       f"the search bounds (a decade beyond the sampled sizes); need "
                       f"{MIN_BUDGETS}")
    ln_d = lines.ln_d(x_arr, ln_b)
    a, _ = np.polyfit(ln_b[inside], x_arr[inside], 1)
    b, _ = np.polyfit(ln_b[inside], ln_d[inside], 1)
    ln_ref = float(np.log(reference))
    x_ref, ll_ref, ref_edge = _minimise(log_loss, lines, ln_ref)
    return Allocation(
        budgets=lines.budgets, n_opt=tuple(float(v) for v in np.exp(x_arr)),
        d_opt=tuple(float(v) for v in np.exp(ln_d)), on_bound=tuple(bool(v) for v in on),
        a=float(a), b=float(b), reference=float(reference), n_ref=float(np.exp(x_ref)),
        d_ref=float(np.exp(lines.ln_d(np.array([x_ref]), ln_ref)[0])),
        loss_ref=float(np.exp(ll_ref)), ref_on_bound=ref_edge)

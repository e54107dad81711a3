"""Chinchilla Approach 2: IsoFLOP profiles (Hoffmann et al. 2022, Sec. 3.2).

For each compute budget, a parabola of the final loss in log N locates the loss-minimising
model size N_opt(C); power laws through the minima give N_opt ∝ C^a and D_opt ∝ C^b.

A budget whose parabola has no interior minimum (it opens downwards, or its vertex lies
outside the model sizes sampled at that budget) is *flagged* and left out of the power-law
fit, with the reason: extrapolating a parabola beyond its points is how IsoFLOP fits go
silently wrong (Porian et al. 2024 drop such budgets too). D_opt at a budget comes from the
straight line of log D on log N through that budget's runs (exactly C/(6·N_opt) for C = 6ND).

The x of each point in N_opt ∝ C^a is the budget itself (its planned label: the compute the
sweep held constant along that IsoFLOP line, in the sweep's own FLOP convention), the same C
at which every law's optimum is read (analysis.fits.optimum). Regressing against each set's
mean 6·N·D instead asked a different question whenever the sweep holds exact FLOPs constant
(issue 16: a = 0.524 against the mean 6ND, 0.543 against the budgets, on the same minima). A
run set without a positive label falls back to the geometric mean of its runs' C.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.errors import FitError
from analysis.fits.powerlaw import PowerLaw, PowerLawAllocation, as_positive, fit_power_law
from analysis.numerics.bootstrap import Bootstrap, run_bootstrap

WHAT = "Approach 2 (IsoFLOP parabolas)"
MIN_SIZES = 3
"""Distinct model sizes a budget needs: three is the least that defines a parabola."""
MIN_BUDGETS = 3
"""Budgets with an interior minimum needed for the power law (two would be an exact line)."""


@dataclass(frozen=True)
class BudgetMinimum:
    """The parabola minimum of one IsoFLOP budget, or why it has none (``ok`` False)."""

    budget: float
    """The budget label (planned C)."""
    flops: float
    """The x of this point in N_opt ∝ C^a: the budget label (module docstring)."""
    n_runs: int
    n_sizes: int
    ok: bool
    reason: str = ""
    n_opt: float = float("nan")
    d_opt: float = float("nan")
    loss_opt: float = float("nan")
    curvature: float = float("nan")
    """Second-order coefficient of loss in ln N; > 0 when the profile has a minimum."""


@dataclass(frozen=True)
class Parabola:
    """loss = p0 + p1·x + p2·x² with x = ln N − centre: one budget's IsoFLOP profile."""

    centre: float
    p0: float
    p1: float
    p2: float

    def __call__(self, n: float | np.ndarray) -> float | np.ndarray:
        x = np.log(np.asarray(n, dtype=float)) - self.centre
        return self.p0 + self.p1 * x + self.p2 * x * x


def fit_parabola(n: np.ndarray, loss: np.ndarray) -> Parabola:
    """Least-squares parabola of loss in ln N, centred on the mean ln N (for conditioning)."""
    x = np.log(np.asarray(n, dtype=float))
    centre = float(x.mean())
    p0, p1, p2 = np.polynomial.polynomial.polyfit(x - centre, np.asarray(loss, dtype=float), 2)
    return Parabola(centre, float(p0), float(p1), float(p2))


def budget_minimum(budget: float, n: np.ndarray, d: np.ndarray, c: np.ndarray,
                   loss: np.ndarray) -> BudgetMinimum:
    """Fit loss = p0 + p1·x + p2·x² with x = ln N (centred) at one budget; locate the vertex."""
    x = np.log(n)
    n_sizes = int(np.unique(np.round(x, 9)).size)
    label = float(budget)
    flops = label if np.isfinite(label) and label > 0 else float(np.exp(np.mean(np.log(c))))
    base = dict(budget=label, flops=flops, n_runs=int(n.size), n_sizes=n_sizes)
    if n_sizes < MIN_SIZES:
        return BudgetMinimum(**base, ok=False,
                             reason=f"{n_sizes} model size(s); a parabola needs {MIN_SIZES}")
    parabola = fit_parabola(n, loss)
    centre, p0, p1, p2 = parabola.centre, parabola.p0, parabola.p1, parabola.p2
    if not p2 > 0:
        return BudgetMinimum(**base, ok=False, curvature=float(p2),
                             reason="the loss profile is not convex (no minimum)")
    x_opt = centre - p1 / (2.0 * p2)
    if not x.min() <= x_opt <= x.max():
        return BudgetMinimum(
            **base, ok=False, curvature=float(p2),
            reason=f"the minimum (N = {np.exp(x_opt):.3g}) lies outside the sampled sizes "
                   f"[{n.min():.3g}, {n.max():.3g}]",
        )
    slope, intercept = np.polynomial.polynomial.polyfit(x - centre, np.log(d), 1)[::-1]
    return BudgetMinimum(
        **base, ok=True, curvature=float(p2), n_opt=float(np.exp(x_opt)),
        d_opt=float(np.exp(intercept + slope * (x_opt - centre))),
        loss_opt=float(p0 + p1 * (x_opt - centre) + p2 * (x_opt - centre) ** 2),
    )


@dataclass(frozen=True)
class Approach2Fit(PowerLawAllocation):
    """N_opt = k_N·C^a and D_opt = k_D·C^b through the budgets' parabola minima."""

    n_law: PowerLaw
    d_law: PowerLaw
    budgets: tuple[BudgetMinimum, ...] = field(repr=False)
    """Every budget, fitted (ok) or flagged (with its reason)."""


    @property
    def flagged(self) -> tuple[BudgetMinimum, ...]:
        return tuple(m for m in self.budgets if not m.ok)



def fit_approach2(n: object, d: object, c: object, loss: object,
                  budget: object) -> Approach2Fit:
    """Fit IsoFLOP profiles; runs are grouped by ``budget`` (NaN: not an IsoFLOP cell, unused).

    FitError when fewer than MIN_BUDGETS budgets have an interior minimum; the message lists
    every flagged budget with its reason.
    """
    n_arr = as_positive("N", n, what=WHAT)
    d_arr = as_positive("D", d, what=WHAT)
    c_arr = as_positive("C", c, what=WHAT)
    l_arr = as_positive("loss", loss, what=WHAT)
    b_arr = np.asarray(budget, dtype=float).ravel()
    if not n_arr.size == d_arr.size == c_arr.size == l_arr.size == b_arr.size:
        raise FitError(f"{WHAT}: N, D, C, loss and budget differ in length")
    labels = np.unique(b_arr[np.isfinite(b_arr)])
    if labels.size == 0:
        raise FitError(f"{WHAT}: no run belongs to an IsoFLOP budget")
    if labels.size == 1:
        raise FitError(f"{WHAT}: a single compute budget ({labels[0]:.3g}); "
                       f"need at least {MIN_BUDGETS}")
    minima = []
    for label in labels:
        sel = b_arr == label
        minima.append(budget_minimum(label, n_arr[sel], d_arr[sel], c_arr[sel], l_arr[sel]))
    good = [m for m in minima if m.ok]
    if len(good) < MIN_BUDGETS:
        flagged = "; ".join(f"C={m.budget:.3g}: {m.reason}" for m in minima if not m.ok)
        raise FitError(
            f"{WHAT}: {len(good)} of {len(minima)} budgets have an interior minimum; need "
            f"at least {MIN_BUDGETS}" + (f" (flagged: {flagged})" if flagged else "")
        )
    flops = np.array([m.flops for m in good])
    return Approach2Fit(
        n_law=fit_power_law(flops, [m.n_opt for m in good], what=f"{WHAT}: N_opt(C)"),
        d_law=fit_power_law(flops, [m.d_opt for m in good], what=f"{WHAT}: D_opt(C)"),
        budgets=tuple(minima),
    )


@dataclass(frozen=True)
class _Refit:
    arrays: tuple[np.ndarray, ...]
    flops: float

    def __call__(self, idx: np.ndarray) -> dict[str, float]:
        return fit_approach2(*(arr[idx] for arr in self.arrays)).statistics(self.flops)


def bootstrap_approach2(n: object, d: object, c: object, loss: object, budget: object, *,
                        flops: float, n_resamples: int, seed: int,
                        strata: np.ndarray | None = None) -> Bootstrap:
    """Resample runs (all budgets pooled, or within each budget with ``strata``), refit; a
    resample that leaves fewer than MIN_BUDGETS budgets with a minimum counts as failed."""
    arrays = tuple(np.asarray(v, dtype=float) for v in (n, d, c, loss, budget))
    return run_bootstrap(len(arrays[0]), _Refit(arrays, float(flops)),
                         n_resamples=n_resamples, seed=seed, strata=strata)

"""Held-out runs: runs the sweep planned *not* to fit, predicted by the fitted laws.

Why: the internal extrapolation check (``analysis.checks.extrapolation``) hides a budget the sweep
was designed around; a held-out run (tag ``role = holdout``, usually at a larger budget than
any fitted one) is a prediction made before looking. One target for every such prediction in
the analysis and the report: a relative error within 2% (``TARGET``).

Two predictors, so a verdict never rests on one model:

* **Approach 3**: L̂ = E + A/N^α + B/D^β at the run's own N and D. Its 95% interval is the
  percentile interval of the same prediction under every bootstrap refit (the Approach 3
  bootstrap keeps E, A, B, α, β of each resample). It is the law's uncertainty only: one
  run scatters around the law by the run-to-run noise σ on top of it.
* **Compute frontier**: a power law through the Approach 2 per-budget minimum losses,
  L*(C) = L0 · (C/C0)^(−g) (least squares in log–log; C0 the geometric mean of the budgets),
  read at the run's C. It needs no parametric form, but it is the loss of the compute-
  optimal model: valid only when the held-out run sits near the optimum, which
  ``n_over_n_opt`` (its N over Approach 2's N_opt at its C) shows. A run off the optimum
  lies above the frontier, so a positive observed-minus-predicted gap is expected there.

Seeds of one held-out cell (``isoflop.holdout.seeds``) are averaged before the comparison,
as the fitted cells are: the observed loss is then known to σ/sqrt(seeds) rather than σ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.checks.noise import collapse_replicates
from analysis.errors import FitError
from analysis.fits.approach2 import Approach2Fit
from analysis.fits.approach3 import Approach3Fit
from analysis.fits.optimum import line_costs
from analysis.fits.powerlaw import fit_power_law
from analysis.fits.results import Estimate, Skipped
from analysis.numerics.bootstrap import LEVEL, Interval
from analysis.runs.table import RunsTable

TARGET = 0.02
"""|predicted − observed| / observed at most this counts as a good prediction of a held-out run,
everywhere in the analysis and the report (issue 51: 1% in one section and 2% in another). Why
2%: on the committed studies one run's loss scatters by σ ≈ 1.1-1.2% between seeds
(reports/chinchilla*/fit.json, noise.rel_sigma), so a held-out cell of 4 seeds is known to
~0.6%; 2% leaves the law about three times that for its own error at a 3x larger budget."""


@dataclass(frozen=True)
class FrontierLaw:
    """L*(C) = L0 · (C/C0)^(−g) through the Approach 2 per-budget minimum losses."""

    L0: float
    C0: float
    g: float
    n_points: int
    rmse_log: float
    """RMS residual in ln L* of the budgets' minima about the line."""

    def __call__(self, flops: float | np.ndarray) -> float | np.ndarray:
        return self.L0 * np.power(np.asarray(flops, dtype=float) / self.C0, -self.g)


def fit_frontier(fit: Approach2Fit) -> FrontierLaw:
    """The frontier law through the budgets with an interior minimum (FitError: < 3)."""
    good = [m for m in fit.budgets if m.ok]
    flops = np.array([m.flops for m in good])
    line = fit_power_law(flops, [m.loss_opt for m in good],
                         what="compute frontier L*(C) of the Approach 2 minima")
    c0 = float(np.exp(np.mean(np.log(flops))))
    return FrontierLaw(L0=float(line(c0)), C0=c0, g=-line.exponent, n_points=line.n_points,
                       rmse_log=line.rmse_log)


@dataclass(frozen=True)
class HoldoutRow:
    """One held-out run, observed and predicted."""

    run: str
    run_id: str
    N: float
    D: float
    C: float
    loss: float
    """Observed final loss: the mean over the cell's seeds."""
    n_seeds: int = 1
    loss_std: float | None = None
    """Standard deviation of the loss over the seeds (None for one seed)."""
    approach3: float | None = None
    """Approach 3's predicted loss (None when Approach 3 was not fitted)."""
    approach3_ci: Interval | None = None
    frontier: float | None = None
    """The compute frontier's loss at C (None when Approach 2 was not fitted)."""
    n_over_n_opt: float | None = None
    """N over Approach 2's N_opt at C: the frontier prediction assumes ≈ 1."""

    @property
    def approach3_error(self) -> float | None:
        """(L̂ − L) / L of Approach 3."""
        return None if self.approach3 is None else (self.approach3 - self.loss) / self.loss

    @property
    def frontier_error(self) -> float | None:
        return None if self.frontier is None else (self.frontier - self.loss) / self.loss


@dataclass(frozen=True)
class HoldoutCheck:
    """Every held-out run with both predictions, and why a predictor is missing."""

    rows: tuple[HoldoutRow, ...]
    target: float
    approach3: str | None
    """None when Approach 3 predicted; otherwise why not."""
    frontier: FrontierLaw | Skipped

    def max_abs_error(self, predictor: str) -> float | None:
        """Largest |relative error| of "approach3" or "frontier" over the runs."""
        errors = [getattr(r, f"{predictor}_error") for r in self.rows]
        errors = [abs(e) for e in errors if e is not None]
        return max(errors) if errors else None

    def within_target(self, predictor: str) -> bool | None:
        worst = self.max_abs_error(predictor)
        return None if worst is None else worst <= self.target


def _interval(est: Estimate[Approach3Fit], n: float, d: float) -> Interval | None:
    """Percentile interval of L̂(n, d) over the bootstrap refits (None without one)."""
    if est.bootstrap is None:
        return None
    s = est.bootstrap.samples
    pred = s["E"] + s["A"] * np.power(n, -s["alpha"]) + s["B"] * np.power(d, -s["beta"])
    pred = pred[np.isfinite(pred)]
    if pred.size == 0:
        return None
    tail = 100.0 * (1.0 - LEVEL) / 2.0
    low, high = np.percentile(pred, [tail, 100.0 - tail])
    return Interval(float(low), float(high))


def check_holdout(holdout: RunsTable | None, approach3: Estimate[Approach3Fit] | Skipped,
                  approach2: Estimate[Approach2Fit] | Skipped, *,
                  target: float = TARGET) -> HoldoutCheck | Skipped:
    """Predict every held-out run with both predictors (module docstring)."""
    if holdout is None or len(holdout) == 0:
        return Skipped("no held-out runs (no run has role 'holdout')")
    frontier: FrontierLaw | Skipped
    if isinstance(approach2, Skipped):
        frontier = Skipped(f"Approach 2 was not fitted: {approach2.reason}")
    else:
        try:
            frontier = fit_frontier(approach2.fit)
        except FitError as err:
            frontier = Skipped(str(err))
    collapsed = collapse_replicates(holdout)
    frame = collapsed.frame
    names = frame["run_name"] if "run_name" in frame.columns else frame["run_id"]
    rows = []
    # The frontier and Approach 2's N_opt(C) are functions of the line cost (the budget label
    # where the run has one, analysis.fits.optimum), so the held-out run is read at its own.
    costs = line_costs(collapsed)
    for i in range(len(frame)):
        n, d, loss = (float(frame[k].iloc[i]) for k in ("N", "D", "loss"))
        c = float(costs[i])
        n_seeds, std = int(frame["n_seeds"].iloc[i]), float(frame["loss_std"].iloc[i])
        predicted3 = ci3 = predicted_frontier = ratio = None
        if isinstance(approach3, Estimate):
            predicted3, ci3 = float(approach3.fit.loss(n, d)), _interval(approach3, n, d)
        if isinstance(frontier, FrontierLaw) and isinstance(approach2, Estimate):
            predicted_frontier = float(frontier(c))
            ratio = n / float(approach2.fit.n_opt(c))
        run_id = str(frame["run_id"].iloc[i])
        rows.append(HoldoutRow(run=str(names.iloc[i]) or run_id, run_id=run_id, N=n, D=d,
                               C=c, loss=loss, n_seeds=n_seeds,
                               loss_std=std if np.isfinite(std) else None,
                               approach3=predicted3, approach3_ci=ci3,
                               frontier=predicted_frontier, n_over_n_opt=ratio))
    reason = (None if isinstance(approach3, Estimate)
              else f"Approach 3 was not fitted: {approach3.reason}")
    return HoldoutCheck(rows=tuple(rows), target=target, approach3=reason, frontier=frontier)

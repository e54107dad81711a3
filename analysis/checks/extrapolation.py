"""Extrapolation check: refit without the largest budget, predict what was held out.

Why: a scaling law is used to extrapolate, so the honest test is to hide the largest compute
and see how well the rest predicts it (Hoffmann et al. 2022 validate Approach 3's prediction
on Chinchilla itself; Porian et al. 2024 and Besiroglu et al. 2024 hold out large budgets).

What is held out: the runs of the largest IsoFLOP budget when the runs have budgets;
otherwise the 10% of runs with the largest C (published data without budgets).
Reported, per approach:
  * loss: mean and max |L̂ − L| / L over the held-out runs (Approach 3; Approach 2 has no
    loss model);
  * N_opt: the refit's N_opt at the held-out compute against a reference: the held-out
    budget's own parabola minimum when it has an interior one, else the full-data fit.
    Approach 3's N_opt is its law minimised along the sweep's IsoFLOP lines at the held-out
    budget (analysis.fits.optimum, the allocation every approach reports), not the closed
    form for C = 6·N·D, which on an exact-FLOP sweep answers another question.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.errors import FitError
from analysis.fits.approach2 import Approach2Fit, budget_minimum, fit_approach2
from analysis.fits.approach3 import Approach3Fit, fit_approach3
from analysis.fits.optimum import lines_from_runs, n_opt_along
from analysis.runs.table import RunsTable

HELD_OUT_FRACTION = 0.1


@dataclass(frozen=True)
class ExtrapolationCheck:
    """How well a fit without the largest compute predicts it."""

    approach: str
    held_out: str
    """Which runs were held out, in words."""
    n_train: int
    n_held_out: int
    flops: float
    """Compute of the held-out runs (geometric mean)."""
    n_opt_predicted: float
    n_opt_reference: float
    n_opt_reference_kind: str
    n_opt_rel_error: float
    """(predicted − reference) / reference."""
    loss_mean_abs_rel_error: float | None = None
    loss_max_abs_rel_error: float | None = None
    refit: Approach2Fit | Approach3Fit | None = field(default=None, repr=False, compare=False)
    """The fit without the held-out runs (what the report's extrapolation figure draws)."""

    def to_json_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "refit"}


@dataclass(frozen=True)
class Split:
    train: np.ndarray
    """Boolean mask of the runs fitted."""
    description: str
    budget_label: float | None
    """The held-out budget, when the split is by budget."""


def holdout_split(runs: RunsTable) -> Split:
    """The largest budget, or the top HELD_OUT_FRACTION of runs by C."""
    budget = runs.column("budget")
    labels = np.unique(budget[np.isfinite(budget)])
    if labels.size >= 2:
        top = labels[-1]
        held = budget == top
        return Split(~held, f"the largest budget C = {top:.3g} ({int(held.sum())} runs)",
                     float(top))
    c = runs.column("C")
    k = max(1, int(round(HELD_OUT_FRACTION * len(c))))
    threshold = np.sort(c)[-k]
    held = c >= threshold
    return Split(~held, f"the {int(held.sum())} runs with the largest C (>= {threshold:.3g})",
                 None)


def _reference_n_opt(runs: RunsTable, split: Split,
                     fallback: float) -> tuple[float, str]:
    """The held-out budget's parabola minimum, or ``fallback`` (a full-data fit's N_opt)."""
    if split.budget_label is not None:
        held = ~split.train
        m = budget_minimum(split.budget_label, *(runs.column(k)[held] for k in ("N", "D", "C",
                                                                               "loss")))
        if m.ok:
            return m.n_opt, "IsoFLOP parabola minimum of the held-out budget"
    return fallback, "full-data fit"


def check_approach3(runs: RunsTable, full: Approach3Fit) -> ExtrapolationCheck:
    """Refit Approach 3 without the largest compute; predict loss and N_opt there."""
    split = holdout_split(runs)
    held = ~split.train
    n, d, loss, c = (runs.column(k) for k in ("N", "D", "loss", "C"))
    refit = fit_approach3(n[split.train], d[split.train], loss[split.train])
    flops = float(np.exp(np.mean(np.log(c[held]))))
    rel = np.abs(refit.loss(n[held], d[held]) - loss[held]) / loss[held]
    # The lines are the sweep's geometry (cost / 6ND against N), not its losses: all runs.
    lines = lines_from_runs(runs)
    cost = split.budget_label if split.budget_label is not None else flops
    predicted, _ = n_opt_along(refit.log_loss, lines, cost)
    reference, kind = _reference_n_opt(runs, split, n_opt_along(full.log_loss, lines, cost)[0])
    return ExtrapolationCheck(
        approach="3", held_out=split.description, n_train=int(split.train.sum()),
        n_held_out=int(held.sum()), flops=flops, n_opt_predicted=predicted,
        n_opt_reference=reference, n_opt_reference_kind=kind,
        n_opt_rel_error=(predicted - reference) / reference,
        loss_mean_abs_rel_error=float(rel.mean()), loss_max_abs_rel_error=float(rel.max()),
        refit=refit,
    )


def check_approach2(runs: RunsTable) -> ExtrapolationCheck:
    """Refit Approach 2 without the largest budget; predict that budget's N_opt."""
    split = holdout_split(runs)
    if split.budget_label is None:
        raise FitError("Approach 2 extrapolation: the runs have no IsoFLOP budgets")
    held = ~split.train
    cols = [runs.column(k) for k in ("N", "D", "C", "loss", "budget")]
    reference = budget_minimum(split.budget_label, *(col[held] for col in cols[:4]))
    if not reference.ok:
        raise FitError(f"Approach 2 extrapolation: the held-out budget has no interior "
                       f"minimum ({reference.reason})")
    refit = fit_approach2(*(col[split.train] for col in cols))
    predicted = float(refit.n_opt(reference.flops))
    return ExtrapolationCheck(
        approach="2", held_out=split.description, n_train=int(split.train.sum()),
        n_held_out=int(held.sum()), flops=reference.flops, n_opt_predicted=predicted,
        n_opt_reference=reference.n_opt,
        n_opt_reference_kind="IsoFLOP parabola minimum of the held-out budget",
        n_opt_rel_error=(predicted - reference.n_opt) / reference.n_opt, refit=refit,
    )

"""Backtests: how well each law predicts compute it was not fitted on (issue 51).

A scaling law exists to predict runs nobody has trained, so its first check is the one a
forecaster makes: fit on the past, predict the future, and compare. Two forms:

* **Held-out cells.** Every run left out of the fits for being a prediction target (role
  ``holdout``, or above ``--holdout-above C``: ``analysis.runs.selection``), predicted by each
  law fitted on everything else. This is the test of the analysis; it never chooses anything.
* **Rolling origin, inside the fitted data.** With the fitted budgets in increasing order
  C_1 < ... < C_k, each law is refitted on the runs at cost <= C_j and predicts the cells of
  C_(j+1), for every j from ``MIN_ORIGIN_BUDGETS`` on (Tashman 2000, "Out-of-sample tests of
  forecasting accuracy"; Hoffmann et al. 2022 and Porian et al. 2024 check the largest budget
  this way). Its worst |relative error| per law is what the headline rule reads
  (analysis.checks.verdict): the law that extrapolated best inside the data, chosen without
  looking at the held-out cells.

Each refit is the law's own entry of the table of fits (``FitSpec.run``) on the subset, with no
bootstrap, so a new law is backtested without code here. A refit that fails (too few points for
its parameters, an optimiser that does not converge) is named per step, never dropped silently.
Seed replicates are averaged into one observed loss per cell, as the fitted points are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.checks.noise import collapse_replicates
from analysis.fits.laws import predicted_loss
from analysis.fits.optimum import line_costs
from analysis.fits.results import Estimate, Skipped
from analysis.fits.spec import FitInput
from analysis.fits.table import FITS, judged
from analysis.runs.table import RunsTable

NOT_ASKED = "not requested"
"""The reason analysis.analyze gives a fit it was not asked for."""
MIN_ORIGIN_BUDGETS = 2
"""Budgets the first rolling-origin refit reads: two IsoFLOP budgets of ~5 sizes each are ~10
points for laws of 4-6 parameters, the fewest on which every judged law can be fitted."""


@dataclass(frozen=True)
class BacktestCell:
    """One predicted cell: its coordinates, its observed loss (seeds averaged) and each law's
    prediction (None where that law could not be fitted)."""

    budget: float
    """The cell's line cost: its IsoFLOP budget label, or its C without one."""
    N: float
    D: float
    observed: float
    n_seeds: int
    predicted: Mapping[str, float | None]

    def rel_error(self, law: str) -> float | None:
        """(L̂ − L) / L of ``law``; None where it did not predict."""
        value = self.predicted.get(law)
        return None if value is None else (value - self.observed) / self.observed

    def to_json_dict(self) -> dict:
        return {"budget": self.budget, "N": self.N, "D": self.D, "observed": self.observed,
                "n_seeds": self.n_seeds, "predicted": dict(self.predicted),
                "rel_error": {law: self.rel_error(law) for law in self.predicted}}


@dataclass(frozen=True)
class BacktestStep:
    """Every law fitted on the runs up to ``fitted_up_to``, predicting ``cells``."""

    fitted_up_to: float
    """The largest cost fitted (budget label, or C for runs without one)."""
    n_fitted: int
    """Points fitted (cells, seeds averaged)."""
    cells: tuple[BacktestCell, ...]
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Laws that could not be refitted on this step's runs, and why."""

    @property
    def laws(self) -> tuple[str, ...]:
        return tuple(self.cells[0].predicted) if self.cells else ()

    def max_abs_rel_error(self, law: str) -> float | None:
        """Worst |relative error| of ``law`` over the cells; None where it did not predict."""
        errors = [c.rel_error(law) for c in self.cells]
        if not errors or any(e is None for e in errors):
            return None
        return float(max(abs(e) for e in errors))

    def to_json_dict(self) -> dict:
        return {"fitted_up_to": self.fitted_up_to, "n_fitted": self.n_fitted,
                "cells": [c.to_json_dict() for c in self.cells],
                "max_abs_rel_error": {law: self.max_abs_rel_error(law) for law in self.laws},
                "skipped": dict(self.skipped)}


@dataclass(frozen=True)
class Backtests:
    """The held-out cells (``heldout``) and the rolling-origin steps (``rolling``)."""

    heldout: BacktestStep | Skipped
    rolling: tuple[BacktestStep, ...] | Skipped

    def rolling_error(self, law: str) -> float | None:
        """Worst |relative error| of ``law`` over every rolling-origin step: what the headline
        rule reads. None when there is no step, or a step where the law could not be fitted
        (a law that cannot be refitted on less data has not shown it extrapolates)."""
        if isinstance(self.rolling, Skipped) or not self.rolling:
            return None
        errors = [step.max_abs_rel_error(law) for step in self.rolling]
        if any(e is None for e in errors):
            return None
        return float(max(errors))

    def heldout_error(self, law: str) -> float | None:
        return None if isinstance(self.heldout, Skipped) else self.heldout.max_abs_rel_error(law)

    def to_json_dict(self) -> dict:
        """fit.json's ``backtest`` block (docs/analysis.md): the held-out step's fields at top
        level, the rolling steps under ``rolling``."""
        out: dict = ({"status": "skipped", "reason": self.heldout.reason}
                     if isinstance(self.heldout, Skipped)
                     else {"status": "ok", **self.heldout.to_json_dict()})
        if isinstance(self.rolling, Skipped):
            out["rolling"] = {"status": "skipped", "reason": self.rolling.reason}
        else:
            laws = self.rolling[0].laws if self.rolling else ()
            out["rolling"] = {"status": "ok", "steps": [s.to_json_dict() for s in self.rolling],
                              "max_abs_rel_error": {law: self.rolling_error(law)
                                                    for law in laws}}
        return out


def _cells(target: RunsTable, laws: Mapping[str, object]) -> tuple[BacktestCell, ...]:
    """``target`` (seeds averaged) predicted by each fitted law's ``loss(N, D)`` (None: the
    law was not fitted)."""
    cells = collapse_replicates(target)
    n, d, loss = (cells.column(k) for k in ("N", "D", "loss"))
    seeds = (cells.column("n_seeds") if "n_seeds" in cells.frame.columns
             else np.ones(len(cells)))
    costs = line_costs(cells)
    predicted = {name: (None if fit is None else predicted_loss(fit, cells))
                 for name, fit in laws.items()}
    return tuple(
        BacktestCell(budget=float(costs[i]), N=float(n[i]), D=float(d[i]),
                     observed=float(loss[i]), n_seeds=int(seeds[i]),
                     predicted={name: (None if p is None or not np.isfinite(p[i])
                                       else float(p[i])) for name, p in predicted.items()})
        for i in np.lexsort((n, costs)))  # by budget, then size


def heldout_step(fitted: RunsTable, heldout: RunsTable | None,
                 fits: Mapping[str, Estimate | Skipped]) -> BacktestStep | Skipped:
    """The full fits (``fits``, on ``fitted``) against the held-out runs."""
    if heldout is None or len(heldout) == 0:
        return Skipped("no held-out runs (none has role 'holdout'; see --holdout-above)")
    laws = {name: est.fit for name, est in fits.items()
            if name in judged() and isinstance(est, Estimate)}
    skipped = {name: est.reason for name, est in fits.items()  # "not requested" is no news
               if name in judged() and isinstance(est, Skipped) and est.reason != NOT_ASKED
               and est.applies}
    return BacktestStep(fitted_up_to=float(line_costs(fitted).max()), n_fitted=len(fitted),
                        cells=_cells(heldout, laws), skipped=skipped)


def _refit(name: str, runs: RunsTable, curves: pd.DataFrame | None,
           seed: int, repeats: RunsTable | None = None) -> object | str:
    """The law ``name`` fitted on ``runs`` (no bootstrap; a law that models U also on the
    ``repeats`` variants), or why it could not be."""
    ref = float(runs.column("C").max())
    est = FITS[name].run(FitInput(runs, curves, ref, 0, seed, repeats=repeats))
    return est.fit if isinstance(est, Estimate) else est.reason


def rolling_origin(fitted: RunsTable, curves: pd.DataFrame | None,
                   laws: tuple[str, ...], seed: int = 0,
                   repeats: RunsTable | None = None) -> tuple[BacktestStep, ...] | Skipped:
    """Each law refitted on the budgets up to C_j, predicting C_(j+1) (module docstring).
    Every law predicts the same cells, those of ``fitted``; the repeat variants of the
    budgets up to C_j (``repeats``) are fitted by the laws that model U."""
    budget = fitted.column("budget")
    labels = np.unique(budget[np.isfinite(budget)])
    if labels.size < MIN_ORIGIN_BUDGETS + 1:
        return Skipped(f"{labels.size} IsoFLOP budget(s) fitted: a rolling-origin backtest "
                       f"needs at least {MIN_ORIGIN_BUDGETS + 1} (fit on "
                       f"{MIN_ORIGIN_BUDGETS}, predict the next)")
    costs = line_costs(fitted)
    steps = []
    for j in range(MIN_ORIGIN_BUDGETS - 1, labels.size - 1):
        train = fitted.subset(costs <= labels[j] * (1 + 1e-9))
        target = fitted.subset(budget == labels[j + 1])
        extra = (None if repeats is None else
                 repeats.subset(line_costs(repeats) <= labels[j] * (1 + 1e-9)))
        refits = {name: _refit(name, train, curves, seed, extra) for name in laws}
        steps.append(BacktestStep(
            fitted_up_to=float(labels[j]), n_fitted=len(train),
            cells=_cells(target, {k: (None if isinstance(v, str) else v)
                                  for k, v in refits.items()}),
            skipped={k: v for k, v in refits.items() if isinstance(v, str)}))
    return tuple(steps)


def backtest(fitted: RunsTable, heldout: RunsTable | None, curves: pd.DataFrame | None,
             fits: Mapping[str, Estimate | Skipped], seed: int = 0, *,
             rolling: bool = True, repeats: RunsTable | None = None) -> Backtests:
    """Both backtests of every judged law that was fitted on all of ``fitted`` (``rolling``
    False: the held-out runs only; ``repeats``: the repeat variants, analysis.runs.selection
    rule 4)."""
    laws = tuple(name for name in judged() if isinstance(fits.get(name), Estimate))
    return Backtests(heldout=heldout_step(fitted, heldout, fits),
                     rolling=(rolling_origin(fitted, curves, laws, seed, repeats) if rolling
                              else Skipped("not asked for")))

"""How much the answer moves with choices a bootstrap does not resample (issue 51).

A bootstrap interval is the spread of an estimate over re-draws of the runs, *given* the law
and the points fitted. Two choices move the answer at least as much, and a reader should see
them beside the interval:

* **the law**: each parametric law that passes its rolling-origin backtest
  (analysis.checks.backtest; worst error within ``HOLDOUT_TARGET``) gives its own a and tokens
  per parameter. When none passes, every headline candidate is shown, and the spread says so.
  (On chinchilla_1gpu, a ranges 0.59-0.85 across the approaches, wider than any one interval.)
* **the fit window**: an IsoFLOP budget's sizes far from its best run pull the fit with the
  curvature of a region nobody would train in. The headline law and Approach 2 are refitted on
  the runs within ``WINDOWS`` (2x and 4x) of each budget's lowest-loss size and on all of them
  (on a published ladder of real LLM runs, a parabola within 4x gives a = 0.376 where all sizes
  give an interval of 0.392-0.473).

Each spread is the smallest and largest estimate over its choices; a choice that cannot be
fitted (a window leaving a budget fewer than 3 sizes) is named, not dropped silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from analysis.checks.backtest import Backtests
from analysis.checks.heldout import TARGET as HOLDOUT_TARGET
from analysis.fits.results import Estimate, Skipped
from analysis.fits.spec import FitInput
from analysis.fits.table import FITS, headline_candidates
from analysis.runs.table import RunsTable

WINDOWS: tuple[float, ...] = (2.0, 4.0)
"""Fit windows: the sizes within this factor of each budget's lowest-loss size (and all)."""
QUANTITIES = ("a", "tokens_per_param")


@dataclass(frozen=True)
class Spread:
    """One quantity's estimates over a set of choices."""

    values: Mapping[str, float]
    """Choice (a law's name, or "<law> within 2x") -> its estimate."""
    failed: Mapping[str, str]
    """Choices that could not be fitted, and why."""
    note: str = ""

    @property
    def range(self) -> tuple[float, float] | None:
        finite = [v for v in self.values.values() if np.isfinite(v)]
        return None if not finite else (float(min(finite)), float(max(finite)))

    def to_json_dict(self) -> dict:
        return {"range": None if self.range is None else list(self.range),
                "values": dict(self.values), "failed": dict(self.failed), "note": self.note}


@dataclass(frozen=True)
class ModelSpread:
    """Per quantity, the spread across laws and across fit windows."""

    laws: Mapping[str, Spread]
    windows: Mapping[str, Spread]

    def to_json_dict(self) -> dict:
        return {q: {"laws": self.laws[q].to_json_dict(),
                    "windows": self.windows[q].to_json_dict()} for q in self.laws}


def window_mask(runs: RunsTable, factor: float | None) -> np.ndarray:
    """Runs within ``factor`` (in N) of their budget's lowest-loss run; runs outside any
    budget are always kept (None: every run)."""
    if factor is None:
        return np.ones(len(runs), dtype=bool)
    budget, n, loss = (runs.column(k) for k in ("budget", "N", "loss"))
    keep = np.ones(len(runs), dtype=bool)
    for label in np.unique(budget[np.isfinite(budget)]):
        members = np.flatnonzero(budget == label)
        best = n[members[np.argmin(loss[members])]]
        keep[members] = np.abs(np.log(n[members] / best)) <= np.log(factor) * (1 + 1e-9)
    return keep


def _across_laws(fits: Mapping[str, Estimate | Skipped], tests: Backtests | None,
                 quantity: str) -> Spread:
    laws = [k for k in headline_candidates() if isinstance(fits.get(k), Estimate)
            and quantity in fits[k].point]
    passing = [k for k in laws if tests is not None
               and (e := tests.rolling_error(k)) is not None and e <= HOLDOUT_TARGET]
    note = (f"the laws whose rolling-origin backtest is within {HOLDOUT_TARGET:.0%}"
            if passing else
            f"no law's rolling-origin backtest is within {HOLDOUT_TARGET:.0%}: every "
            "parametric law")
    chosen = passing or laws
    return Spread({k: float(fits[k].point[quantity]) for k in chosen}, {}, note)


def _across_windows(runs: RunsTable, curves, reference: float, seed: int,
                    headline: str | None,
                    fits: Mapping[str, Estimate | Skipped]) -> dict[str, Spread]:
    names = [k for k in ("2", headline) if k is not None and k in FITS]
    values: dict[str, dict[str, float]] = {q: {} for q in QUANTITIES}
    failed: dict[str, str] = {}
    for factor in (*WINDOWS, None):
        mask = window_mask(runs, factor)
        where = "all sizes" if factor is None else f"within {factor:g}x"
        for name in names:
            label = f"{name} {where}"
            # A window that keeps every run is the full-data fit, already made: not refitted.
            est = fits.get(name) if mask.all() else None
            if est is None:
                est = FITS[name].run(FitInput(runs.subset(mask), curves, reference, 0, seed))
            if isinstance(est, Skipped):
                failed[label] = est.reason
                continue
            for q in QUANTITIES:
                if q in est.point:
                    values[q][label] = float(est.point[q])
    note = (f"Approach 2 and the headline law ({headline}) refitted on the sizes within "
            + ", ".join(f"{w:g}x" for w in WINDOWS) + " of each budget's best run, and on all")
    return {q: Spread(values[q], failed, note) for q in QUANTITIES}


def model_spread(runs: RunsTable, curves, fits: Mapping[str, Estimate | Skipped],
                 tests: Backtests | None, headline: str | None, reference: float,
                 seed: int = 0) -> ModelSpread:
    """The spreads of the module docstring, for a and tokens per parameter at ``reference``."""
    return ModelSpread(laws={q: _across_laws(fits, tests, q) for q in QUANTITIES},
                       windows=_across_windows(runs, curves, reference, seed, headline, fits))

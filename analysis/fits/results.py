"""The two shapes of every result: an ``Estimate`` (a fit with its bootstrap) or ``Skipped``.

Why a module of their own: ``analysis.analyze`` gathers every analysis, and the analyses it
calls (noise, held-out runs, conventions, schedules) return these types too; keeping them
here lets those modules be imported by ``analyze`` without a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from analysis.numerics.bootstrap import Bootstrap, Interval

FitT = TypeVar("FitT")


@dataclass(frozen=True)
class Skipped:
    """An analysis that was not made, and why."""

    reason: str
    applies: bool = True
    """False: the approach does not apply to these runs (a data-constrained law where no run
    repeats its data or none records U); listed with its reason where the approaches are, but
    not as a law the backtest failed to fit."""


@dataclass(frozen=True)
class Estimate(Generic[FitT]):
    """A fitted approach: the typed fit, its named point statistics, and their bootstrap."""

    fit: FitT
    point: Mapping[str, float]
    """Exponents and derived quantities by name (tokens_per_param at the reference C)."""
    bootstrap: Bootstrap | None = None
    bootstrap_error: str | None = None
    """Why there is no bootstrap although one was asked for (no resample could be fitted)."""

    def ci95(self, name: str) -> Interval | None:
        """95% percentile interval of a statistic, or None without a bootstrap."""
        if self.bootstrap is None or name not in self.bootstrap.samples:
            return None
        return self.bootstrap.interval(name)

    @property
    def intervals(self) -> dict[str, Interval]:
        return {} if self.bootstrap is None else self.bootstrap.intervals

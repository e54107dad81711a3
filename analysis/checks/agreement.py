"""Do two approaches agree on an exponent? The paired bootstrap difference, with the overlap.

Approaches 1, 2 and 3 are bootstrapped over the same fitted points with the same seed, so
draw k of each refits the same resample of runs: the difference of their exponents, draw by
draw, has a 95% interval of its own. "They agree" is read as that interval containing 0
(no difference detected at 95%). That is the test of a difference. Reading two separate
intervals instead misleads both ways (Schenker & Gentleman 2001, "On judging the
significance of differences by examining the overlap between confidence intervals"): for
independent estimates, intervals that overlap can still differ significantly, and asking
each to contain the other's estimate is stricter than the test; for two fits of the same
runs, whose errors are correlated, even that can pass while a constant offset is
significant. The report shows all three readings, so none is hidden behind another.

Where the two approaches were both fitted in fewer than half of the draws (``MAX_FAILED_FRACTION``
of analysis.checks.verdict), the difference's interval describes that minority of resamples,
not the estimates' spread, and the pair is not judged (``agree`` None), as a single interval
is not compared with a documented value then.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from analysis.checks.verdict import MAX_FAILED_FRACTION
from analysis.fits.results import Estimate, Skipped
from analysis.fits.table import compared
from analysis.numerics.bootstrap import LEVEL, Bootstrap, Interval

# Which approaches are compared pairwise on a: the entries of the table of fits with
# ``FitSpec.agreement`` (analysis.fits.table.compared, in table order): Chinchilla's
# approaches, the laws with an interaction and the model-free check. Every one reads a off the
# same C (the sweep's budgets, analysis.fits.optimum) and bootstraps the same draws of runs, so
# their paired differences are defined.


@dataclass(frozen=True)
class Agreement:
    """Two approaches' estimates of one exponent, and whether they differ."""

    first: str
    second: str
    quantity: str
    first_value: float
    second_value: float
    first_ci: Interval
    second_ci: Interval
    difference_ci: Interval
    """95% percentile interval of first − second over the draws both could fit."""
    n_paired: int
    """Draws that both approaches fitted (the difference's sample)."""
    n_draws: int = 0
    """Draws of the bootstrap (0: unknown, the pair is judged)."""

    @property
    def difference(self) -> float:
        return self.first_value - self.second_value

    @property
    def judged(self) -> bool:
        """At least half of the draws were fitted by both (module docstring)."""
        return self.n_paired >= (1.0 - MAX_FAILED_FRACTION) * self.n_draws

    @property
    def agree(self) -> bool | None:
        """The paired difference's 95% interval contains 0 (None: not judged)."""
        return self.difference_ci.contains(0.0) if self.judged else None

    @property
    def overlap(self) -> bool:
        return bool(self.first_ci.low <= self.second_ci.high
                    and self.second_ci.low <= self.first_ci.high)

    @property
    def each_inside_other(self) -> bool:
        return self.first_ci.contains(self.second_value) and \
            self.second_ci.contains(self.first_value)

    def to_json_dict(self) -> dict:
        return {"first": self.first, "second": self.second, "quantity": self.quantity,
                "first_value": self.first_value, "second_value": self.second_value,
                "first_ci": self.first_ci.as_list(), "second_ci": self.second_ci.as_list(),
                "difference": self.difference, "difference_ci": self.difference_ci.as_list(),
                "n_paired": self.n_paired, "n_draws": self.n_draws, "agree": self.agree,
                "overlap": self.overlap,
                "each_inside_other": self.each_inside_other}


def paired_difference(first: Bootstrap, second: Bootstrap, name: str,
                      level: float = LEVEL) -> tuple[Interval, int]:
    """Percentile interval of first − second over the draws both fitted, and their count.

    ValueError when the two did not draw the same resamples (other seed, number of draws or
    units), or when no draw was fitted by both.
    """
    same = (first.seed, first.n_resamples, first.n_units, first.by) == \
        (second.seed, second.n_resamples, second.n_units, second.by)
    if first.n_units is None or not same:
        raise ValueError(
            "the bootstraps did not draw the same resamples (seed, draws, units): "
            f"{(first.seed, first.n_resamples, first.n_units, first.by)} vs "
            f"{(second.seed, second.n_resamples, second.n_units, second.by)}")
    diff = first.by_draw(name) - second.by_draw(name)
    diff = diff[np.isfinite(diff)]
    if diff.size == 0:
        raise ValueError(f"no draw has a finite {name} in both bootstraps")
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(diff, [tail, 100.0 - tail])
    return Interval(float(low), float(high)), int(diff.size)


def compare_approaches(estimates: Mapping[str, Estimate | Skipped],
                       quantity: str = "a") -> tuple[Agreement, ...] | Skipped:
    """Every pair of bootstrapped approaches among those compared (``FitSpec.agreement``),
    compared on ``quantity``."""
    pairs = compared()
    usable = {name: est for name, est in estimates.items()
              if name in pairs and isinstance(est, Estimate) and est.bootstrap is not None
              and quantity in est.bootstrap.samples}
    if len(usable) < 2:
        return Skipped(f"fewer than two approaches have a bootstrap of {quantity}")
    rows = []
    for one, two in itertools.combinations([p for p in pairs if p in usable], 2):
        first, second = usable[one], usable[two]
        try:
            diff_ci, n_paired = paired_difference(first.bootstrap, second.bootstrap, quantity)
        except ValueError as err:
            return Skipped(f"Approaches {one} and {two}: {err}")
        rows.append(Agreement(
            first=one, second=two, quantity=quantity,
            first_value=float(first.point[quantity]),
            second_value=float(second.point[quantity]),
            first_ci=first.bootstrap.interval(quantity),
            second_ci=second.bootstrap.interval(quantity),
            difference_ci=diff_ci, n_paired=n_paired, n_draws=first.bootstrap.n_resamples))
    return tuple(rows)

"""Bootstrap over runs: resample runs with replacement, refit, take percentile intervals.

Why runs are the unit: a run is one independent training job; its final loss (and its
curve) is the observation. Besiroglu et al. (2024) bootstrap the Chinchilla points the same
way to get their 95% intervals. Resamples whose refit fails (e.g. a resample of an IsoFLOP
sweep leaves a budget with too few model sizes) are counted, not hidden: ``n_failed`` and the
first distinct reasons travel with the intervals, and the intervals come from the successful
refits only (so they are conditional on a fit being possible).

Two schemes (``BY``): "run" draws every unit from all of them (as Besiroglu et al.);
"budget" draws each IsoFLOP budget's units from that budget only (a stratified bootstrap: the
budgets are the design, fixed, not sampled), so every resample has each budget with as many
points as it has, where the pooled draw moves points between budgets. A budget's draw can
still repeat sizes. Units outside any budget (grid and runs sweeps) form one stratum.

The default, "auto" (``resolve_by``), is "budget" for an IsoFLOP design (two budgets or more)
and "run" otherwise. Why (issue 51): on every committed IsoFLOP study the pooled draw fails in
37-60% of resamples (a budget left with too few sizes for its parabola), so its intervals are
conditional on the minority that could be fitted, while the stratified draw keeps the design
the sweep fixed, fails far less and gives narrower intervals (docs/analysis.md, "Bootstrap
within budgets", has the measurements).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from analysis.errors import FitError
from analysis.numerics import workers
from analysis.numerics.threads import single_threaded_blas

DEFAULT_RESAMPLES = 1000
LEVEL = 0.95
BY: tuple[str, ...] = ("auto", "run", "budget")
"""What a resample draws from: all runs, or the runs of the unit's own budget; "auto" chooses
(``resolve_by``)."""
MIN_DESIGN_BUDGETS = 2
"""Budgets from which "auto" treats the runs as an IsoFLOP design and resamples within them."""


def resolve_by(asked: str, budget: np.ndarray) -> str:
    """The scheme "auto" stands for on runs with these budget labels (NaN: none), or
    ``asked`` itself when it names one (module docstring)."""
    if asked not in BY:
        raise ValueError(f"bootstrap_by must be one of {BY}, got {asked!r}")
    if asked != "auto":
        return asked
    labels = np.unique(np.asarray(budget, dtype=float))
    return "budget" if np.isfinite(labels).sum() >= MIN_DESIGN_BUDGETS else "run"
MIN_PARALLEL_RESAMPLES = 100
"""Fewer resamples run in this process whatever ``n_jobs`` says: a spawned worker costs ~1 s
of imports, a law's refit ~10-100 ms, so a pool pays off from about a hundred."""


@dataclass(frozen=True)
class Interval:
    """A two-sided percentile interval."""

    low: float
    high: float

    def contains(self, value: float) -> bool:
        return bool(self.low <= value <= self.high)

    def as_list(self) -> list[float]:
        return [self.low, self.high]


@dataclass(frozen=True)
class Bootstrap:
    """Per-resample values of every named statistic, and their 95% percentile intervals."""

    n_resamples: int
    n_failed: int
    seed: int
    samples: Mapping[str, np.ndarray] = field(repr=False, compare=False)
    failures: tuple[str, ...] = ()
    """Up to five distinct reasons why resamples could not be fitted."""
    n_units: int | None = None
    """Units each draw resampled (runs or cells); None for derived bootstraps."""
    by: str = "run"
    """"run" (pooled) or "budget" (stratified by budget): see the module docstring."""
    fitted: np.ndarray | None = field(default=None, repr=False, compare=False)
    """Which draws were fitted, in draw order (bool, n_resamples); ``samples`` holds the
    fitted draws only. None where the draws are not indexed (derived bootstraps)."""

    def interval(self, name: str, level: float = LEVEL) -> Interval:
        values = np.asarray(self.samples[name], dtype=float)
        values = values[np.isfinite(values)]
        if values.size == 0:
            return Interval(float("nan"), float("nan"))
        tail = 100.0 * (1.0 - level) / 2.0
        low, high = np.percentile(values, [tail, 100.0 - tail])
        return Interval(float(low), float(high))

    @property
    def intervals(self) -> dict[str, Interval]:
        """95% intervals of every statistic, by name."""
        return {name: self.interval(name) for name in self.samples}

    def by_draw(self, name: str) -> np.ndarray:
        """A statistic per draw (n_resamples values, NaN where the refit failed): two
        bootstraps with the same seed, draws and units drew the same resamples, so their
        values pair up draw by draw (e.g. the difference of two approaches' exponents)."""
        if self.fitted is None:
            raise ValueError("this bootstrap does not record which draws were fitted")
        out = np.full(self.n_resamples, np.nan)
        out[self.fitted] = self.samples[name]
        return out


def resample_indices(n_units: int, n_resamples: int, seed: int,
                     strata: np.ndarray | None = None) -> np.ndarray:
    """(n_resamples, n_units) indices drawn with replacement; the same for the same seed.
    With ``strata`` (a label per unit; NaN is one more label), each column draws from the
    units of its own stratum, which keep their positions: a stratified bootstrap."""
    rng = np.random.default_rng(seed)
    if strata is None:
        return rng.integers(0, n_units, size=(n_resamples, n_units))
    labels = np.asarray(strata, dtype=float)
    if labels.shape != (n_units,):
        raise ValueError(f"strata must give one label per unit ({n_units}), got {labels.shape}")
    groups = np.unique(np.nan_to_num(labels, nan=-np.inf), return_inverse=True)[1]
    out = np.empty((n_resamples, n_units), dtype=np.int64)
    for g in range(int(groups.max()) + 1 if n_units else 0):
        members = np.flatnonzero(groups == g)
        out[:, members] = members[rng.integers(0, len(members), size=(n_resamples,
                                                                       len(members)))]
    return out


def _refit_all(refit: Callable[[np.ndarray], Mapping[str, float]],
               indices: np.ndarray) -> list[Mapping[str, float] | str]:
    """Refit each row of indices: its statistics, or the FitError message (one worker's share)."""
    out: list[Mapping[str, float] | str] = []
    batch = getattr(refit, "batch", None)  # every resample at once (analysis.numerics.batched)
    with single_threaded_blas():
        if batch is not None:
            return list(batch(indices))
        for idx in indices:
            try:
                out.append(dict(refit(idx)))
            except FitError as err:
                out.append(str(err))
    return out


def run_bootstrap(
    n_units: int,
    refit: Callable[[np.ndarray], Mapping[str, float]],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    n_jobs: int = 1,
    strata: np.ndarray | None = None,
) -> Bootstrap:
    """Call ``refit(indices)`` on each resample; collect its named statistics.

    A refit with a ``batch(indices)`` method (Approach 3's: analysis.numerics.batched) is given
    all of a process's resamples at once and returns, in order, their statistics or their
    FitError messages; the draws and the results are those of the one-at-a-time call.

    ``refit`` raises FitError when a resample cannot be fitted; any other exception is a bug
    and propagates. FitError when no resample at all could be fitted. With ``n_jobs`` > 1 the
    resamples are split over worker processes (``refit`` must then be picklable); the draws
    and the result are the same as with one process. ``strata``: resample within them
    (resample_indices); None pools every unit.
    """
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if n_jobs < 1:
        raise ValueError(f"n_jobs must be >= 1, got {n_jobs}")
    indices = resample_indices(n_units, n_resamples, seed, strata)
    if n_jobs == 1 or n_resamples < MIN_PARALLEL_RESAMPLES:
        results = _refit_all(refit, indices)
    else:
        # A batched refit goes fastest on one large chunk per worker; one at a time, chunks
        # of a few dozen draws let a worker that gets cheap resamples take more.
        per_job = 1 if getattr(refit, "batch", None) is not None else 8
        chunks = np.array_split(indices, min(n_resamples, per_job * n_jobs))
        if workers._POOL is not None and workers._POOL[0] == n_jobs:
            parts = list(workers._POOL[1].map(_refit_all, [refit] * len(chunks), chunks))
        else:
            with workers._new_pool(n_jobs) as pool:  # started by the map itself
                parts = list(pool.map(_refit_all, [refit] * len(chunks), chunks))
        results = [item for part in parts for item in part]

    collected: dict[str, list[float]] = {}
    failures: list[str] = []
    n_failed = 0
    fitted = np.array([not isinstance(item, str) for item in results])
    for item in results:
        if isinstance(item, str):
            n_failed += 1
            if item not in failures and len(failures) < 5:
                failures.append(item)
            continue
        for name, value in item.items():
            collected.setdefault(name, []).append(float(value))
    if n_failed == n_resamples:
        raise FitError(f"bootstrap: none of {n_resamples} resamples could be fitted "
                       f"({failures[0]})")
    return Bootstrap(
        n_resamples=n_resamples, n_failed=n_failed, seed=seed,
        samples={name: np.asarray(v) for name, v in collected.items()},
        failures=tuple(failures), n_units=n_units, fitted=fitted,
        by="run" if strata is None else "budget",
    )

"""Bootstrap over runs: resample runs with replacement, refit, take percentile intervals.

Why runs are the unit: a run is one independent training job; its final loss (and its
curve) is the observation. Besiroglu et al. (2024) bootstrap the Chinchilla points the same
way to get their 95% intervals. Resamples whose refit fails (e.g. a resample of an IsoFLOP
sweep leaves a budget with too few model sizes) are counted, not hidden: ``n_failed`` and the
first distinct reasons travel with the intervals, and the intervals come from the successful
refits only (so they are conditional on a fit being possible).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from analysis.errors import FitError
from analysis.threads import single_threaded_blas

DEFAULT_RESAMPLES = 1000
LEVEL = 0.95


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


def resample_indices(n_units: int, n_resamples: int, seed: int) -> np.ndarray:
    """(n_resamples, n_units) indices drawn with replacement; the same for the same seed."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_units, size=(n_resamples, n_units))


def _refit_all(refit: Callable[[np.ndarray], Mapping[str, float]],
               indices: np.ndarray) -> list[Mapping[str, float] | str]:
    """Refit each row of indices: its statistics, or the FitError message (one worker's share)."""
    out: list[Mapping[str, float] | str] = []
    with single_threaded_blas():
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
) -> Bootstrap:
    """Call ``refit(indices)`` on each resample; collect its named statistics.

    ``refit`` raises FitError when a resample cannot be fitted; any other exception is a bug
    and propagates. FitError when no resample at all could be fitted. With ``n_jobs`` > 1 the
    resamples are split over worker processes (``refit`` must then be picklable); the draws
    and the result are the same as with one process.
    """
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if n_jobs < 1:
        raise ValueError(f"n_jobs must be >= 1, got {n_jobs}")
    indices = resample_indices(n_units, n_resamples, seed)
    if n_jobs == 1:
        results = _refit_all(refit, indices)
    else:
        # spawn, not fork: a forked child of a process with threads (MLflow, BLAS) can hang.
        context = multiprocessing.get_context("spawn")
        chunks = np.array_split(indices, n_jobs)
        with ProcessPoolExecutor(max_workers=n_jobs, mp_context=context) as pool:
            parts = pool.map(_refit_all, [refit] * n_jobs, chunks)
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
    )

"""How the compute-optimal exponent and tokens per parameter depend on the N and C conventions.

Why: "N_opt ∝ C^a" and "20 tokens per parameter" are statements about *counted* parameters
and *counted* FLOPs. Kaplan et al. (2020) count non-embedding parameters and 6·N·D; Hoffmann
et al. (2022) all parameters; Porian et al. (2024) trace much of the Kaplan–Chinchilla gap
to such choices. For small models the embeddings are a large share of N and attention a
large share of the FLOPs, so here the choice matters most. The same runs are refitted under

    N ∈ {total (params_total), non-embedding (N_kaplan)}
  × C ∈ {6·N·D with that N, exact (flops_exact: attention and logits included)}.

Approach 2 is refitted as it is (same IsoFLOP groups, the runs' N and C in the convention).
Approach 3 is fitted once per N; its allocation under a C convention solves
min L(N, D) subject to C = k·N^p·D, where C/D = k·N^p (FLOPs per token) is a power law of N
fitted to the runs. For 6·N·D that is exact (k = 6, p = 1) and gives Hoffmann's formulas;
for exact FLOPs it is a close approximation (its RMS in ln is reported). The optimum is

    N_opt = [αA C^β / (pβB k^β)]^(1/(α+pβ)),  D_opt = C / (k N_opt^p),
    a = β/(α+pβ),  b = 1 − p·a.

Tokens per parameter are given at the largest compute of the runs in each convention. The
bootstrap of these refits uses ``resamples_for(n)`` = max(50, n // 4) resamples, never more
than the main analysis' n (a sensitivity table needs the size of the intervals, not their
third digit; the full count would make the report ~2.5x slower). A convention whose column
the runs lack (published CSVs have no flops_exact) is a row with the reason instead of
numbers.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from analysis.errors import AnalysisError, DataError, FitError
from analysis.fits.approach2 import Approach2Fit, bootstrap_approach2, fit_approach2
from analysis.fits.approach3 import Approach3Fit, bootstrap_approach3, fit_approach3
from analysis.fits.powerlaw import PowerLaw, fit_power_law
from analysis.fits.results import Estimate, Skipped
from analysis.numerics.bootstrap import Bootstrap
from analysis.numerics.threads import single_threaded_blas
from analysis.runs.table import RunsTable

GRID: tuple[tuple[str, str], ...] = (("total", "6nd"), ("total", "exact"),
                                     ("non_embedding", "6nd"), ("non_embedding", "exact"))
C_LABELS = {"6nd": "6·N·D", "exact": "exact FLOPs"}
MIN_RESAMPLES = 50
RESAMPLE_DIVISOR = 4


def resamples_for(n_resamples: int) -> int:
    """Bootstrap resamples of the refits for a main analysis of ``n_resamples`` (0: none)."""
    if n_resamples <= 0:
        return 0
    return min(n_resamples, max(MIN_RESAMPLES, n_resamples // RESAMPLE_DIVISOR))


def convention_runs(runs: RunsTable, n: str, c: str) -> RunsTable:
    """The runs with N and C in another convention; DataError naming the missing column."""
    if n == "total":
        n_values, n_label = runs.column("N"), runs.n_convention
    elif n == "non_embedding":
        n_values, n_label = runs.column("N_kaplan"), "params_non_embedding"
    else:
        raise ValueError(f"unknown N convention {n!r}")
    if not np.all(np.isfinite(n_values) & (n_values > 0)):
        raise DataError(f"the runs do not record {n_label} (column N_kaplan)")
    if c == "6nd":
        c_values = 6.0 * n_values * runs.column("D")
    elif c == "exact":
        if "flops_exact" not in runs.frame.columns:
            raise DataError("the runs do not record exact FLOPs (column flops_exact)")
        c_values = runs.column("flops_exact")
        if not np.all(np.isfinite(c_values) & (c_values > 0)):
            raise DataError("some runs lack exact FLOPs (column flops_exact)")
    else:
        raise ValueError(f"unknown C convention {c!r}")
    frame = runs.frame.copy()
    frame["N"], frame["C"] = n_values, c_values
    return RunsTable(frame, source=runs.source, n_convention=n_label, c_convention=c,
                     excluded=runs.excluded)


@dataclass(frozen=True)
class GeneralAllocation:
    """Approach 3's law with the allocation for C = k·N^p·D (module docstring)."""

    fit: Approach3Fit
    per_token: PowerLaw
    """FLOPs per token C/D as a power law of N: coefficient k, exponent p."""

    def statistics(self, flops: float) -> dict[str, float]:
        f = self.fit
        stats = allocation(f.E, f.A, f.B, f.alpha, f.beta, self.per_token, flops)
        return {key: float(value) for key, value in stats.items()}


def allocation(E: object, A: object, B: object, alpha: object, beta: object,
               per_token: PowerLaw, flops: float) -> dict[str, np.ndarray]:
    """a, b, n_opt, d_opt, tokens_per_param (arrays: one per bootstrap resample, or scalars)."""
    A, B, alpha, beta = (np.asarray(v, dtype=float) for v in (A, B, alpha, beta))
    ln_k, p, ln_c = per_token.log_coefficient, per_token.exponent, np.log(flops)
    ln_n = (np.log(alpha * A) - np.log(p * beta * B) + beta * (ln_c - ln_k)) / (alpha + p * beta)
    ln_d = ln_c - ln_k - p * ln_n
    a = beta / (alpha + p * beta)
    return {"a": a, "b": 1.0 - p * a, "n_opt": np.exp(ln_n), "d_opt": np.exp(ln_d),
            "tokens_per_param": np.exp(ln_d - ln_n)}


@dataclass(frozen=True)
class ConventionRow:
    """Approaches 2 and 3 refitted under one (N, C) convention."""

    n: str
    """"total" or "non_embedding"."""
    c: str
    """"6nd" or "exact"."""
    n_label: str
    reference_flops: float | None
    """The largest C of the runs in this convention: where tokens per parameter is given."""
    approach2: Estimate[Approach2Fit] | Skipped
    approach3: Estimate[GeneralAllocation] | Skipped

    @property
    def label(self) -> str:
        n = "non-embedding N" if self.n == "non_embedding" else f"N = {self.n_label}"
        return f"{n}, C = {C_LABELS[self.c]}"


@dataclass(frozen=True)
class ConventionTable:
    """The four conventions side by side."""

    rows: tuple[ConventionRow, ...]
    n_resamples: int
    seed: int

    def spread(self, approach: str, key: str) -> tuple[float, float] | None:
        """(min, max) of a statistic over the conventions where the approach was fitted."""
        values = [getattr(r, f"approach{approach}").point[key] for r in self.rows
                  if isinstance(getattr(r, f"approach{approach}"), Estimate)]
        return (min(values), max(values)) if values else None


def _strata(runs: RunsTable, by: str):
    """The budget of each run when resampling within budgets (by "budget"), else None."""
    return runs.column("budget") if by == "budget" else None


def _approach2(runs: RunsTable, ref: float, n_boot: int, seed: int, by: str = "run"
               ) -> Estimate[Approach2Fit] | Skipped:
    cols = [runs.column(k) for k in ("N", "D", "C", "loss", "budget")]
    try:
        fit = fit_approach2(*cols)
    except FitError as err:
        return Skipped(str(err))
    if n_boot == 0:
        return Estimate(fit, fit.statistics(ref))
    try:
        boot = bootstrap_approach2(*cols, flops=ref, n_resamples=n_boot, seed=seed,
                                   strata=_strata(runs, by))
    except FitError as err:
        return Estimate(fit, fit.statistics(ref), bootstrap_error=str(err))
    return Estimate(fit, fit.statistics(ref), bootstrap=boot)


def _approach3(runs: RunsTable, fitted: tuple[Approach3Fit, Bootstrap | None, str | None],
               ref: float) -> Estimate[GeneralAllocation] | Skipped:
    fit, boot, boot_error = fitted
    per_token = fit_power_law(runs.column("N"), runs.column("C") / runs.column("D"),
                              what="FLOPs per token against N")
    general = GeneralAllocation(fit, per_token)
    if boot is None:
        return Estimate(general, general.statistics(ref), bootstrap_error=boot_error)
    s = boot.samples
    samples = allocation(s["E"], s["A"], s["B"], s["alpha"], s["beta"], per_token, ref)
    derived = Bootstrap(n_resamples=boot.n_resamples, n_failed=boot.n_failed, seed=boot.seed,
                        samples=samples, failures=boot.failures, by=boot.by)
    return Estimate(general, general.statistics(ref), bootstrap=derived)


def _fit3(runs: RunsTable, n_boot: int, seed: int, n_jobs: int, by: str = "run"
          ) -> tuple[Approach3Fit, Bootstrap | None, str | None]:
    """Approach 3 on this N (FitError propagates); its bootstrap or why there is none."""
    n, d, loss = runs.column("N"), runs.column("D"), runs.column("loss")
    fit = fit_approach3(n, d, loss)
    if n_boot == 0:
        return fit, None, None
    try:
        return fit, bootstrap_approach3(n, d, loss, fit, flops=float(runs.column("C").max()),
                                        n_resamples=n_boot, seed=seed, n_jobs=n_jobs,
                                        strata=_strata(runs, by)), None
    except FitError as err:
        return fit, None, str(err)


def compare_conventions(runs: RunsTable, *, bootstrap: int, seed: int = 0,
                        approaches: Iterable[str] = ("2", "3"),
                        n_jobs: int = 1, bootstrap_by: str = "run") -> ConventionTable:
    """Refit the requested approaches under every convention of GRID (module docstring).

    ``bootstrap`` is the main analysis' resample count; the refits use resamples_for(it).
    """
    wanted = set(approaches)
    n_boot = resamples_for(bootstrap)
    not_requested = Skipped("not requested")
    fits3: dict[str, tuple[Approach3Fit, Bootstrap | None, str | None] | Skipped] = {}
    rows = []
    for n_conv, c_conv in GRID:
        try:
            table = convention_runs(runs, n_conv, c_conv)
        except DataError as err:
            missing = Skipped(str(err))
            label = "params_non_embedding" if n_conv == "non_embedding" else runs.n_convention
            rows.append(ConventionRow(n_conv, c_conv, label, None, missing, missing))
            continue
        ref = float(table.column("C").max())
        a2: Estimate[Approach2Fit] | Skipped = not_requested
        if "2" in wanted:
            a2 = _approach2(table, ref, n_boot, seed, bootstrap_by)
        a3: Estimate[GeneralAllocation] | Skipped = not_requested
        if "3" in wanted:
            if n_conv not in fits3:  # one fit per N: the C convention only moves the optimum
                try:
                    fits3[n_conv] = _fit3(table, n_boot, seed, n_jobs, bootstrap_by)
                except FitError as err:
                    fits3[n_conv] = Skipped(str(err))
            fitted = fits3[n_conv]
            try:
                a3 = fitted if isinstance(fitted, Skipped) else _approach3(table, fitted, ref)
            except AnalysisError as err:
                a3 = Skipped(str(err))
        rows.append(ConventionRow(n_conv, c_conv, table.n_convention, ref, a2, a3))
    return ConventionTable(rows=tuple(rows), n_resamples=n_boot, seed=seed)


def refit_conventions(runs: RunsTable, wanted: Iterable[str], bootstrap: int, seed: int,
                      n_jobs: int = 1, bootstrap_by: str = "run") -> ConventionTable | Skipped:
    """Approaches 2 and 3 (those of ``wanted``) refitted under the other N and C conventions:
    ``analysis.analyze``'s last step, and the report's, which runs it in a worker beside its
    figures. ``runs``: the fitted points (``Analysis.fitted_runs``). Here, not in
    analysis.analyze, so that a worker that runs it imports the fits and no more: the pool's
    fork server preloads this module (analysis.numerics.workers.POOL_PRELOAD)."""
    approaches = set(wanted) & {"2", "3"}
    if not approaches:
        return Skipped("not requested")
    with single_threaded_blas():
        return compare_conventions(runs, bootstrap=bootstrap, seed=seed, approaches=approaches,
                                   n_jobs=n_jobs, bootstrap_by=bootstrap_by)


def timed_refit_conventions(*args: object) -> tuple[ConventionTable | Skipped, float]:
    """refit_conventions(*args) and its wall time in seconds (analyze's progress line; the
    report runs it in a worker: analysis.numerics.workers.in_worker)."""
    t0 = time.monotonic()
    return refit_conventions(*args), time.monotonic() - t0  # type: ignore[arg-type]

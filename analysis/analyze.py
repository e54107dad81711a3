"""One call that runs every analysis on a sweep: what the fit CLI and the report use.

    runs = load_sweep("chinchilla").runs            # or load_csv(...)
    result = analyze(runs, curves, bootstrap=1000, seed=0)
    result.approach3.fit.alpha, result.approach3.ci95("alpha"), result.comparison, ...
    json.dumps(analysis_to_json(result))            # analysis.schema: docs/analysis.md

The approaches are the entries of the table of fits (``analysis.fits.table.FITS``);
``result.fits`` maps each name to an ``Estimate`` (``result.kaplan``, ``result.approach1``
... for the built-in ones). Each approach is an ``Estimate`` (the typed fit, its point statistics and its bootstrap) or
a ``Skipped`` with the reason (e.g. "no training curves", "a single compute budget"), so a
report can show everything that was and was not possible with this sweep.

What is fitted (``analysis.runs.selection``): held-out runs never are; when the sweep has cosine
and WSD runs only the cosine runs are; seed replicates are averaged into one point per cell
first (their final losses, and their curves for the fits that read curves). Around the fits:
whether the approaches agree on a (``analysis.checks.agreement``), the run-to-run noise from
the replicates (``analysis.checks.noise``), the residuals against it
(``analysis.checks.residuals``), the held-out predictions (``analysis.checks.heldout``), the
refits under other N/C conventions (``analysis.checks.conventions``) and the WSD-vs-cosine
pairs (``analysis.checks.schedules``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

import pandas as pd

from analysis.checks.agreement import Agreement, compare_approaches
from analysis.checks.answer import Answer, answer
from analysis.checks.backtest import Backtests, backtest
from analysis.checks.conventions import ConventionTable, timed_refit_conventions
from analysis.checks.extrapolation import ExtrapolationCheck, check_approach2, check_approach3
from analysis.checks.heldout import HoldoutCheck, check_holdout
from analysis.checks.model_spread import ModelSpread, model_spread
from analysis.checks.noise import (
    NoiseEstimate,
    NoiseSplit,
    collapse_curves,
    estimate_noise,
    split_by_optimum,
)
from analysis.checks.propagation import propagate_noise_approach2
from analysis.checks.published import ComparisonRow, compare
from analysis.checks.residuals import (
    ResidualCheck,
    approach2_residuals,
    approach3_residuals,
    law_residuals,
)
from analysis.checks.schedules import ScheduleComparison, compare_schedules
from analysis.checks.verdict import LAWS, Verdict, interval_problem, judge_laws
from analysis.errors import FitError
from analysis.fits.optimum import line_costs
from analysis.fits.results import Estimate, Skipped
from analysis.fits.spec import FitInput
from analysis.fits.table import FITS, compared
from analysis.numerics.bootstrap import BY, Bootstrap, resolve_by
from analysis.numerics.threads import single_threaded_blas
from analysis.numerics.workers import worker_pool
from analysis.runs.selection import FitSelection, select_runs
from analysis.runs.table import Excluded, RunsTable

__all__ = ["Analysis", "Estimate", "Skipped", "analyze"]
NOT_REQUESTED = Skipped("not requested")


@dataclass(frozen=True)
class Analysis:
    """Everything fitted on one set of runs (see docs/analysis.md for the JSON form)."""

    source: str
    n_runs: int
    """Finished runs loaded: fitted, held out and left out together."""
    excluded: tuple[Excluded, ...]
    conventions: Mapping[str, str]
    reference_flops: float
    """The compute at which tokens per parameter is reported (default: the largest C)."""
    n_resamples: int
    seed: int
    fits: Mapping[str, Estimate | Skipped]
    """Each approach of the table of fits (``analysis.fits.table.FITS``), in table order."""
    comparison: tuple[ComparisonRow, ...]
    selection: FitSelection = field(repr=False, compare=False)
    """Which runs were fitted (``selection.fitted``), held out and left out, and why."""
    noise: NoiseEstimate | Skipped
    residuals: tuple[ResidualCheck, ...]
    """Approach 3's and each IsoFLOP parabola's residual RMS against the noise."""
    holdout: HoldoutCheck | Skipped
    convention_refits: ConventionTable | Skipped
    schedules: ScheduleComparison | Skipped
    extrapolation: Mapping[str, ExtrapolationCheck | Skipped] = field(default_factory=dict)
    noise_split: NoiseSplit | None = None
    """The noise near each budget's Approach 2 optimum and away from it (None without both)."""
    noise_propagation: Bootstrap | Skipped = field(default_factory=lambda: Skipped("not run"))
    """Approach 2 refitted on simulated re-runs with the measured σ (analysis.propagation)."""
    agreement: tuple[Agreement, ...] | Skipped = field(
        default_factory=lambda: Skipped("not run"))
    """Each pair of approaches on a: the paired bootstrap difference (analysis.agreement)."""
    verdict: Verdict | None = None
    """Which laws describe the runs and the headline law (analysis.checks.verdict)."""
    bootstrap_by: str = "run"
    """What each resample drew from: all runs ("run") or the runs of each budget ("budget";
    analysis.numerics.bootstrap; "auto" is resolved before this is set)."""
    backtests: Backtests | Skipped = field(default_factory=lambda: Skipped("not run"))
    """Each judged law against the held-out runs and in a rolling-origin backtest
    (analysis.checks.backtest)."""
    model_spread: ModelSpread | Skipped = field(default_factory=lambda: Skipped("not run"))
    """a and tokens per parameter across the laws and the fit windows: the uncertainty a
    bootstrap leaves out (analysis.checks.model_spread)."""

    @property
    def fitted_runs(self) -> RunsTable:
        """The points every fit read (one per cell; what the figures draw)."""
        return self.selection.fitted

    @property
    def kaplan(self) -> Estimate | Skipped:
        return self.fits.get("kaplan", NOT_REQUESTED)

    @property
    def approach1(self) -> Estimate | Skipped:
        return self.fits.get("1", NOT_REQUESTED)

    @property
    def approach2(self) -> Estimate | Skipped:
        return self.fits.get("2", NOT_REQUESTED)

    @property
    def approach3(self) -> Estimate | Skipped:
        return self.fits.get("3", NOT_REQUESTED)

    def approaches(self) -> dict[str, Estimate | Skipped]:
        return dict(self.fits)

    def answer(self) -> Answer | None:
        """The answer at the reference compute (analysis.checks.answer): the headline law's
        N_opt, D_opt, tokens per parameter and loss, how sure, what next; None without one."""
        fitted = self.fitted_runs
        costs = line_costs(fitted)
        largest = float(costs.max()) if len(fitted) else self.reference_flops
        return answer(self.fits, self.verdict, self.model_spread, self.reference_flops,
                      largest, fitted.data_unit)


def analyze(
    runs: RunsTable,
    curves: pd.DataFrame | None = None,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    approaches: Iterable[str] | None = None,
    reference_flops: float | None = None,
    n_jobs: int = 1,
    conventions: bool = True,
    max_epochs: float | None = None,
    progress: Callable[[str], None] | None = None,
    bootstrap_by: str = "auto",
    holdout_above: float | None = None,
    backtests: bool = True,
    unique_tokens: float | None = None,
) -> Analysis:
    """Fit every requested approach (default: every entry of the table of fits), bootstrap
    it, compare with the documented values and run the checks. ``bootstrap=0`` skips the
    intervals (fast); ``conventions=False`` skips the refits under other N/C conventions
    (the slowest check). ``max_epochs`` leaves out runs that repeated their data more than
    that (analysis.runs.selection). ``progress`` gets a line as each fit (with its bootstrap)
    is done. ``bootstrap_by`` "budget" resamples each IsoFLOP budget's runs within it
    (analysis.numerics.bootstrap.BY); "run" pools them; "auto" is "budget" for an IsoFLOP
    design (analysis.numerics.bootstrap.resolve_by). ``holdout_above`` holds out every run
    above that cost (analysis.runs.selection); ``backtests=False`` skips the rolling-origin
    refits (analysis.checks.backtest; the held-out runs are predicted either way).
    ``unique_tokens``: a corpus size at which the data-constrained laws also give their
    optimum (FitInput.unique_tokens)."""
    if bootstrap_by not in BY:
        raise ValueError(f"bootstrap_by must be one of {BY}, got {bootstrap_by!r}")
    wanted = set(FITS) if approaches is None else set(approaches)
    unknown = wanted - set(FITS)
    if unknown:
        raise ValueError(f"unknown approach(es) {sorted(unknown)}; known: {tuple(FITS)}")
    selection = select_runs(runs, max_epochs, holdout_above)
    all_runs, runs = runs, selection.fitted  # every fit below reads the selected points
    noise = estimate_noise(selection.replicates)
    sigma = noise.sigma if isinstance(noise, NoiseEstimate) else None
    # A WSD branch and its cosine run may average other seeds than each other: their difference
    # keeps the seeds' offsets, so it is judged against the spread within cells.
    spread = noise.pooled_sigma if isinstance(noise, NoiseEstimate) else None
    ref = float(reference_flops) if reference_flops else float(runs.column("C").max())
    with single_threaded_blas(), worker_pool(n_jobs):  # one pool of workers for every fit
        fitted_curves = collapse_curves(selection.replicates, curves)  # seeds averaged
        bootstrap_by = resolve_by(bootstrap_by, runs.column("budget"))
        strata = runs.column("budget") if bootstrap_by == "budget" else None
        fits = fit_all(FitInput(runs, fitted_curves, ref, bootstrap, seed, n_jobs, strata,
                                unique_tokens, selection.repeats),
                       wanted, progress)
        a2, a3 = fits.get("2", NOT_REQUESTED), fits.get("3", NOT_REQUESTED)
        extrapolation = _extrapolation(runs, a2, a3)
        t0 = time.monotonic()
        tests = backtest(runs, selection.holdout, fitted_curves, fits, seed,
                         rolling=backtests, repeats=selection.repeats)
        if progress is not None and backtests:
            progress(f"rolling-origin backtests in {time.monotonic() - t0:.1f} s")
        verdict = judge_laws(fits, runs, selection.holdout, sigma, tests,
                             noise.dof if isinstance(noise, NoiseEstimate) else None)
        residuals = _residuals(runs, fits, sigma, with_parabolas="2" in wanted)
        across: ModelSpread | Skipped = Skipped("no parametric law was fitted")
        if verdict.headline is not None:
            across = model_spread(runs, fitted_curves, fits, tests, verdict.headline, ref, seed)
        refits: ConventionTable | Skipped = NOT_REQUESTED
        if conventions:
            refits, seconds = timed_refit_conventions(runs, wanted, bootstrap, seed, n_jobs,
                                                      bootstrap_by)
            if progress is not None and not isinstance(refits, Skipped):
                progress(f"refits under the other N and C conventions in {seconds:.1f} s")
    return Analysis(
        source=all_runs.source, n_runs=len(all_runs), excluded=all_runs.excluded,
        conventions={"N": runs.n_convention, "C": runs.c_convention,
                     "kaplan": runs.kaplan_n_c()[2]},
        reference_flops=ref, n_resamples=bootstrap, seed=seed, fits=fits,
        comparison=compare_documented(fits, ref, verdict), backtests=tests,
        model_spread=across,
        selection=selection, noise=noise, residuals=residuals,
        holdout=check_holdout(selection.holdout, a3, a2),
        convention_refits=refits, schedules=compare_schedules(all_runs, spread),
        extrapolation=extrapolation, noise_split=_noise_split(noise, a2),
        noise_propagation=_propagation(runs, sigma, a2, ref, bootstrap, seed),
        agreement=compare_approaches({k: fits.get(k, NOT_REQUESTED) for k in compared()}),
        verdict=verdict, bootstrap_by=bootstrap_by,
    )


def fit_all(inp: FitInput, wanted: set[str],
            progress: Callable[[str], None] | None = None) -> dict[str, Estimate | Skipped]:
    """Every entry of the table of fits, in table order; those not wanted are Skipped.
    ``progress`` gets "fit i/n NAME ... in s" as each is done (a bootstrap can take a while).

    With a pool of workers (``inp.n_jobs`` > 1) the fits run at once, each in a thread of this
    process: a fit's own work (its full-data fit, a bootstrap that stays in the process) goes
    on while the workers refit another fit's resamples, where one after another they waited
    for it (issue 21). Fits share nothing, so each result is the one it would be alone; the
    lines then come in the order the fits end, numbered so."""
    todo = [name for name in FITS if name in wanted]

    def run(name: str) -> tuple[str, Estimate | Skipped, float]:
        t0 = time.monotonic()
        return name, FITS[name].run(inp), time.monotonic() - t0

    if inp.n_jobs > 1 and len(todo) > 1:
        threads = ThreadPoolExecutor(max_workers=len(todo), thread_name_prefix="fit")
        with threads:
            finished = (f.result() for f in as_completed([threads.submit(run, n) for n in todo]))
            done = _collect(finished, len(todo), inp.n_resamples, progress)
    else:
        done = _collect(map(run, todo), len(todo), inp.n_resamples, progress)
    return {name: done.get(name, NOT_REQUESTED) for name in FITS}


def _collect(finished: Iterable[tuple[str, Estimate | Skipped, float]], total: int,
             n_resamples: int, progress: Callable[[str], None] | None
             ) -> dict[str, Estimate | Skipped]:
    out: dict[str, Estimate | Skipped] = {}
    for i, (name, est, seconds) in enumerate(finished, 1):
        out[name] = est
        if progress is not None:
            label = f"Approach {name}" if name.isdigit() else name
            progress(f"fit {i}/{total} {label} with {n_resamples} resamples in {seconds:.1f} s")
    return out


def compare_documented(fits: Mapping[str, Estimate | Skipped], ref: float,
                       verdict: Verdict | None = None) -> tuple[ComparisonRow, ...]:
    """The published values (analysis.checks.published) against each fit's estimates; a law
    that does not describe the runs (``verdict``) is never called consistent with them."""
    estimates = {
        name: (est.reason if isinstance(est, Skipped) else (dict(est.point), est.intervals))
        for name, est in fits.items()
    }
    judged = None if verdict is None else {
        v.approach: ("" if v.comparable else v.reason()) for v in verdict.laws}
    problems = {(name, key): why for name, est in fits.items() if isinstance(est, Estimate)
                for key in est.point if (why := interval_problem(est, key)) is not None}
    return compare(estimates, tokens_note=f"at C = {ref:.3g}", not_describing=judged,
                   interval_problems=problems)


def _residuals(runs: RunsTable, fits: Mapping[str, Estimate | Skipped], sigma: float | None,
               *, with_parabolas: bool) -> tuple[ResidualCheck, ...]:
    """Approach 3's, the parabolas' and the other judged laws' (analysis.checks.verdict.LAWS,
    the entries of the table with ``FitSpec.judged``)."""
    a3 = fits.get("3", NOT_REQUESTED)
    out: tuple[ResidualCheck, ...] = (
        () if isinstance(a3, Skipped) else (approach3_residuals(runs, a3.fit, sigma),))
    if with_parabolas:
        out += approach2_residuals(runs, sigma)
    for name, (what, n_params) in LAWS.items():
        est = fits.get(name, NOT_REQUESTED)
        if name != "3" and isinstance(est, Estimate):
            out += (law_residuals(what, runs, est.fit, n_params, sigma),)
    return out


def _propagation(runs: RunsTable, sigma: float | None, a2: Estimate | Skipped, ref: float,
                 n: int, seed: int) -> Bootstrap | Skipped:
    if sigma is None:
        return Skipped("no noise measured (no seed replicates)")
    if isinstance(a2, Skipped):
        return Skipped("Approach 2 was not fitted")
    if n <= 0:
        return Skipped("no resamples asked for (--bootstrap 0)")
    try:
        return propagate_noise_approach2(runs, sigma, flops=ref, n_simulations=n, seed=seed)
    except FitError as err:
        return Skipped(str(err))


def _noise_split(noise: NoiseEstimate | Skipped, a2: Estimate | Skipped) -> NoiseSplit | None:
    if isinstance(noise, Skipped) or isinstance(a2, Skipped):
        return None
    return split_by_optimum(noise, {m.budget: m.n_opt for m in a2.fit.budgets if m.ok})


def _extrapolation(runs: RunsTable, a2: Estimate | Skipped,
                   a3: Estimate | Skipped) -> dict[str, ExtrapolationCheck | Skipped]:
    out: dict[str, ExtrapolationCheck | Skipped] = {}
    for name, est, check in (("2", a2, lambda: check_approach2(runs)),
                             ("3", a3, lambda: check_approach3(runs, a3.fit))):
        if isinstance(est, Skipped):
            out[name] = Skipped(f"approach {name} was not fitted")
            continue
        try:
            out[name] = check()
        except FitError as err:
            out[name] = Skipped(str(err))
    return out

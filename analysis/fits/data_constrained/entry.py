"""The data-constrained laws as entries of the table of fits, and what they say beyond the
fit: the loss each repeated run owes to repetition, and the optimum for a fixed corpus.

``run_data_constrained`` fits the law (analysis.fits.data_constrained.law) on the selected
runs, reads its allocation along the sweep's lines with fresh data, and bootstraps it over
runs (each resample refitted from the full-data optimum and its backup starts: ~0.25 s for the
additive form and ~0.4 s for the interaction form on the 296 published runs, 2026-12-07). It is
Skipped, as not applying, unless every run knows U and some run repeats its data.

``corpus_optimum``: the compute-optimal N and D for a budget when only U unique tokens exist
(``predict --unique-tokens``): L(N, D(N; C), U) minimised along the sweep's lines as every
allocation is (analysis.fits.optimum), beside the same with fresh data; their difference is the
loss lost to the finite corpus. ``returns_vanish_flops``: the budget beyond which the optimal
run's next repetitions are worth under 10% of fresh data (``epochs_vanish`` epochs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar

from analysis.errors import FitError
from analysis.fits.data_constrained.law import (
    REPEAT_RTOL,
    DataConstrainedLaw,
    fit_data_constrained,
    what,
)
from analysis.fits.laws import LawFit
from analysis.fits.optimum import (
    IsoFlopLines,
    lines_from_runs,
    optimal_allocation,
    optimum_along,
)
from analysis.fits.results import Estimate, Skipped
from analysis.fits.spec import FitInput, estimate
from analysis.numerics.bootstrap import Bootstrap, run_bootstrap
from analysis.runs.table import RunsTable

# --------------------------------------------------------------------------- a fixed corpus


VANISH_VALUE = 0.1
"""Returns vanish where the next repeated token is worth under this share of a fresh one: at
R_D = R_D*·ln(1/VANISH_VALUE) repetitions (the law's marginal value of D is exp(−R_D/R_D*))."""


@dataclass(frozen=True)
class CorpusOptimum:
    """The compute-optimal run for a budget when only ``unique_tokens`` exist, beside the
    optimum with unlimited data (both along the sweep's lines, in its FLOP convention)."""

    flops: float
    unique_tokens: float
    n_opt: float
    d_opt: float
    loss: float
    n_opt_fresh: float
    d_opt_fresh: float
    loss_fresh: float
    on_bound: bool
    """Either optimum lies on the edge of the search (a decade beyond the sampled sizes)."""

    @property
    def epochs(self) -> float:
        return self.d_opt / self.unique_tokens

    @property
    def repetition_cost(self) -> float:
        """Loss lost to the finite corpus at this budget, nats."""
        return self.loss - self.loss_fresh

    def statistics(self) -> dict[str, float]:
        return {"n_opt_corpus": self.n_opt, "d_opt_corpus": self.d_opt,
                "epochs_corpus": self.epochs, "loss_corpus": self.loss,
                "repetition_cost": self.repetition_cost}


def corpus_optimum(law: DataConstrainedLaw, lines: IsoFlopLines, flops: float,
                   unique_tokens: float) -> CorpusOptimum:
    """The N and D (along ``lines`` at ``flops``) that minimise L(N, D, U) with U =
    ``unique_tokens``, beside the optimum with fresh data."""
    if not (flops > 0 and unique_tokens > 0):
        raise ValueError("flops and unique_tokens must be > 0")
    ln_u, ln_c = math.log(unique_tokens), math.log(flops)

    def with_corpus(ln_n: np.ndarray, ln_d: np.ndarray) -> np.ndarray:
        return law.log_loss_u(ln_n, ln_d, np.minimum(ln_u, ln_d))

    n, loss, edge = optimum_along(with_corpus, lines, flops)
    n_f, loss_f, edge_f = optimum_along(law.log_loss, lines, flops)
    d, d_f = (float(np.exp(lines.ln_d(np.array([math.log(v)]), ln_c)[0])) for v in (n, n_f))
    return CorpusOptimum(flops, unique_tokens, n, d, loss, n_f, d_f, loss_f, edge or edge_f)


def epochs_vanish(law: DataConstrainedLaw) -> float:
    """The epochs after which a further repetition is worth under VANISH_VALUE of a fresh
    token: 1 + R_D*·ln(1/VANISH_VALUE)."""
    return 1.0 + law.parameters()["R_D_star"] * math.log(1.0 / VANISH_VALUE)


def _epochs_6nd(law: DataConstrainedLaw, flops: float, ln_u: float) -> float:
    """Epochs of the compute-optimal run for ``flops`` = 6ND with U = e^ln_u (bounded search
    in ln N, 25 nats either side of √(C/6): no sweep's lines reach that far)."""
    def f(ln_n: float) -> float:
        ln_d = math.log(flops / 6.0) - ln_n
        return float(law.log_loss_u(np.array([ln_n]), np.array([ln_d]),
                                    np.array([min(ln_u, ln_d)]))[0])
    centre = 0.5 * math.log(flops / 6.0)
    res = minimize_scalar(f, bounds=(centre - 25.0, centre + 25.0), method="bounded",
                          options={"xatol": 1e-9})
    return math.exp(math.log(flops / 6.0) - float(res.x) - ln_u)


def returns_vanish_flops(law: DataConstrainedLaw, unique_tokens: float) -> float | None:
    """The budget (C = 6ND) at which the compute-optimal run on ``unique_tokens`` trains
    ``epochs_vanish`` epochs: beyond it more compute mostly buys repetitions worth < 10% of
    fresh data. None when no budget below 1e45 FLOPs gets there."""
    target, ln_u = epochs_vanish(law), math.log(unique_tokens)
    lo = 6.0 * unique_tokens * unique_tokens / 20.0  # ~one epoch at 20 tokens per parameter
    if _epochs_6nd(law, lo, ln_u) >= target:
        return lo
    hi = lo
    while _epochs_6nd(law, hi, ln_u) < target:
        lo, hi = hi, hi * 4.0
        if hi > 1e45:
            return None
    for _ in range(60):  # bisection in ln C, to 1e-6 relative
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if _epochs_6nd(law, mid, ln_u) < target else (lo, mid)
        if hi / lo < 1.0 + 1e-6:
            break
    return math.sqrt(lo * hi)


# --------------------------------------------------------------------------- the table entry


@dataclass(frozen=True)
class RepeatedRun:
    """A fitted run that repeats its data, and the loss the law puts on the repetition."""

    run_id: str
    N: float
    D: float
    unique_tokens: float
    loss: float
    """Its observed final loss."""
    attributed: float
    """L(N, D, U) − L(N, D, fresh): the loss the law attributes to repetition (and to
    parameters beyond N_opt(U) that fresh data would have used), nats."""

    @property
    def epochs(self) -> float:
        return self.D / self.unique_tokens

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "N": self.N, "D": self.D, "U": self.unique_tokens,
                "epochs": self.epochs, "loss": self.loss, "attributed": self.attributed}


@dataclass(frozen=True)
class DataConstrainedFit(LawFit):
    """The table's fit: a LawFit whose loss at the runs reads their U (``loss_of_runs``),
    with what it attributes to repetition at each fitted run that repeats (``repeated``)."""

    repeated: tuple[RepeatedRun, ...] = ()
    unique_tokens: float | None = None
    """A corpus size U (FitInput.unique_tokens): the statistics then add the optimum at the
    reference compute with only U unique tokens (``corpus_optimum``)."""

    def statistics(self) -> dict[str, float]:
        out = super().statistics()
        out["epochs_vanish"] = epochs_vanish(self.law)
        if self.unique_tokens is not None:
            out.update(corpus_optimum(self.law, self.lines, self.allocation.reference,
                                      self.unique_tokens).statistics())
        return out

    def loss_of_runs(self, runs: RunsTable) -> np.ndarray:
        law: DataConstrainedLaw = self.law
        return law.loss(runs.column("N"), runs.column("D"), runs.unique_tokens())


def repeated_runs(law: DataConstrainedLaw, runs: RunsTable) -> tuple[RepeatedRun, ...]:
    """Each run of ``runs`` that repeats its data, with the loss the law attributes to it."""
    n, d, u, loss = runs.column("N"), runs.column("D"), runs.unique_tokens(), runs.column("loss")
    rep = np.flatnonzero(d > u * (1 + REPEAT_RTOL))
    extra = law.repetition_share(n[rep], d[rep], u[rep])
    ids = runs.frame["run_id"].astype(str).to_numpy()
    return tuple(RepeatedRun(str(ids[i]), float(n[i]), float(d[i]), float(u[i]),
                             float(loss[i]), float(x)) for i, x in zip(rep, extra, strict=True))


def _inputs(runs: RunsTable, form: str) -> tuple[np.ndarray, ...] | Skipped:
    u = runs.unique_tokens()
    missing = ~np.isfinite(u)
    if missing.all():
        return Skipped("no run records U, its unique tokens (give --unique-col for a CSV; a "
                       "sweep's runs record their epochs)", applies=False)
    if missing.any():
        return Skipped(f"{int(missing.sum())} of {u.size} runs lack U, their unique tokens: "
                       "the law needs it for every run")
    n, d, loss = (runs.column(k) for k in ("N", "D", "loss"))
    if not (d > u * (1 + REPEAT_RTOL)).any():
        return Skipped("no run repeats its data (every D <= U): R_D* and R_N* have nothing "
                       "to be fitted to, and the law is the fresh-data law", applies=False)
    return n, d, u, loss


@dataclass(frozen=True)
class _Refit:
    """One bootstrap refit (module level, so worker processes can unpickle it)."""

    arrays: tuple[np.ndarray, ...]
    form: str
    lines: Any
    reference: float
    start: DataConstrainedLaw
    unique_tokens: float | None = None

    def __call__(self, idx: np.ndarray) -> dict[str, float]:
        n, d, u, loss = (a[idx] for a in self.arrays)
        if not (d > u * (1 + REPEAT_RTOL)).any():
            raise FitError(f"{what(self.form)}: the resample has no run that repeats its data")
        law = fit_data_constrained(n, d, u, loss, self.form, self.start)
        alloc = optimal_allocation(law.log_loss, self.lines, self.reference)
        return DataConstrainedFit(law, alloc, self.lines,
                                  unique_tokens=self.unique_tokens).statistics()


def run_data_constrained(inp: FitInput, form: str,
                         pending: Callable[..., object] | None = None) -> Estimate | Skipped:
    """The table entry: fit on the selected runs, allocation along the lines with fresh data,
    bootstrap over runs (each resample refitted from the full-data optimum). ``pending(N, D,
    U, loss)``: what the full-data fit carries as its ``identification`` (the table's:
    analysis.checks.repetition, R_D*'s and R_N*'s profiles). The repeat variants the other
    laws never see (``FitInput.repeats``) are fitted here beside the runs."""
    inp = inp.with_repeats()
    arrays = _inputs(inp.runs, form)
    if isinstance(arrays, Skipped):
        return arrays
    lines = lines_from_runs(inp.runs)
    ref = inp.reference_flops

    def fit() -> DataConstrainedFit:
        law = fit_data_constrained(*arrays, form=form)
        if pending is not None:
            law = replace(law, identification=pending(*arrays))
        return DataConstrainedFit(law, optimal_allocation(law.log_loss, lines, ref), lines,
                                  repeated_runs(law, inp.runs), inp.unique_tokens)

    boot = None
    if inp.n_resamples > 0:
        def boot(f: DataConstrainedFit) -> Bootstrap:
            return run_bootstrap(len(arrays[0]), _Refit(arrays, form, lines, ref, f.law,
                                                              inp.unique_tokens),
                                 n_resamples=inp.n_resamples, seed=inp.seed, n_jobs=inp.n_jobs,
                                 strata=inp.strata)
    return estimate(fit, DataConstrainedFit.statistics, boot)

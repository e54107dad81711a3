"""Which recipe scales better: the compute multiplier of sweep B over sweep A, with intervals.

The question a comparison answers (an architecture, a data mix, an optimizer): is B worth it
at scale, and does its advantage grow or shrink with compute? The answer is the effective
compute multiplier

    m(C) = C_A(L_B(C)) / C,

the compute the baseline A needs to reach the loss B reaches with C, over C (m > 1: B is
better; m = 2: B at C is worth A at 2C). Each side's compute-optimal loss frontier L_opt(C)
is its Approach 3 law minimised along its own IsoFLOP lines (analysis.fits.optimum), the
allocation every approach of this project reports; C_A(L) inverts A's frontier (it falls
monotonically with C). Beside m: each side's a (N_opt ∝ C^a), tokens per parameter, and the
exponent of the reducible loss along the frontier, γ = αβ/(α+β) (L_opt − E ∝ C^-γ under
C = 6ND; Hoffmann et al. 2022, Eq. 4), with the difference B − A.

Intervals: each side's runs (one point per cell, seeds averaged) are resampled on their own
(the sweeps are independent experiments), each draw refits both laws, and every statistic is
read per draw; 95% percentile intervals. A multiplier at a compute above both sweeps' largest
budget is marked as an extrapolation.

Refusals: losses compare only when measured on the same tokens, so sweeps whose runs record
different corpora, tokenizers, token data (the split and its fingerprint), sequence lengths
or FLOP conventions are refused, naming the difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import brentq

from analysis.errors import DataError, FitError
from analysis.fits.approach3 import Approach3Fit, fit_approach3, refit_starts
from analysis.fits.optimum import IsoFlopLines, lines_from_runs, optimal_allocation, optimum_along
from analysis.numerics.bootstrap import Interval, resample_indices
from analysis.numerics.threads import single_threaded_blas
from analysis.runs.selection import select_runs
from analysis.runs.table import RunsTable

SAME = ("data_corpus", "data_tokenizer", "data_fingerprint", "seq_len")
"""Run columns that must agree between the sweeps for their losses to compare."""
SEARCH_DECADES = 2.0
"""C_A(L) is sought this many decades below and above A's budgets: N_opt moves about one
decade per two of C, which is how far beyond its sizes the optimum search reaches
(analysis.fits.optimum.SEARCH_FACTOR). A loss whose optimum lies on that search bound is
not trusted (NaN): the multiplier there is reported as out of range, not as a number."""


@dataclass(frozen=True)
class Frontier:
    """L_opt(C) of one sweep: its Approach 3 law minimised along its IsoFLOP lines."""

    fit: Approach3Fit
    lines: IsoFlopLines

    @property
    def budgets(self) -> tuple[float, ...]:
        return self.lines.budgets

    def loss(self, flops: float) -> float:
        """L_opt(C); NaN where the optimum falls on the search bound (beyond the sizes)."""
        _, loss, on_bound = optimum_along(self.fit.log_loss, self.lines, flops)
        return float("nan") if on_bound else loss

    def compute_for(self, loss: float) -> float:
        """The compute at which this frontier reaches ``loss``: inf when it does not within
        SEARCH_DECADES above its budgets, 0 when it already does that far below, NaN when
        the answer lies where the frontier is not trusted."""
        lo = float(np.log(min(self.budgets))) - SEARCH_DECADES * np.log(10.0)
        hi = float(np.log(max(self.budgets))) + SEARCH_DECADES * np.log(10.0)

        def gap(ln_c: float) -> float:
            return float(np.log(self.loss(float(np.exp(ln_c)))) - np.log(loss))

        g_lo, g_hi = gap(lo), gap(hi)
        if not np.isfinite(loss):
            return float("nan")
        if g_hi > 0:
            return float("inf")
        if g_lo < 0:
            return 0.0
        if not (np.isfinite(g_lo) and np.isfinite(g_hi)):
            return float("nan")
        return float(np.exp(brentq(gap, lo, hi, xtol=1e-10)))

    @property
    def gamma(self) -> float:
        """Exponent of the reducible loss along the frontier, αβ/(α+β)."""
        return self.fit.alpha * self.fit.beta / (self.fit.alpha + self.fit.beta)


def frontier(runs: RunsTable) -> Frontier:
    """Fit one sweep's frontier (FitError when its law or lines cannot be fitted)."""
    return Frontier(fit_approach3(runs.column("N"), runs.column("D"), runs.column("loss")),
                    lines_from_runs(runs))


def multiplier(a: Frontier, b: Frontier, flops: float) -> float:
    """m(C) = C_A(L_B(C)) / C: how much more compute A needs for B's loss at C."""
    return a.compute_for(b.loss(flops)) / flops


def statistics(a: Frontier, b: Frontier, flops: Sequence[float],
               reference: float) -> dict[str, float]:
    """Every compared quantity of one pair of frontiers (the point estimate or one draw)."""
    out = {f"multiplier@{c:.6g}": multiplier(a, b, c) for c in flops}
    for side, f in (("A", a), ("B", b)):
        alloc = optimal_allocation(f.fit.log_loss, f.lines, reference)
        out[f"a_{side}"] = alloc.a
        out[f"tokens_per_param_{side}"] = alloc.tokens_per_param
        out[f"gamma_{side}"] = f.gamma
        out[f"loss_opt_{side}"] = f.loss(reference)
    out["a_diff"] = out["a_B"] - out["a_A"]
    out["gamma_diff"] = out["gamma_B"] - out["gamma_A"]
    out["tokens_per_param_ratio"] = out["tokens_per_param_B"] / out["tokens_per_param_A"]
    return out


@dataclass(frozen=True)
class Comparison:
    """B against A: point estimates, 95% intervals, and which budgets are extrapolations."""

    source_a: str
    source_b: str
    flops: tuple[float, ...]
    """Where the multiplier is read: both sweeps' budgets, then the requested larger ones."""
    extrapolated: tuple[bool, ...]
    """Per entry of flops: the multiplier reads a frontier beyond its own budgets (C above
    either sweep's largest budget, or the compute A needs, m·C, above A's)."""
    reference: float
    point: dict[str, float]
    intervals: dict[str, Interval] = field(default_factory=dict)
    n_resamples: int = 0
    n_failed: int = 0
    seed: int = 0
    frontiers: tuple[Frontier, Frontier] | None = field(default=None, repr=False,
                                                         compare=False)

    def multiplier(self, flops: float) -> tuple[float, Interval | None]:
        key = f"multiplier@{flops:.6g}"
        return self.point[key], self.intervals.get(key)

    def verdict(self) -> str:
        """One sentence: the multiplier at the reference compute and the exponents."""
        m, ci = self.multiplier(self.reference)
        ci_text = f" [{ci.low:.2g}, {ci.high:.2g}]" if ci is not None else ""
        gi = self.intervals.get("gamma_diff")
        if gi is None:
            exponents = f"the frontier exponents differ by {self.point['gamma_diff']:+.3f}"
        elif gi.contains(0.0):
            exponents = (f"the frontier exponents do not differ (B − A = "
                         f"{self.point['gamma_diff']:+.3f} [{gi.low:+.3f}, {gi.high:+.3f}])")
        else:
            exponents = (f"the frontier exponents differ (B − A = "
                         f"{self.point['gamma_diff']:+.3f} [{gi.low:+.3f}, {gi.high:+.3f}])")
        if not np.isfinite(m) or m <= 0:
            what = ("A does not reach B's loss within its range" if m == float("inf") else
                    "B does not reach A's loss within its range" if m == 0 else
                    "the multiplier is out of the frontiers' trusted range")
            return f"At C = {self.reference:.3g}, {what}; {exponents}."
        where = self.flops.index(self.reference)
        note = (f" (an extrapolation: A's frontier read at {m * self.reference:.3g}, beyond its "
                "budgets)" if self.extrapolated[where] else "")
        return (f"At C = {self.reference:.3g}, A needs {m:.2g}x{ci_text} the compute to reach "
                f"B's loss (B is worth {m:.2g}x A's compute){note}; {exponents}.")


def check_comparable(a: RunsTable, b: RunsTable) -> list[str]:
    """Refuse (DataError) sweeps whose losses are not measured alike; return what could not
    be checked (columns one side does not record)."""
    ca, cb = (_convention(t.c_convention) for t in (a, b))
    unchecked = []
    if ca is None or cb is None:
        unchecked.append("flops_convention")  # a CSV's C column: its convention is unknown
    elif ca != cb:
        raise DataError(f"{a.source} has C under {ca!r}, {b.source} under {cb!r}: compare "
                        "them under one FLOP convention")
    for col in SAME:
        if col not in a.frame.columns or col not in b.frame.columns:
            unchecked.append(col)
            continue
        va = sorted({str(v) for v in a.frame[col]})
        vb = sorted({str(v) for v in b.frame[col]})
        if va != vb:
            raise DataError(f"{a.source} and {b.source} differ in {col} ({', '.join(va)} "
                            f"against {', '.join(vb)}): their losses are not measured on the "
                            "same tokens, so they do not compare")
    return unchecked


def _convention(text: str) -> str | None:
    """A table's FLOP convention by name (6nd, exact, ...), None for a CSV's own C column."""
    if text.startswith("column"):
        return None
    return text.split(" ")[0]  # "6nd (6·N·D)" is 6nd


def compare(a_runs: RunsTable, b_runs: RunsTable, *, larger: Sequence[float] = (),
            bootstrap: int = 200, seed: int = 0,
            holdout_above: float | None = None) -> Comparison:
    """Fit both sweeps' frontiers, compare them at every budget and at ``larger`` ones
    (``holdout_above``: runs above that cost are left out of both, as in analysis.analyze)."""
    check_comparable(a_runs, b_runs)
    a_fit = select_runs(a_runs, holdout_above=holdout_above).fitted
    b_fit = select_runs(b_runs, holdout_above=holdout_above).fitted
    fa, fb = frontier(a_fit), frontier(b_fit)
    top = max(max(fa.budgets), max(fb.budgets))
    flops = tuple(sorted({*fa.budgets, *fb.budgets, *(float(c) for c in larger)}))
    reference = top
    point = statistics(fa, fb, flops, reference)
    inside = min(max(fa.budgets), max(fb.budgets))
    extrapolated = tuple(
        bool(c > inside * (1 + 1e-9) or not point[f"multiplier@{c:.6g}"] * c
             <= max(fa.budgets) * (1 + 1e-9)) for c in flops)
    samples: dict[str, list[float]] = {k: [] for k in point}
    failed = 0
    if bootstrap > 0:
        ia = resample_indices(len(a_fit), bootstrap, seed)
        ib = resample_indices(len(b_fit), bootstrap, seed + 1)
        starts_a, starts_b = _starts(a_fit, fa), _starts(b_fit, fb)
        with single_threaded_blas():
            for ra, rb in zip(ia, ib, strict=True):
                try:
                    da = _refit(a_fit, ra, starts_a, fa.lines)
                    db = _refit(b_fit, rb, starts_b, fb.lines)
                    draw = statistics(da, db, flops, reference)
                except FitError:
                    failed += 1
                    continue
                for k, v in draw.items():
                    samples[k].append(v)
    intervals = {}
    for k, values in samples.items():
        # A draw where A never reaches B's loss has m = inf: it stays in the ranking (order
        # statistics, not interpolation), so the upper limit is not biased low; NaN draws
        # (out of the trusted range) are left out.
        arr = np.asarray(values, dtype=float)
        arr = arr[~np.isnan(arr)]
        if arr.size:
            low, high = np.quantile(arr, [0.025, 0.975], method="inverted_cdf")
            intervals[k] = Interval(float(low), float(high))
    return Comparison(a_runs.source, b_runs.source, flops, extrapolated,
                      reference, point, intervals, bootstrap, failed, seed, (fa, fb))


def _starts(runs: RunsTable, f: Frontier) -> np.ndarray:
    """The full-data optimum and the best screened grid starts, as bootstrap_approach3 does."""
    return refit_starts(runs.column("N"), runs.column("D"), runs.column("loss"), f.fit)


def _refit(runs: RunsTable, idx: np.ndarray, start: np.ndarray,
           lines: IsoFlopLines) -> Frontier:
    """One draw's frontier: the law refitted from ``start``, on the same lines."""
    n, d, loss = (runs.column(k)[idx] for k in ("N", "D", "loss"))
    return Frontier(fit_approach3(n, d, loss, keep=0, warm_starts=start), lines)

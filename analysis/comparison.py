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

Trust: a frontier is trusted at C where its optimum lies inside the sizes its search reaches
(analysis.fits.optimum: a decade beyond the sampled ones), and C_A(L) is sought only there
(issue 55: searching from 100x below A's budgets, an untrusted edge, lost every crossing, even
those inside the budgets). Where there is no number, one note says why (``NOTES``), in the
table, the verdict and the JSON alike.

Refusals: losses compare only when measured on the same tokens, so sweeps whose runs record
different corpora, tokenizers, token data (the split and its fingerprint), sequence lengths
or FLOP conventions are refused, naming the difference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

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
"""C_A(L) is sought at most this many decades below and above A's budgets: N_opt moves about
one decade per two of C, which is how far beyond its sizes the optimum search reaches
(analysis.fits.optimum.SEARCH_FACTOR). Within that window only the part where A's frontier is
trusted is searched (``Frontier.trusted``)."""
TRUST_TOLERANCE = 1e-3
"""How closely the edges of the trusted range are located, in ln C (0.1% of the compute)."""
BEYOND_A = "beyond A's trusted range"
"""No number: the compute A needs for B's loss lies where A's optimum leaves its searched
sizes (its frontier is not trusted there)."""
BEYOND_B = "beyond B's trusted range"
"""No number: B's own optimum at C leaves B's searched sizes, so B's loss there is unknown."""
ABOVE_SEARCH = "beyond A's search range"
"""m = inf: A, trusted that far, does not reach B's loss SEARCH_DECADES above its budgets."""
BELOW_SEARCH = "below A's search range"
"""m = 0: A, trusted that far, reaches B's loss already SEARCH_DECADES below its budgets."""
NOTES = (BEYOND_A, BEYOND_B, ABOVE_SEARCH, BELOW_SEARCH)
"""The one wording of each case without a finite, positive multiplier (table, text, JSON)."""


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

    @property
    def search_range(self) -> tuple[float, float]:
        """ln C of the window C_A(L) is sought in: SEARCH_DECADES beyond the budgets."""
        pad = SEARCH_DECADES * np.log(10.0)
        return float(np.log(min(self.budgets))) - pad, float(np.log(max(self.budgets))) + pad

    @cached_property
    def trusted(self) -> tuple[float, float] | None:
        """ln C range of the search window where the frontier is trusted (its optimum off the
        search bound), None when it is trusted at none of its budgets.

        N_opt grows with C, so the optimum leaves the searched sizes below some C and above
        another: each edge is found by bisection from a trusted budget, to TRUST_TOLERANCE.
        """
        def ok(ln_c: float) -> bool:
            return bool(np.isfinite(self.loss(float(np.exp(ln_c)))))

        start = next((float(np.log(c)) for c in self.budgets if ok(float(np.log(c)))), None)
        if start is None:
            return None
        lo, hi = self.search_range
        return _edge(ok, start, lo), _edge(ok, start, hi)

    def compute_for(self, loss: float) -> float:
        """The compute at which this frontier reaches ``loss``, sought where it is trusted
        (``trusted``): inf when it does not reach it SEARCH_DECADES above its budgets, 0 when
        it already does SEARCH_DECADES below, NaN (BEYOND_A) when the answer lies beyond the
        trusted range, or ``loss`` itself is NaN."""
        if not np.isfinite(loss) or self.trusted is None:
            return float("nan")
        lo, hi = self.search_range
        t_lo, t_hi = self.trusted

        def gap(ln_c: float) -> float:
            return float(np.log(self.loss(float(np.exp(ln_c)))) - np.log(loss))

        g_lo, g_hi = gap(t_lo), gap(t_hi)
        if not (np.isfinite(g_lo) and np.isfinite(g_hi)):
            return float("nan")
        if g_hi > 0:  # not reached: a number only where trust reaches the window's top
            return float("inf") if t_hi >= hi else float("nan")
        if g_lo < 0:  # reached before: likewise at the window's bottom
            return 0.0 if t_lo <= lo else float("nan")
        root = brentq(gap, t_lo, t_hi, xtol=1e-10)
        # Trust may have a hole between the edges (a law with two dips): no number there.
        return float(np.exp(root)) if np.isfinite(gap(root)) else float("nan")

    @property
    def gamma(self) -> float:
        """Exponent of the reducible loss along the frontier, αβ/(α+β)."""
        return self.fit.alpha * self.fit.beta / (self.fit.alpha + self.fit.beta)


def _edge(ok: Callable[[float], bool], inside: float, outside: float) -> float:
    """The trusted end of [inside, outside] (ln C): ``outside`` when trusted, else the last
    trusted point found by bisection, within TRUST_TOLERANCE of where trust ends."""
    if ok(outside):
        return outside
    while abs(outside - inside) > TRUST_TOLERANCE:
        mid = 0.5 * (inside + outside)
        inside, outside = (mid, outside) if ok(mid) else (inside, mid)
    return inside


def frontier(runs: RunsTable) -> Frontier:
    """Fit one sweep's frontier (FitError when its law or lines cannot be fitted)."""
    return Frontier(fit_approach3(runs.column("N"), runs.column("D"), runs.column("loss")),
                    lines_from_runs(runs))


def multiplier(a: Frontier, b: Frontier, flops: float) -> float:
    """m(C) = C_A(L_B(C)) / C: how much more compute A needs for B's loss at C."""
    return a.compute_for(b.loss(flops)) / flops


def note(a: Frontier, b: Frontier, flops: float, m: float) -> str | None:
    """Why m(C) is not a finite, positive number (one of NOTES), None when it is one."""
    if np.isnan(m):
        return BEYOND_B if not np.isfinite(b.loss(flops)) else BEYOND_A
    if m == float("inf"):
        return ABOVE_SEARCH
    return BELOW_SEARCH if m <= 0 else None


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
    notes: tuple[str | None, ...] = ()
    """Per entry of flops: why the point multiplier is no finite, positive number (one of
    NOTES), None where it is one."""
    trained: tuple[bool, ...] = ()
    """Per entry of flops: a budget a sweep trained, inside both sweeps' budget ranges (what
    the verdict summarises; the other entries are "beyond them")."""

    def multiplier(self, flops: float) -> tuple[float, Interval | None]:
        key = f"multiplier@{flops:.6g}"
        return self.point[key], self.intervals.get(key)

    def note(self, flops: float) -> str | None:
        """Why there is no multiplier at ``flops`` (one of NOTES), None where there is one."""
        return self.notes[self.flops.index(flops)] if self.notes else None

    def summary(self) -> dict:
        """The verdict in numbers, at the budgets trained: ``case`` (B saves, A saves,
        indistinguishable, mixed, or none: no multiplier there), the geometric median and
        range of the multipliers (m > 1: B saves m x; m < 1: A saves 1/m x), each budget's
        multiplier with its interval and side (B, A, or =: the interval contains 1x), and
        the budgets with no number, by note."""
        rows, missing = [], {}
        for c, is_trained, why in zip(self.flops, self.trained, self.notes, strict=True):
            if not is_trained:
                continue
            if why is not None:
                missing.setdefault(why, []).append(c)
                continue
            m, ci = self.multiplier(c)
            low, high = (ci.low, ci.high) if ci is not None else (m, m)
            side = "B" if low > 1 else "A" if high < 1 else "="
            rows.append({"flops": c, "value": m, "ci95": None if ci is None else ci.as_list(),
                         "side": side})
        out: dict = {"case": "none", "median": None, "range": None, "budgets": rows,
                     "missing": missing, "intervals": all(r["ci95"] for r in rows)}
        if rows:
            values = np.array([r["value"] for r in rows])
            sides = {r["side"] for r in rows}
            out["case"] = ("mixed" if len(sides) > 1 else
                           {"B": "B saves", "A": "A saves", "=": "indistinguishable"}[sides.pop()])
            # Multipliers are ratios: their median and range are taken on ln m.
            out["median"] = float(np.exp(np.median(np.log(values))))
            out["range"] = [float(values.min()), float(values.max())]
        return out

    def verdict(self) -> str:
        """One sentence: who saves how much compute at the budgets trained, the multiplier
        beyond them, and whether the frontier exponents differ."""
        s = self.summary()
        budgets = [r["flops"] for r in s["budgets"]]
        details = []
        if len(budgets) == 1:
            details.append(f"at C = {budgets[0]:.3g}")
        if not s["intervals"] and budgets:
            details.append("point estimates, without intervals")
        extrapolated = [c for c, x, t in zip(self.flops, self.extrapolated, self.trained,
                                             strict=True) if t and x and c in budgets]
        if extrapolated:
            details.append(f"extrapolated at {_list(extrapolated)}: A's frontier read "
                           "beyond its budgets")
        details += [f"{_list(cs)}: {why}" for why, cs in s["missing"].items()]
        tail = "; ".join(details)
        span = span_a = ""  # the range of B's saving, and of A's (1/m): with two budgets up
        if s["range"] is not None and len(budgets) > 1:
            low, high = s["range"]
            span, span_a = _span(low, high), _span(1 / high, 1 / low)
        case = s["case"]
        if case == "B saves":
            main = (f"B saves {_times(s['median'])} compute at the budgets trained "
                    f"({'; '.join(filter(None, [span, tail]))})")
        elif case == "A saves":
            main = (f"A saves {_times(1 / s['median'])} compute at the budgets trained "
                    f"({'; '.join(filter(None, [span_a, tail]))})")
        elif case == "indistinguishable":
            main = ("A and B are indistinguishable at the budgets trained: every interval "
                    f"contains 1x ({'; '.join(filter(None, [span, tail]))})")
        elif case == "mixed":
            words = {"B": "B saves compute", "A": "A saves compute",
                     "=": "the interval contains 1x"}
            parts = [f"{words[side]} at " + ", ".join(
                f"{r['flops']:.3g} ({_times(r['value'])})" for r in s["budgets"]
                if r["side"] == side) for side in ("B", "A", "=")
                if any(r["side"] == side for r in s["budgets"])]
            main = (f"The budgets trained disagree: {', '.join(parts)}"
                    + (f" ({tail})" if tail else ""))
        elif s["missing"]:
            main = f"No budget trained has a multiplier ({tail})"
        else:
            main = "No budget lies inside both sweeps' budget ranges"
        return f"{main}; beyond them, {self._beyond()}; {self._exponents()}."

    def _beyond(self) -> str:
        """The multiplier at every compute outside the budgets trained (the --flops ones)."""
        parts: list[str] = []
        missing: dict[str, list[float]] = {}
        for c, t, x in zip(self.flops, self.trained, self.extrapolated, strict=True):
            if t:
                continue
            why = self.note(c)
            if why is not None:
                missing.setdefault(why, []).append(c)
                continue
            m, ci = self.multiplier(c)
            ci_text = "" if ci is None else f" [{_times(ci.low)}, {_times(ci.high)}]"
            parts.append(f"at {c:.3g}: {_times(m)}{ci_text}{' (extrapolated)' if x else ''}")
        parts += [f"at {_list(cs)}: {why}" for why, cs in missing.items()]
        return "; ".join(parts) if parts else "nothing was read"

    def _exponents(self) -> str:
        gi = self.intervals.get("gamma_diff")
        if gi is None:
            return f"the frontier exponents differ by {self.point['gamma_diff']:+.3f}"
        word = "do not differ" if gi.contains(0.0) else "differ"
        return (f"the frontier exponents {word} (B − A = {self.point['gamma_diff']:+.3f} "
                f"[{gi.low:+.3f}, {gi.high:+.3f}])")


def _times(m: float) -> str:
    """A multiplier as the verdict writes it: 2 significant digits, whole numbers from 100."""
    if not np.isfinite(m):
        return "no limit" if m > 0 else "no number"
    return f"{m:.2g}x" if m < 100 else f"{m:,.0f}x"


def _span(low: float, high: float) -> str:
    """``low``-``high`` as multipliers, with a third digit where two would print one number
    twice (1.97x-2.04x, not 2x-2x)."""
    if _times(low) != _times(high) or not (np.isfinite(high) and high < 100):
        return f"{_times(low)}-{_times(high)}"
    return f"{low:.3g}x-{high:.3g}x"


def _list(flops: Sequence[float]) -> str:
    return ", ".join(f"{c:.3g}" for c in flops)


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
    notes = tuple(note(fa, fb, c, point[f"multiplier@{c:.6g}"]) for c in flops)
    # The budgets trained: a budget of either sweep inside both sweeps' budget ranges, where
    # neither frontier is read beyond the compute it was fitted on (relative slack 1e-9).
    floor = max(min(fa.budgets), min(fb.budgets))
    trained = tuple(bool(c in {*fa.budgets, *fb.budgets} and floor * (1 - 1e-9) <= c
                         <= inside * (1 + 1e-9)) for c in flops)
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
                      reference, point, intervals, bootstrap, failed, seed, (fa, fb), notes,
                      trained)


def _starts(runs: RunsTable, f: Frontier) -> np.ndarray:
    """The full-data optimum and the best screened grid starts, as bootstrap_approach3 does."""
    return refit_starts(runs.column("N"), runs.column("D"), runs.column("loss"), f.fit)


def _refit(runs: RunsTable, idx: np.ndarray, start: np.ndarray,
           lines: IsoFlopLines) -> Frontier:
    """One draw's frontier: the law refitted from ``start``, on the same lines."""
    n, d, loss = (runs.column(k)[idx] for k in ("N", "D", "loss"))
    return Frontier(fit_approach3(n, d, loss, keep=0, warm_starts=start), lines)

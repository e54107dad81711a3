"""Which law describes the runs, and the one allocation a researcher can act on (issue 16).

Every law with a loss model (Approach 3's additive law, the interaction law, Kaplan's joint
law on the sweep's N, and the model-free quadratic surface: the entries of the table of fits
with ``FitSpec.judged``, in table order) is judged the same way:

* **residual / noise**: its residual RMS on the fitted points over what the measured seed noise
  alone would leave (analysis.checks.residuals, σ from analysis.checks.noise). A law that misses
  structure in the runs has a ratio well above 1.
* **held-out error**: the worst relative error |L̂ − L| / L of its prediction at the held-out
  runs (the sweep's larger budget, seeds averaged; analysis.checks.heldout), when there are any.

A law **describes the runs** only when its ratio is at most ``NOISE_RATIO_LIMIT`` *and* it
predicts every held-out run within ``HOLDOUT_TARGET`` (when a held-out budget exists). Only then
may a report call its exponent "consistent with Chinchilla/Kaplan": an interval that contains
0.5 says nothing when the law it comes from does not fit the points (issue 16: Approach 3's
0.325 [0.246, 0.554] with residuals 2.9x the noise was called "consistent with Chinchilla").
Nor may an interval be compared that most bootstrap resamples could not contribute to, or that
excludes its own estimate (``interval_problem``), whatever the approach.

The headline (``headline_rule``): among the parametric laws (``FitSpec.headline_candidate``,
analysis.fits.table.headline_candidates; the quadratic is a
check that must not be extrapolated, so it never headlines) that describe the runs, the one
with the lowest residual/noise ratio; if none does, the lowest ratio, labelled as not
describing the runs. Without a noise estimate no law can be said to describe the runs and the
lowest residual RMS is headlined, labelled so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from analysis.checks.noise import collapse_replicates
from analysis.checks.residuals import law_residuals
from analysis.fits.results import Estimate, Skipped
from analysis.fits.table import FITS, headline_candidates, judged
from analysis.runs.table import RunsTable
from analysis.text import fmt, fmt_interval

NOISE_RATIO_LIMIT = 1.5
"""Largest residual RMS / noise-expected RMS of a law that describes the runs."""
HOLDOUT_TARGET = 0.01
"""Largest |relative error| at the held-out runs of a law that describes them (the issue's 1%)."""
MAX_FAILED_FRACTION = 0.5
"""Largest share of failed bootstrap resamples with which an interval may still be compared
with a documented value (``interval_problem``)."""


class _JudgedLaws(Mapping[str, tuple[str, int]]):
    """The judged entries of the table of fits, read off it when asked (so an entry registered
    at run time is judged too)."""

    def __getitem__(self, name: str) -> tuple[str, int]:
        spec = FITS.get(name)
        if spec is None or not spec.judged:
            raise KeyError(name)
        return spec.words, spec.n_params

    def __iter__(self) -> Iterator[str]:
        return iter(judged())

    def __len__(self) -> int:
        return len(judged())


LAWS: Mapping[str, tuple[str, int]] = _JudgedLaws()
"""The judged laws: name -> (words, parameters), in table order (``FitSpec.judged``)."""


def headline_rule() -> str:
    """The headline rule in words, naming the current headline candidates."""
    return (f"among the parametric laws ({', '.join(headline_candidates())}) that describe "
            f"the runs (residual/noise ≤ {NOISE_RATIO_LIMIT} and every held-out run within "
            f"{HOLDOUT_TARGET:.0%}), the lowest residual/noise ratio; if none does, the lowest "
            "ratio, labelled as not describing the runs")


def interval_problem(est: Estimate, name: str) -> str | None:
    """Why the 95% interval of statistic ``name`` cannot be compared with a documented value,
    or None when it can.

    A bootstrap's intervals come from the resamples that could be fitted (analysis.fits.
    bootstrap). When more than ``MAX_FAILED_FRACTION`` of them could not (a pooled resample of
    an IsoFLOP sweep often leaves a budget without an interior minimum), the interval is the
    spread of an unrepresentative minority, not the estimate's sampling spread; an interval
    that excludes its own point estimate says the same. Issue 16: on the quickstart, Approach
    2's 0.6926 [0.4844, 0.6556], from 20 of 400 resamples, was called "consistent with
    Chinchilla".
    """
    boot = est.bootstrap
    if boot is None or name not in boot.samples:
        return None
    fitted = boot.n_resamples - boot.n_failed
    finite = int(np.isfinite(np.asarray(boot.samples[name], dtype=float)).sum())
    if finite < (1.0 - MAX_FAILED_FRACTION) * boot.n_resamples:
        what = "could be fitted" if finite == fitted else f"gave a finite {name}"
        return (f"only {finite} of {boot.n_resamples} bootstrap resamples {what}, so its "
                "interval is conditional on them")
    iv, point = boot.interval(name), est.point.get(name)
    if point is not None and np.isfinite(point) and not iv.contains(point):
        return f"its interval {fmt_interval(iv)} excludes its own estimate {fmt(point)}"
    return None


@dataclass(frozen=True)
class LawVerdict:
    """One law, judged."""

    approach: str
    what: str
    rms: float
    expected_rms: float | None
    holdout_rel_error: float | None
    """The held-out run with the largest |(L̂ − L) / L| (signed); None without held-out runs."""
    n_holdout: int

    @property
    def ratio(self) -> float | None:
        if self.expected_rms is None or not self.expected_rms > 0:
            return None
        return self.rms / self.expected_rms

    @property
    def describes(self) -> bool:
        """Residual/noise ≤ the limit and the held-out runs within target (module docstring)."""
        ratio = self.ratio
        if ratio is None or ratio > NOISE_RATIO_LIMIT:
            return False
        return self.holdout_rel_error is None or abs(self.holdout_rel_error) <= HOLDOUT_TARGET

    def reason(self) -> str:
        """Why it does or does not describe the runs, in words."""
        ratio = self.ratio
        parts = ["no noise measured, so its residuals cannot be judged" if ratio is None else
                 f"residual/noise {ratio:.3g} ({'≤' if ratio <= NOISE_RATIO_LIMIT else '>'} "
                 f"{NOISE_RATIO_LIMIT})"]
        if self.holdout_rel_error is not None:
            ok = abs(self.holdout_rel_error) <= HOLDOUT_TARGET
            parts.append(f"held-out error {self.holdout_rel_error:+.2%} "
                         f"({'within' if ok else 'outside'} {HOLDOUT_TARGET:.0%})")
        return ", ".join(parts)

    def to_json_dict(self) -> dict:
        return {"approach": self.approach, "what": self.what, "rms": self.rms,
                "expected_rms": self.expected_rms, "residual_noise_ratio": self.ratio,
                "holdout_rel_error": self.holdout_rel_error, "n_holdout": self.n_holdout,
                "describes_runs": self.describes, "reason": self.reason()}


@dataclass(frozen=True)
class Verdict:
    """Every judged law and the headline chosen by ``headline_rule``."""

    laws: tuple[LawVerdict, ...]
    headline: str | None
    """The headline law's approach name (None: no parametric law was fitted)."""
    rule: str = field(default_factory=headline_rule)

    def law(self, approach: str) -> LawVerdict | None:
        return next((v for v in self.laws if v.approach == approach), None)

    @property
    def headline_describes(self) -> bool:
        law = None if self.headline is None else self.law(self.headline)
        return bool(law is not None and law.describes)


def _holdout_error(holdout: RunsTable | None,
                   loss: Callable[[np.ndarray, np.ndarray], object]) -> tuple[float | None, int]:
    if holdout is None or len(holdout) == 0:
        return None, 0
    cells = collapse_replicates(holdout)  # seeds averaged, as the fitted cells are
    observed = cells.column("loss")
    rel = (np.asarray(loss(cells.column("N"), cells.column("D"))) - observed) / observed
    worst = int(np.argmax(np.abs(rel)))
    return float(rel[worst]), int(rel.size)


def choose_headline(laws: tuple[LawVerdict, ...]) -> str | None:
    """``headline_rule`` applied (ties: table order of the headline candidates)."""
    parametric = headline_candidates()
    candidates = [v for v in laws if v.approach in parametric]
    if not candidates:
        return None
    order = {name: i for i, name in enumerate(parametric)}
    if all(v.ratio is None for v in candidates):
        return min(candidates, key=lambda v: (v.rms, order[v.approach])).approach
    rated = [v for v in candidates if v.ratio is not None]
    pool = [v for v in rated if v.describes] or rated
    return min(pool, key=lambda v: (v.ratio, order[v.approach])).approach


def judge_laws(fits: Mapping[str, Estimate | Skipped], runs: RunsTable,
               holdout: RunsTable | None, sigma: float | None) -> Verdict:
    """Judge every fitted law of ``LAWS`` on the fitted points and the held-out runs."""
    out = []
    for name, (what, n_params) in LAWS.items():
        est = fits.get(name)
        if not isinstance(est, Estimate):
            continue
        check = law_residuals(what, runs, est.fit.loss, n_params, sigma)
        error, n_hold = _holdout_error(holdout, est.fit.loss)
        out.append(LawVerdict(name, what, check.rms, check.expected_rms, error, n_hold))
    laws = tuple(out)
    return Verdict(laws, choose_headline(laws))


CONVENTION = (
    "N_opt(C) = argmin over N of L(N, D(N; C)) along the sweep's own IsoFLOP lines, C being "
    "each line's budget label (the compute the sweep held constant, in its FLOP convention; "
    "a run without a budget counts at its C), D(N; C) from a smooth fit of ln(C/(6ND)) "
    "against ln N over the runs; a and b are the slopes of ln N_opt and ln D_opt against ln C "
    "over the budgets; tokens per parameter is D_opt/N_opt at the reference compute "
    "(analysis.fits.optimum). Approach 2 regresses its parabola minima against the same C.")


def _interval(est: Estimate, key: str) -> list[float] | None:
    iv = est.ci95(key)
    return None if iv is None else iv.as_list()


def summarise(fits: Mapping[str, Estimate | Skipped], verdict: Verdict,
              reference_flops: float) -> dict:
    """fit.json's stable top-level "summary" (documented in docs/analysis.md)."""
    approaches = {}
    for name, est in fits.items():
        if not isinstance(est, Estimate) or "a" not in est.point:
            continue
        law = verdict.law(name)
        approaches[name] = {
            "a": est.point["a"], "a_ci95": _interval(est, "a"), "b": est.point.get("b"),
            "tokens_per_param": est.point.get("tokens_per_param"),
            "tokens_per_param_ci95": _interval(est, "tokens_per_param"),
            "residual_noise_ratio": None if law is None else law.ratio,
            "holdout_rel_error": None if law is None else law.holdout_rel_error,
            "describes_runs": None if law is None else law.describes,
            "interval_problem": interval_problem(est, "a")}
    headline = None
    if verdict.headline is not None and verdict.headline in approaches:
        law = verdict.law(verdict.headline)
        entry = approaches[verdict.headline]
        headline = {"approach": verdict.headline, "what": law.what,
                    "describes_runs": law.describes, "reason": law.reason(),
                    **{k: entry[k] for k in ("a", "a_ci95", "b", "tokens_per_param",
                                             "tokens_per_param_ci95", "residual_noise_ratio",
                                             "holdout_rel_error")}}
    return {"headline": headline, "approaches": approaches, "rule": verdict.rule,
            "noise_ratio_limit": NOISE_RATIO_LIMIT, "holdout_target": HOLDOUT_TARGET,
            "reference_flops": reference_flops, "convention": CONVENTION}

"""Which law describes the runs, and the one allocation a researcher can act on (issue 16).

Every law with a loss model (Approach 3's additive law, the interaction law, Kaplan's joint law
on the sweep's N, the model-free quadratic surface: the entries of the table of fits with
``FitSpec.judged``, in table order) is judged the same way, on three numbers:

* **residual / noise**: its residual RMS on the fitted points over what the measured seed noise
  alone would leave (analysis.checks.residuals, σ from analysis.checks.noise). A law that misses
  structure in the runs has a ratio well above 1. The ratio is itself an estimate: both RMS
  come from few points, so under a law that fits, ratio² is distributed as F(k − p, m) (k
  points, p parameters, m the noise's degrees of freedom). Its 95% interval is compared with
  ``NOISE_RATIO_LIMIT``: the law **describes** the runs when the whole interval is at or below
  the limit, **does not describe** them when the whole interval is above it, and is
  **borderline** when the interval straddles it (issue 51: 1.516 against 1.5 was called a
  failure although the ratio's own spread was ±0.18). Without seed replicates there is no σ,
  and a law's residuals **cannot be judged**.
* **rolling-origin backtest error**: the worst |relative error| of the law refitted on the
  lower budgets predicting the next one up, inside the fitted data (analysis.checks.backtest).
* **held-out error**: the worst relative error at the held-out runs (role ``holdout`` or
  above ``--holdout-above``), against the one target ``HOLDOUT_TARGET``. It tests the analysis
  and is reported; it never chooses the headline (a choice made by looking at the test would
  make the test circular).

A comparison with Chinchilla's or Kaplan's exponent is made only for a law that describes the
runs or is borderline (``LawVerdict.comparable``): an interval that contains 0.5 says nothing
when the law it comes from does not fit the points (issue 16: Approach 3's 0.325
[0.246, 0.554] with residuals 2.9x the noise was called "consistent with Chinchilla"). Nor may
an interval be compared that most bootstrap resamples could not contribute to, or that excludes
its own estimate (``interval_problem``), whatever the approach.

The headline (``headline_rule``): among the parametric laws (``FitSpec.headline_candidate``;
the quadratic is a check that must not be extrapolated, so it never headlines) whose residuals
are not beyond the noise (all of them if every one is), the one with the smallest
rolling-origin backtest error; without a backtest (fewer than three budgets, or no law could be
refitted on every step) the lowest residual/noise ratio, or the lowest residual RMS without a
noise estimate. Issue 51: a law exists to extrapolate, and on the committed studies the law
with the smallest residuals was not the one that predicted the next budget best.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from analysis.checks.backtest import Backtests
from analysis.checks.heldout import TARGET
from analysis.checks.noise import collapse_replicates
from analysis.checks.residuals import law_residuals
from analysis.fits.laws import predicted_loss
from analysis.fits.results import Estimate, Skipped
from analysis.fits.table import FITS, headline_candidates, judged
from analysis.runs.table import RunsTable
from analysis.text import fmt, fmt_interval

NOISE_RATIO_LIMIT = 1.5
"""Largest residual RMS / noise-expected RMS of a law that describes the runs."""
HOLDOUT_TARGET = TARGET
"""The one target for a prediction of a held-out run (analysis.checks.heldout.TARGET)."""
RATIO_LEVEL = 0.95
"""Coverage of the residual/noise ratio's interval (``LawVerdict.ratio_interval``)."""
STATES = ("describes", "borderline", "does not describe", "cannot be judged")
"""What the residuals say of a law (module docstring)."""
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
    return (f"among the parametric laws ({', '.join(headline_candidates())}) whose residuals "
            f"are not beyond the noise (residual/noise interval not wholly above "
            f"{NOISE_RATIO_LIMIT}; all of them if none is), the smallest rolling-origin "
            "backtest error (each budget predicted by the law fitted on the budgets below it); "
            "without a backtest, the lowest residual/noise ratio. The held-out runs test the "
            "choice and never make it")


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


def ratio_interval(ratio: float, n_points: int, n_params: int,
                   noise_dof: int | None) -> tuple[float, float] | None:
    """The ``RATIO_LEVEL`` interval of the true residual/noise ratio ρ given the measured one:
    ratio² / ρ² ~ F(k − p, m) (module docstring); None without degrees of freedom."""
    nu = n_points - n_params
    if noise_dof is None or noise_dof < 1 or nu < 1:
        return None
    tail = (1.0 - RATIO_LEVEL) / 2.0
    f_low, f_high = stats.f.ppf([tail, 1.0 - tail], nu, noise_dof)
    return float(ratio / np.sqrt(f_high)), float(ratio / np.sqrt(f_low))


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
    n_points: int = 0
    n_params: int = 0
    noise_dof: int | None = None
    """Degrees of freedom of the noise estimate (None: no noise measured)."""
    backtest_error: float | None = None
    """Worst |relative error| of its rolling-origin backtest (None: none could be made)."""

    @property
    def ratio(self) -> float | None:
        if self.expected_rms is None or not self.expected_rms > 0:
            return None
        return self.rms / self.expected_rms

    @property
    def ratio_ci(self) -> tuple[float, float] | None:
        """The ratio's 95% interval (``ratio_interval``); the point where no dof are known."""
        ratio = self.ratio
        if ratio is None:
            return None
        iv = ratio_interval(ratio, self.n_points, self.n_params, self.noise_dof)
        return (ratio, ratio) if iv is None else iv

    @property
    def state(self) -> str:
        """One of ``STATES``: the ratio's interval against ``NOISE_RATIO_LIMIT``."""
        iv = self.ratio_ci
        if iv is None:
            return "cannot be judged"
        if iv[1] <= NOISE_RATIO_LIMIT:
            return "describes"
        return "does not describe" if iv[0] > NOISE_RATIO_LIMIT else "borderline"

    @property
    def describes(self) -> bool:
        """Its residuals are within the noise, the whole interval of the ratio included."""
        return self.state == "describes"

    @property
    def comparable(self) -> bool:
        """Its exponents may be compared with documented ones: it describes the runs or is
        borderline (module docstring)."""
        return self.state in ("describes", "borderline")

    @property
    def holdout_within_target(self) -> bool | None:
        if self.holdout_rel_error is None:
            return None
        return abs(self.holdout_rel_error) <= HOLDOUT_TARGET

    def reason(self) -> str:
        """What its residuals, backtest and held-out runs say, in words."""
        ratio, iv = self.ratio, self.ratio_ci
        if ratio is None:
            parts = ["no seed replicates, so its residuals cannot be judged against the noise"]
        else:
            spread = "" if iv is None or iv[0] == iv[1] else f" [{iv[0]:.3g}, {iv[1]:.3g}]"
            parts = [f"residual/noise {ratio:.3g}{spread}, {self.state} "
                     f"(limit {NOISE_RATIO_LIMIT})"]
        if self.backtest_error is not None:
            parts.append(f"rolling-origin backtest error {self.backtest_error:.2%}")
        if self.holdout_rel_error is not None:
            ok = self.holdout_within_target
            parts.append(f"held-out error {self.holdout_rel_error:+.2%} "
                         f"({'within' if ok else 'outside'} {HOLDOUT_TARGET:.0%})")
        return ", ".join(parts)

    def to_json_dict(self) -> dict:
        iv = self.ratio_ci
        return {"approach": self.approach, "what": self.what, "rms": self.rms,
                "expected_rms": self.expected_rms, "residual_noise_ratio": self.ratio,
                "residual_noise_ratio_ci95": None if iv is None else list(iv),
                "state": self.state, "backtest_max_abs_rel_error": self.backtest_error,
                "holdout_rel_error": self.holdout_rel_error, "n_holdout": self.n_holdout,
                "holdout_within_target": self.holdout_within_target,
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

    @property
    def headline_state(self) -> str | None:
        law = None if self.headline is None else self.law(self.headline)
        return None if law is None else law.state


def _holdout_error(holdout: RunsTable | None, fit: object) -> tuple[float | None, int]:
    if holdout is None or len(holdout) == 0:
        return None, 0
    cells = collapse_replicates(holdout)  # seeds averaged, as the fitted cells are
    observed = cells.column("loss")
    rel = (predicted_loss(fit, cells) - observed) / observed
    worst = int(np.argmax(np.abs(rel)))
    return float(rel[worst]), int(rel.size)


def choose_headline(laws: tuple[LawVerdict, ...]) -> str | None:
    """``headline_rule`` applied (ties: table order of the headline candidates)."""
    parametric = headline_candidates()
    candidates = [v for v in laws if v.approach in parametric]
    if not candidates:
        return None
    order = {name: i for i, name in enumerate(parametric)}
    pool = [v for v in candidates if v.state != "does not describe"] or candidates
    tested = [v for v in pool if v.backtest_error is not None]
    if tested:
        return min(tested, key=lambda v: (v.backtest_error, order[v.approach])).approach
    rated = [v for v in pool if v.ratio is not None]
    if rated:
        return min(rated, key=lambda v: (v.ratio, order[v.approach])).approach
    return min(pool, key=lambda v: (v.rms, order[v.approach])).approach


def judge_laws(fits: Mapping[str, Estimate | Skipped], runs: RunsTable,
               holdout: RunsTable | None, sigma: float | None,
               backtests: Backtests | None = None, noise_dof: int | None = None) -> Verdict:
    """Judge every fitted law of ``LAWS`` on the fitted points, its rolling-origin backtest
    and the held-out runs (``noise_dof``: the noise estimate's degrees of freedom)."""
    out = []
    for name, (what, n_params) in LAWS.items():
        est = fits.get(name)
        if not isinstance(est, Estimate):
            continue
        check = law_residuals(what, runs, est.fit, n_params, sigma)
        error, n_hold = _holdout_error(holdout, est.fit)
        out.append(LawVerdict(
            name, what, check.rms, check.expected_rms, error, n_hold, n_points=len(runs),
            n_params=n_params, noise_dof=noise_dof if sigma is not None else None,
            backtest_error=None if backtests is None else backtests.rolling_error(name)))
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
            "state": None if law is None else law.state,
            "backtest_max_abs_rel_error": None if law is None else law.backtest_error,
            "holdout_rel_error": None if law is None else law.holdout_rel_error,
            "describes_runs": None if law is None else law.describes,
            "interval_problem": interval_problem(est, "a")}
    headline = None
    if verdict.headline is not None and verdict.headline in approaches:
        law = verdict.law(verdict.headline)
        entry = approaches[verdict.headline]
        headline = {"approach": verdict.headline, "what": law.what,
                    "describes_runs": law.describes, "state": law.state,
                    "reason": law.reason(),
                    **{k: entry[k] for k in ("a", "a_ci95", "b", "tokens_per_param",
                                             "tokens_per_param_ci95", "residual_noise_ratio",
                                             "backtest_max_abs_rel_error",
                                             "holdout_rel_error")}}
    return {"headline": headline, "approaches": approaches, "rule": verdict.rule,
            "noise_ratio_limit": NOISE_RATIO_LIMIT, "holdout_target": HOLDOUT_TARGET,
            "reference_flops": reference_flops, "convention": CONVENTION}

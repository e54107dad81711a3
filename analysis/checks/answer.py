"""The answer: what to train at the budget that matters, how sure to be, and what to run next
(issue 55: the report's first screen gave three tokens-per-parameter figures and no N_opt).

One law answers: the headline (analysis.checks.verdict's rule, the same in the report, the
terminal and fit.json's ``summary.answer``). At the reference compute C (the largest budget
fitted, or ``--reference-flops``) it gives N_opt, D_opt, tokens per parameter and the loss,
each with its 95% bootstrap interval when that interval can be shown (``interval_problem``:
not when it comes from a minority of resamples or excludes its own estimate), the law and why
(the rule in one sentence), how sure (its rolling-origin backtest error against the 2% target,
and the range of tokens per parameter across the laws that pass their backtest), and what to
run next (the obvious next budget: 3x the largest, the predict command that writes it).

Numbers are written to 3 significant figures (``sig3``): the intervals of a small study span
2-10x, and 5 digits of them read as a precision that is not there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analysis.checks.heldout import TARGET
from analysis.checks.model_spread import ModelSpread
from analysis.checks.verdict import Verdict, interval_problem
from analysis.fits.results import Estimate, Skipped

QUANTITIES = ("n_opt", "d_opt", "tokens_per_param", "loss_opt")
NEXT_FACTOR = 3.0
"""The next budget suggested: this factor above the largest fitted (a held-out budget's
usual distance in the committed studies, and far enough to test the extrapolation)."""


def sig3(x: float | None) -> str:
    """A number to 3 significant figures ("—" for none)."""
    if x is None:
        return "—"
    return f"{x:.3g}"


@dataclass(frozen=True)
class Answer:
    """The answer at one compute: the headline law's allocation and how sure it is."""

    flops: float
    law: str
    what: str
    why: str
    values: Mapping[str, float]
    """n_opt, d_opt, tokens_per_param, loss_opt at ``flops`` (the law's point estimates)."""
    intervals: Mapping[str, tuple[float, float] | None]
    """Their 95% intervals; None where there is none or it cannot be shown (``problems``)."""
    problems: Mapping[str, str]
    backtest_error: float | None
    """The law's rolling-origin backtest error (max |relative error|), None without one."""
    tokens_spread: tuple[float, float] | None
    """Tokens per parameter across the laws that pass their backtest, or every parametric law
    when none does (analysis.checks.model_spread: ``spread_note`` says which), None without."""
    spread_note: str
    unit: str
    """What D counts ("tokens", "images", ...)."""
    next_flops: float

    def sure(self) -> str:
        """How sure, in one sentence."""
        parts = []
        if self.backtest_error is None:
            parts.append("no rolling-origin backtest (it needs three budgets or more)")
        else:
            ok = "within" if self.backtest_error <= TARGET else "outside"
            parts.append(f"each budget predicted from the ones below it within "
                         f"{self.backtest_error:.1%} ({ok} the {TARGET:.0%} target)")
        if self.tokens_spread is not None:
            lo, hi = self.tokens_spread
            which = ("every parametric law (none passes its backtest)"
                     if self.spread_note.startswith("no law") else
                     "the laws that pass their backtest")
            parts.append(f"{sig3(lo)}-{sig3(hi)} {self.unit} per parameter across {which}")
        return "; ".join(parts)

    def next_step(self) -> str:
        return (f"train the predicted optimum at {sig3(self.next_flops)} FLOPs ({NEXT_FACTOR:g}x "
                "the largest budget) and see whether it lands on the prediction: `python -m "
                f"analysis.predict ... --flops {sig3(self.next_flops)} --sweep-file FILE --write "
                "NEXT.yaml` writes that sweep")

    def cell(self, q: str) -> str:
        """A quantity with its interval (or why there is none), 3 significant figures."""
        iv = self.intervals.get(q)
        text = sig3(self.values.get(q))
        if iv is not None:
            return f"{text} [{sig3(iv[0])}, {sig3(iv[1])}]"
        return text + (f" (no interval: {self.problems[q]})" if q in self.problems else "")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"flops": self.flops, "law": self.law, "what": self.what,
                               "why": self.why}
        for q in QUANTITIES:
            key = "loss" if q == "loss_opt" else q
            out[key] = self.values.get(q)
            iv = self.intervals.get(q)
            out[f"{key}_ci95"] = None if iv is None else list(iv)
        out.update({"backtest_max_abs_rel_error": self.backtest_error,
                    "tokens_per_param_across_laws": (None if self.tokens_spread is None
                                                     else list(self.tokens_spread)),
                    "sure": self.sure(), "next_flops": self.next_flops,
                    "next": self.next_step()})
        return out


def answer(fits: Mapping[str, Estimate | Skipped], verdict: Verdict | None,
           spread: ModelSpread | Skipped | None, reference_flops: float,
           largest_budget: float, unit: str = "tokens") -> Answer | None:
    """The answer at ``reference_flops`` from the headline law; None without a headline."""
    if verdict is None or verdict.headline is None:
        return None
    name = verdict.headline
    est, law = fits.get(name), verdict.law(name)
    if not isinstance(est, Estimate) or law is None:
        return None
    values = {q: float(est.point[q]) for q in QUANTITIES if q in est.point}
    intervals: dict[str, tuple[float, float] | None] = {}
    problems: dict[str, str] = {}
    for q in values:
        iv = est.ci95(q)
        why = interval_problem(est, q)
        if why is not None:
            problems[q] = why
        intervals[q] = None if iv is None or why is not None else (iv.low, iv.high)
    tokens, note = None, ""
    if isinstance(spread, ModelSpread) and "tokens_per_param" in spread.laws:
        tokens = spread.laws["tokens_per_param"].range
        note = spread.laws["tokens_per_param"].note
    why = ("the parametric law, not beyond the noise, that best predicted each budget from the "
           "ones below it (rolling-origin backtest)" if law.backtest_error is not None else
           "without a rolling-origin backtest, the parametric law whose residuals are closest "
           "to the noise (or smallest)")
    return Answer(reference_flops, name, law.what, why, values, intervals, problems,
                  law.backtest_error, tokens, note, unit, NEXT_FACTOR * largest_budget)

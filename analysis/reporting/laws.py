"""The report's answer to "how many tokens per parameter": the laws judged, the approaches
side by side, and the headline (analysis.checks.verdict). Only presentation, like
``analysis.reporting.sections`` (which places this section and the headline line).

The FLOP convention of every allocation is stated once, here (``CONVENTION``); the agreement
table lists every approach and law on the same C, the model-free check included.
"""

from __future__ import annotations

from analysis.analyze import Analysis
from analysis.checks.verdict import (
    CONVENTION,
    HOLDOUT_TARGET,
    NOISE_RATIO_LIMIT,
    Verdict,
    interval_problem,
)
from analysis.fits.results import Estimate
from analysis.fits.table import FITS, allocations
from analysis.numerics.bootstrap import Interval
from analysis.reporting.document import Block, Heading, Paragraph, Table
from analysis.reporting.figures import CHINCHILLA_A, KAPLAN_A
from analysis.text import fmt, fmt_interval


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.2%}"


def _vci(est: Estimate, key: str) -> str:
    if key not in est.point:
        return "—"
    iv = est.ci95(key)
    return f"{fmt(est.point[key])}" + ("" if iv is None else f" {fmt_interval(iv)}")


def position(iv: Interval | None, a: float) -> str:
    """Which documented exponent(s) an interval for a admits (only said of a law that
    describes the runs, or of a model-free approach)."""
    if iv is None:
        closer = "Chinchilla" if abs(a - CHINCHILLA_A) <= abs(a - KAPLAN_A) else "Kaplan"
        return f"closer to {closer} (no interval to test)"
    chin, kap = iv.contains(CHINCHILLA_A), iv.contains(KAPLAN_A)
    if chin and kap:
        return (f"cannot tell Chinchilla from Kaplan: {fmt_interval(iv)} contains both "
                f"{CHINCHILLA_A} and {KAPLAN_A}")
    if chin:
        return (f"consistent with Chinchilla (a ≈ {CHINCHILLA_A} inside {fmt_interval(iv)}), "
                f"not with Kaplan ({KAPLAN_A} outside)")
    if kap:
        return (f"consistent with Kaplan ({KAPLAN_A} inside {fmt_interval(iv)}), not with "
                f"Chinchilla ({CHINCHILLA_A} outside)")
    return (f"consistent with neither: {fmt_interval(iv)} excludes Chinchilla's "
            f"{CHINCHILLA_A} and Kaplan's {KAPLAN_A}")


def judged_position(result: Analysis, name: str, est: Estimate) -> str:
    """``position``, unless ``name`` is a law that does not describe the runs (then that, and
    the headline law instead) or its interval of a cannot be compared (interval_problem;
    issue 16)."""
    law = None if result.verdict is None else result.verdict.law(name)
    if law is None or law.describes:
        problem = interval_problem(est, "a")
        if problem is not None:
            return f"no comparison: {problem}"
        return position(est.ci95("a"), est.point["a"])
    better = result.verdict.headline
    named = ("" if better in (None, name) else
             f"; the better form is {better} ({_what(result.verdict, better)})")
    return f"does not describe the runs ({law.reason()}), so no comparison is made{named}"


def _what(verdict: Verdict, name: str) -> str:
    law = verdict.law(name)
    return name if law is None else law.what


def headline_line(result: Analysis) -> str | None:
    """The summary's first line: the headline law, its allocation, and the rule."""
    verdict = result.verdict
    if verdict is None or verdict.headline is None:
        return None
    name = verdict.headline
    est, law = result.fits.get(name), verdict.law(name)
    if not isinstance(est, Estimate) or law is None:
        return None
    status = ("describes the runs" if law.describes else
              "the best available, but it does **not** describe the runs")
    then = ("" if not law.describes else
            f"; against the documented exponents: {judged_position(result, name, est)}")
    return (f"**Headline allocation** ({name}: {law.what}; {status}: {law.reason()}): "
            f"a = {_vci(est, 'a')}, b = {_vci(est, 'b')}, "
            f"{_vci(est, 'tokens_per_param')} {result.fitted_runs.data_unit} per parameter at "
            f"C = {fmt(result.reference_flops)}{then}. Rule: {verdict.rule}.")


def laws_section(result: Analysis) -> list[Block]:
    """The convention, every law judged, and every approach's allocation on the same C."""
    blocks: list[Block] = [
        Heading("Which law describes the runs, and the allocation it implies"),
        Paragraph(f"**Convention** (every allocation in this report): {CONVENTION}")]
    verdict = result.verdict
    if verdict is not None and verdict.laws:
        blocks.append(Paragraph(
            f"A law describes the runs when its residual RMS is at most {NOISE_RATIO_LIMIT}x "
            "what the measured seed noise alone would leave and it predicts every held-out "
            f"run within {HOLDOUT_TARGET:.0%}; only such a law is compared with Chinchilla "
            f"or Kaplan. Headline rule: {verdict.rule}."))
        rows = tuple((v.approach, v.what, fmt(v.rms), fmt(v.expected_rms), fmt(v.ratio),
                      _pct(v.holdout_rel_error), "yes" if v.describes else "no",
                      "headline" if v.approach == verdict.headline else "")
                     for v in verdict.laws)
        blocks.append(Table(("law", "form", "residual RMS", "noise-expected RMS",
                             "residual / noise", "held-out error", "describes the runs?",
                             ""), rows))
    rows = []
    for name in allocations():  # the entries with FitSpec.allocation, in table order
        est = result.fits.get(name)
        spec = FITS.get(name)
        if spec is None or est is None:
            continue
        if not isinstance(est, Estimate):
            rows.append((name, spec.title, "—", "—", "—", f"skipped: {est.reason}"))
            continue
        rows.append((name, spec.title, _vci(est, "a"), _vci(est, "b"),
                     _vci(est, "tokens_per_param"),
                     judged_position(result, name, est) if "a" in est.point else ""))
    blocks.append(Paragraph(
        f"Every approach on the same C (95% bootstrap intervals; "
        f"{result.fitted_runs.data_unit} per parameter at "
        f"C = {fmt(result.reference_flops)}). The quadratic surface is model-free: a check "
        "on the laws, never extrapolated and never the headline."))
    blocks.append(Table(("approach", "what", "a", "b",
                         f"{result.fitted_runs.data_unit} per parameter", "verdict"),
                        tuple(rows)))
    return blocks

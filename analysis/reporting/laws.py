"""The report's answer to "how many tokens per parameter": the laws judged, the approaches
side by side, and the headline (analysis.checks.verdict). Only presentation, like
``analysis.reporting.sections`` (which places this section and the headline line).

The FLOP convention of every allocation is stated once, here (``CONVENTION``); the agreement
table lists every approach and law on the same C, the model-free check included.
"""

from __future__ import annotations

from analysis.analyze import Analysis
from analysis.checks.identification import DEVIANCE_LIMIT, ParameterFlag, checked, flags_of
from analysis.checks.verdict import (
    CONVENTION,
    HOLDOUT_TARGET,
    NOISE_RATIO_LIMIT,
    LawVerdict,
    Verdict,
    interval_problem,
)
from analysis.fits.results import Estimate, Skipped
from analysis.fits.table import FITS, allocations, judged
from analysis.numerics.bootstrap import Interval
from analysis.reporting.document import Block, Bullets, Heading, Paragraph, Table
from analysis.reporting.figures import CHINCHILLA_A, KAPLAN_A
from analysis.text import fmt, fmt_interval


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.2%}"


def _worst(x: float | None) -> str:
    return "—" if x is None else f"{x:.2%}"


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
    if law is None or law.comparable:
        problem = interval_problem(est, "a")
        if problem is not None:
            return f"no comparison: {problem}"
        return position(est.ci95("a"), est.point["a"])
    better = result.verdict.headline
    named = ("" if better in (None, name) else
             f"; the better form is {better} ({_what(result.verdict, better)})")
    return f"{_state_words(law)} ({law.reason()}), so no comparison is made{named}"


def _state_words(law: LawVerdict) -> str:
    """The verdict's state of a law as a clause (analysis.checks.verdict.STATES)."""
    return {"describes": "describes the runs",
            "borderline": "is borderline: its residuals may or may not exceed the noise",
            "does not describe": "does **not** describe the runs",
            "cannot be judged": "cannot be judged against the noise (no seed replicates)",
            }[law.state]


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
    status = _state_words(law)
    then = ("" if not law.comparable else
            f"; against the documented exponents: {judged_position(result, name, est)}")
    return (f"**Headline allocation** ({name}: {law.what}; {status}: {law.reason()}): "
            f"a = {_vci(est, 'a')}{_spread(result, 'a')}, b = {_vci(est, 'b')}, "
            f"{_vci(est, 'tokens_per_param')}{_spread(result, 'tokens_per_param')} "
            f"{result.fitted_runs.data_unit} per parameter at "
            f"C = {fmt(result.reference_flops)}{then}. Rule: {verdict.rule}."
            + _unpinned(est))


def _spread(result: Analysis, quantity: str) -> str:
    """The model uncertainty beside a bootstrap interval: the range across the laws and
    across the fit windows (analysis.checks.model_spread)."""
    spread = result.model_spread
    if isinstance(spread, Skipped):
        return ""
    parts = []
    for what, s in (("across laws", spread.laws[quantity]),
                    ("across fit windows", spread.windows[quantity])):
        if s.range is not None and len(s.values) > 1:
            parts.append(f"{what} {fmt(s.range[0])}–{fmt(s.range[1])}")
    return "" if not parts else f" ({'; '.join(parts)})"


def laws_section(result: Analysis) -> list[Block]:
    """The convention, every law judged, and every approach's allocation on the same C."""
    blocks: list[Block] = [
        Heading("Which law describes the runs, and the allocation it implies"),
        Paragraph(f"**Convention** (every allocation in this report): {CONVENTION}")]
    verdict = result.verdict
    if verdict is not None and verdict.laws:
        blocks.append(Paragraph(
            f"A law describes the runs when the 95% interval of its residual RMS over what "
            f"the measured seed noise alone would leave is at most {NOISE_RATIO_LIMIT}, does "
            f"not when the whole interval is above it, and is borderline when the interval "
            f"straddles it; without seed replicates it cannot be judged. Only a law that "
            f"describes the runs or is borderline is compared with Chinchilla or Kaplan. "
            f"Held-out runs are predicted against one target, {HOLDOUT_TARGET:.0%}. "
            f"Headline rule: {verdict.rule}."))
        rows = tuple((v.approach, v.what, fmt(v.rms), fmt(v.expected_rms), fmt(v.ratio),
                      "—" if v.ratio_ci is None else fmt_interval(Interval(*v.ratio_ci)),
                      v.state, _worst(v.backtest_error), _pct(v.holdout_rel_error),
                      "headline" if v.approach == verdict.headline else "")
                     for v in verdict.laws)
        blocks.append(Table(("law", "form", "residual RMS", "noise-expected RMS",
                             "residual / noise", "its 95% interval", "residuals",
                             "rolling-origin error", "held-out error", ""), rows))
    blocks.extend(identification_blocks(result))
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


# --------------------------------------------------------------------------- identification


def short_flags(flags: tuple[ParameterFlag, ...]) -> str:
    """``E (at its bound 0), alpha (flat profile)``: the flags of one law, briefly."""
    return ", ".join(f"{f.parameter} (" + (f"at its bound {fmt(f.bound)}" if f.kind == "at_bound"
                                          else "flat profile") + ")" for f in flags)


def _unpinned(est: Estimate) -> str:
    flags = flags_of(est.fit)
    return "" if not flags else (f" Not identified by the runs: {short_flags(flags)} (see "
                                 "\"Parameters the runs do not identify\" below).")


def identification_blocks(result: Analysis) -> list[Block]:
    """The parameters of each judged law that the runs do not identify
    (analysis.checks.identification), in the words of fit.json's ``identification``."""
    names = [name for name in judged() if isinstance(result.fits.get(name), Estimate)
             and checked(result.fits[name].fit)]
    if not names:
        return []
    lines = tuple(f"{name}: {flag.words}" for name in names
                  for flag in flags_of(result.fits[name].fit))
    how = ("a parameter is not identified when it sits at a bound of its fit, or when its "
           "profile is flat: moved across a wide range (an exponent a factor of 2 either way, "
           "E to half of it or halfway to the lowest loss) with the other parameters "
           "refitted, the fit never worsens by the deviance of "
           f"{DEVIANCE_LIMIT:.2f} a 95% likelihood-ratio test needs; such a value is not a "
           "measurement")
    if not lines:
        return [Paragraph(f"**Identification** ({', '.join(names)}): every parameter is "
                          f"identified by the runs ({how}).")]
    return [Paragraph(f"**Parameters the runs do not identify** ({how}):"), Bullets(lines)]

"""The report's section on repeated data: the data-constrained laws (issue 52), what they
fit against the fresh-data laws on the same runs, whether the runs pin R_D* and R_N*, and how
much of each repeated run's loss the law puts on the repetition. Only presentation; nothing
when no data-constrained law was fitted (no run repeats its data, or none records U).
"""

from __future__ import annotations

from analysis.analyze import Analysis
from analysis.checks.repetition import law_profiles
from analysis.fits.data_constrained import DataConstrainedFit
from analysis.fits.results import Estimate
from analysis.fits.table import FITS
from analysis.reporting.document import Block, Bullets, Heading, Paragraph, Table
from analysis.text import fmt, fmt_interval

BASE = {"data_constrained": "3", "data_constrained_interaction": "interaction"}
"""Each data-constrained law's fresh-data form in the table of fits."""
MAX_ROWS = 12
"""Repeated runs listed (the most repeated first); fit.json's ``repeated_runs`` has all."""


def _value(est: Estimate, key: str) -> str:
    iv = est.ci95(key)
    return fmt(est.point[key]) + ("" if iv is None else f" {fmt_interval(iv)}")


def _objective_words(result: Analysis, name: str, est: Estimate) -> str:
    base = result.fits.get(BASE[name])
    mine = est.fit.law.objective
    if not isinstance(base, Estimate):
        return f"objective {fmt(mine)}"
    theirs = getattr(base.fit, "objective", None)
    if theirs is None:  # a LawFit: the objective is its law's
        theirs = base.fit.law.objective
    return (f"objective {fmt(mine)} against {fmt(theirs)} for its fresh-data form (approach "
            f"{BASE[name]}) on the same runs ({mine / theirs - 1:+.0%})")


def repetition_section(result: Analysis) -> list[Block]:
    fitted = {name: est for name in BASE if isinstance(est := result.fits.get(name), Estimate)
              and isinstance(est.fit, DataConstrainedFit)}
    if not fitted:
        return []
    first = next(iter(fitted.values())).fit
    blocks: list[Block] = [
        Heading("Repeated data: the data-constrained laws"),
        Paragraph(
            f"{len(first.repeated)} of {first.law.n_points} fitted points repeat their data (up "
            f"to {max(r.epochs for r in first.repeated):.3g} epochs). The data-constrained "
            "law (Muennighoff et al. 2023) counts a token repeated k times as worth "
            "exp(−k/R_D*) of a fresh one and parameters beyond the compute-optimal size for U "
            "unique tokens likewise with R_N*; with fresh data it is its base law. Its "
            "allocation (tables above) is for unlimited data; `python -m analysis.predict "
            "--unique-tokens U` gives the optimum for a fixed corpus.")]
    rows = []
    for name, est in fitted.items():
        rows.append((name, _value(est, "R_D_star"), _value(est, "R_N_star"),
                     _value(est, "alpha"), _value(est, "beta"), _value(est, "E"),
                     _objective_words(result, name, est)))
    blocks.append(Table(("law", "R_D*", "R_N*", "α", "β", "E", "fit"), tuple(rows)))
    profiles = []
    for name, est in fitted.items():
        for which, prof in law_profiles(est.fit.law).items():
            points = ", ".join(f"{fmt(v)}: {dev:.3g}" for v, dev in prof)
            profiles.append(f"{name}, {which.replace('_star', '*')} (value: deviance, the "
                            f"others refitted; 95% limit 3.84): {points}")
    if profiles:
        blocks += [Paragraph("Profiles (a value whose deviance stays under 3.84 fits as well "
                             "as the estimate; the flags are with the laws above):"),
                   Bullets(tuple(profiles))]
    headline = result.verdict.headline if result.verdict is not None else None
    name = headline if headline in fitted else next(iter(fitted))
    fit = fitted[name].fit
    runs = sorted(fit.repeated, key=lambda r: -r.epochs)[:MAX_ROWS]
    one_u = len({round(r.unique_tokens, 6) for r in fit.repeated}) == 1
    fresh = len(fit.repeated) < fit.law.n_points
    caveat = ("" if fresh and not one_u else
              " Caution: every fitted run repeats its data" + (
                  f", all the same U = {fmt(fit.repeated[0].unique_tokens)}" if one_u else "")
              + ", so the law's fresh-data form is an extrapolation the runs never saw: these "
              "numbers are the law's, not measured (a share above 100% says the extrapolation "
              "fails).")
    blocks.append(Paragraph(
        f"What {name} ({FITS[name].words}) attributes to repetition at the most repeated "
        f"runs ({len(runs)} of {len(fit.repeated)}): L(N, D, U) − L(N, D, fresh data), in "
        f"nats and as a share of the observed loss.{caveat}"))
    blocks.append(Table(
        ("run", "N", "D", "U", "epochs", "loss", "owed to repetition", "share"),
        tuple((r.run_id, fmt(r.N), fmt(r.D), fmt(r.unique_tokens), f"{r.epochs:.3g}",
               fmt(r.loss), fmt(r.attributed), f"{r.attributed / r.loss:.1%}") for r in runs),
        numeric=(False, True, True, True, True, True, True, True)))
    return blocks

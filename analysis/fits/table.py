"""The table of fits: one entry per fit approach, what everything else iterates.

``FITS`` maps an approach name ("kaplan", "1", "2", "3", and the laws with an N x D interaction
"interaction" and "kaplan_joint" and the model-free check "quadratic") to a ``FitSpec``: its title, how to
fit, bootstrap and summarise it on a sweep (``run``), which fields beyond its point statistics
go into fit.json (``json_fields``, one function per entry), whether the report has sections of
its own for it, and its roles (``FitSpec.judged``, ``headline_candidate``, ``allocation``,
``agreement``, ``extrapolates``, with the verdict's ``words`` and ``n_params``).
``analysis.analyze`` fits every entry, ``analysis.schema`` writes each as
``approaches.<name>``, the console (``analysis.render``) prints a table for each, the report
lists each one without sections of its own, and the ``--approach`` choices of
`python -m analysis.fit` are its names. The lists of a role are read off the table when asked,
in table order: ``judged`` (the laws analysis.checks.verdict judges), ``headline_candidates``,
``allocations`` (the report's table of allocations), ``compared`` (the pairs of
analysis.checks.agreement) and ``predictable`` (`python -m analysis.predict --approach`).

A new approach is one module in ``analysis/fits/`` (its fit, returning a frozen dataclass
with ``statistics``, and its ``run``, using ``analysis.fits.spec``) plus one
``register(FitSpec(...))`` entry at the bottom of this file (docs/analysis.md: "Adding a
fit"). Entries run in table order, each on the same selected runs (``FitInput``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from analysis.checks.identification import (
    fit_identified_interaction,
    fit_identified_joint,
    flags_json,
    with_approach3_flags,
)
from analysis.checks.repetition import PendingProfiles, law_profiles
from analysis.errors import FitError
from analysis.fits.approach1 import Approach1Fit, bootstrap_approach1, fit_approach1
from analysis.fits.approach2 import Approach2Fit, bootstrap_approach2, fit_approach2
from analysis.fits.approach3 import Approach3Fit, bootstrap_approach3, fit_approach3
from analysis.fits.data_constrained import DataConstrainedLaw, run_data_constrained
from analysis.fits.envelope import build_curves
from analysis.fits.interaction import N_PARAMS as INTERACTION_PARAMS
from analysis.fits.interaction import InteractionLaw, run_interaction
from analysis.fits.kaplan import (
    KaplanFit,
    KaplanJoint,
    bootstrap_kaplan,
    fit_kaplan,
    refit_joint_batch,
)
from analysis.fits.laws import LawFit, run_law
from analysis.fits.optimum import lines_from_runs
from analysis.fits.quadratic import N_PARAMS as QUADRATIC_PARAMS
from analysis.fits.quadratic import QuadraticSurface, run_quadratic
from analysis.fits.results import Estimate, Skipped
from analysis.fits.spec import FitInput, FitSpec, estimate
from analysis.numerics.bootstrap import Bootstrap

__all__ = ["FITS", "FitInput", "FitSpec", "allocations", "compared", "estimate",
           "headline_candidates", "judged", "predictable", "register"]
FitT = TypeVar("FitT")


FITS: dict[str, FitSpec] = {}


def register(spec: FitSpec) -> FitSpec:
    """Add (or replace) an entry; it runs after those already in the table."""
    FITS[spec.name] = spec
    return spec


def _names(role: Callable[[FitSpec], bool]) -> tuple[str, ...]:
    return tuple(name for name, spec in FITS.items() if role(spec))


def judged() -> tuple[str, ...]:
    """The laws the verdict judges (``FitSpec.judged``), in table order."""
    return _names(lambda s: s.judged)


def headline_candidates() -> tuple[str, ...]:
    """The judged laws that may be the headline (``FitSpec.headline_candidate``)."""
    return _names(lambda s: s.headline_candidate)


def allocations() -> tuple[str, ...]:
    """The approaches whose statistics are an allocation (``FitSpec.allocation``)."""
    return _names(lambda s: s.allocation)


def compared() -> tuple[str, ...]:
    """The approaches compared pairwise on a (``FitSpec.agreement``)."""
    return _names(lambda s: s.agreement)


def predictable() -> tuple[str, ...]:
    """The allocations that may be carried to another budget (``FitSpec.extrapolates``):
    the ``--approach`` choices of `python -m analysis.predict`."""
    return _names(lambda s: s.allocation and s.extrapolates)


def _boot(inp: FitInput, fn: Callable[[FitT], Bootstrap]) -> Callable[[FitT], Bootstrap] | None:
    return fn if inp.n_resamples > 0 else None


# --------------------------------------------------------------------------- Kaplan et al. 2020


def _run_kaplan(inp: FitInput) -> Estimate | Skipped:
    n_k, _, label = inp.runs.kaplan_n_c()
    d, loss = inp.columns("D", "loss")
    curves_k = build_curves(inp.runs, inp.curves, kaplan=True)
    return estimate(
        lambda: fit_kaplan(n_k, d, loss, curves_k, conventions=label), KaplanFit.statistics,
        _boot(inp, lambda f: bootstrap_kaplan(n_k, d, loss, curves_k, f,
                                              n_resamples=inp.n_resamples, seed=inp.seed,
                                              strata=inp.strata)))


def _kaplan_fields(fit: KaplanFit) -> dict[str, Any]:
    out: dict[str, Any] = {"conventions": fit.conventions, "skipped_parts": dict(fit.skipped)}
    for key, law in (("N_c", fit.l_of_n), ("D_c", fit.l_of_d), ("C_c", fit.l_of_c)):
        if law is not None:
            out[key] = law.x_c
    if fit.n_opt is not None:
        out["n_opt_coefficient"] = fit.n_opt.coefficient
    if fit.joint is not None:
        j = fit.joint
        out["joint"] = {"alpha_N": j.alpha_N, "alpha_D": j.alpha_D, "N_c": j.N_c,
                        "D_c": j.D_c, "rmse_log": j.rmse_log}
    return out


# --------------------------------------------------------------------------- Chinchilla 1-3


def _run_approach1(inp: FitInput) -> Estimate | Skipped:
    curves_c = build_curves(inp.runs, inp.curves)
    if all(cv is None for cv in curves_c):
        return Skipped("no training curves")
    ref = inp.reference_flops
    return estimate(
        lambda: fit_approach1(curves_c), lambda f: f.statistics(ref),
        _boot(inp, lambda f: bootstrap_approach1(curves_c, flops=ref,
                                                 n_resamples=inp.n_resamples, seed=inp.seed,
                                                 strata=inp.strata)))


def _run_approach2(inp: FitInput) -> Estimate | Skipped:
    n, d, c, loss, budget = inp.columns("N", "D", "C", "loss", "budget")
    if not np.isfinite(budget).any():
        return Skipped("no IsoFLOP budgets (no run belongs to a budget)")
    ref = inp.reference_flops
    return estimate(
        lambda: fit_approach2(n, d, c, loss, budget), lambda f: f.statistics(ref),
        _boot(inp, lambda f: bootstrap_approach2(n, d, c, loss, budget, flops=ref,
                                                 n_resamples=inp.n_resamples, seed=inp.seed,
                                                 strata=inp.strata)))


def _run_approach3(inp: FitInput) -> Estimate | Skipped:
    n, d, loss = inp.columns("N", "D", "loss")
    ref = inp.reference_flops
    try:
        lines = lines_from_runs(inp.runs)
    except FitError as err:
        return Skipped(str(err))
    return estimate(
        lambda: with_approach3_flags(fit_approach3(n, d, loss), n, d, loss),
        lambda f: f.statistics(ref, lines),
        _boot(inp, lambda f: bootstrap_approach3(n, d, loss, f, flops=ref,
                                                 n_resamples=inp.n_resamples, seed=inp.seed,
                                                 n_jobs=inp.n_jobs, lines=lines,
                                                 strata=inp.strata)))


def _approach1_fields(fit: Approach1Fit) -> dict[str, Any]:
    return {"n_opt_coefficient": fit.n_law.coefficient,
            "d_opt_coefficient": fit.d_law.coefficient, "n_points": fit.n_law.n_points}


def _approach2_fields(fit: Approach2Fit) -> dict[str, Any]:
    return {**_approach1_fields(fit), "budgets": [dict(m.__dict__) for m in fit.budgets]}


def _approach3_fields(fit: Approach3Fit) -> dict[str, Any]:
    return {"objective": fit.objective, "converged": fit.converged, "n_points": fit.n_points,
            "n_starts": fit.n_starts, "n_optimized": fit.n_optimized,
            "huber_delta": fit.delta, "identification": flags_json(fit)}


# The built-in approaches; each has sections and figures of its own in the report. Approaches
# 1 to 3 give an allocation on the sweep's budgets, compared pairwise; 3 is a law, judged.
register(FitSpec("kaplan", "Kaplan et al. 2020 laws", _run_kaplan, _kaplan_fields,
                 own_report_sections=True))
register(FitSpec("1", "Chinchilla Approach 1 (envelope)", _run_approach1, _approach1_fields,
                 own_report_sections=True, allocation=True, agreement=True))
register(FitSpec("2", "Chinchilla Approach 2 (IsoFLOP parabolas)", _run_approach2,
                 _approach2_fields, own_report_sections=True, allocation=True, agreement=True))
register(FitSpec("3", "Chinchilla Approach 3 (L = E + A/N^α + B/D^β)", _run_approach3,
                 _approach3_fields, own_report_sections=True,
                 words="Approach 3 (additive E + A/N^α + B/D^β)", n_params=5, judged=True,
                 headline_candidate=True, allocation=True, agreement=True))


# --------------------------------------------------------------------------- laws with an N x D
# interaction and the model-free check (issue 16). Each is a law of analysis.fits.laws: its
# allocation is the one definition of analysis.fits.optimum, as Approach 3's is.


def _law_fields(fit: LawFit) -> dict[str, Any]:
    """What every law of analysis.fits.laws writes: its parameter count and its allocation."""
    alloc = fit.allocation
    return {
        "n_params": fit.n_params,
        "allocation": {"budgets": list(alloc.budgets), "n_opt": list(alloc.n_opt),
                       "d_opt": list(alloc.d_opt), "on_bound": list(alloc.on_bound),
                       "reference_on_bound": alloc.ref_on_bound},
    }


def _interaction_fields(fit: LawFit) -> dict[str, Any]:
    law: InteractionLaw = fit.law
    return {**_law_fields(fit), "objective": law.objective, "converged": law.converged,
            "n_points": law.n_points, "identification": flags_json(fit)}


def _kaplan_joint_fields(fit: LawFit) -> dict[str, Any]:
    law: KaplanJoint = fit.law
    return {**_law_fields(fit), "n_points": law.n_points, "rmse_log": law.rmse_log,
            "identification": flags_json(fit)}


def _quadratic_fields(fit: LawFit) -> dict[str, Any]:
    law: QuadraticSurface = fit.law
    return {**_law_fields(fit), "coefficients": list(law.coef), "rmse_log": law.rmse_log,
            "n_points": law.n_points}


def _run_interaction(inp: FitInput) -> Estimate | Skipped:
    return run_interaction(inp, fit_identified_interaction)  # the full-data fit's flags


def _run_kaplan_joint(inp: FitInput) -> Estimate | Skipped:
    return run_law(inp, fit_identified_joint, refit_joint_batch)  # the full-data fit's flags


# The report shows them in its section on the laws and the allocation (analysis.reporting.laws).
# Each is judged; the quadratic, a check that must not be extrapolated, never headlines.
register(FitSpec("interaction", "Interaction law (L = E + (A/N^α + B/D^β)^γ)", _run_interaction,
                 _interaction_fields, own_report_sections=True,
                 words="interaction law E + (A/N^α + B/D^β)^γ", n_params=INTERACTION_PARAMS,
                 judged=True, headline_candidate=True, allocation=True, agreement=True))
register(FitSpec("kaplan_joint", "Kaplan joint law on the sweep's N "
                 "(L = [(N_c/N)^(α_N/α_D) + D_c/D]^α_D)", _run_kaplan_joint,
                 _kaplan_joint_fields, own_report_sections=True,
                 words="Kaplan joint law [(N_c/N)^(α_N/α_D) + D_c/D]^α_D",
                 n_params=KaplanJoint.n_params, judged=True, headline_candidate=True,
                 allocation=True, agreement=True))
register(FitSpec("quadratic", "Model-free check: quadratic surface of ln L in (ln N, ln D)",
                 run_quadratic, _quadratic_fields, own_report_sections=True,
                 words="model-free quadratic surface in (ln N, ln D)", n_params=QUADRATIC_PARAMS,
                 judged=True, allocation=True, agreement=True, extrapolates=False))


# --------------------------------------------------------------------------- the data-constrained
# laws (issue 52; analysis.fits.data_constrained): the two forms above with repeated tokens and
# excess parameters decayed. Skipped unless every run knows U and some run repeats its data.
# The report shows them with the laws (analysis.reporting.laws) and in its section on repeated
# data (analysis.reporting.repetition).


def _data_constrained_fields(fit: LawFit) -> dict[str, Any]:
    law: DataConstrainedLaw = fit.law
    return {**_law_fields(fit), "form": law.form, "objective": law.objective,
            "converged": law.converged, "n_points": law.n_points, "n_repeated": law.n_repeated,
            "identification": flags_json(fit),
            "profiles": {name: [{"value": v, "deviance": dev} for v, dev in prof]
                         for name, prof in law_profiles(law).items()},
            "repeated_runs": [r.to_json() for r in getattr(fit, "repeated", ())]}


def _run_data_constrained(inp: FitInput) -> Estimate | Skipped:
    return run_data_constrained(inp, "additive", PendingProfiles)  # the full fit's profiles


def _run_data_constrained_interaction(inp: FitInput) -> Estimate | Skipped:
    return run_data_constrained(inp, "interaction", PendingProfiles)


register(FitSpec("data_constrained", "Data-constrained law, additive (Muennighoff et al. "
                 "2023: L = E + A/N'^α + B/D'^β)", _run_data_constrained,
                 _data_constrained_fields, own_report_sections=True,
                 words="data-constrained law E + A/N'^α + B/D'^β (repeats decayed)",
                 n_params=7, judged=True, headline_candidate=True, allocation=True,
                 agreement=True))
register(FitSpec("data_constrained_interaction", "Data-constrained law, interaction form "
                 "(L = E + (A/N'^α + B/D'^β)^γ)", _run_data_constrained_interaction,
                 _data_constrained_fields, own_report_sections=True,
                 words="data-constrained interaction law E + (A/N'^α + B/D'^β)^γ",
                 n_params=8, judged=True, headline_candidate=True, allocation=True,
                 agreement=True))

"""The table of fits: one entry per fit approach, what everything else iterates.

``FITS`` maps an approach name ("kaplan", "1", "2", "3", and the laws with an N x D interaction
"interaction" and "kaplan_joint" and the model-free check "quadratic") to a ``FitSpec``: its title, how to
fit, bootstrap and summarise it on a sweep (``run``), which fields beyond its point statistics
go into fit.json (``json_fields``), and whether the report has sections of its own for it.
``analysis.analyze`` fits every entry, ``analysis.schema`` writes each as
``approaches.<name>``, the console (``analysis.render``) prints a table for each, the report
lists each one without sections of its own, and the ``--approach`` choices of
`python -m analysis.fit` and `python -m analysis.predict` are its names.

A new approach is one module in ``analysis/fits/`` (its fit, returning a frozen dataclass
with ``statistics``, and its ``run``, using ``analysis.fits.spec``) plus one
``register(FitSpec(...))`` entry at the bottom of this file (docs/analysis.md: "Adding a
fit"). Entries run in table order, each on the same selected runs (``FitInput``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from analysis.errors import FitError
from analysis.fits.approach1 import Approach1Fit, bootstrap_approach1, fit_approach1
from analysis.fits.approach2 import Approach2Fit, bootstrap_approach2, fit_approach2
from analysis.fits.approach3 import Approach3Fit, bootstrap_approach3, fit_approach3
from analysis.fits.bootstrap import Bootstrap
from analysis.fits.envelope import build_curves
from analysis.fits.interaction import InteractionLaw, run_interaction
from analysis.fits.kaplan import (
    KaplanFit,
    bootstrap_kaplan,
    fit_joint_law,
    fit_kaplan,
    refit_joint_batch,
)
from analysis.fits.laws import LawFit, run_law
from analysis.fits.optimum import lines_from_runs
from analysis.fits.quadratic import QuadraticSurface, run_quadratic
from analysis.fits.results import Estimate, Skipped
from analysis.fits.spec import FitInput, FitSpec, estimate

__all__ = ["FITS", "FitInput", "FitSpec", "estimate", "register"]
FitT = TypeVar("FitT")


FITS: dict[str, FitSpec] = {}


def register(spec: FitSpec) -> FitSpec:
    """Add (or replace) an entry; it runs after those already in the table."""
    FITS[spec.name] = spec
    return spec


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
        lambda: fit_approach3(n, d, loss), lambda f: f.statistics(ref, lines),
        _boot(inp, lambda f: bootstrap_approach3(n, d, loss, f, flops=ref,
                                                 n_resamples=inp.n_resamples, seed=inp.seed,
                                                 n_jobs=inp.n_jobs, lines=lines,
                                                 strata=inp.strata)))


def _allocation_fields(fit: Approach1Fit | Approach2Fit) -> dict[str, Any]:
    out: dict[str, Any] = {
        "n_opt_coefficient": fit.n_law.coefficient, "d_opt_coefficient": fit.d_law.coefficient,
        "n_points": fit.n_law.n_points,
    }
    if isinstance(fit, Approach2Fit):
        out["budgets"] = [dict(m.__dict__) for m in fit.budgets]
    return out


def _approach3_fields(fit: Approach3Fit) -> dict[str, Any]:
    return {"objective": fit.objective, "converged": fit.converged, "n_points": fit.n_points,
            "n_starts": fit.n_starts, "n_optimized": fit.n_optimized,
            "huber_delta": fit.delta}


# The built-in approaches; each has sections and figures of its own in the report.
register(FitSpec("kaplan", "Kaplan et al. 2020 laws", _run_kaplan, _kaplan_fields,
                 own_report_sections=True))
register(FitSpec("1", "Chinchilla Approach 1 (envelope)", _run_approach1, _allocation_fields,
                 own_report_sections=True))
register(FitSpec("2", "Chinchilla Approach 2 (IsoFLOP parabolas)", _run_approach2,
                 _allocation_fields, own_report_sections=True))
register(FitSpec("3", "Chinchilla Approach 3 (L = E + A/N^α + B/D^β)", _run_approach3,
                 _approach3_fields, own_report_sections=True))


# --------------------------------------------------------------------------- laws with an N x D
# interaction and the model-free check (issue 16). Each is a law of analysis.fits.laws: its
# allocation is the one definition of analysis.fits.optimum, as Approach 3's is.


def _law_fields(fit: LawFit) -> dict[str, Any]:
    alloc, law = fit.allocation, fit.law
    out: dict[str, Any] = {
        "n_params": fit.n_params,
        "allocation": {"budgets": list(alloc.budgets), "n_opt": list(alloc.n_opt),
                       "d_opt": list(alloc.d_opt), "on_bound": list(alloc.on_bound),
                       "reference_on_bound": alloc.ref_on_bound},
    }
    if isinstance(law, InteractionLaw):
        out.update(objective=law.objective, converged=law.converged, n_points=law.n_points)
    elif isinstance(law, QuadraticSurface):
        out.update(coefficients=list(law.coef), rmse_log=law.rmse_log, n_points=law.n_points)
    else:
        out.update(n_points=law.n_points, rmse_log=law.rmse_log)
    return out


def _run_kaplan_joint(inp: FitInput) -> Estimate | Skipped:
    return run_law(inp, fit_joint_law, refit_joint_batch)


# The report shows them in its section on the laws and the allocation (analysis.reporting.laws).
register(FitSpec("interaction", "Interaction law (L = E + (A/N^α + B/D^β)^γ)", run_interaction,
                 _law_fields, own_report_sections=True))
register(FitSpec("kaplan_joint", "Kaplan joint law on the sweep's N "
                 "(L = [(N_c/N)^(α_N/α_D) + D_c/D]^α_D)", _run_kaplan_joint, _law_fields,
                 own_report_sections=True))
register(FitSpec("quadratic", "Model-free check: quadratic surface of ln L in (ln N, ln D)",
                 run_quadratic, _law_fields, own_report_sections=True))

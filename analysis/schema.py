"""The JSON form of an Analysis: one schema for `python -m analysis.fit --json` and reports.

Documented field by field in docs/analysis.md. Numbers that are not finite become null, so
the output is strict JSON. Every approach has ``status`` "ok" or "skipped" (with ``reason``);
an ok approach has its point estimates at top level and ``ci95`` = {name: [low, high]}. So do
the checks around the fits (noise, holdout, convention_refits, schedules).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis.checks.conventions import ConventionTable, GeneralAllocation
from analysis.checks.heldout import FrontierLaw, HoldoutCheck
from analysis.checks.identification import flags_of
from analysis.checks.noise import NoiseEstimate
from analysis.checks.schedules import ScheduleComparison
from analysis.checks.verdict import summarise
from analysis.fits.results import Estimate, Skipped
from analysis.fits.table import FITS

if TYPE_CHECKING:
    from analysis.analyze import Analysis

SCHEMA = "scaling-analysis/1"


def clean(value: Any) -> Any:
    """numpy scalars -> Python; NaN/inf -> None; recurse into dicts, lists and tuples."""
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def estimate_to_json(name: str, est: Estimate | Skipped) -> dict[str, Any]:
    """One approach of the table of fits: its point statistics, the fields its entry adds
    (``FitSpec.json_fields``), its intervals and how its bootstrap went."""
    if not hasattr(est, "fit"):
        return {"status": "skipped", "reason": est.reason}
    out: dict[str, Any] = {"status": "ok", **est.point, **FITS[name].json_fields(est.fit)}
    out["ci95"] = {name: iv.as_list() for name, iv in est.intervals.items()}
    if est.bootstrap is not None:
        out["bootstrap"] = {"resamples": est.bootstrap.n_resamples,
                            "failed": est.bootstrap.n_failed,
                            "failures": list(est.bootstrap.failures)}
    elif est.bootstrap_error:
        out["bootstrap"] = {"error": est.bootstrap_error}
    return out


def _skipped(reason: str) -> dict[str, Any]:
    return {"status": "skipped", "reason": reason}


def _summary(result: Analysis) -> dict[str, Any] | None:
    """fit.json's "summary"; its headline gains the words of its law's parameters that the
    runs do not identify, and the ranges of a and tokens per parameter across the laws and the
    fit windows (analysis.checks.model_spread)."""
    if result.verdict is None:
        return None
    out = summarise(result.fits, result.verdict, result.reference_flops)
    head = result.fits.get(result.verdict.headline or "")
    if out["headline"] is not None and isinstance(head, Estimate):
        # What the runs do not pin down of the headline law (analysis.checks.identification).
        out["headline"]["not_identified"] = [f.words for f in flags_of(head.fit)]
    found = result.answer()  # the headline law's allocation at the reference compute
    out["answer"] = None if found is None else found.to_json()
    spread = result.model_spread
    if out["headline"] is not None and not isinstance(spread, Skipped):
        out["headline"]["model_spread"] = {
            q: {"laws": spread.laws[q].range, "windows": spread.windows[q].range}
            for q in spread.laws}
    return out


def noise_to_json(noise: NoiseEstimate | Skipped) -> dict[str, Any]:
    if not isinstance(noise, NoiseEstimate):
        return _skipped(noise.reason)
    return {"status": "ok", "n_groups": noise.n_groups, "n_runs": noise.n_runs,
            "dof": noise.dof, "sigma": noise.sigma, "sigma_ci": noise.sigma_ci.as_list(),
            "rel_sigma": noise.rel_sigma, "rel_sigma_ci": noise.rel_sigma_ci.as_list(),
            "pooled_sigma": noise.pooled_sigma, "pooled_dof": noise.pooled_dof,
            "pooled_rel_sigma": noise.pooled_rel_sigma,
            "net_sigma": noise.net_sigma, "net_dof": noise.net_dof, "balanced": noise.balanced,
            "draw_effect_dof": noise.draw_effect_dof, "draw_effect_p": noise.draw_effect_p,
            "groups": [dict(g.__dict__) for g in noise.groups]}


def holdout_to_json(check: HoldoutCheck | Skipped) -> dict[str, Any]:
    if not isinstance(check, HoldoutCheck):
        return _skipped(check.reason)
    frontier = check.frontier
    runs = []
    for r in check.rows:
        row = dict(r.__dict__)
        row["approach3_ci"] = None if r.approach3_ci is None else r.approach3_ci.as_list()
        for name in ("approach3", "frontier"):
            err = getattr(r, f"{name}_error")
            row[f"{name}_error"] = err
            row[f"{name}_within_target"] = None if err is None else abs(err) < check.target
        runs.append(row)
    return {
        "status": "ok", "target": check.target, "approach3_reason": check.approach3,
        "frontier": ({"status": "ok", **frontier.__dict__} if isinstance(frontier, FrontierLaw)
                     else _skipped(frontier.reason)),
        "max_abs_error": {name: check.max_abs_error(name) for name in ("approach3", "frontier")},
        "runs": runs,
    }


def _refit_to_json(est: Estimate | Skipped) -> dict[str, Any]:
    """A convention refit: its allocation statistics and intervals, no fit details."""
    if not hasattr(est, "fit"):
        return _skipped(est.reason)
    out: dict[str, Any] = {"status": "ok", **est.point,
                           "ci95": {k: iv.as_list() for k, iv in est.intervals.items()}}
    if isinstance(est.fit, GeneralAllocation):
        law = est.fit.per_token
        out["flops_per_token"] = {"coefficient": law.coefficient, "exponent": law.exponent,
                                  "rmse_log": law.rmse_log}
    if est.bootstrap is not None:
        out["bootstrap"] = {"resamples": est.bootstrap.n_resamples,
                            "failed": est.bootstrap.n_failed}
    elif est.bootstrap_error:
        out["bootstrap"] = {"error": est.bootstrap_error}
    return out


def conventions_to_json(table: ConventionTable | Skipped) -> dict[str, Any]:
    if not isinstance(table, ConventionTable):
        return _skipped(table.reason)
    return {"status": "ok", "resamples": table.n_resamples, "seed": table.seed,
            "rows": [{"n": r.n, "c": r.c, "label": r.label, "n_label": r.n_label,
                      "reference_flops": r.reference_flops,
                      "approaches": {"2": _refit_to_json(r.approach2),
                                     "3": _refit_to_json(r.approach3)}}
                     for r in table.rows]}


def schedules_to_json(comparison: ScheduleComparison | Skipped) -> dict[str, Any]:
    if not isinstance(comparison, ScheduleComparison):
        return _skipped(comparison.reason)
    pairs = [{**p.__dict__, "difference": p.difference, "rel_difference": p.rel_difference,
              "z": p.z} for p in comparison.pairs]
    return {"status": "ok", "sigma": comparison.sigma,
            "mean_difference": comparison.mean_difference,
            "se_difference": comparison.se_difference, "pairs": pairs}


def analysis_to_json(result: Analysis) -> dict[str, Any]:
    extrapolation = {
        name: ({"status": "skipped", "reason": chk.reason} if not hasattr(chk, "approach")
               else {"status": "ok", **chk.to_json_dict()})
        for name, chk in result.extrapolation.items()
    }
    sel = result.selection
    return clean({
        "schema": SCHEMA,
        "source": result.source,
        "n_runs": result.n_runs,
        "excluded": [{"run": e.run, "reason": e.reason} for e in result.excluded],
        "conventions": dict(result.conventions),
        "reference_flops": result.reference_flops,
        "bootstrap": {"resamples": result.n_resamples, "seed": result.seed,
                      "by": result.bootstrap_by},
        "approaches": {name: estimate_to_json(name, est)
                       for name, est in result.approaches().items()},
        "comparison": [row.to_json_dict() for row in result.comparison],
        "extrapolation": extrapolation,
        "fitted": {
            "points": len(sel.fitted), "schedule": sel.schedule,
            "averaged_runs": sel.n_averaged,
            "holdout_runs": 0 if sel.holdout is None else len(sel.holdout),
            "holdout_above": sel.holdout_above,
            "left_out": [{"run": e.run, "reason": e.reason} for e in sel.left_out],
            "repeated_data": [{"run": run, "epochs": epochs} for run, epochs in sel.repeated],
            "repeat_variants": 0 if sel.repeats is None else len(sel.repeats),
        },
        "noise": noise_to_json(result.noise),
        "noise_propagation": (
            _skipped(result.noise_propagation.reason)
            if isinstance(result.noise_propagation, Skipped) else
            {"status": "ok", "simulations": result.noise_propagation.n_resamples,
             "failed": result.noise_propagation.n_failed,
             "intervals": {k: result.noise_propagation.interval(k).as_list()
                           for k in ("a", "b", "tokens_per_param")}}),
        "noise_split": None if result.noise_split is None else {
            **result.noise_split.__dict__,  # NaN ratio (no interior minimum) -> null
            "n_over_n_opt": [r if np.isfinite(r) else None
                             for r in result.noise_split.n_over_n_opt]},
        "residuals": [{**r.__dict__, "ratio": r.ratio} for r in result.residuals],
        "agreement": (_skipped(result.agreement.reason)
                      if isinstance(result.agreement, Skipped) else
                      {"status": "ok",
                       "pairs": [row.to_json_dict() for row in result.agreement]}),
        "holdout": holdout_to_json(result.holdout),
        "backtest": (_skipped(result.backtests.reason) if isinstance(result.backtests, Skipped)
                     else result.backtests.to_json_dict()),
        "model_spread": (_skipped(result.model_spread.reason)
                         if isinstance(result.model_spread, Skipped)
                         else result.model_spread.to_json_dict()),
        "laws": ([] if result.verdict is None else
                 [v.to_json_dict() for v in result.verdict.laws]),
        "summary": _summary(result),
        "convention_refits": conventions_to_json(result.convention_refits),
        "schedules": schedules_to_json(result.schedules),
    })

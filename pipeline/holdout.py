"""Held-out budgets: planned after the main runs, at the size their fit predicts optimal.

A held-out run tests a prediction made before looking, so it must not be chosen by hand: the
sweep driver calls holdout_plan once the main runs are in the ledger, and the report
(analysis.checks.heldout) compares its loss with what the fits of the main runs predict.
"""

from __future__ import annotations

from pipeline.config import SweepConfig
from pipeline.grid import Plan, plan_holdout, planned_run_ids
from pipeline.terminal import console
from pipeline.vocab import keys


class HoldoutError(RuntimeError):
    """The held-out runs cannot be planned (the main budgets give no fit)."""


def holdout_plan(cfg: SweepConfig, sweep_file: str, vocab: int, uri: str, plan: Plan) -> Plan:
    """The held-out runs, at the size that the main budgets' fit predicts optimal.

    The predictor is Approach 2 (IsoFLOP parabolas -> N_opt = k C^a), fitted on the main
    runs in the ledger with C under the sweep's planning convention, so N_opt(C) is read at
    the held-out budget in the same units. Its N_opt is a plan, not a result: the report
    compares the held-out loss with what every fit predicts for the size actually trained.
    ``plan`` is the main plan the driver ran: the ledger's runs outside it (and outside the
    held-out runs this file plans) are of an earlier version of the file and are not fitted.
    """
    from analysis.errors import AnalysisError
    from analysis.fits.approach2 import fit_approach2
    from analysis.runs.load import load_sweep as load_runs
    from analysis.runs.planned import held_out_cells, restrict_to_plan

    assert cfg.isoflop is not None and cfg.isoflop.holdout is not None
    try:
        runs = load_runs(cfg.name, tracking_uri=uri, flops_convention=cfg.flops_convention,
                         with_curves=False, log=lambda _m: None).runs
    except AnalysisError as e:
        raise HoldoutError(f"cannot load the main runs: {e}") from e
    try:
        planned = planned_run_ids(cfg, held_out_cells(runs), sweep_file, vocab, plan=plan)
        runs = restrict_to_plan(runs, planned, sweep_file)  # not the runs of an earlier recipe
    except AnalysisError as e:
        raise HoldoutError(f"cannot tell the main runs of {sweep_file}: {e}") from e
    frame = runs.frame
    main = frame[frame["role"] != keys.ROLE_HOLDOUT]
    try:
        fit = fit_approach2(*(main[k].to_numpy(float) for k in ("N", "D", "C", "loss", "budget")))
    except AnalysisError as e:
        raise HoldoutError(f"Approach 2 cannot be fitted on the main budgets, so there is no "
                           f"predicted optimum to train at: {e}") from e
    n_opt = {c: float(fit.n_opt(c)) for c in cfg.isoflop.holdout.budgets}
    for c, n in n_opt.items():
        console.print(f"held-out budget C={c:.3g}: Approach 2 on the main budgets "
                      f"(a = {fit.a:.3f}) predicts N_opt = {n:,.0f}")
    return plan_holdout(cfg, n_opt, sweep_file, vocab)

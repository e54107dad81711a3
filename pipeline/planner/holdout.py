"""Held-out budgets: planned after the main runs, at the size their fit predicts optimal.

A held-out run tests a prediction made before looking, so it must not be chosen by hand: the
sweep (pipeline.sweep, an entry point) fits Approach 2 on its main runs once they are in the
ledger and gives the predicted optimum to holdout_plan; the report (analysis.checks.heldout)
compares the held-out loss with what the fits of the main runs predict. This module is the
planning half only: it imports nothing of the analysis (tests/test_architecture.py).
holdout_plan checks the predicted optima and plans with plan_holdout, which takes the ladder
sizes (ladder) nearest each optimum and makes their RunSpecs as the main plan does (specs).
"""

from __future__ import annotations

import math
from pathlib import Path

from pipeline.config import SweepConfig
from pipeline.planner.cells import Cell
from pipeline.planner.ladder import shape_rule, size_ladder
from pipeline.planner.plan import Plan, Skipped
from pipeline.planner.specs import data_spec_for, model_vocab, run_specs
from pipeline.vocab import flops


class HoldoutError(RuntimeError):
    """The held-out runs cannot be planned (the main budgets give no fit)."""


def holdout_plan(cfg: SweepConfig, n_opt: dict[float, float], sweep_file: str | Path,
                 vocab: int, *, cpu_bf16: bool = False) -> Plan:
    """The held-out runs: at each held-out budget C, the sizes nearest the predicted
    compute-optimal ``n_opt[C]`` (parameters, read at C in the sweep's planning convention).

    That N_opt is a plan, not a result: the report compares the held-out loss with what every
    fit predicts for the size actually trained. HoldoutError when a held-out budget has no
    finite positive N_opt. ``cpu_bf16``: as the main plan's (pipeline.planner.expand)."""
    assert cfg.isoflop is not None and cfg.isoflop.holdout is not None
    for c in cfg.isoflop.holdout.budgets:
        n = n_opt.get(c)
        if n is None or not math.isfinite(n) or n <= 0:
            raise HoldoutError(f"no predicted optimum to train at for the held-out budget "
                               f"C={c:.3g} (got N_opt = {n})")
    return plan_holdout(cfg, n_opt, sweep_file, vocab, cpu_bf16=cpu_bf16)


def plan_holdout(cfg: SweepConfig, n_opt: dict[float, float], sweep_path: Path | str = ".",
                 vocab_size: int | None = None, *, cpu_bf16: bool = False) -> Plan:
    """The held-out runs: for each held-out budget C, the `count` ladder sizes nearest in
    log N to n_opt[C], the compute-optimal N that the fit of the main budgets predicts
    (``cpu_bf16`` as in expand)."""
    assert cfg.isoflop is not None and cfg.isoflop.holdout is not None
    seeds = tuple(cfg.train.seeds) + tuple(cfg.isoflop.holdout.seeds or ())
    vocab = model_vocab(cfg, vocab_size)
    ladder = size_ladder(cfg, shape_rule(cfg), vocab)
    skipped: list[Skipped] = []
    cells: list[Cell] = []
    for budget in cfg.isoflop.holdout.budgets:
        target = math.log(n_opt[budget])
        nearest = sorted(range(len(ladder)), key=lambda j: (
            abs(math.log(flops.params_total(ladder[j])) - target), j))
        for j in sorted(nearest[: cfg.isoflop.holdout.count]):
            m = ladder[j]
            cells.append(Cell(m, flops.tokens_for_budget(m, budget, cfg.flops_convention),
                              budget, seeds))
    specs = run_specs(cfg, data_spec_for(cfg, sweep_path), cells, skipped, role="holdout",
                      cpu_bf16=cpu_bf16)
    return Plan(specs, skipped)

"""Held-out budgets: planned after the main runs, at the size their fit predicts optimal.

A held-out run tests a prediction made before looking, so it must not be chosen by hand: the
sweep (pipeline.sweep, an entry point) fits Approach 2 on its main runs once they are in the
ledger and gives the predicted optimum to holdout_plan; the report (analysis.checks.heldout)
compares the held-out loss with what the fits of the main runs predict. This module is the
planning half only: it imports nothing of the analysis (tests/test_architecture.py).
"""

from __future__ import annotations

import math
from pathlib import Path

from pipeline.config import SweepConfig
from pipeline.grid import Plan, plan_holdout


class HoldoutError(RuntimeError):
    """The held-out runs cannot be planned (the main budgets give no fit)."""


def holdout_plan(cfg: SweepConfig, n_opt: dict[float, float], sweep_file: str | Path,
                 vocab: int, *, cpu_bf16: bool = False) -> Plan:
    """The held-out runs: at each held-out budget C, the sizes nearest the predicted
    compute-optimal ``n_opt[C]`` (parameters, read at C in the sweep's planning convention).

    That N_opt is a plan, not a result: the report compares the held-out loss with what every
    fit predicts for the size actually trained. HoldoutError when a held-out budget has no
    finite positive N_opt. ``cpu_bf16``: as the main plan's (pipeline.grid.expand)."""
    assert cfg.isoflop is not None and cfg.isoflop.holdout is not None
    for c in cfg.isoflop.holdout.budgets:
        n = n_opt.get(c)
        if n is None or not math.isfinite(n) or n <= 0:
            raise HoldoutError(f"no predicted optimum to train at for the held-out budget "
                               f"C={c:.3g} (got N_opt = {n})")
    return plan_holdout(cfg, n_opt, sweep_file, vocab, cpu_bf16=cpu_bf16)

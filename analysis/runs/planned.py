"""Keep the runs of a sweep's current plan: a ledger also holds the runs of earlier recipes.

Why: run_id is a hash of what is trained, so editing a sweep file (a longer warmup, another
LR) plans new runs under new ids, and the runs of the old recipe stay in the MLflow experiment,
finished. Fitted together, two recipes of one cell would be two points of one law. Given the
sweep file, the report and the held-out planning keep the runs the file plans now, and say
which were left out. A held-out run is planned from a fit, not by the file alone; it is kept
when the file's held-out section, had the fit put the optimum at that run's own size, would
plan it (same recipe and seed), so a held-out run of an earlier recipe is left out too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from analysis.errors import DataError
from analysis.runs.table import Excluded, RunsTable
from pipeline import keys


def restrict_to_plan(runs: RunsTable, sweep_file: str | Path) -> RunsTable:
    """The runs whose run_id the sweep file plans now (held-out runs: module docstring); the
    rest excluded.

    A sweep whose vocabulary depends on the corpus (chars tokenizer) is returned unchanged:
    its plan cannot be known without reading the corpus.
    """
    from pipeline.config import SweepError, load_sweep
    from pipeline.grid import expand, plan_holdout, vocab_size_for

    try:
        cfg = load_sweep(sweep_file)
    except SweepError as e:
        raise DataError(str(e)) from e
    vocab = vocab_size_for(cfg)
    if vocab is None:
        return runs
    planned = {s.run_id for s in expand(cfg, sweep_file, vocab).specs}
    held = runs.values("role").astype(str).to_numpy() == keys.ROLE_HOLDOUT
    section = cfg.isoflop.holdout if cfg.isoflop is not None else None
    if held.any() and section is not None:
        for n, budget in zip(runs.column("N")[held], runs.column("budget")[held], strict=True):
            if budget in section.budgets:  # what the file plans were the optimum at N = n
                one = cfg.model_copy(update={"isoflop": cfg.isoflop.model_copy(update={
                    "holdout": section.model_copy(update={"budgets": [budget]})})})
                planned |= {s.run_id for s in
                            plan_holdout(one, {budget: n}, sweep_file, vocab).specs}
    run_id = runs.frame["run_id"].astype(str).to_numpy()
    keep = np.isin(run_id, list(planned))
    if keep.all():
        return runs
    if not keep.any():
        raise DataError(f"{runs.source}: none of its {len(runs)} runs is planned by "
                        f"{sweep_file} (another sweep, or every run of an earlier version of the file)")
    names = runs.frame["run_name"] if "run_name" in runs.frame.columns else runs.frame["run_id"]
    stale = tuple(Excluded(str(n) or str(r), f"not planned by {sweep_file} as it is now (a run "
                           "of an earlier version of the file: recipe, budgets or held-out)")
                  for n, r in zip(names[~keep], run_id[~keep], strict=True))
    return runs.subset(keep, excluded=runs.excluded + stale)

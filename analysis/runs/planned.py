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
from pipeline.vocab import keys


def held_out_cells(runs: RunsTable) -> list[tuple[float, float]]:
    """(N, budget) of each held-out run: what the planner needs to tell whether the file's
    held-out section plans it (``pipeline.grid.planned_run_ids``)."""
    held = runs.values("role").astype(str).to_numpy() == keys.ROLE_HOLDOUT
    return [(float(n), float(b)) for n, b in
            zip(runs.column("N")[held], runs.column("budget")[held], strict=True)]


def restrict_to_plan(runs: RunsTable, planned: set[str], label: str | Path) -> RunsTable:
    """The runs whose run_id is in ``planned`` (the ids the sweep file ``label`` plans now);
    the rest excluded, each with the reason."""
    run_id = runs.frame["run_id"].astype(str).to_numpy()
    keep = np.isin(run_id, list(planned))
    if keep.all():
        return runs
    if not keep.any():
        raise DataError(f"{runs.source}: none of its {len(runs)} runs is planned by "
                        f"{label} (another sweep, or every run of an earlier version of the file)")
    names = runs.frame["run_name"] if "run_name" in runs.frame.columns else runs.frame["run_id"]
    stale = tuple(Excluded(str(n) or str(r), f"not planned by {label} as it is now (a run "
                           "of an earlier version of the file: recipe, budgets or held-out)")
                  for n, r in zip(names[~keep], run_id[~keep], strict=True))
    return runs.subset(keep, excluded=runs.excluded + stale)


def restrict_to_sweep_file(runs: RunsTable, sweep_file: str | Path) -> RunsTable:
    """``restrict_to_plan`` with the ids planned by reading ``sweep_file`` (the commands'
    ``--sweep-file``; the sweep driver passes the plan it has instead).

    A sweep whose vocabulary depends on the corpus (chars tokenizer) is returned unchanged:
    its plan cannot be known without reading the corpus.
    """
    from pipeline.config import SweepError, load_sweep
    from pipeline.grid import planned_run_ids, vocab_size_for

    try:
        cfg = load_sweep(sweep_file)
    except SweepError as e:
        raise DataError(str(e)) from e
    vocab = vocab_size_for(cfg)
    if vocab is None:
        return runs
    return restrict_to_plan(runs, planned_run_ids(cfg, held_out_cells(runs), sweep_file, vocab),
                            sweep_file)


def sweep_corpus(sweep_file: str | Path) -> str | None:
    """The corpus ``sweep_file`` names, spelled as its runs record it (a relative path made
    absolute against the file), or None where the file cannot be read as a sweep. The report
    passes it to `pipeline.sample --corpus`: a sample reads a corpus that a ledger names only
    when the user's own sweep file names it too (pipeline/sample.py, docs/untrusted.md)."""
    from pipeline.config import SweepError, load_sweep
    from pipeline.grid import data_spec_for

    try:
        return data_spec_for(load_sweep(sweep_file), sweep_file).corpus
    except SweepError:
        return None

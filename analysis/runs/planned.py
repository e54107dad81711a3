"""Keep the runs of a sweep's plan: a ledger also holds the runs of earlier recipes.

Why: run_id is a hash of what is trained, so editing a sweep file (a longer warmup, another
LR) plans new runs under new ids, and the runs of the old recipe stay in the MLflow experiment,
finished. Fitted together, two recipes of one cell would be two points of one law. The plan is
a manifest (pipeline.vocab.manifest): the one the sweep driver recorded in the ledger at its
last launch (analysis.runs.load reads it), or the view of a ``--sweep-file``, the runs that file
plans now (pipeline.planned_view, passed in by the entry points: this module imports no
planner). A held-out run is planned from a fit, not by the file alone; the file's view keeps it
when the file's held-out section, had the fit put the optimum at that run's own size, would
plan it (same recipe and seed), so a held-out run of an earlier recipe is left out too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from analysis.errors import DataError
from analysis.runs.table import Excluded, RunsTable
from pipeline.vocab import keys
from pipeline.vocab.manifest import PlanManifest


def held_out_cells(runs: RunsTable) -> list[tuple[float, float]]:
    """(N, budget) of each held-out run: what the planner needs to tell whether the file's
    held-out section plans it (``pipeline.planner.planned_run_ids``)."""
    held = runs.values("role").astype(str).to_numpy() == keys.ROLE_HOLDOUT
    return [(float(n), float(b)) for n, b in
            zip(runs.column("N")[held], runs.column("budget")[held], strict=True)]


def restrict_to_plan(runs: RunsTable, planned: set[str], label: str | Path) -> RunsTable:
    """The runs whose run_id is in ``planned`` (the ids the sweep file ``label`` plans now);
    the rest excluded, each with the reason (the table keeps its plan, if any)."""
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


def restrict_to_manifest(runs: RunsTable, manifest: PlanManifest,
                         label: str | Path) -> RunsTable:
    """``restrict_to_plan`` with the runs of ``manifest`` (the plan of the sweep file
    ``label``); the table returned carries the manifest (``RunsTable.plan``: a report's
    provenance and export say which plan chose the runs)."""
    kept = restrict_to_plan(runs, set(manifest.run_ids), label)
    return kept.with_frame(kept.frame, plan=manifest)

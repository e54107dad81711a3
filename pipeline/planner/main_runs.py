"""The main plan of a sweep (role "main"): expand, SweepConfig -> Plan, in a deterministic order.

The steps are the package's modules (pipeline/planner/__init__.py): the cells of the sweep's
kind (cells), the RunSpecs of each recipe (specs), then the WSD trunks (trunks). Held-out
budgets are not in it: they depend on the fit of these runs (holdout).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config import SweepConfig
from pipeline.planner.cells import main_cells
from pipeline.planner.plan import Plan, Skipped
from pipeline.planner.specs import data_spec_for, model_vocab, run_specs
from pipeline.planner.trunks import share_trunks
from pipeline.vocab.spec import RunSpec


def expand(cfg: SweepConfig, sweep_path: Path | str = ".", vocab_size: int | None = None, *,
           cpu_bf16: bool = False) -> Plan:
    """All RunSpecs of a sweep, in a deterministic order, plus the skipped cells.

    Held-out budgets are not in it: they depend on the fit of these runs (plan_holdout).
    ``cpu_bf16``: whether the CPUs the runs train on compute bf16 natively, which decides what
    `precision: auto` becomes on a CPU (pipeline.vocab.recipe.resolve_auto). An input, never
    asked of this machine: a plan, hence every run id, is the same wherever it is made (the
    sweep command passes what its machine has: pipeline.estimate.device)."""
    vocab = model_vocab(cfg, vocab_size)
    skipped: list[Skipped] = []
    cells = main_cells(cfg, vocab, skipped)
    data = data_spec_for(cfg, sweep_path)
    specs: list[RunSpec] = []
    seen: dict[str, str] = {}
    for recipe in cfg.train.recipes():  # the recipe, then each ablation variant
        specs += run_specs(cfg.model_copy(update={"train": recipe}), data, cells, skipped,
                           role="main", cpu_bf16=cpu_bf16, seen=seen)
    if cfg.train.wsd_reuse:
        specs = share_trunks(specs)
    return Plan(specs, skipped)

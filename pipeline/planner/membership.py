"""Which runs a sweep file plans now: its main plan and the held-out runs a ledger holds.

A ledger's run belongs to the file when the file, as it reads now, plans it (the same run
id): the commands' ``--sweep-file`` view (pipeline.planned_view) is made of these runs. The
held-out runs depend on a fit the file does not hold, so each is planned again from a
ledger's (N, budget) (holdout.plan_holdout); on a CPU sweep with precision auto the runs of
both kinds of CPU count (pipeline.vocab.recipe.resolve_auto).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pipeline.config import SweepConfig
from pipeline.planner.holdout import plan_holdout
from pipeline.planner.main_runs import expand
from pipeline.planner.specs import vocab_size_for
from pipeline.vocab.families import get_family
from pipeline.vocab.spec import RunSpec


def planned_run_ids(cfg: SweepConfig, held_out: Iterable[tuple[float, float]] = (),
                    sweep_path: Path | str = ".", vocab_size: int | None = None) -> set[str]:
    """The ids of ``planned_specs``."""
    return {s.run_id for s in planned_specs(cfg, held_out, sweep_path, vocab_size)}


def planned_specs(cfg: SweepConfig, held_out: Iterable[tuple[float, float]] = (),
                  sweep_path: Path | str = ".", vocab_size: int | None = None) -> list[RunSpec]:
    """The runs the file plans now, each once (the first planned of an id): its main plan
    and, for each held-out run (N, budget)
    of a ledger, the run the held-out section would plan had the fit put the optimum at that
    N (same recipe and seed). A held-out run of an earlier recipe is therefore not in it. A
    CPU sweep with precision auto plans other ids for CPUs with native bf16
    (pipeline.vocab.recipe.resolve_auto): the runs of both kinds of CPU count, so a report
    made on another machine keeps the runs."""
    held_out = list(held_out)  # read once per kind of CPU
    kinds = [False]
    if (cfg.train.precision == "auto" and cfg.resources.num_gpus == 0
            and get_family(cfg.family).auto_bf16):
        kinds.append(True)
    specs = [s for bf16 in kinds
             for s in _planned_specs(cfg, held_out, sweep_path, vocab_size, bf16)]
    first: dict[str, RunSpec] = {}
    for s in specs:
        first.setdefault(s.run_id, s)
    return list(first.values())


def _planned_specs(cfg: SweepConfig, held_out: list[tuple[float, float]],
                   sweep_path: Path | str, vocab_size: int | None,
                   cpu_bf16: bool) -> list[RunSpec]:
    vocab = vocab_size or vocab_size_for(cfg)  # the tokenizer's; expand checks it is known
    specs = list(expand(cfg, sweep_path, vocab, cpu_bf16=cpu_bf16).specs)
    section = cfg.isoflop.holdout if cfg.isoflop is not None else None
    if section is None:
        return specs
    for n, budget in held_out:
        if budget in section.budgets:
            one = cfg.model_copy(update={"isoflop": cfg.isoflop.model_copy(update={
                "holdout": section.model_copy(update={"budgets": [budget]})})})
            specs += plan_holdout(one, {budget: n}, sweep_path, vocab, cpu_bf16=cpu_bf16).specs
    return specs

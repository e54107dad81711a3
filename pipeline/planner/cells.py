"""The cells of a sweep's main plan: one (shape, tokens, budget, seeds) per thing to train.

A cell is what the file asks for before the recipe makes runs of it (specs.run_specs): an
isoflop sweep gives, for each budget C, its shapes (ladder.shapes_for) each with
D = C / flops_per_token(m, convention) tokens, and its replicate seeds at the replicated
budgets, then at the budgets of isoflop.repeats each of those cells again per fraction of the
train split (same shape and D, the sweep's train.seeds); a grid sweep every shape x token
count; a runs sweep one cell per listed run. The order is the file's order of budgets (or
token counts, or runs), then the shapes in increasing parameter count (a budget's
repeated-data cells after its own, fraction by fraction). Shapes that cannot be built go to
skipped with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.config import SweepConfig
from pipeline.planner.ladder import group_problem, shape_rule, shapes_for
from pipeline.planner.plan import Skipped
from pipeline.vocab import flops
from pipeline.vocab.families import ModelConfig, ShapeError, make_config
from pipeline.vocab.shapes import shape_for_depth


@dataclass(frozen=True)
class Cell:
    model: ModelConfig
    tokens: float
    budget: float | None
    seeds: tuple[int, ...]
    train_fraction: float = 1.0
    """The share of the train split it reads (DataSpec.train_fraction; isoflop.repeats)."""


def main_cells(cfg: SweepConfig, vocab: int, skipped: list[Skipped]) -> list[Cell]:
    """The cells of the sweep's kind (the one section isoflop / grid / runs it has)."""
    seeds = tuple(cfg.train.seeds)
    if cfg.isoflop is not None:
        return _isoflop_cells(cfg, vocab, seeds, skipped)
    if cfg.grid is not None:
        return _grid_cells(cfg, vocab, seeds, skipped)
    return _run_cells(cfg, vocab, seeds, skipped)


def _isoflop_cells(cfg: SweepConfig, vocab: int, seeds: tuple[int, ...],
                   skipped: list[Skipped]) -> list[Cell]:
    cells: list[Cell] = []
    rep, repeats = cfg.isoflop.replicates, cfg.isoflop.repeats
    for budget in cfg.isoflop.budgets:
        extra = tuple(rep.seeds) if rep is not None and budget in rep.budgets else ()
        main = [Cell(m, flops.tokens_for_budget(m, budget, cfg.flops_convention), budget,
                     seeds + extra)
                for m in shapes_for(cfg, cfg.isoflop.sizes, vocab, budget, skipped)]
        cells += main
        if repeats is not None and budget in repeats.budgets:
            # Beside the cells they vary: same shape and D, fewer unique tokens. The main
            # seeds only: a variant is another cell, not a replicate of one.
            cells += [replace(c, seeds=seeds, train_fraction=f)
                      for f in repeats.fractions for c in main]
    return cells


def _grid_cells(cfg: SweepConfig, vocab: int, seeds: tuple[int, ...],
                skipped: list[Skipped]) -> list[Cell]:
    shapes = shapes_for(cfg, cfg.grid.sizes, vocab, None, skipped)
    return [Cell(m, tok, None, seeds) for m in shapes for tok in cfg.grid.tokens]


def _run_cells(cfg: SweepConfig, vocab: int, seeds: tuple[int, ...],
               skipped: list[Skipped]) -> list[Cell]:
    d = cfg.data
    rule = shape_rule(cfg)
    cells: list[Cell] = []
    for i, r in enumerate(cfg.runs or []):
        try:
            if r.depth is not None:
                m = shape_for_depth(cfg.family, r.depth, rule, vocab_size=vocab,
                                    seq_len=d.seq_len)
            else:
                m = make_config(cfg.family, r.n_layer, r.d_model, vocab_size=vocab,
                                seq_len=d.seq_len, head_dim=rule.head_dim,
                                gqa_ratio=rule.gqa_ratio, ffn_multiple=rule.ffn_multiple,
                                **rule.image())
        except ShapeError as e:
            skipped.append(Skipped(f"runs[{i}]", str(e), cause="shape"))
            continue
        if problem := group_problem(cfg, m):
            skipped.append(Skipped(f"runs[{i}]", problem, cause="group"))
            continue
        cells.append(Cell(m, r.tokens, None, seeds))
    return cells

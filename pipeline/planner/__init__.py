"""The planner: SweepConfig -> RunSpecs (deterministic), and the cells that cannot be built.

IsoFLOP cells: for budget C and model shape m, D = C / flops_per_token(m, convention), then
steps = round(D / (batch_size * seq_len)); the achieved C differs from the budget only by that
rounding (under 1% once steps >= 50). Cells with fewer than train.min_steps steps, cells whose
achieved C misses the budget by more than ISOFLOP_TOLERANCE, sizes the shape rule cannot make,
and cells that resolve to a run already planned are returned as Skipped with the reason, never
dropped silently. The order is the file's order of budgets (or token counts, or runs), sizes
in increasing parameter count within a budget, then seeds; expanding twice gives the same list.

The flow of expand (main_runs), one module per step:
  1. the models' vocabulary: the tokenizer's plus the objective's own tokens
     (specs.model_vocab);
  2. the cells of the sweep's kind, (shape, tokens, budget, seeds) each (cells.main_cells),
     with the shapes of the shape ladder (ladder: the shape rule, its sizes, the sizes around
     the guessed optimum of a budget, one GQA group size);
  3. per recipe (the recipe, then each ablation variant), each cell's steps and the RunSpecs
     of its seeds x LRs x schedules (specs.run_specs); a run planned twice is skipped;
  4. with train.wsd_reuse, the WSD runs that differ only in length branch off the longest
     one's trunk (trunks.share_trunks).
Held-out budgets are planned after the main runs, at the optimum their fit predicts
(holdout), from the same ladder and specs. A budget the skipped cells leave with too few
sizes for an IsoFLOP fit is warned about before training (coverage).

Modules:
  plan        Plan, Skipped: what planning returns
  ladder      the shape ladder: shape rule, ladder of sizes, shapes of a sizes section
  cells       the cells of each kind of sweep (isoflop / grid / runs)
  specs       the RunSpecs of cells: steps, recipe, execution settings, vocabulary and data
  trunks      WSD trunks shared by runs that differ only in length
  main_runs   expand: the main plan
  holdout     the held-out runs, planned at a predicted optimum
  membership  the runs a sweep file plans now (main and held-out), by id
  coverage    budgets left with too few sizes to fit, and why (warnings for the plan's print)
This module re-exports the public names.
"""

from __future__ import annotations

from pipeline.planner.coverage import plan_warnings, thin_budgets
from pipeline.planner.holdout import HoldoutError, holdout_plan, plan_holdout
from pipeline.planner.ladder import group_problem
from pipeline.planner.main_runs import expand
from pipeline.planner.membership import planned_run_ids, planned_specs
from pipeline.planner.plan import Plan, Skipped
from pipeline.planner.specs import ISOFLOP_TOLERANCE, data_spec_for, vocab_size_for

__all__ = [
    "ISOFLOP_TOLERANCE",
    "HoldoutError",
    "Plan",
    "Skipped",
    "data_spec_for",
    "expand",
    "group_problem",
    "holdout_plan",
    "plan_holdout",
    "planned_run_ids",
    "plan_warnings",
    "planned_specs",
    "thin_budgets",
    "vocab_size_for",
]

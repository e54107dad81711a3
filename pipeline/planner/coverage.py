"""IsoFLOP budgets that a plan leaves with too few sizes to fit, named before anything trains.

Approach 2 (analysis.fits.approach2) fits a parabola of loss in ln N at each budget, which
needs MIN_SIZES distinct sizes, and N_opt = k C^a through MIN_BUDGETS budgets' minima. The
planner drops sizes for reasons of its own: a head count shape.gqa_ratio does not divide,
the caps on embeddings and tokens per parameter, too few steps, a shape the rule cannot
build. Each drop is a "skipped" line of the plan; a budget they leave with one or two sizes
trains runs that give the fit no point, and nothing said so before the report (issue 55:
sweeps/quickstart.yaml with `family: llama` kept 2 of 4 sizes at every budget).

thin_budgets finds those budgets; plan_warnings words them with the causes and their fix for
the plan's print (the dry run and the start of a sweep). A warning, not a refusal: the runs
are still valid measurements, and the fix may be to accept fewer sizes. A budget the file
itself gives fewer than MIN_SIZES sizes is not warned about: that is a choice written in the
file (sweeps/short_run_stability.yaml trains 2 widths to measure seed scatter, not a law),
not a silent drop.

The data-repetition rule (data.max_epochs against the corpus) drops no size: it refuses the
whole plan (pipeline.data.repetition), so it never thins a budget here.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config import SweepConfig
from pipeline.planner.plan import Plan, Skipped
from pipeline.vocab import keys

# Copies of analysis.fits.approach2's minima: the planner imports nothing of the analysis
# (tests/test_architecture.py); tests/test_plan_coverage.py checks they agree.
MIN_SIZES = 3
"""Distinct sizes an IsoFLOP budget needs for its parabola."""
MIN_BUDGETS = 3
"""Budgets with a parabola minimum that the power law N_opt = k C^a needs."""


@dataclass(frozen=True)
class ThinBudget:
    """A budget left with fewer than MIN_SIZES sizes by the planner, and what dropped them."""

    budget: float
    left: int
    """Distinct model shapes planned at the budget."""
    asked: int
    """Sizes the file's sizes section asks for at every budget."""
    dropped: tuple[Skipped, ...]


def asked_sizes(cfg: SweepConfig) -> int:
    """How many sizes the isoflop sizes section asks for at each budget."""
    assert cfg.isoflop is not None
    sizes = cfg.isoflop.sizes
    for listed in (sizes.depths, sizes.widths, sizes.shapes):
        if listed is not None:
            return len(listed)
    return sizes.count or 0


def sizes_per_budget(cfg: SweepConfig, plan: Plan) -> dict[float, int]:
    """Distinct model shapes of the main plan at each of the file's budgets (0 where none
    is left), in the file's order; {} for a grid or runs sweep, or a plan of held-out runs
    only (those are planned from the fit, not fitted themselves)."""
    if cfg.isoflop is None or not any(s.role == keys.ROLE_MAIN for s in plan.specs):
        return {}
    models: dict[float, set] = {b: set() for b in cfg.isoflop.budgets}
    for s in plan.specs:  # seeds, LRs, schedules and recipe variants add no size
        if s.role == keys.ROLE_MAIN and s.budget in models:
            models[s.budget].add(s.model)
    return {b: len(m) for b, m in models.items()}


def thin_budgets(cfg: SweepConfig, plan: Plan) -> list[ThinBudget]:
    """The main budgets with fewer than MIN_SIZES sizes where the file asked for more than
    are left, in the file's order ([] for a grid or runs sweep, or a held-out plan)."""
    counts = sizes_per_budget(cfg, plan)
    if not counts:
        return []
    asked = asked_sizes(cfg)
    thin = []
    for budget, left in counts.items():
        if left >= min(MIN_SIZES, asked):
            continue
        # A duplicate is trained once under its first label: it loses no size.
        dropped = tuple(dict.fromkeys(sk for sk in plan.skipped
                                      if sk.budget == budget and sk.cause != "duplicate"))
        thin.append(ThinBudget(budget, left, asked, dropped))
    return thin


def plan_warnings(cfg: SweepConfig, plan: Plan, where: str) -> list[str]:
    """One warning per group of thin budgets dropped for the same reasons (the reasons and
    their fix), then what it means for the fit; [] when every budget can be fitted.
    ``where``: the sweep file, to name it."""
    thin = thin_budgets(cfg, plan)
    if not thin:
        return []
    groups: dict[tuple, list[ThinBudget]] = {}
    for t in thin:  # budgets thinned alike share one warning (the case: all of them)
        key = (t.left, tuple((_dropped(sk), sk.cause) for sk in t.dropped))
        groups.setdefault(key, []).append(t)
    out = []
    for same in groups.values():
        first = same[0]
        budgets = ", ".join(f"{t.budget:.3g}" for t in same)
        these = "these budgets give" if len(same) > 1 else "it gives"
        lines = [f"{where}: IsoFLOP budget{'s' if len(same) > 1 else ''} {budgets}: "
                 f"{first.left} of the {first.asked} sizes left; Approach 2 needs "
                 f"{MIN_SIZES} at a budget to fit its parabola, so {these} no N_opt. "
                 "Dropped:"]
        lines += [f"  {_dropped(sk)}" for sk in first.dropped]
        lines += [f"  fix: {fix}" for fix in _fixes(cfg, first.dropped)]
        out.append("\n".join(lines))
    assert cfg.isoflop is not None
    counts = sizes_per_budget(cfg, plan)
    good = sum(n >= MIN_SIZES for n in counts.values())
    if good < MIN_BUDGETS:
        out.append(f"{where}: {good} of the {len(counts)} budgets keep {MIN_SIZES} sizes or "
                   f"more and Approach 2 needs {MIN_BUDGETS} such budgets: the sweep trains, "
                   "but fits no IsoFLOP law (N_opt = k C^a)"
                   + (" and plans no held-out run" if cfg.isoflop.holdout is not None else ""))
    else:
        out.append(f"{where}: Approach 2 fits N_opt = k C^a on the other {good} budgets")
    return out


def _dropped(sk: Skipped) -> str:
    """A skipped line under its budgets' warning: without a label that only names the budget
    (the warning names the budgets)."""
    only_budget = sk.budget is not None and sk.label == f"C={sk.budget:.3g}"
    return sk.reason if only_budget else f"{sk.label}: {sk.reason}"


def _fixes(cfg: SweepConfig, dropped: tuple[Skipped, ...]) -> list[str]:
    """The fix of each cause among the dropped cells, in the order they first occur."""
    assert cfg.isoflop is not None
    shape, sizes, t = cfg.shape, cfg.isoflop.sizes, cfg.train
    caps = " or ".join(f"sizes.{k} ({v:g})" for k in ("max_embedding_fraction",
                                                       "max_tokens_per_param")
                       if (v := getattr(sizes, k)) is not None)
    top = f"max_{shape.knob}"
    fixes = {
        "group": f"set shape.gqa_ratio: 1 (plain multi-head attention; now {shape.gqa_ratio}), "
                 "or one that divides every size's head count (d_model / shape.head_dim, "
                 f"head_dim {shape.head_dim}), or choose sizes whose head count "
                 f"{shape.gqa_ratio} divides",
        "shape": "choose sizes the shape section can build (the reasons above)",
        "caps": f"raise {caps}, or choose budgets where more of the ladder's sizes fit them",
        "ladder": f"raise shape.{top} ({getattr(shape, top)}) or lower sizes.count "
                  f"({sizes.count})",
        "dedup": "choose sizes further apart (two of them made one shape)",
        "min_steps": f"raise the budget, or lower train.batch_size ({t.batch_size}) or "
                     f"train.min_steps ({t.min_steps}) so the largest sizes get enough steps",
        "off_budget": f"raise the budget or lower train.batch_size ({t.batch_size}): a run of "
                      "few steps rounds away from its budget",
    }
    causes = dict.fromkeys(sk.cause for sk in dropped if sk.cause in fixes)
    return [fixes[c] for c in causes] or ["add sizes to isoflop.sizes"]

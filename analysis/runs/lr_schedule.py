"""The learning-rate multiplier of every optimizer step of a run, recomputed without torch.

Why: a whole-curve scaling law (analysis.fits.curve_law; Tissue et al. 2024, arXiv 2408.11029;
Luo et al. 2025, arXiv 2503.12811) reads each validation point through the learning rate the
run had taken up to it. Each run's schedule is a pure function of its spec, so the analysis
recomputes it here, in numpy, from what the run records: the schedule's name, its steps, its
warmup steps, its min-LR ratio and (WSD) its decay fraction. The rules are the trainer's own
(pipeline.vocab.recipe.lr_at, which pipeline.train calls at every step), reproduced exactly:
tests/test_curve_law.py compares them step by step for cosine, WSD and constant.

Units: a *multiplier* is the LR of a step divided by the run's peak LR (dimensionless, 1 at
the peak); step i (0-based) is the i-th optimizer update, so a validation point logged at
step s (the trainer logs the count of completed steps) follows multipliers 0 .. s-1.

What a ledger records and an export does not: the MLflow ledger logs every field of a run's
TrainSpec (``train.warmup_steps``, ``train.min_lr_ratio``, ``train.decay_fraction``,
``train.batch_size``) and ``steps``, and each run's ``spec.json`` artifact; the runs table
(analysis.runs.load) and so every committed ``runs_export.json`` keep only ``schedule`` and
``lr``. ``schedule_of`` therefore requires the fields by name and refuses a run without them;
``RecipeSchedule`` derives them from the rule that set them (the sweep's train section, as
pipeline.vocab.recipe.ScalingRecipe) and from a recorded field (the run's steps: its final
validation point, which the trainer logs at step = steps), never from a guess.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.errors import DataError
from pipeline.vocab.recipe import ScalingRecipe

SCHEDULES = ("cosine", "wsd", "constant")
SCHEDULE_FIELDS = ("schedule", "steps", "warmup_steps", "min_lr_ratio", "decay_fraction")
"""The per-run fields a schedule needs (decay_fraction only for wsd), as runs-table columns."""


@dataclass(frozen=True)
class Schedule:
    """One run's LR schedule (the fields of pipeline.vocab.spec.TrainSpec it reads)."""

    name: str
    """"cosine" | "wsd" | "constant"."""
    steps: int
    """Optimizer steps of the run."""
    warmup_steps: int
    """Linear warmup steps from 0 to the peak (for a WSD branch: the trunk's warmup)."""
    min_lr_ratio: float
    """Final LR / peak LR (cosine and wsd)."""
    decay_fraction: float = 0.2
    """wsd only: the share of the steps in the final linear decay."""

    def __post_init__(self) -> None:
        if self.name not in SCHEDULES:
            raise DataError(f"schedule {self.name!r}: expected one of {', '.join(SCHEDULES)}")
        for name, value, ok in (
                ("steps", self.steps, self.steps >= 1),
                ("warmup_steps", self.warmup_steps, 0 <= self.warmup_steps <= self.steps),
                ("min_lr_ratio", self.min_lr_ratio, 0 <= self.min_lr_ratio <= 1),
                ("decay_fraction", self.decay_fraction, 0 <= self.decay_fraction <= 1)):
            if not ok:
                raise DataError(f"schedule field {name!r} = {value!r} is out of range "
                                f"(steps {self.steps})")

    def decay_start(self) -> int:
        """wsd: the first step of the final decay (pipeline.vocab.spec.TrainSpec.decay_start;
        Python's round, half to even, as there)."""
        return self.steps - max(1, round(self.decay_fraction * self.steps))


def learning_rates(schedule: Schedule, peak: float) -> np.ndarray:
    """The LR of steps 0 .. steps-1 for a peak LR ``peak``: pipeline.vocab.recipe.lr_at, step
    by step, with the same operations in the same order (float64)."""
    s, n = schedule, schedule.steps
    step = np.arange(n, dtype=np.int64)
    floor = peak * s.min_lr_ratio
    out = np.full(n, float(peak))
    if s.name == "wsd":
        start = s.decay_start()
        frac = (step - start + 1) / max(1, n - start)
        out = np.where(step < start, peak, peak + (floor - peak) * frac)
    elif s.name == "cosine":
        span = max(1, n - 1 - s.warmup_steps)
        frac = np.minimum(1.0, (step - s.warmup_steps) / span)
        out = floor + 0.5 * (peak - floor) * (1 + np.cos(math.pi * frac))
    if s.warmup_steps > 0:
        warm = step < s.warmup_steps
        out = np.where(warm, peak * (step + 1) / s.warmup_steps, out)
    return out


def multipliers(schedule: Schedule) -> np.ndarray:
    """LR / peak LR of steps 0 .. steps-1 (dimensionless)."""
    return learning_rates(schedule, 1.0)


def _field(run: Mapping[str, object], name: str, who: str) -> object:
    value = run.get(name)
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        raise DataError(f"{who}: field {name!r} is missing; a run's LR schedule needs "
                        f"{', '.join(SCHEDULE_FIELDS[:4])} (and decay_fraction for wsd), which "
                        "the ledger records per run (train.* params, spec.json) and the runs "
                        "export does not")
    return value


def _integer(value: object, name: str, who: str) -> int:
    number = float(value)  # type: ignore[arg-type]
    if not number.is_integer():
        raise DataError(f"{who}: field {name!r} = {value!r} is not a whole number of steps")
    return int(number)


def schedule_of(run: Mapping[str, object]) -> Schedule:
    """The schedule of one run from its recorded fields (a runs-table row as a mapping);
    DataError naming the run and the missing or bad field."""
    who = f"run {run.get('run_id', '?')}"
    name = str(_field(run, "schedule", who))
    decay = float(_field(run, "decay_fraction", who)) if name == "wsd" else float(
        run.get("decay_fraction") or 0.2)
    try:
        return Schedule(name, _integer(_field(run, "steps", who), "steps", who),
                        _integer(_field(run, "warmup_steps", who), "warmup_steps", who),
                        float(_field(run, "min_lr_ratio", who)), decay)  # type: ignore[arg-type]
    except DataError as err:
        raise DataError(f"{who}: {err}") from err


@dataclass(frozen=True)
class RecipeSchedule:
    """How a sweep's train section set a run's schedule: steps and batch from its tokens,
    warmup from its steps (pipeline.vocab.recipe.ScalingRecipe, the planner's rules).

    ``for_tokens`` is the schedule of a run the recipe would plan for D tokens (the standard
    schedule a law's final loss L(N, D) refers to); ``with_schedule_columns`` adds the fields
    of ``schedule_of`` to runs that do not record them, from their recorded steps.
    """

    schedule: str
    min_lr_ratio: float
    recipe: ScalingRecipe = field(default_factory=ScalingRecipe)
    seq_len: int = 128
    """Tokens per sequence of the sweep's model (data.seq_len)."""
    decay_fraction: float = 0.2

    def at_steps(self, steps: int, warmup_of: int | None = None) -> Schedule:
        """The schedule of a run of ``steps`` steps (``warmup_of``: the trunk's steps for a
        WSD branch sharing a trunk, pipeline.planner.specs)."""
        warmup = self.recipe.warmup_steps(steps if warmup_of is None else warmup_of)
        return Schedule(self.schedule, int(steps), warmup, self.min_lr_ratio,
                        self.decay_fraction)

    def for_tokens(self, tokens: float) -> tuple[Schedule, int]:
        """(schedule, tokens per step) of a run planned for ``tokens`` tokens: the batch rule,
        then steps = round(D / tokens per step) (pipeline.planner.specs.run_specs)."""
        per_step = self.recipe.batch_for(tokens, self.seq_len) * self.seq_len
        return self.at_steps(max(1, round(tokens / per_step))), per_step

    def with_schedule_columns(self, runs: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
        """``runs`` with the columns of SCHEDULE_FIELDS: steps is each run's last validation
        step (the trainer's final evaluation is logged at step = steps), checked against its D
        (D = steps x tokens per step, with tokens per step from its curve); the rest follow
        from this recipe. DataError naming the run where a curve is missing or disagrees."""
        last = curves.sort_values("step").groupby("run_id", sort=False).tail(1)
        by_run = {str(r.run_id): (int(r.step), float(r.tokens)) for r in last.itertuples()}
        rows = []
        for run in runs.itertuples():
            rid = str(run.run_id)
            if rid not in by_run:
                raise DataError(f"run {rid}: no validation curve, so its steps are unknown")
            steps, tokens = by_run[rid]
            if abs(tokens - float(run.D)) > 0.5 or steps < 1:
                raise DataError(f"run {rid}: the last validation point (step {steps}, "
                                f"{tokens:.0f} tokens) is not the end of the run "
                                f"(D = {float(run.D):.0f})")
            name = str(getattr(run, "schedule", "") or self.schedule)
            if name != self.schedule:
                raise DataError(f"run {rid}: field 'schedule' = {name!r}, the recipe's is "
                                f"{self.schedule!r}")
            s = self.at_steps(steps)
            rows.append((s.name, s.steps, s.warmup_steps, s.min_lr_ratio, s.decay_fraction))
        out = runs.copy()
        for i, col in enumerate(SCHEDULE_FIELDS):
            out[col] = [r[i] for r in rows]
        return out

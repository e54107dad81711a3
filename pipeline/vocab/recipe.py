"""The training recipe's rules in one place: peak LR with width and batch, warmup, batch,
schedule, evaluation budget and precision.

Like marin's ScalingRecipe: the numbers a sweep file sets (its `train` section) live in
pipeline.config.TrainSection; the rules that turn them into one run's values live here, each
with the measurement it comes from (docs/recipes.md). The planner (pipeline.planner) resolves a
run's peak LR, warmup and batch through `ScalingRecipe`; the training loop (pipeline.train)
reads the LR of each step from `lr_at`. Pure Python: no torch, no pydantic.

Changing a rule here changes the resolved TrainSpec, hence every run_id it touches
(tests/test_snapshots.py pins them): regenerate the snapshot on purpose and say why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.vocab.families import get_family

if TYPE_CHECKING:
    from pipeline.vocab.spec import RunSpec


@dataclass(frozen=True)
class ScalingRecipe:
    """How a sweep's train section becomes one run's peak LR, warmup steps and batch size.

    Field defaults are those of pipeline.config.TrainSection (the schema's defaults).
    """

    batch_size: int = 16
    """The reference batch (sequences per step): the peak LR is the base LR there, and every
    run evaluates eval_batches * batch_size sequences."""
    lr_reference_d_model: int = 64
    """Width at which the peak LR equals the base LR."""
    lr_width_exponent: float = 0.0
    """Peak LR x (lr_reference_d_model / d_model) ** exponent. Measurement: the best LR falls
    roughly as 1/d_model (docs/recipes.md, "Learning rate": lr_tuning.yaml, 4 sizes x 4 LRs
    at C = 2e11; exponent 1.0 at reference d 32 lands within ~2x of every optimum)."""
    lr_batch_exponent: float = 0.0
    """Peak LR x (batch / batch_size) ** exponent, for runs whose batch a batch rule picks.
    0.5 is the square-root rule for Adam (Malladi et al. 2022). Measurement: with the batch
    rule, sqrt scaling kept every cell near the optimum within 0.01 nats and fitted the
    IsoFLOP parabolas 20-30% closer (docs/recipes.md, "A batch that grows with the run's
    tokens"). At the reference batch the factor is exactly 1, so fixed-batch runs keep their
    run_id."""
    warmup_fraction: float = 0.05
    """Warmup = int(warmup_fraction x steps). Measurement: on 1,000-8,000-step runs 1% ties
    with 5% and 20% costs 0.015 nats (docs/recipes.md, "Batch size, warmup, weight decay")."""
    warmup_min_steps: int = 0
    """A warmup floor for short runs, never above a fifth of the run. Measurement: ~500-step
    runs with a 25-step warmup scattered 0.1 nats between seeds; a 4x longer warmup cut that
    to 0.013 and the loss by 0.06-0.08 (docs/recipes.md, "Warmup of short runs"; the shipped
    floor is 100)."""
    batch_rule_steps: int | None = None
    """A batch that grows with the run's tokens D: the power of two nearest (in log) to
    D / (seq_len x batch_rule_steps) sequences, clipped to [batch_min, batch_max]; None: every
    run takes batch_size. Measurement: at a fixed budget the small models gained from larger
    batches and the large ones from smaller, both towards ~4,000 steps; the rule lowered the
    large models' loss at small budgets by up to 0.18 nats (docs/recipes.md, batch_tuning)."""
    batch_min: int = 1
    """batch_rule_steps only: the smallest batch (a power of two)."""
    batch_max: int = 128
    """batch_rule_steps only: the largest batch (a power of two)."""
    eval_budget: float | None = 0.05
    """Evaluation costs at most this share of a run's training compute: a run keeps its final
    evaluation (every run scores the same held-out tokens) and as many of the evals_per_run
    evaluations along the way as fit. None: no cap. Measurement: the single-run CLI's 1M-token
    run (batch 64) spent 590k forward tokens, ~20% of its training compute, on 9 evaluations
    of 8 x 64 sequences: 0.86x a plain training loop as a whole process, 0.99x with the cap
    (2026-12-05, BENCHMARKS.md, "The single-run CLI as a whole process"); the chinchilla
    study's runs spend 0.1-1%, so its runs keep every evaluation."""

    def batch_for(self, tokens: float, seq_len: int) -> int:
        """Sequences per step of a run of `tokens` tokens (batch_rule_steps, or batch_size)."""
        if self.batch_rule_steps is None:
            return self.batch_size
        ideal = tokens / (seq_len * self.batch_rule_steps)
        batch = 2 ** round(math.log2(ideal)) if ideal > 0 else 1
        return min(max(batch, self.batch_min), self.batch_max)

    def peak_lr(self, base_lr: float, d_model: int, batch: int) -> float:
        """The run's peak LR: base_lr scaled with width, then with the batch."""
        lr = base_lr * (self.lr_reference_d_model / d_model) ** self.lr_width_exponent
        lr *= (batch / self.batch_size) ** self.lr_batch_exponent
        return lr

    def warmup_steps(self, steps: int) -> int:
        """Warmup of a run whose schedule spans `steps` steps (its own, or the trunk's for
        WSD runs sharing one): the fraction, raised to the floor, the floor capped at a fifth."""
        warmup = int(self.warmup_fraction * steps)
        if self.warmup_min_steps:
            warmup = max(warmup, min(self.warmup_min_steps, steps // 5))
        return warmup

    def evals_per_run(self, evals_per_run: int, steps: int, eval_batches: int) -> int:
        """Evaluations along a run of `steps` steps, besides its final one: evals_per_run, or
        fewer where eval_budget binds. An evaluation of `eval_batches` batches (of the run's
        own batch) is a forward pass only, about a third of a training step's FLOPs per batch
        (forward 2N of 6N per token), so k evaluations along the way (one every steps // k
        steps; where k divides the steps the last is the final one) and the final one cost
        at most (k + 1) x eval_batches / 3 training steps. k is the largest count within the
        budget, at least 0: the final evaluation is never dropped, even where it alone
        exceeds the budget."""
        if self.eval_budget is None:
            return evals_per_run
        affordable = 3 * self.eval_budget * steps / eval_batches  # evaluations in the budget
        return max(0, min(evals_per_run, math.floor(affordable + 1e-9) - 1))

    def eval_batches(self, eval_batches: int, batch: int) -> int:
        """Evaluation batches at `batch`: the same eval_batches x batch_size sequences for
        every run, whatever its batch (sizes compare on the same text)."""
        return eval_batches * self.batch_size // batch


def lr_at(step: int, spec: RunSpec) -> float:
    """Learning rate for optimizer step `step` (0-based) of a run of spec.steps steps.

    Linear warmup to the peak, then: cosine to min_lr_ratio x peak landing exactly on the last
    step (Chinchilla: a cosine longer than the run overestimates short runs' loss); constant;
    or warmup-stable-decay with a linear decay over the last decay_fraction of the steps.
    """
    t, n = spec.train, spec.steps
    peak, floor = t.lr, t.lr * t.min_lr_ratio
    if step < t.warmup_steps:
        return peak * (step + 1) / t.warmup_steps
    if t.schedule == "constant":
        return peak
    if t.schedule == "wsd":
        decay_start = t.decay_start(n)
        if step < decay_start:
            return peak
        frac = (step - decay_start + 1) / max(1, n - decay_start)
        return peak + (floor - peak) * frac
    # cosine from the end of warmup to the last step, landing exactly on floor at step n-1
    span = max(1, n - 1 - t.warmup_steps)
    frac = min(1.0, (step - t.warmup_steps) / span)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * frac))


# --- precision ----------------------------------------------------------------------------
# `precision: auto` is bf16 autocast on CUDA. On a CPU it is fp32, except where bf16 was
# measured both faster and at parity with fp32 (BENCHMARKS.md, "bf16 on the CPU"), where the
# planner resolves it to bf16 with the final norm and output head in fp32 (`resolve_auto`):
# - speed, per CPU-second, the trainer as it is, interleaved rounds: at the chinchilla
#   ladder's and the quickstart's shapes (d 16-56, heads of 4-8) bf16 is 1.00-1.08x, so auto
#   stays fp32 there (no new ids for 1-8%); at d 128 with heads of 32 it is 1.5x;
# - parity at d 128 (sweeps/bf16_parity_cli.yaml, gpt L4, 3M tokens, seeds 0-4 paired with
#   fp32): plain bf16 autocast ended +0.0054 nats above fp32, 90% CI [-0.0004, +0.0112], not
#   equivalent within +-0.01 (its rule); with the head in fp32 (the logits not rounded to bf16
#   before the loss) -0.0014, 95% CI [-0.0054, +0.0027]: equivalent by the stricter rule stated
#   before those runs (2026-12-06);
# - native bf16 instructions (avx512_bf16 or amx_bf16): without them bf16 is emulated and
#   slower than fp32.
# Only GPT was measured, so only GPT is resolved (its Family.auto_bf16); other families stay
# fp32 on CPUs.
AUTO_BF16_MIN_D_MODEL = 128
"""auto trains in bf16 (head in fp32) on a CPU with native bf16 from this width (GPT)."""


def resolve_auto(precision: str, head_precision: str, device_type: str, family: str,
                 d_model: int, cpu_bf16: bool) -> tuple[str, str]:
    """(precision, head_precision) the planner writes into a run's TrainSpec for the sweep's
    values on a device type: `auto` becomes ("bf16", "fp32") where the rule above binds; a
    run that trains in fp32 gets head_precision "autocast" (the head is fp32 anyway: the same
    computation keeps one id); everything else is kept as given (so every earlier run keeps
    its id). `cpu_bf16`: whether the CPU the runs train on has native bf16 (an input of the
    planner, pipeline.planner.expand; the sweep command passes its machine's,
    pipeline.estimate.device.cpu_has_native_bf16; a sweep for a cluster of other CPUs sets
    its precision explicitly)."""
    if (precision == "auto" and device_type == "cpu" and cpu_bf16
            and get_family(family).auto_bf16 and d_model >= AUTO_BF16_MIN_D_MODEL):
        return "bf16", "fp32"
    if trained_precision(precision, device_type) == "fp32":
        return precision, "autocast"
    return precision, head_precision


def trained_precision(precision: str, device_type: str) -> str:
    """What a run's precision trains in on a device type: "bf16" (autocast) or "fp32"."""
    if precision == "bf16" or (precision == "auto" and device_type == "cuda"):
        return "bf16"
    return "fp32"


def precision_label(precision: str, head_precision: str, device_type: str) -> str:
    """"fp32", "bf16" or "bf16, head fp32": what a run trains in, for plans and CLI lines."""
    trained = trained_precision(precision, device_type)
    return "bf16, head fp32" if trained == "bf16" and head_precision == "fp32" else trained

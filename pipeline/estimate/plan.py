"""A plan's estimates: every run's time and peak memory on the device it will train on, and
the runs that cannot fit it (refused before Ray starts)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.estimate.device import CPU_MFU, CPU_PEAK_FLOPS_PER_THREAD, Target, ram_bytes
from pipeline.estimate.memory import GIB, HEADROOM, MemoryEstimate, training_memory
from pipeline.vocab import flops
from pipeline.vocab.recipe import trained_precision
from pipeline.vocab.spec import RunSpec

# Calibration builds a model and times real steps: only shapes this machine affords, a
# quarter of its RAM and ~20 s a step at its ~100 GFLOP/s per core (DEVELOPERS.md). Dearer
# shapes are extrapolated from the measured ones in log-log (calibration._interp).
AFFORDABLE_RAM_SHARE = 0.25
AFFORDABLE_STEP_FLOPS = 2e12


@dataclass(frozen=True)
class PlanEstimate:
    seconds: dict[str, float] | None  # run_id -> wall seconds of the run; None: not estimated
    memory: dict[str, MemoryEstimate]  # run_id -> peak of a training step
    target: Target
    how: str  # how the times were obtained, for the plan's footer


def uses_bf16(spec: RunSpec, kind: str) -> bool:
    """The trainer's rule (pipeline.vocab.recipe.trained_precision)."""
    return trained_precision(spec.train.precision, kind) == "bf16"


def run_memory(spec: RunSpec, kind: str) -> MemoryEstimate:
    """The peak of one worker's step: its share of the batch (a pass at a time), and with
    FSDP its share of the parameters, gradients and AdamW state (the gathered block being
    trained is small next to them, and left out)."""
    w = spec.exec.workers
    micro = spec.exec.micro_batch_size or spec.train.batch_size // w
    est = training_memory(spec.model, micro, uses_bf16(spec, kind))
    if spec.exec.sharding == "fsdp" and w > 1:
        est = replace(est, weights=est.weights / w, gradients=est.gradients / w,
                      optimizer=est.optimizer / w)
    return est


def step_flops(spec: RunSpec) -> float:
    return flops.flops_per_token(spec.model, "exact") * spec.train.batch_size * spec.model.seq_len


def assumed_seconds(spec: RunSpec, flops_per_s: float) -> float:
    """Training FLOPs plus the evaluations' forward passes (1/3 of a training token's FLOPs
    each), over a sustained throughput (FLOP/s)."""
    per_token = flops.flops_per_token(spec.model, "exact")
    t = spec.train
    n_evals = spec.steps // t.resolved_eval_interval(spec.steps) + 1
    eval_tokens = n_evals * t.eval_batches * t.batch_size * spec.model.seq_len
    return (per_token * spec.tokens + per_token / 3 * eval_tokens) / flops_per_s


def estimate_plan(specs: list[RunSpec], target: Target, measure: bool = True) -> PlanEstimate:
    """Memory of every run, and (measure=True) its time: measured on this machine where the
    target is here and the shapes affordable, else assumed (target.assumption). A run of W
    data-parallel workers takes 1/W of one worker's time (perfect scaling, said in the
    footer: docs/cluster.md has what was measured)."""
    est = _estimate_plan(specs, target, measure)
    workers = {s.run_id: s.exec.workers for s in specs}
    if est.seconds is None or max(workers.values()) == 1:
        return est
    return replace(est, seconds={r: t / workers[r] for r, t in est.seconds.items()},
                   how=est.how + "; a run of W workers: 1/W of that (perfect scaling assumed)")


def _estimate_plan(specs: list[RunSpec], target: Target, measure: bool) -> PlanEstimate:
    memory = {s.run_id: run_memory(s, target.kind) for s in specs}
    if not measure:
        return PlanEstimate(None, memory, target, "no time estimate (--no-estimate)")
    if not target.measured:
        return PlanEstimate({s.run_id: assumed_seconds(s, target.flops_per_s) for s in specs},
                            memory, target, target.assumption)
    budget = (HEADROOM * target.memory if target.kind == "cuda" and target.memory
              else AFFORDABLE_RAM_SHARE * ram_bytes())
    affordable = [s for s in specs if memory[s.run_id].total <= budget
                  and (target.kind == "cuda" or step_flops(s) <= AFFORDABLE_STEP_FLOPS)]
    if not affordable:
        threads = max(s.exec.threads for s in specs)
        rate = CPU_PEAK_FLOPS_PER_THREAD * threads * CPU_MFU
        return PlanEstimate(
            {s.run_id: assumed_seconds(s, rate) for s in specs}, memory, target,
            f"time = exact FLOPs / ({rate / 1e9:.3g} GFLOP/s: {threads} thread(s) x "
            f"{CPU_PEAK_FLOPS_PER_THREAD / 1e9:.0f} GFLOP/s x MFU {CPU_MFU:g}, assumed): no "
            "shape of the plan is cheap enough to time here")
    from pipeline.estimate.calibration import calibrate

    cal = calibrate(affordable, device=target.kind)
    how = target.assumption
    if len(affordable) < len(specs):
        how += (f"; {len(specs) - len(affordable)} run(s) too large to build here "
                "extrapolated from the measured shapes")
    return PlanEstimate({s.run_id: cal.seconds(s) for s in specs}, memory, target, how)


def too_big(specs: list[RunSpec], est: PlanEstimate, where: str) -> list[str]:
    """One message per run whose estimated peak exceeds HEADROOM x the target's memory."""
    if est.target.memory is None:
        return []
    limit = HEADROOM * est.target.memory
    out = []
    for s in specs:
        m = est.memory[s.run_id]
        if m.total > limit:
            micro = s.exec.micro_batch_size or s.train.batch_size
            per_pass = (f"{micro} images of {s.model.positions} tokens" if s.model.is_image
                        else f"{micro} x {s.model.seq_len} tokens")
            out.append(
                f"{where}: run {s.run_id} (L{s.model.n_layer} d{s.model.d_model}, "
                f"N={flops.params_total(s.model):,}, {per_pass} a "
                f"pass) needs ~{_size(m.total)} at its peak (weights, gradients and "
                f"AdamW {(m.weights + m.gradients + m.optimizer) / GIB:.1f}, activations "
                f"{m.activations / GIB:.1f}, logits {m.logits / GIB:.1f}), more than "
                f"{HEADROOM:.0%} of the {_size(est.target.memory)} of its device "
                f"({est.target.memory_source}); set resources.micro_batch_size (or auto, with "
                "resources.device_memory_gb) to accumulate gradients over smaller passes")
    return out


def _size(n: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 2**10:.1f} KiB"

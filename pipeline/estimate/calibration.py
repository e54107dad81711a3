"""Time estimates for a plan, from a throughput calibration measured on this machine
(pipeline.estimate.plan decides when: only for shapes this machine can afford).

How: for up to three shapes of the plan (smallest, middle, largest by FLOPs per step), build
the model, run 2 warm-up steps and then `steps` timed optimizer steps (forward, backward,
AdamW) on random tokens with the sweep's batch size, sequence length and threads per run.
Seconds per step of any other shape are interpolated in log(seconds) vs log(FLOPs per step);
evaluation adds eval_batches forward passes (1/3 of a step each) per evaluation, counted as the
trainer makes them. A plan whose runs train in more than one precision (fp32 and bf16, as
sweeps/bf16_parity.yaml) is calibrated once per precision: on the CPU bf16 runs 1.0-1.5x
faster than fp32 depending on the shape (BENCHMARKS.md), so one curve cannot time both. The
sweep's wall time is the sum over runs divided by the number of runs that fit on the machine
at once.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from pipeline.model import build_model
from pipeline.train import autocast_for, make_optimizer
from pipeline.vocab import flops
from pipeline.vocab.recipe import trained_precision
from pipeline.vocab.spec import RunSpec


@dataclass(frozen=True)
class Curve:
    """Seconds per step against FLOPs per step, measured for one precision."""

    flops_per_step: list[float]  # exact convention, per measured shape
    seconds_per_step: list[float]


@dataclass(frozen=True)
class Calibration:
    curves: dict[str, Curve]
    """By the precision the runs train in ("fp32", "bf16": pipeline.vocab.recipe.trained_precision)."""
    device: str = "cpu"

    def seconds(self, spec: RunSpec) -> float:
        """Estimated wall seconds of one run (training plus evaluation)."""
        curve = self.curves[trained_precision(spec.train.precision, self.device)]
        per_step = _interp(_step_flops(spec), curve.flops_per_step, curve.seconds_per_step)
        t = spec.train
        # The trainer's count: one every interval before the last step, and the final one.
        n_evals = (spec.steps - 1) // t.resolved_eval_interval(spec.steps) + 1
        eval_steps = n_evals * t.eval_batches / 3  # forward only: ~1/3 of a training step
        return per_step * (spec.steps + eval_steps)


def _tokens_per_step(spec: RunSpec) -> int:
    return spec.train.batch_size * spec.model.seq_len


def _step_flops(spec: RunSpec) -> float:
    return flops.flops_per_token(spec.model, "exact") * _tokens_per_step(spec)


SLOPE_RANGE = (0.25, 1.25)
"""Bounds on the log-log slope used to extrapolate past the measured shapes: time per step
grows at most a little faster than FLOPs (cache effects) and at least a little (fixed
per-step overhead). A slope from two noisy timings of near-equal shapes can be anything: the
bf16_parity plan's shapes, measured 5 steps each within 8% of each other in FLOPs, once gave
-10 and timed a 6-minute run at 6 s."""
MIN_SPAN = 1.5
"""Measured shapes closer than this in FLOPs per step give no slope: time ∝ FLOPs there."""


def _interp(x: float, xs: list[float], ys: list[float]) -> float:
    if len(xs) == 1 or xs[-1] < MIN_SPAN * xs[0]:
        i = min(range(len(xs)), key=lambda j: abs(math.log(x / xs[j])))
        return ys[i] * x / xs[i]  # time proportional to FLOPs from the nearest measurement
    lx, lxs, lys = math.log(x), np.log(xs), np.log(ys)
    # Linear in log-log, extrapolated with the end slopes (bounded) outside the measured range.
    if lx <= lxs[0] or lx >= lxs[-1]:
        i = 0 if lx <= lxs[0] else len(xs) - 2
        slope = (lys[i + 1] - lys[i]) / max(lxs[i + 1] - lxs[i], 1e-12)
        slope = min(max(slope, SLOPE_RANGE[0]), SLOPE_RANGE[1])
        j = i if lx <= lxs[0] else i + 1  # from the nearer end
        return float(math.exp(lys[j] + slope * (lx - lxs[j])))
    return float(math.exp(np.interp(lx, lxs, lys)))


def calibrate(specs: list[RunSpec], steps: int = 5, device: str = "cpu") -> Calibration:
    """Measure seconds per step for up to three representative shapes of the plan per
    precision its runs train in, on the CPU or (device "cuda") this machine's GPU, at each
    run's micro-batch."""
    by_precision: dict[str, list[RunSpec]] = {}
    for s in specs:
        by_precision.setdefault(trained_precision(s.train.precision, device), []).append(s)
    return Calibration({p: _measure(group, steps, device)
                        for p, group in sorted(by_precision.items())}, device)


def _measure(specs: list[RunSpec], steps: int, device: str) -> Curve:
    """The curve of one precision: its smallest, middle and largest steps timed (by FLOPs
    per step, the axis the curve is read along: by FLOPs per token, shapes whose batches
    differ can all sit at one end of it)."""
    by_cost = sorted({(s.model, _tokens_per_step(s)): s for s in specs}.values(),
                     key=_step_flops)
    picks = [by_cost[0], by_cost[len(by_cost) // 2], by_cost[-1]]
    picks = list({(p.model, _tokens_per_step(p)): p for p in picks}.values())
    fps, sps = [], []
    dev = torch.device(device)
    old_threads = torch.get_num_threads()
    try:
        for spec in picks:
            torch.set_num_threads(spec.exec.threads)
            torch.manual_seed(0)
            model = build_model(spec.model, fp32_head=spec.train.head_precision == "fp32").to(dev)
            opt = make_optimizer(model, spec, dev)
            B = spec.train.batch_size
            micro = spec.exec.micro_batch_size or B
            x, y = _inputs(spec.model, micro, dev)
            for i in range(steps + 2):
                if i == 2:
                    _sync(dev)
                    t0 = time.perf_counter()
                for _ in range(B // micro):  # gradient accumulation, as the trainer does
                    with autocast_for(spec, dev):
                        _, loss = model(x, y)
                    loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            _sync(dev)
            sps.append((time.perf_counter() - t0) / steps)
            fps.append(_step_flops(spec))
            del model, opt, x, y
    finally:
        torch.set_num_threads(old_threads)
    order = np.argsort(fps)
    return Curve([fps[i] for i in order], [sps[i] for i in order])


def _inputs(cfg, micro: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random inputs and targets of one pass: token windows, or vit's images and classes."""
    if cfg.is_image:
        shape = (micro, cfg.channels, cfg.image_size, cfg.image_size)
        return (torch.rand(shape, device=dev),
                torch.randint(0, cfg.vocab_size, (micro,), device=dev))
    x = torch.randint(0, cfg.vocab_size, (micro, cfg.seq_len), device=dev)
    return x, x


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


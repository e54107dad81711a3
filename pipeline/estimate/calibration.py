"""Time estimates for a plan, from a throughput calibration measured on this machine
(pipeline.estimate.plan decides when: only for shapes this machine can afford).

How: for up to three shapes of the plan (smallest, middle, largest by FLOPs per step), build
the model, run 2 warm-up steps and then `steps` timed optimizer steps (forward, backward,
AdamW) on random tokens with the sweep's batch size, sequence length and threads per run.
Seconds per step of any other shape are interpolated in log(seconds) vs log(FLOPs per step);
evaluation adds eval_batches forward passes (1/3 of a step each) per evaluation. The sweep's
wall time is the sum over runs divided by the number of runs that fit on the machine at once.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from pipeline import flops
from pipeline.model import build_model
from pipeline.spec import RunSpec
from pipeline.train import autocast_for, make_optimizer


@dataclass(frozen=True)
class Calibration:
    flops_per_step: list[float]  # exact convention, per measured shape
    seconds_per_step: list[float]

    def seconds(self, spec: RunSpec) -> float:
        """Estimated wall seconds of one run (training plus evaluation)."""
        per_step = _interp(flops.flops_per_token(spec.model, "exact") * _tokens_per_step(spec),
                           self.flops_per_step, self.seconds_per_step)
        t = spec.train
        n_evals = spec.steps // t.resolved_eval_interval(spec.steps) + 1
        eval_steps = n_evals * t.eval_batches / 3  # forward only: ~1/3 of a training step
        return per_step * (spec.steps + eval_steps)


def _tokens_per_step(spec: RunSpec) -> int:
    return spec.train.batch_size * spec.model.seq_len


def _interp(x: float, xs: list[float], ys: list[float]) -> float:
    if len(xs) == 1:
        return ys[0] * x / xs[0]  # time proportional to FLOPs
    lx, lxs, lys = math.log(x), np.log(xs), np.log(ys)
    # Linear in log-log, extrapolated with the end slopes outside the measured range.
    if lx <= lxs[0] or lx >= lxs[-1]:
        i = 0 if lx <= lxs[0] else len(xs) - 2
        slope = (lys[i + 1] - lys[i]) / max(lxs[i + 1] - lxs[i], 1e-12)
        return float(math.exp(lys[i] + slope * (lx - lxs[i])))
    return float(math.exp(np.interp(lx, lxs, lys)))


def calibrate(specs: list[RunSpec], steps: int = 5, device: str = "cpu") -> Calibration:
    """Measure seconds per step for up to three representative shapes of the plan, on the
    CPU or (device "cuda") this machine's GPU, at each run's micro-batch and precision."""
    by_cost = sorted({s.model: s for s in specs}.values(),
                     key=lambda s: flops.flops_per_token(s.model, "exact"))
    picks = [by_cost[0], by_cost[len(by_cost) // 2], by_cost[-1]]
    picks = list({p.model: p for p in picks}.values())
    fps, sps = [], []
    dev = torch.device(device)
    old_threads = torch.get_num_threads()
    try:
        for spec in picks:
            torch.set_num_threads(spec.exec.threads)
            torch.manual_seed(0)
            model = build_model(spec.model).to(dev)
            opt = make_optimizer(model, spec, dev)
            B, T = spec.train.batch_size, spec.model.seq_len
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
            fps.append(flops.flops_per_token(spec.model, "exact") * B * T)
            del model, opt, x, y
    finally:
        torch.set_num_threads(old_threads)
    order = np.argsort(fps)
    return Calibration([fps[i] for i in order], [sps[i] for i in order])


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


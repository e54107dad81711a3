"""Is the bf16 gap made in training or in evaluation? One seed of a parity sweep, retrained.

    python benchmarks/studies/bench_bf16_rescore.py --seed 1        # ~4.5 min on 2 cores

Trains the seed's fp32 and bf16 runs of sweeps/bf16_parity_cli.yaml (the sweep's own
RunSpecs, so the same run ids) in two processes at once, each with a checkpoint folder, then
scores each final model on the run's fixed eval batches under fp32 and under bf16 autocast
(pipeline.train.passes.evaluate). If the bf16-trained model scores the same in both, the
gap to fp32 comes from training, and evaluating in fp32 would not close it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

SWEEP = Path(__file__).resolve().parents[2] / "sweeps" / "bf16_parity_cli.yaml"


def spec_of(precision: str, seed: int):
    from pipeline.config import load_sweep
    from pipeline.planner import expand

    plan = expand(load_sweep(SWEEP))
    return next(s for s in plan.specs
                if s.train.precision == precision and s.train.seed == seed
                and s.train.head_precision == "autocast")  # the first treatment's runs


def train_one(precision: str, seed: int, folder: Path) -> None:
    from pipeline.train import NullTracker, train

    spec = spec_of(precision, seed)
    result = train(spec, NullTracker(), checkpoint_dir=folder, resume=False)
    print(json.dumps({"run_id": spec.run_id, "trained": precision,
                      "final_val_loss": result.final_val_loss}), flush=True)


def rescore(precision: str, seed: int, folder: Path) -> dict:
    import torch

    from pipeline import checkpoint
    from pipeline.model import build_model
    from pipeline.train import load_data, objective
    from pipeline.train.passes import evaluate

    torch.set_num_threads(1)
    spec, device = spec_of(precision, seed), torch.device("cpu")
    model = build_model(spec.model)
    model.load_state_dict(checkpoint.load_latest(folder)["model"])
    evals = objective.validation_batches(spec, load_data(spec.data), spec.train.batch_size,
                                         spec.train.eval_batches, device)
    scored = {p: evaluate(model, evals, replace(spec, train=replace(spec.train, precision=p)),
                          device) for p in ("fp32", "bf16")}
    return {"run_id": spec.run_id, "trained": precision, "scored": scored}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train-one", choices=["fp32", "bf16"], help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.train_one:  # the child process of one precision
        train_one(args.train_one, args.seed, args.folder)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folders = {p: Path(tmp) / p for p in ("fp32", "bf16")}
        children = [subprocess.Popen([sys.executable, __file__, "--seed", str(args.seed),
                                      "--train-one", p, "--folder", str(f)])
                    for p, f in folders.items()]
        if any(child.wait() for child in children):
            sys.exit("a training process failed")
        for p, f in folders.items():
            print(json.dumps(rescore(p, args.seed, f)))


if __name__ == "__main__":
    main()

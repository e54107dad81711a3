"""How much of the chinchilla study's seed noise is the evaluation set? Two seeds, rescored.

    python benchmarks/studies/bench_eval_noise.py                 # ~4 min on 2 cores
    python benchmarks/studies/bench_eval_noise.py --budget 8e12 --size 4

The analysis measures run-to-run noise from seed replicates (analysis.checks.noise): σ =
0.0195 nats in reports/chinchilla (1.3% of the loss), 0.019 in reports/chinchilla_1gpu. Every
fit's interval, the residual/noise ratio and the held-out checks are set against it. But a
run's final loss is scored on eval_batches x batch_size = 16 x 8 = 128 fixed windows (16k
tokens) of the validation split, so part of the difference between two seeds may be which
128 windows happen to be scored, not the models.

This trains seeds 0 and 1 of one cell of sweeps/chinchilla.yaml (its own RunSpecs: the same
run ids as the committed ledger) in two processes at once, keeps their final weights, and
scores both models (fp32, as trained) on:
- the run's own 128 windows (its final_val_loss, as the ledger has it);
- every non-overlapping window of the validation split, in disjoint sets of 128, each spread
  evenly over the split as the run's own are: the spread of (seed 1 - seed 0) across the
  sets is the evaluation's share of the seed difference, and all of them together give the
  two models' losses nearly free of it.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

SWEEP = Path(__file__).resolve().parents[2] / "sweeps" / "chinchilla.yaml"


def spec_of(budget: float, size: int, seed: int):
    """The sweep's run of this budget, size (0 = smallest) and seed."""
    from pipeline.config import load_sweep
    from pipeline.planner import expand
    from pipeline.vocab.flops import params_total

    plan = expand(load_sweep(SWEEP), str(SWEEP))
    cell = [s for s in plan.specs if s.budget is not None and math.isclose(s.budget, budget)]
    sizes = sorted({params_total(s.model) for s in cell})
    if not sizes:
        raise SystemExit(f"no budget {budget:g} in {SWEEP.name}")
    if not 0 <= size < len(sizes):
        raise SystemExit(f"{SWEEP.name}: no size {size} at budget {budget:g} "
                         f"({len(sizes)} sizes)")
    return next(s for s in cell if params_total(s.model) == sizes[size] and s.train.seed == seed)


def train_one(budget: float, size: int, seed: int, folder: Path) -> None:
    from pipeline.train import NullTracker, train

    spec = spec_of(budget, size, seed)
    result = train(spec, NullTracker(), checkpoint_dir=folder, resume=False)
    print(json.dumps({"run_id": spec.run_id, "seed": seed,
                      "final_val_loss": result.final_val_loss}), flush=True)


def rescore(budget: float, size: int, folders: dict[int, Path], set_size: int) -> dict:
    import numpy as np
    import torch

    from pipeline import checkpoint
    from pipeline.model import build_model
    from pipeline.train import load_data, objective
    from pipeline.train.passes import evaluate

    torch.set_num_threads(2)
    device = torch.device("cpu")
    specs = {seed: spec_of(budget, size, seed) for seed in folders}
    spec = specs[0]
    data = load_data(spec.data)
    T = spec.model.seq_len
    own = objective.validation_batches(spec, data, spec.train.batch_size,
                                       spec.train.eval_batches, device)
    # Every non-overlapping window of the split, in disjoint sets of set_size windows, each
    # spread over the whole split as the study's are (pipeline.data.batches.eval_batches:
    # evenly spaced): set k holds windows k, k + n_sets, k + 2 n_sets, ... (consecutive
    # windows would make each set one stretch of a few files).
    val = torch.from_numpy(np.asarray(data.val, dtype=np.int64))
    starts = torch.arange(0, len(val) - T - 1, T + 1)
    windows = torch.stack([val[s:s + T + 1] for s in starts.tolist()])
    n_sets = len(windows) // set_size
    sets = windows[: n_sets * set_size].reshape(set_size, n_sets, T + 1).transpose(0, 1)
    out: dict = {"budget": budget, "run_ids": {}, "own": {}, "sets": {}, "n_sets": n_sets,
                 "set_windows": set_size, "window_tokens": T}
    for seed, folder in folders.items():
        s = specs[seed]
        model = build_model(s.model)
        model.load_state_dict(checkpoint.load_latest(folder)["model"])
        out["run_ids"][seed] = s.run_id
        out["n"] = sum(p.numel() for p in model.parameters())
        out["own"][seed] = evaluate(model, own, s, device)
        losses = []
        for chunk in sets:  # one set = its windows in batches of the run's eval batch size
            batches = [(b[:, :-1].contiguous(), b[:, 1:].contiguous())
                       for b in chunk.contiguous().split(s.train.batch_size)]
            losses.append(evaluate(model, batches, s, device))
        out["sets"][seed] = losses
    return out


def summarise(r: dict) -> None:
    import numpy as np

    own = r["own"][1] - r["own"][0]
    l0, l1 = np.array(r["sets"][0]), np.array(r["sets"][1])
    diff = l1 - l0
    sd_eval = float(diff.std(ddof=1))
    print(f"cell C = {r['budget']:g}, N = {r['n']:,}; runs {r['run_ids'][0]} (seed 0), "
          f"{r['run_ids'][1]} (seed 1)")
    print(f"own {r['set_windows']} windows: seed 0 {r['own'][0]:.4f}, seed 1 {r['own'][1]:.4f}, "
          f"difference {own:+.4f}")
    print(f"{r['n_sets']} disjoint sets of {r['set_windows']} windows "
          f"({r['set_windows'] * r['window_tokens']:,} tokens each): difference mean "
          f"{diff.mean():+.4f}, sd across sets {sd_eval:.4f}; one model's loss sd across sets "
          f"{l0.std(ddof=1):.4f} (seed 0), {l1.std(ddof=1):.4f} (seed 1)")
    print(f"all {r['n_sets'] * r['set_windows']:,} windows: seed 0 {l0.mean():.4f}, seed 1 "
          f"{l1.mean():.4f}, difference {diff.mean():+.4f} (its evaluation sd "
          f"{sd_eval / math.sqrt(r['n_sets']):.4f})")
    # The analysis's sigma is one run's sd: Var(seed 1 - seed 0) = 2 sigma^2.
    print(f"evaluation share of one run's noise at this set size: sigma_eval = "
          f"{sd_eval / math.sqrt(2):.4f} nats (against the study's measured sigma 0.0195)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=3.2e12)
    ap.add_argument("--size", type=int, default=2, help="0 = the budget's smallest model")
    ap.add_argument("--set-windows", type=int, default=128,
                    help="windows per disjoint set (the study scores 16 x 8 = 128)")
    ap.add_argument("--json", type=Path, help="also write the raw losses here")
    ap.add_argument("--work", type=Path,
                    help="keep the two runs' checkpoints here (trained once; default: a "
                         "temporary folder)")
    ap.add_argument("--train-one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.train_one is not None:  # the child process of one seed
        train_one(args.budget, args.size, args.train_one, args.folder)
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        folders = {seed: work / f"C{args.budget:g}-size{args.size}-seed{seed}" for seed in (0, 1)}
        children = [subprocess.Popen([sys.executable, __file__, "--budget", str(args.budget),
                                      "--size", str(args.size), "--train-one", str(seed),
                                      "--folder", str(f)])
                    for seed, f in folders.items() if not any(f.glob("step_*.pt"))]
        if any(child.wait() for child in children):
            sys.exit("a training process failed")
        result = rescore(args.budget, args.size, folders, args.set_windows)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    summarise(result)


if __name__ == "__main__":
    main()

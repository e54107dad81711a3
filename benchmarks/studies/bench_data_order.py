"""How much of the chinchilla study's seed noise is the data order? Seeds that share it, trained.

    python benchmarks/studies/bench_data_order.py OUT             # 9 runs, ~25 min on 2 cores
    python benchmarks/studies/bench_data_order.py OUT --budget 3.2e12 --sizes 0 2 4 --seeds 1 2 3
    python benchmarks/studies/bench_data_order.py OUT --summary   # the table, from OUT

A run's `seed` fixes both its initialisation and its batch sequence (a permutation of the
training windows with `sampling: shuffled`), so the σ ≈ 0.0195 nats that the report measures
from seed pairs (analysis.checks.noise) mixes the two, plus the evaluation windows (~0.005:
benchmarks/studies/bench_eval_noise.py). This trains cells of sweeps/chinchilla.yaml (the
sweep's own RunSpecs) again with other seeds but `data_seed: 0`: the batch sequence of the
ledger's seed-0 run, so the runs of a cell differ only in their initialisation. Beside the
ledger's seed 0 (the same computation, the same run id) they give σ_init, pooled over the
cells, to set against the seed pairs' σ in the same cells (reports/chinchilla/runs.csv).

With --eval-interval K the runs also evaluate every K steps (evaluations never change the
trained weights: the same final loss) and keep their curves, and the summary says whether two
seeds of a cell differ by a gap that persists to the end (the models) or by jitter between
neighbouring evaluations (the final iterate, which weight averaging would smooth):

    python benchmarks/studies/bench_data_order.py OUT2 --sizes 0 --seeds 0 3 --eval-interval 20

With --lr-factor F the runs (seed 0 included) train at F times the recipe's peak LR, to see
whether a cell's seed spread and mean move with the LR; the summary then sets each factor's
seeds beside the recipe's:

    python benchmarks/studies/bench_data_order.py OUT --sizes 0 --lr-factor 0.5

Each finished run is appended to OUT/runs.jsonl as it ends; a rerun skips the runs already
there, so an interrupted measurement resumes.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEDGER = ROOT / "reports" / "chinchilla" / "runs.csv"
RECORDS = "runs.jsonl"


def shared_order_spec(budget: float, size: int, seed: int):
    """The cell's seed-0 run, initialised with `seed`, reading seed 0's batches."""
    from bench_eval_noise import spec_of  # the sweep's run of a cell (its own script)

    base = spec_of(budget, size, 0)
    return replace(base, train=replace(base.train, seed=seed, data_seed=0))


def _train(job: tuple[float, int, int, int, float]) -> dict:
    import torch

    from pipeline.train import NullTracker, train
    from pipeline.vocab.flops import params_total

    torch.set_num_threads(1)
    budget, size, seed, eval_interval, lr_factor = job
    spec = shared_order_spec(budget, size, seed)
    if lr_factor != 1.0:
        spec = replace(spec, train=replace(spec.train, lr=spec.train.lr * lr_factor))
    if eval_interval:
        spec = replace(spec, train=replace(spec.train, eval_interval=eval_interval))
    t0 = time.time()
    result = train(spec, NullTracker(), resume=False)
    record = {"budget": budget, "size": size, "seed": seed, "data_seed": 0,
              "run_id": spec.run_id, "N": params_total(spec.model), "D": spec.tokens,
              "final_val_loss": result.final_val_loss, "wall_s": round(time.time() - t0, 1),
              "eval_interval": eval_interval, "lr_factor": lr_factor}
    if eval_interval:
        record["curve"] = {"step": result.curve["step"], "val_loss": result.curve["val_loss"]}
    return record


def measure(out: Path, budget: float, sizes: list[int], seeds: list[int], workers: int,
            eval_interval: int, lr_factor: float = 1.0) -> None:
    out.mkdir(parents=True, exist_ok=True)
    earlier = read(out)
    if other := {r.get("eval_interval", 0) for r in earlier} - {eval_interval}:
        raise SystemExit(f"error: {out / RECORDS} holds runs of --eval-interval "
                         f"{sorted(other)[0]}, not {eval_interval}: use another folder")
    done = {(r["budget"], r["size"], r["seed"], r.get("lr_factor", 1.0)) for r in earlier}
    jobs = [(budget, z, s, eval_interval, lr_factor) for z in sizes for s in seeds
            if (budget, z, s, lr_factor) not in done]
    for z in sorted({job[1] for job in jobs}):  # a bad cell stops here, not in a worker
        shared_order_spec(budget, z, 0)
    print(f"{len(jobs)} runs to train ({len(done)} already in {out / RECORDS})", flush=True)
    with mp.get_context("spawn").Pool(workers) as pool:
        for r in pool.imap_unordered(_train, jobs):
            with open(out / RECORDS, "a") as f:
                f.write(json.dumps(r) + "\n")
            print(f"C={r['budget']:g} size {r['size']} seed {r['seed']} (data 0, LR x "
                  f"{r['lr_factor']:g}): "
                  f"{r['final_val_loss']:.4f} in {r['wall_s']:.0f} s", flush=True)


def read(out: Path) -> list[dict]:
    path = out / RECORDS
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def summary(out: Path) -> None:
    """Per cell: the shared-order runs and the ledger's two seeds; σ pooled over cells."""
    import numpy as np
    import pandas as pd

    records = read(out)
    if not records:
        raise SystemExit(f"no runs in {out / RECORDS}")
    if all("curve" in r for r in records):
        curves(records)
        return
    ledger = pd.read_csv(LEDGER)
    ledger = ledger[ledger["role"] == "main"]
    if any(r.get("lr_factor", 1.0) != 1.0 for r in records):
        by_lr(records, ledger)
        records = [r for r in records if r.get("lr_factor", 1.0) == 1.0]
        if not records:
            return
        print()
    runs = pd.DataFrame(records)
    ss_init = ss_pair = 0.0
    df_init = df_pair = 0
    print("| C | N | seed 0 (ledger) | init seeds, data 0 | sd, init only | seed 1 (ledger) "
          "| (s1 - s0)/√2 |")
    print("|---|---|---|---|---|---|---|")
    for (budget, _size), g in runs.groupby(["budget", "size"]):
        n = int(g["N"].iloc[0])
        cell = ledger[np.isclose(ledger["budget"], budget) & (ledger["N"] == n)]
        s0 = float(cell.loc[cell["seed"] == 0, "loss"].iloc[0])
        s1 = float(cell.loc[cell["seed"] == 1, "loss"].iloc[0])
        losses = np.array([s0, *g.sort_values("seed")["final_val_loss"]])
        ss_init += float(((losses - losses.mean()) ** 2).sum())
        df_init += len(losses) - 1
        ss_pair += (s1 - s0) ** 2 / 2
        df_pair += 1
        others = ", ".join(f"{v:.4f}" for v in g.sort_values("seed")["final_val_loss"])
        print(f"| {budget:g} | {n:,} | {s0:.4f} | {others} | {losses.std(ddof=1):.4f} "
              f"| {s1:.4f} | {(s1 - s0) / math.sqrt(2):+.4f} |")
    print(f"\nσ_init (pooled over {df_init} df): {math.sqrt(ss_init / df_init):.4f}; "
          f"σ from the ledger's seed pairs of these cells ({df_pair} df): "
          f"{math.sqrt(ss_pair / df_pair):.4f}")


def by_lr(records: list[dict], ledger) -> None:
    """Per cell and LR factor: the final losses of the seeds (all on seed 0's batches; at
    factor 1 the ledger's seed 0 and the runs of factor 1 here), their mean and sd."""
    import numpy as np

    cells: dict[tuple, dict[float, list[float]]] = {}
    for r in sorted(records, key=lambda r: r["seed"]):
        cell = cells.setdefault((r["budget"], r["size"], r["N"]), {})
        cell.setdefault(r.get("lr_factor", 1.0), []).append(r["final_val_loss"])
    print("| C | N | peak LR x | final losses, by seed (from 0) | mean | sd |")
    print("|---|---|---|---|---|---|")
    for (budget, _size, n), by_factor in sorted(cells.items()):
        seed0 = ledger[np.isclose(ledger["budget"], budget) & (ledger["N"] == n)
                       & (ledger["seed"] == 0)]["loss"]
        by_factor.setdefault(1.0, []).insert(0, float(seed0.iloc[0]))
        for factor, losses in sorted(by_factor.items()):
            v = np.array(losses)
            print(f"| {budget:g} | {n:,} | {factor:g} | {', '.join(f'{x:.4f}' for x in v)} "
                  f"| {v.mean():.4f} | {v.std(ddof=1) if len(v) > 1 else math.nan:.4f} |")


def curves(records: list[dict], tail: float = 0.1) -> None:
    """Runs with curves, per cell: the gap between each seed and the first over the last
    `tail` of the run (mean, sd) and each run's jitter there (sd of neighbouring evaluations'
    differences / √2: the noise of one evaluation of the final iterate)."""
    import numpy as np

    cells: dict[tuple, list[dict]] = {}
    for r in records:
        cells.setdefault((r["budget"], r["size"]), []).append(r)
    print(f"| C | N | seed | final | jitter, last {tail:.0%} | gap to the first seed, last "
          f"{tail:.0%}: mean (sd) | gap at 50% / 75% of the run |")
    print("|---|---|---|---|---|---|---|")
    for (budget, _size), runs in sorted(cells.items()):
        runs = sorted(runs, key=lambda r: r["seed"])
        first = np.array(runs[0]["curve"]["val_loss"])
        steps = np.array(runs[0]["curve"]["step"])
        last = steps >= steps[-1] * (1 - tail)
        for r in runs:
            v = np.array(r["curve"]["val_loss"])
            gap = v - first
            at = [gap[np.searchsorted(steps, f * steps[-1])] for f in (0.5, 0.75)]
            print(f"| {budget:g} | {r['N']:,} | {r['seed']} | {r['final_val_loss']:.4f} "
                  f"| {np.std(np.diff(v[last])) / math.sqrt(2):.4f} "
                  f"| {gap[last].mean():+.4f} ({gap[last].std():.4f}) "
                  f"| {at[0]:+.4f} / {at[1]:+.4f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="folder of the runs (resumable)")
    p.add_argument("--budget", type=float, default=3.2e12)
    p.add_argument("--sizes", type=int, nargs="+", default=[0, 2, 4])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3],
                   help="initialisation seeds, each with data_seed 0 (0 is the ledger's run)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--eval-interval", type=int, default=0,
                   help="also evaluate every K steps and keep the curves (0: the sweep's)")
    p.add_argument("--lr-factor", type=float, default=1.0,
                   help="train at this multiple of the recipe's peak LR (seed 0 included)")
    p.add_argument("--summary", action="store_true", help="only print the table from OUT")
    a = p.parse_args(argv)
    if not a.summary:
        seeds = a.seeds if a.lr_factor == 1.0 else sorted({0, *a.seeds})
        measure(a.out, a.budget, a.sizes, seeds, a.workers, a.eval_interval, a.lr_factor)
    summary(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

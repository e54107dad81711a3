"""How much of the chinchilla study's seed noise is the data order? Seeds that share it, trained.

    python benchmarks/bench_data_order.py OUT                     # 9 runs, ~25 min on 2 cores
    python benchmarks/bench_data_order.py OUT --budget 3.2e12 --sizes 0 2 4 --seeds 1 2 3
    python benchmarks/bench_data_order.py OUT --summary           # the table, from OUT

A run's `seed` fixes both its initialisation and its batch sequence (a permutation of the
training windows with `sampling: shuffled`), so the σ ≈ 0.0195 nats that the report measures
from seed pairs (analysis.checks.noise) mixes the two, plus the evaluation windows (~0.005:
benchmarks/bench_eval_noise.py). This trains cells of sweeps/chinchilla.yaml (the sweep's own
RunSpecs) again with other seeds but `data_seed: 0`: the batch sequence of the ledger's seed-0
run, so the runs of a cell differ only in their initialisation. Beside the ledger's seed 0 (the
same computation, the same run id) they give σ_init, pooled over the cells, to set against the
seed pairs' σ in the same cells (reports/chinchilla/runs.csv).

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

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "sweeps" / "chinchilla.yaml"
LEDGER = ROOT / "reports" / "chinchilla" / "runs.csv"
RECORDS = "runs.jsonl"


def cell_specs(budget: float, size: int) -> list:
    """The sweep's runs (every seed) of this budget and size (0 = smallest)."""
    from pipeline.config import load_sweep
    from pipeline.flops import params_total
    from pipeline.grid import expand

    plan = expand(load_sweep(SWEEP), str(SWEEP))
    cell = [s for s in plan.specs if s.budget is not None and math.isclose(s.budget, budget)]
    sizes = sorted({params_total(s.model) for s in cell})
    if not 0 <= size < len(sizes):
        raise SystemExit(f"{SWEEP.name}: no size {size} at budget {budget:g} "
                         f"({len(sizes)} sizes)")
    return [s for s in cell if params_total(s.model) == sizes[size]]


def shared_order_spec(budget: float, size: int, seed: int):
    """The cell's seed-0 run, initialised with `seed`, reading seed 0's batches."""
    base = next(s for s in cell_specs(budget, size) if s.train.seed == 0)
    return replace(base, train=replace(base.train, seed=seed, data_seed=0))


def _train(job: tuple[float, int, int]) -> dict:
    import torch

    from pipeline.flops import params_total
    from pipeline.train import NullTracker, train

    torch.set_num_threads(1)
    budget, size, seed = job
    spec = shared_order_spec(budget, size, seed)
    t0 = time.time()
    result = train(spec, NullTracker(), resume=False)
    return {"budget": budget, "size": size, "seed": seed, "data_seed": 0,
            "run_id": spec.run_id, "N": params_total(spec.model), "D": spec.tokens,
            "final_val_loss": result.final_val_loss, "wall_s": round(time.time() - t0, 1)}


def measure(out: Path, budget: float, sizes: list[int], seeds: list[int], workers: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    done = {(r["budget"], r["size"], r["seed"]) for r in read(out)}
    jobs = [(budget, z, s) for z in sizes for s in seeds if (budget, z, s) not in done]
    print(f"{len(jobs)} runs to train ({len(done)} already in {out / RECORDS})", flush=True)
    with mp.get_context("spawn").Pool(workers) as pool:
        for r in pool.imap_unordered(_train, jobs):
            with open(out / RECORDS, "a") as f:
                f.write(json.dumps(r) + "\n")
            print(f"C={r['budget']:g} size {r['size']} seed {r['seed']} (data 0): "
                  f"{r['final_val_loss']:.4f} in {r['wall_s']:.0f} s", flush=True)


def read(out: Path) -> list[dict]:
    path = out / RECORDS
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def summary(out: Path) -> None:
    """Per cell: the shared-order runs and the ledger's two seeds; σ pooled over cells."""
    import numpy as np
    import pandas as pd

    ledger = pd.read_csv(LEDGER)
    ledger = ledger[ledger["role"] == "main"]
    runs = pd.DataFrame(read(out))
    if runs.empty:
        raise SystemExit(f"no runs in {out / RECORDS}")
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="folder of the runs (resumable)")
    p.add_argument("--budget", type=float, default=3.2e12)
    p.add_argument("--sizes", type=int, nargs="+", default=[0, 2, 4])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3],
                   help="initialisation seeds, each with data_seed 0 (0 is the ledger's run)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--summary", action="store_true", help="only print the table from OUT")
    a = p.parse_args(argv)
    if not a.summary:
        measure(a.out, a.budget, a.sizes, a.seeds, a.workers)
    summary(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Growth: planning a 5,000-run grid, and loading + fitting a ledger of up to 2,000 runs.

    python benchmarks/perf/bench_growth.py                # ~3-4 minutes on 2 cores

1. Plan: a grid sweep file of 5,000 runs (25 depths x 40 token counts x 5 seeds) through
   pipeline.config.parse_sweep + pipeline.planner.expand (target: under 10 s), and the CLI's
   dry run (`python -m pipeline.sweep FILE --dry-run --no-estimate`, imports and the printed
   table included).
2. Ledger: synthetic finished runs written into a temporary sqlite MLflow store with
   MlflowClient, with what pipeline.tracking writes for a finished trial (tags kind=trial,
   status=finished, run_id, sweep, family, budget; the spec as params; the summary metrics of
   pipeline.vocab.keys; the eval curve as metric history and as the curve.json artifact),
   log_batch'ed. Losses follow Chinchilla's law (analysis.runs.synthetic.ChinchillaLaw) on an
   IsoFLOP grid with 1% noise. At 250, 500, 1,000 and 2,000 runs: analysis.runs.load.load_sweep
   (with and without curves) and analysis.analyze.analyze (all approaches, point fits:
   bootstrap=0; bootstrap speed is bench_fits.py's subject). Target: 2,000 runs loaded and
   fitted in under 60 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import benchlib as bl  # noqa: E402

GRID_YAML = """
name: growth-plan
kind: grid
family: gpt
data: {{corpus: stdlib, tokenizer: bytes, seq_len: 128}}
train: {{batch_size: 16, seeds: [0, 1, 2, 3, 4]}}
grid:
  sizes: {{depths: [{depths}]}}
  tokens: [{tokens}]
"""


def grid_text() -> str:
    depths = ", ".join(str(d) for d in range(1, 26))
    tokens = ", ".join(f"{t:.4g}" for t in np.geomspace(1e5, 1e9, 40))
    return GRID_YAML.format(depths=depths, tokens=tokens)


def time_plan(tmp: str) -> list[dict]:
    from pipeline.config import parse_sweep
    from pipeline.planner import expand

    text = grid_text()
    t0 = time.perf_counter()
    cfg = parse_sweep(text, "growth-plan.yaml")
    t1 = time.perf_counter()
    plan = expand(cfg, ".", 256)
    t2 = time.perf_counter()
    path = os.path.join(tmp, "growth-plan.yaml")
    with open(path, "w") as f:
        f.write(text)
    t3 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipeline.sweep", path, "--dry-run",
                           "--no-estimate"], capture_output=True, text=True)
    t4 = time.perf_counter()
    cli = f"{t4 - t3:.1f}s (exit {proc.returncode}, {len(proc.stdout.splitlines()):,} lines)"
    return [{"runs planned": f"{len(plan.specs):,} (+{len(plan.skipped)} skipped)",
             "parse_sweep": f"{t1 - t0:.3f}s", "expand": f"{t2 - t1:.2f}s",
             "parse + expand": f"{t2 - t0:.2f}s",
             "target < 10 s": "met" if t2 - t0 < 10 else "NOT met",
             "CLI --dry-run --no-estimate (wall)": cli}]


# --------------------------------------------------------------------------------------
# Synthetic ledger
# --------------------------------------------------------------------------------------


def synthetic_rows(count: int, start: int, seed: int = 0) -> list[dict]:
    """IsoFLOP cells under Chinchilla's law: 10 budgets, sizes around each optimum."""
    from analysis.runs.synthetic import ChinchillaLaw

    law = ChinchillaLaw()
    rng = np.random.default_rng([seed, start])
    budgets = np.geomspace(1e17, 1e21, 10)
    rows = []
    for i in range(start, start + count):
        budget = budgets[i % 10]
        n = float(law.n_opt(budget) * 10 ** rng.uniform(-0.8, 0.8))
        d = budget / (6 * n)
        points = np.geomspace(d / 64, d, 9)
        curve = law.loss(np.full(9, n), points) * np.exp(0.01 * rng.standard_normal(9))
        rows.append({"i": i, "budget": budget, "n": n, "d": d, "tokens": points,
                     "curve": curve})
    return rows


def write_runs(client, experiment_id: str, sweep: str, rows: list[dict]) -> None:
    from mlflow.entities import Metric, Param, RunTag

    from pipeline.vocab import keys
    from pipeline.vocab.flops import CONVENTIONS

    now = int(time.time() * 1000)
    for r in rows:
        run_id = f"{r['i']:016x}"
        tags = {keys.TAG_KIND: "trial", keys.TAG_SWEEP: sweep, keys.TAG_RUN_ID: run_id,
                keys.TAG_FAMILY: "gpt", keys.TAG_BUDGET: f"{r['budget']:.6g}",
                keys.TAG_STATUS: "queued", keys.TAG_ATTEMPTS: "1"}
        run = client.create_run(experiment_id, run_name=f"gpt-{run_id[:6]}", tags=tags)
        rid = run.info.run_id
        n, d, final = r["n"], r["d"], float(r["curve"][-1])
        params = [Param(f"model.{k}", str(v)) for k, v in (
            ("n_layer", 8), ("d_model", 512), ("n_heads", 8), ("vocab_size", 32000),
            ("seq_len", 2048), ("family", "gpt"))]
        params += [Param(f"train.{k}", str(v)) for k, v in (
            ("batch_size", 256), ("lr", 3e-4), ("seed", 0), ("schedule", "cosine"))]
        params += [Param("steps", str(int(d // 524288))), Param("tokens", str(int(d))),
                   Param("budget", f"{r['budget']:.6g}"), Param("flops_convention", "6nd")]
        metrics = [Metric(keys.FINAL_VAL_LOSS, final, now, 0),
                   Metric(keys.FINAL_VAL_BPB, final / np.log(2), now, 0),
                   Metric(keys.FINAL_TRAIN_LOSS, final * 0.99, now, 0),
                   Metric(keys.FINAL_TOKENS, d, now, 0),
                   Metric(keys.FINAL_STEPS, d // 524288, now, 0),
                   Metric(keys.FINAL_WALL_S, 30.0, now, 0),
                   Metric(keys.FINAL_TOKENS_PER_S, d / 30.0, now, 0),
                   Metric(keys.PARAMS_TOTAL, n, now, 0),
                   Metric(keys.PARAMS_NON_EMBEDDING, 0.9 * n, now, 0)]
        metrics += [Metric(keys.flops_key(c), 6 * n * d * (1.1 if c == "exact" else 1.0),
                           now, 0) for c in CONVENTIONS]
        for k, (tok, loss) in enumerate(zip(r["tokens"], r["curve"], strict=True)):
            metrics += [Metric(keys.VAL_LOSS, float(loss), now, k + 1),
                        Metric(keys.TOKENS, float(tok), now, k + 1),
                        Metric(keys.TRAIN_LOSS, float(loss) * 0.99, now, k + 1)]
        client.log_batch(rid, metrics=metrics, params=params,
                         tags=[RunTag(keys.TAG_STATUS, keys.STATUS_FINISHED)])
        client.log_dict(rid, {"step": list(range(1, 10)), "tokens": r["tokens"].tolist(),
                              "val_loss": r["curve"].tolist()}, keys.CURVE_ARTIFACT)
        client.set_terminated(rid, status="FINISHED")


def time_ledger(tmp: str, sizes: list[int]) -> list[dict]:
    from mlflow import MlflowClient

    from analysis.analyze import analyze
    from analysis.runs.load import load_sweep
    from pipeline.tracking import prepare_store

    uri = f"sqlite:///{tmp}/ledger.db"
    sweep = "growth-ledger"
    t = time.perf_counter()
    experiment_id = prepare_store(uri, sweep)
    print(f"  store created in {time.perf_counter() - t:.1f}s", flush=True)
    client = MlflowClient(tracking_uri=uri)
    rows, written = [], 0
    quiet = lambda _msg: None  # noqa: E731
    for size in sizes:
        t = time.perf_counter()
        write_runs(client, experiment_id, sweep, synthetic_rows(size - written, written))
        t_write = time.perf_counter() - t
        written = size
        t = time.perf_counter()
        bare = load_sweep(sweep, tracking_uri=uri, flops_convention="6nd", with_curves=False,
                          log=quiet)
        t_bare = time.perf_counter() - t
        t = time.perf_counter()
        data = load_sweep(sweep, tracking_uri=uri, flops_convention="6nd", with_curves=True,
                          log=quiet)
        t_load = time.perf_counter() - t
        t = time.perf_counter()
        result = analyze(data.runs, data.curves, bootstrap=0)
        t_fit = time.perf_counter() - t
        a3 = result.approach3
        alpha = getattr(getattr(a3, "fit", None), "alpha", float("nan"))
        total = t_load + t_fit
        rows.append({
            "runs": f"{size:,}", "write (this batch)": f"{t_write:.1f}s",
            "load, no curves": f"{t_bare:.1f}s ({len(bare.runs)} runs)",
            "load with curves": f"{t_load:.1f}s", "fit (all approaches, no bootstrap)":
            f"{t_fit:.1f}s", "load + fit": f"{total:.1f}s",
            "target < 60 s": "met" if total < 60 else "NOT met",
            "approach 3 alpha (true 0.34)": f"{alpha:.3f}",
        })
        print("  " + " | ".join(rows[-1].values()), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="250,500,1000,2000")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    tmp = tempfile.mkdtemp(prefix="bg-")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp}/ledger.db"
    try:
        print(bl.machine_header("Growth: planning and ledger size"))
        print("\n## Planning a 5,000-run grid")
        plan_rows = time_plan(tmp)
        print(bl.table(plan_rows, list(plan_rows[0])))
        print("\n## Ledger: load + fit against the number of finished runs")
        rows = time_ledger(tmp, sizes)
        print(bl.table(rows, list(rows[0])))
        print(f"\nload average at the end: {bl.loadavg()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

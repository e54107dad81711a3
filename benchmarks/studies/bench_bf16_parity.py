"""bf16 (attention in fp32) against fp32 at the chinchilla ladder: final-loss parity over seeds.

    python -m pipeline.sweep sweeps/bf16_parity.yaml --no-report    # ~45 min on 2 cores
    python benchmarks/studies/bench_bf16_parity.py --tracking-uri sqlite:///mlflow.db \
        --csv benchmarks/results/bf16_parity.csv                     # the table below

or, from the committed per-run results, `python benchmarks/studies/bench_bf16_parity.py
--from-csv benchmarks/results/bf16_parity.csv`. The same for sweeps/bf16_parity_cli.yaml (the CLI's
d 128, heads of 32) with `--sweep bf16_parity_cli --rule equivalence` (or `--from-csv
benchmarks/results/bf16_parity_cli.csv --rule equivalence`). For each ladder size the same seeds train in both
precisions (same data order, same initialisation), so the paired differences bf16 - fp32
measure the precision alone; the fp32 seed standard deviation is the noise they are set
against. Verdict (stated before looking): parity when the mean paired difference over all
runs is within 0.5 fp32 seed standard deviations and its 95% interval (t, over the pairs)
contains 0 or lies within +-0.01 nats, and no size's mean difference exceeds one seed
standard deviation. Speed: each precision's wall seconds per run, as the sweep measured them
(two runs at a time on 2 cores, so shared with whatever else ran).

    python benchmarks/studies/bench_bf16_parity.py --speed           # ~6 minutes, 1 core

measures steady-state training tokens per CPU-second, fp32 against bf16, side by side
(interleaved rounds, one thread, the trainer as it is) at the shapes that matter: the
parity sweep's five ladder shapes at their batches, the quickstart's, and the single-run
CLI's default-sized example of issue 21 (4 layers, d 128, heads of 32, batch 64).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import benchlib as bl  # noqa: E402

COLUMNS = ["d_model", "n_layer", "seed", "precision", "final_val_loss", "wall_s",
           "tokens_per_s", "run_id"]


def from_store(uri: str, sweep: str) -> pd.DataFrame:
    import mlflow

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=[sweep], filter_string="tags.kind = 'trial'")
    runs = runs[runs["tags.status"] == "finished"]
    out = pd.DataFrame({
        "d_model": runs["params.model.d_model"].astype(int),
        "n_layer": runs["params.model.n_layer"].astype(int),
        "seed": runs["params.train.seed"].astype(int),
        # fp32 on the CPU is planned as "auto" since 2026-12-05 (pipeline/vocab/recipe.py)
        "precision": _treatment(runs),
        "final_val_loss": runs["metrics.final/val_loss"].astype(float),
        "wall_s": runs["metrics.final/wall_s"].astype(float),
        "tokens_per_s": runs["metrics.final/tokens_per_s"].astype(float),
        "run_id": runs["tags.run_id"],
    })
    return out.sort_values(["d_model", "precision", "seed"]).reset_index(drop=True)


HEAD_FP32 = "bf16_head_fp32"
"""The precision label of bf16 runs with the final norm and output head in fp32
(train.head_precision: fp32, the second treatment of sweeps/bf16_parity_cli.yaml)."""


def _treatment(runs: pd.DataFrame) -> pd.Series:
    precision = runs["params.train.precision"].replace({"auto": "fp32"})
    head = runs.get("params.train.head_precision")  # absent before the field existed
    if head is None:
        return precision
    return precision.where(~((precision == "bf16") & (head == "fp32")), HEAD_FP32)


def treated(table: pd.DataFrame, treatment: str) -> pd.DataFrame:
    """fp32 and one treatment's runs, the treatment labelled "bf16" (what parity pairs)."""
    keep = table[table["precision"].isin(["fp32", treatment])].copy()
    keep["precision"] = keep["precision"].replace({treatment: "bf16"})
    return keep


def parity(table: pd.DataFrame) -> tuple[list[dict], dict]:
    wide = table.pivot_table(index=["d_model", "seed"], columns="precision",
                             values=["final_val_loss", "wall_s"])
    wide = wide.dropna()
    diff = wide[("final_val_loss", "bf16")] - wide[("final_val_loss", "fp32")]
    rows = []
    sds = []
    for d, group in wide.groupby(level="d_model"):
        fp32 = group[("final_val_loss", "fp32")].to_numpy()
        bf16 = group[("final_val_loss", "bf16")].to_numpy()
        d_diff = diff.loc[d].to_numpy()
        sd = float(np.std(fp32, ddof=1)) if len(fp32) > 1 else math.nan
        sds.append(sd)
        speed = group[("wall_s", "fp32")].to_numpy() / group[("wall_s", "bf16")].to_numpy()
        rows.append({"d_model": d, "pairs": len(fp32),
                     "fp32 loss (seeds)": ", ".join(f"{x:.4f}" for x in fp32),
                     "bf16 loss (seeds)": ", ".join(f"{x:.4f}" for x in bf16),
                     "paired diffs": ", ".join(f"{x:+.4f}" for x in d_diff),
                     "mean diff": f"{d_diff.mean():+.4f}", "fp32 seed sd": f"{sd:.4f}",
                     "mean/sd": f"{d_diff.mean() / sd:+.2f}",
                     "fp32/bf16 wall": f"{np.median(speed):.2f}x"})
    d_all = diff.to_numpy()
    n = len(d_all)
    half = stats.t.ppf(0.975, n - 1) * d_all.std(ddof=1) / math.sqrt(n)
    sd_pooled = float(np.sqrt(np.nanmean(np.square(sds))))
    per_size = max(abs(float(r["mean diff"])) / float(r["fp32 seed sd"]) for r in rows)
    lo, hi = d_all.mean() - half, d_all.mean() + half
    verdict = (abs(d_all.mean()) <= 0.5 * sd_pooled
               and ((lo <= 0 <= hi) or (lo >= -0.01 and hi <= 0.01)) and per_size <= 1.0)
    summary = {"pairs": n, "mean_diff": float(d_all.mean()), "ci95": (float(lo), float(hi)),
               "seed_sd": sd_pooled, "worst_size_mean_over_sd": per_size, "parity": verdict,
               "wall_fp32_over_bf16": float(np.median(
                   wide[("wall_s", "fp32")] / wide[("wall_s", "bf16")]))}
    return rows, summary


EQUIVALENCE_MARGIN = 0.01
"""nats: the --rule equivalence margin, about half the seed sd of the chinchilla study's
cells (0.0195) and of this sweep's pooled fp32 seeds (0.0122)."""


def equivalence(d_all: np.ndarray, margin: float = EQUIVALENCE_MARGIN,
                level: float = 0.90) -> dict:
    """Two one-sided t tests at (1 - level) / 2 each (Schuirmann 1987): the precisions are
    equivalent when the `level` t interval of the mean paired difference lies inside
    +-margin. Stated before the bf16_parity_cli runs, for sweeps of one or more sizes (the
    pairs pooled): level 0.90 for its first treatment (bf16), 0.95 for its second (bf16 with
    the head in fp32: the 5% split over the two treatments tried, Bonferroni)."""
    n = len(d_all)
    half = stats.t.ppf(0.5 + level / 2, n - 1) * d_all.std(ddof=1) / math.sqrt(n)
    lo, hi = float(d_all.mean() - half), float(d_all.mean() + half)
    return {"ci": (lo, hi), "level": level, "margin": margin,
            "equivalent": -margin < lo and hi < margin}


# (label, n_layer, d_model, head_dim, batch): the shapes --speed times.
SPEED_SHAPES = (
    ("ladder 2/32", 2, 32, 4, 16), ("ladder 2/36", 2, 36, 4, 16),
    ("ladder 3/40", 3, 40, 4, 8), ("ladder 3/52", 3, 52, 4, 8), ("ladder 4/56", 4, 56, 4, 4),
    ("quickstart 1/16", 1, 16, 8, 16), ("quickstart 2/32", 2, 32, 8, 16),
    ("cli 4/128 (hd 32)", 4, 128, 32, 64),
)


def speed(reps: int, window_s: float) -> None:
    from pipeline.vocab.families import make_config

    data = bl.bench_data()
    rows = []
    for label, n_layer, d_model, head_dim, batch in SPEED_SHAPES:
        cfg = make_config("gpt", n_layer, d_model, vocab_size=256, seq_len=128,
                          head_dim=head_dim)
        step_s = bl.seconds_per_step(bl.make_spec(cfg, 3, batch=batch), data=data)
        log = bl.log_interval_for(step_s, window_s)

        def timed(precision: str, cfg=cfg, batch=batch, log=log) -> float:
            spec = bl.make_spec(cfg, 1, batch=batch, precision=precision, log_interval=log)
            return bl.time_train(spec, data=data).tokens_per_s

        res = bl.interleave({p: (lambda p=p: timed(p)) for p in ("fp32", "bf16")}, reps)
        ratios = [b / f for b, f in zip(res["bf16"], res["fp32"], strict=True)]
        rows.append({"shape": label, "fp32 tok/CPU-s": f"{bl.median(res['fp32']):,.0f}",
                     "bf16 tok/CPU-s": f"{bl.median(res['bf16']):,.0f}",
                     "bf16 / fp32 (rounds)": f"{bl.median(ratios):.2f}x ("
                     + ", ".join(f"{r:.2f}" for r in ratios) + ")"})
        print("  " + ", ".join(f"{k} {v}" for k, v in rows[-1].items()), flush=True)
    print()
    print(bl.table(rows, list(rows[0])))
    print(f"\nload average at the end {bl.loadavg()}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--speed", action="store_true", help="time fp32 against bf16 instead")
    src.add_argument("--tracking-uri", help="the sweep's MLflow store")
    src.add_argument("--from-csv", type=Path, help="per-run results written with --csv")
    p.add_argument("--sweep", default="bf16_parity")
    p.add_argument("--csv", type=Path, help="write the per-run results here")
    p.add_argument("--rule", choices=("stated", "equivalence"), default="stated",
                   help="stated: the rule of the module docstring (bf16_parity); equivalence: "
                        f"two one-sided tests, the 90%% interval within +-{EQUIVALENCE_MARGIN} "
                        "nats (bf16_parity_cli)")
    p.add_argument("--treatment", choices=("bf16", HEAD_FP32), default="bf16",
                   help=f"the runs set against fp32: plain bf16 autocast, or {HEAD_FP32} (the "
                        "final norm and output head in fp32; its rule: --level 0.95)")
    p.add_argument("--level", type=float, default=None,
                   help="--rule equivalence: the interval that must lie within the margin "
                        f"(default: each treatment's stated rule, 0.90 for bf16, 0.95 for "
                        f"{HEAD_FP32})")
    p.add_argument("--reps", type=int, default=3, help="--speed: interleaved rounds")
    p.add_argument("--window-s", type=float, default=1.5, help="--speed: seconds per window")
    args = p.parse_args(argv)
    if args.speed:
        print(bl.machine_header("bf16 (attention in fp32) against fp32, gpt, 1 thread"))
        speed(args.reps, args.window_s)
        return 0
    table = (pd.read_csv(args.from_csv) if args.from_csv
             else from_store(args.tracking_uri, args.sweep))
    if args.csv:
        table[[c for c in COLUMNS if c in table]].to_csv(args.csv, index=False)
    table = treated(table, args.treatment)
    rows, s = parity(table)
    print(bl.table(rows, list(rows[0])))
    print(f"\nall {s['pairs']} pairs: mean bf16 - fp32 {s['mean_diff']:+.4f} nats, 95% CI "
          f"[{s['ci95'][0]:+.4f}, {s['ci95'][1]:+.4f}]; fp32 seed sd (pooled) "
          f"{s['seed_sd']:.4f}; worst size |mean|/sd {s['worst_size_mean_over_sd']:.2f}; "
          f"median wall fp32/bf16 {s['wall_fp32_over_bf16']:.2f}x")
    if args.rule == "stated":
        print(f"parity: {'yes' if s['parity'] else 'NO'}")
        return 0
    wide = table.pivot_table(index=["d_model", "seed"], columns="precision",
                             values="final_val_loss").dropna()
    level = args.level or (0.95 if args.treatment == HEAD_FP32 else 0.90)
    e = equivalence((wide["bf16"] - wide["fp32"]).to_numpy(), level=level)
    print(f"equivalence ({args.treatment} - fp32): {e['level']:.0%} CI "
          f"[{e['ci'][0]:+.4f}, {e['ci'][1]:+.4f}] within "
          f"+-{e['margin']}: {'yes' if e['equivalent'] else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Backtest of the whole-curve law (analysis.fits.curve_law) against the endpoint laws.

Why: issue 51 asks whether fitting every validation point of every run, with the LR schedule
known, predicts larger runs better than the laws fitted on final losses. On a sweep's export:
fit the curve law on all validation points of the cosine main runs up to ``--fit-up-to``
(every seed's curve), the interaction law and Approach 3 on the same runs' final losses (seed
replicates averaged, analysis.checks.noise.collapse_replicates, and, as a second row each,
every seed's final loss: the curve law's own data); predict the final loss of
every cell at ``--target`` (replicates averaged the same way) and of the held-out runs; then
predict each run's final loss from the first half of its own curve plus the other runs' full
curves. Prints one table (markdown) and writes JSON with ``--json FILE``.

The export records each run's schedule name and peak LR but not its warmup, min-LR ratio or
steps (analysis/runs/lr_schedule.py); they are derived from recorded fields only: steps from
each run's last validation point, the rest from the sweep file whose sha256 the export's plan
records (refused if it differs). ``--ledger TAR`` also checks them against each run's
``spec.json`` in the ledger archive.

    python benchmarks/studies/curve_law_backtest.py reports/chinchilla_1gpu/runs_export.json \
        sweeps/chinchilla_1gpu.yaml --ledger reports/chinchilla_1gpu/ledger.tar.gz
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.checks.noise import collapse_curves, collapse_replicates
from analysis.fits.approach3 import fit_approach3
from analysis.fits.curve_law import CurveLaw, fit_curve_law
from analysis.fits.interaction import fit_interaction
from analysis.fits.optimum import lines_from_runs, optimal_allocation
from analysis.runs.export import read_export
from analysis.runs.lr_schedule import RecipeSchedule
from pipeline.config import load_sweep_and_sha256

SHORT = {"curve (seed-averaged curves)": "curve-avg",
         "interaction (every seed's final loss)": "interaction-seeds",
         "approach3 (every seed's final loss)": "approach3-seeds"}


def recipe_of(sweep_file: Path, plan_sha256: str | None) -> RecipeSchedule:
    """The schedule rule of the sweep file, which must be the one the export's plan names."""
    cfg, sha = load_sweep_and_sha256(sweep_file)
    if plan_sha256 is not None and sha != plan_sha256:
        sys.exit(f"error: {sweep_file}: sha256 {sha} is not the plan's sweep_sha256 "
                 f"{plan_sha256}: not the file these runs were planned from")
    t = cfg.train
    return RecipeSchedule(t.schedule, t.min_lr_ratio, t.scaling_recipe(), cfg.data.seq_len,
                          t.decay_fraction)


def check_ledger(frame: pd.DataFrame, archive: Path) -> int:
    """Runs whose derived schedule fields differ from their ledger spec.json (printed)."""
    specs = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.name.endswith("artifacts/spec.json"):
                spec = json.load(tar.extractfile(member))  # type: ignore[arg-type]
                specs[spec["run_id"]] = spec
    bad = 0
    for run in frame.itertuples():
        spec = specs.get(run.run_id)
        got = (run.steps, run.warmup_steps, run.min_lr_ratio, run.schedule)
        want = None if spec is None else (spec["steps"], spec["train"]["warmup_steps"],
                                          spec["train"]["min_lr_ratio"],
                                          spec["train"]["schedule"])
        if got != want:
            bad += 1
            print(f"ledger mismatch {run.run_id}: derived {got}, ledger {want}")
    print(f"ledger check: {len(frame) - bad} of {len(frame)} runs' schedules match spec.json")
    return bad


def rel_errors(predicted: np.ndarray, observed: np.ndarray) -> np.ndarray:
    return (np.asarray(predicted) - np.asarray(observed)) / np.asarray(observed)


def endpoint_laws(fit_rows: pd.DataFrame) -> dict:
    return {name: fit(fit_rows["N"].to_numpy(), fit_rows["D"].to_numpy(),
                      fit_rows["loss"].to_numpy())
            for name, fit in (("interaction", fit_interaction), ("approach3", fit_approach3))}


def half_curve(frame: pd.DataFrame, curves: pd.DataFrame, base: pd.DataFrame,
               full: CurveLaw, recipe: RecipeSchedule, runs: list[str]) -> pd.DataFrame:
    """Each run's final loss from the first half of its curve plus ``base``'s full curves."""
    rows = []
    for rid in runs:
        run = frame[frame["run_id"] == rid]
        steps = int(run["steps"].iloc[0])
        own = curves[(curves["run_id"] == rid) & (curves["step"] <= steps // 2)]
        others = curves[curves["run_id"].isin(base["run_id"]) & (curves["run_id"] != rid)]
        fit_runs = pd.concat([base[base["run_id"] != rid], run])
        law = fit_curve_law(fit_runs, pd.concat([others, own]), recipe=recipe,
                            lambdas=(full.lam,), keep=4, warm_start=full)
        pred = float(law.predict_curve(run.iloc[0].to_dict())["loss"].iloc[-1])
        obs = float(run["loss"].iloc[0])
        rows.append({"run_id": rid, "budget": float(run["budget"].iloc[0]),
                     "N": float(run["N"].iloc[0]), "points_used": len(own),
                     "observed": obs, "predicted": pred, "rel_error": (pred - obs) / obs})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("export", type=Path)
    ap.add_argument("sweep_file", type=Path)
    ap.add_argument("--fit-up-to", type=float, default=3.2e13)
    ap.add_argument("--target", type=float, default=1e14)
    ap.add_argument("--ledger", type=Path)
    ap.add_argument("--skip-half", action="store_true", help="skip the half-curve check")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    runs, curves = read_export(args.export)
    recipe = recipe_of(args.sweep_file, None if runs.plan is None else runs.plan.sweep_sha256)
    frame = recipe.with_schedule_columns(runs.frame, curves)
    if args.ledger is not None and check_ledger(frame, args.ledger):
        return 1
    cosine_main = (frame["schedule"] == "cosine") & (frame["role"] == "main")
    fit_frame = frame[cosine_main & (frame["budget"] <= args.fit_up_to)]
    cells = collapse_replicates(runs).frame
    fit_cells = cells[cells["run_id"].isin(fit_frame["run_id"])]
    targets = cells[(cells["schedule"] == "cosine") & (
        np.isclose(cells["budget"], args.target) | (cells["role"] == "holdout"))]

    t0 = time.perf_counter()
    law = fit_curve_law(fit_frame, curves, recipe=recipe)
    fit_s = time.perf_counter() - t0
    # The same law on seed-averaged curves: the data of the endpoint laws, point for point.
    cell_runs = runs.with_frame(fit_cells.reset_index(drop=True))
    cell_frame = frame[frame["run_id"].isin(fit_cells["run_id"])]
    averaged = fit_curve_law(cell_frame, collapse_curves(runs, curves), recipe=recipe)
    per_seed = {f"{k} (every seed's final loss)": v for k, v in endpoint_laws(fit_frame).items()}
    laws = {"curve": law, "curve (seed-averaged curves)": averaged, **endpoint_laws(fit_cells),
            **per_seed}
    ln_n, ln_d = np.log(targets["N"].to_numpy()), np.log(targets["D"].to_numpy())
    preds = {name: np.exp(one.log_loss(ln_n, ln_d)) for name, one in laws.items()}
    lines = lines_from_runs(cell_runs)
    alloc = {name: optimal_allocation(one.log_loss, lines, args.fit_up_to).statistics()
             for name, one in laws.items()}
    main_t = (targets["role"] == "main").to_numpy()
    for name, one in (("curve", law), ("seed-averaged", averaged)):
        print(f"curve law ({name}): {one.n_points} points of {one.n_runs} runs, lambda "
              f"{one.lam}; {'; '.join(one.flags) or 'every parameter identified'}")
        print("  ", {k: round(v, 4) for k, v in one.parameters().items()})
    print(f"curve law fit: {fit_s:.1f} s")
    print(f"\n| law | median abs rel error at {args.target:.3g} | max | held-out cells | "
          f"a | tokens/param at {args.fit_up_to:.3g} |")
    print("|---|---|---|---|---|---|")
    summary = {}
    for name, p in preds.items():
        err = rel_errors(p, targets["loss"].to_numpy())
        held = ", ".join(f"{e:+.2%}" for e in err[~main_t])
        summary[name] = {"median": float(np.median(np.abs(err[main_t]))),
                         "max": float(np.max(np.abs(err[main_t]))),
                         "signed": [float(e) for e in err[main_t]],
                         "holdout": [float(e) for e in err[~main_t]],
                         "a": alloc[name]["a"],
                         "tokens_per_param": alloc[name]["tokens_per_param"]}
        print(f"| {name} | {summary[name]['median']:.2%} | {summary[name]['max']:.2%} | {held} "
              f"| {alloc[name]['a']:.3f} | {alloc[name]['tokens_per_param']:.1f} |")
    print("\nper cell (signed errors):")
    for i, (_, row) in enumerate(targets.iterrows()):
        cells_txt = "  ".join(f"{SHORT.get(k, k)} {rel_errors(p[i], row['loss']):+.2%}"
                              for k, p in preds.items())
        print(f"  N={row['N']:.4g} D={row['D']:.4g} {row['role']:7s} observed {row['loss']:.4f}"
              f"  {cells_txt}")
    out = {"curve_law": law.parameters(), "lambda": law.lam, "flags": list(law.flags),
           "n_points": law.n_points, "n_runs": law.n_runs, "fit_seconds": fit_s,
           "targets": summary}
    if not args.skip_half:
        t0 = time.perf_counter()
        base = fit_frame
        check = list(fit_frame["run_id"]) + list(
            frame[cosine_main & np.isclose(frame["budget"], args.target)]["run_id"])
        half = half_curve(frame, curves, base, law, recipe, check)
        err = half["rel_error"].abs()
        print(f"\nfirst half of its own curve + the other runs' full curves "
              f"({len(half)} runs, {time.perf_counter() - t0:.0f} s):")
        for budget, group in half.groupby("budget"):
            e = group["rel_error"].abs()
            print(f"  budget {budget:.3g}: {len(group)} runs, median {e.median():.2%}, "
                  f"max {e.max():.2%}, mean signed {group['rel_error'].mean():+.2%}")
        print(f"  all: median {err.median():.2%}, max {err.max():.2%}")
        out["half_curve"] = half.to_dict("records")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

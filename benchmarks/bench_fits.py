"""Fit speed: Chinchilla Approach 3 on the 240 Epoch points, start grid + 1000 bootstraps.

    python benchmarks/bench_fits.py                 # the figure in BENCHMARKS.md
    python benchmarks/bench_fits.py --jobs 2        # bootstrap over 2 processes
    python benchmarks/bench_fits.py --no-exhaustive # skip the 4500-start verification

What is timed (target: < 60 s on 2 cores):
  1. the fit: all 4500 grid starts' objective evaluated at once (vectorised), L-BFGS-B from
     the 20 best (analysis.fits.approach3.fit_approach3, the default);
  2. 1000 bootstrap resamples of the runs, each refitted (bootstrap_approach3).
Then, unless --no-exhaustive, L-BFGS-B from every one of the 4500 starts, to check that the
fast fit equals the exhaustive one (the check fails loudly if not). Wall and CPU seconds are
printed, with the load average: on a shared machine wall time is what others leave over.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

from analysis.fits.approach3 import bootstrap_approach3, fit_approach3
from analysis.runs.load import load_csv

EPOCH = Path(__file__).resolve().parents[1] / "tests" / "data" / "chinchilla_epoch_fig4.csv"
CHINCHILLA_FLOPS = 5.76e23


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--no-exhaustive", action="store_true")
    args = p.parse_args()

    runs = load_csv(EPOCH, n_col="Model Size", c_col="Training FLOP", loss_col="loss",
                    drop_highest_loss=5, log=lambda _: None)
    n, d, loss = runs.column("N"), runs.column("D"), runs.column("loss")
    print(f"machine: {os.cpu_count()} CPUs, {cpu_model()}; load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"data: {len(n)} points (Epoch Chinchilla Fig. 4, 5 highest-loss dropped)")

    fit, w_fit, c_fit = timed(lambda: fit_approach3(n, d, loss))
    print(f"fit (4500-start grid, L-BFGS-B from the best {fit.n_optimized}): "
          f"{w_fit:.2f} s wall, {c_fit:.2f} s CPU")
    print(f"  E={fit.E:.4f} A={fit.A:.1f} B={fit.B:.1f} alpha={fit.alpha:.4f} "
          f"beta={fit.beta:.4f} a={fit.a:.4f} objective={fit.objective:.10g}")
    boot, w_b, c_b = timed(lambda: bootstrap_approach3(
        n, d, loss, fit, flops=CHINCHILLA_FLOPS, n_resamples=args.resamples, seed=0,
        n_jobs=args.jobs))
    alpha, beta = boot.interval("alpha"), boot.interval("beta")
    print(f"bootstrap ({args.resamples} resamples, {args.jobs} process(es), "
          f"{boot.n_failed} failed): {w_b:.2f} s wall, {c_b:.2f} s CPU "
          "(CPU of this process only)")
    print(f"  alpha 95% CI [{alpha.low:.4f}, {alpha.high:.4f}] (published [0.317, 0.373]); "
          f"beta [{beta.low:.4f}, {beta.high:.4f}] (published [0.331, 0.415])")
    print(f"TOTAL fit + bootstrap: {w_fit + w_b:.1f} s wall")

    if not args.no_exhaustive:
        full, w_full, c_full = timed(lambda: fit_approach3(n, d, loss, keep=None))
        print(f"exhaustive check (L-BFGS-B from all {full.n_optimized} starts): "
              f"{w_full:.1f} s wall, {c_full:.1f} s CPU")
        print(f"  E={full.E:.6f} A={full.A:.3f} B={full.B:.3f} alpha={full.alpha:.6f} "
              f"beta={full.beta:.6f} objective={full.objective:.10g}")
        same = np.isclose(full.objective, fit.objective, rtol=1e-9) and all(
            np.isclose(getattr(full, k), getattr(fit, k), rtol=1e-3)
            for k in ("E", "A", "B", "alpha", "beta"))
        if not same:
            raise SystemExit("the screened fit differs from the exhaustive grid's")
        print("  the screened fit equals the exhaustive one (objective to 1e-9, params to 1e-3)")


if __name__ == "__main__":
    main()

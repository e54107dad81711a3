"""Coverage of the compute multiplier's interval (issue 19): how often the 95% bootstrap
interval of analysis.comparison covers the true multiplier, on simulated pairs of sweeps.

    python benchmarks/studies/bench_compare.py                      # 100 repetitions x 2 cases
    python benchmarks/studies/bench_compare.py --reps 20 --jobs 2   # quicker

Each repetition draws both sweeps afresh (5 budgets 1e18-1e20 x 7 sizes, lognormal noise
0.5% per run, Chinchilla's law for A) for two cases: B with a constant multiplier of 2 and B
whose multiplier grows from 1.12x to 1.62x over the budgets (tests/test_compare.py). It
reports, per case and budget, the repetitions whose interval covers the truth (target: at
least 90 of 100) and the median relative error of the point estimate (target: within 5%).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from test_compare import BUDGETS, A, scaled, true_multiplier  # noqa: E402

from analysis.comparison import compare  # noqa: E402
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs  # noqa: E402

CASES = {
    "constant 2x": scaled(A, 2.0),
    "growing 1.12x-1.62x": ChinchillaLaw(E=A.E, A=A.A * 1.6, B=A.B * 1.6,
                                         alpha=A.alpha * 1.08, beta=A.beta * 1.08),
}
NOISE = 0.005


def one(args: tuple[str, int, int]) -> list[tuple[float, float, float]]:
    """(estimate, low, high) per budget for one repetition of one case."""
    case, rep, bootstrap = args
    law = CASES[case]
    ra = isoflop_runs(A, BUDGETS, sizes_per_budget=7, noise=NOISE, seed=2 * rep)
    rb = isoflop_runs(law, BUDGETS, sizes_per_budget=7, noise=NOISE, seed=2 * rep + 1)
    result = compare(ra, rb, bootstrap=bootstrap, seed=rep)
    out = []
    for c in BUDGETS:
        value, ci = result.multiplier(c)
        out.append((value, ci.low, ci.high))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--bootstrap", type=int, default=200)
    p.add_argument("--jobs", type=int, default=1)
    args = p.parse_args()
    wall, cpu = time.perf_counter(), time.process_time()
    print(f"python benchmarks/studies/bench_compare.py --reps {args.reps} --bootstrap "
          f"{args.bootstrap} --jobs {args.jobs}")
    for case, law in CASES.items():
        truth = np.array([true_multiplier(A, law, c) for c in BUDGETS])
        work = [(case, rep, args.bootstrap) for rep in range(args.reps)]
        if args.jobs > 1:
            with ProcessPoolExecutor(args.jobs) as pool:
                results = list(pool.map(one, work))
        else:
            results = [one(w) for w in work]
        arr = np.array(results)  # reps x budgets x (value, low, high)
        covered = ((arr[..., 1] <= truth) & (truth <= arr[..., 2])).sum(axis=0)
        error = np.median(np.abs(arr[..., 0] / truth - 1), axis=0)
        print(f"{case}:")
        for c, t, k, e in zip(BUDGETS, truth, covered, error, strict=True):
            print(f"  C = {c:.3g}: truth {t:.3f}, covered {k} of {args.reps}, "
                  f"median |error| {100 * e:.1f}%")
    print(f"wall {time.perf_counter() - wall:.0f} s, CPU of this process "
          f"{time.process_time() - cpu:.0f} s (workers not counted)")


if __name__ == "__main__":
    main()

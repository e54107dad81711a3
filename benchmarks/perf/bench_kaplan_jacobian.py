"""The Kaplan joint law fitted with finite-difference and with analytic Jacobians, side by side
in one process: 20 fits of 36 synthetic runs (16 starts per fit), CPU time and the fits.

    python benchmarks/perf/bench_kaplan_jacobian.py
"""

from __future__ import annotations

import time

import numpy as np
from scipy.optimize import least_squares

import analysis.fits.kaplan as kaplan
from analysis.runs.synthetic import ChinchillaLaw, replicated_runs


def _finite_differences(fun, x0, jac=None, **kw):
    """least_squares as it ran before: the Jacobian by finite differences."""
    return least_squares(fun, x0, **kw)


def main() -> None:
    runs = replicated_runs(ChinchillaLaw(), np.logspace(18, 20.5, 6), seeds=1,
                           sizes_per_budget=6, noise=0.004, seed=3)
    n, d, loss = runs.column("N"), runs.column("D"), runs.column("loss")
    out = {}
    for name, solver in (("finite differences", _finite_differences),
                         ("analytic", least_squares)):
        kaplan.least_squares = solver
        t0, c0 = time.perf_counter(), time.process_time()
        fits = [kaplan.fit_kaplan_joint(n, d, loss) for _ in range(20)]
        out[name] = (time.perf_counter() - t0, time.process_time() - c0, fits[0])
    kaplan.least_squares = least_squares
    for name, (wall, cpu, fit) in out.items():
        print(f"{name}: 20 fits in {wall:.2f} s wall, {cpu:.2f} s CPU; alpha_N "
              f"{fit.alpha_N:.6f}, alpha_D {fit.alpha_D:.6f}, rmse(ln L) {fit.rmse_log:.4e}")
    print(f"CPU ratio: {out['finite differences'][1] / out['analytic'][1]:.2f}x")


if __name__ == "__main__":
    main()

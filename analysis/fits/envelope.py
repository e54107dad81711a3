"""The envelope of training curves: the lowest loss any run reached at each FLOP count.

Chinchilla's Approach 1 (Hoffmann et al. 2022, Sec. 3.1, Fig. 2) and Kaplan's L(C_min)
(Kaplan et al. 2020, Sec. 6, Fig. 13) both read the compute-efficient frontier off the
training curves: at each C, the run with the lowest loss tells the best model size.

Each curve is interpolated linearly in (log C, log L) between its own eval points, never
extrapolated past them. A grid point counts as *interior* when the winning run is neither
the smallest nor the largest model among the runs whose curves reach that C: otherwise the
best size may lie outside the sizes trained (at the low end every curve's start is won by
the smallest model, at the high end by the largest), and an edge winner would flatten the
N_opt(C) slope. Fits use interior points only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.errors import FitError
from analysis.fits.optimum import line_costs
from analysis.runs.table import RunsTable

DEFAULT_GRID_POINTS = 48


@dataclass(frozen=True)
class Curve:
    """One run's eval curve, with what is needed to put it on a FLOP axis."""

    run_id: str
    n: float
    """Parameters of the run, in the convention of the analysis that uses the curve."""
    tokens: np.ndarray
    loss: np.ndarray
    flops_per_token: float
    """C / D of the run in the chosen FLOP convention (curve FLOPs = tokens × this)."""


def build_curves(runs: RunsTable, curves: pd.DataFrame | None, *,
                 kaplan: bool = False) -> list[Curve | None]:
    """One Curve per row of ``runs`` (None where the run has fewer than two usable points).

    ``kaplan``: use non-embedding N and Kaplan's C (when the table has them); otherwise N and
    the run's cost on its IsoFLOP line (``analysis.fits.optimum.line_costs``).
    Usable points have tokens > 0 and a finite, positive loss; they are sorted by tokens.
    """
    if curves is None or curves.empty:
        return [None] * len(runs)
    if kaplan:
        n_col, c_col, _ = runs.kaplan_n_c()
    else:
        # Each run's cost on its IsoFLOP line (its budget label, else C): the FLOP convention
        # in which every other approach reads its optimum (analysis.fits.optimum), so Approach
        # 1's N_opt(C) is a function of the same C as theirs.
        n_col, c_col = runs.column("N"), line_costs(runs)
    per_token = c_col / runs.column("D")
    by_run = {str(k): g for k, g in curves.groupby("run_id", sort=False)}
    out: list[Curve | None] = []
    for i, run_id in enumerate(runs.frame["run_id"].astype(str)):
        group = by_run.get(run_id)
        if group is None:
            out.append(None)
            continue
        tokens = group["tokens"].to_numpy(dtype=float)
        loss = group["loss"].to_numpy(dtype=float)
        keep = np.isfinite(tokens) & (tokens > 0) & np.isfinite(loss) & (loss > 0)
        order = np.argsort(tokens[keep], kind="stable")
        tokens, loss = tokens[keep][order], loss[keep][order]
        if tokens.size < 2:
            out.append(None)
            continue
        out.append(Curve(run_id, float(n_col[i]), tokens, loss, float(per_token[i])))
    return out


@dataclass(frozen=True)
class Envelope:
    """Lowest loss over runs on a log-spaced FLOP grid, with the winning run's N and D."""

    flops: np.ndarray
    loss: np.ndarray
    n: np.ndarray
    tokens: np.ndarray
    interior: np.ndarray
    """True where the winner is neither the smallest nor the largest candidate model."""
    n_curves: int


def envelope(curves: Sequence[Curve | None], *, grid_points: int = DEFAULT_GRID_POINTS,
             what: str = "envelope of training curves") -> Envelope:
    """The compute-efficient frontier of ``curves`` (None entries are ignored)."""
    usable = [c for c in curves if c is not None]
    if len(usable) < 2:
        raise FitError(f"{what}: {len(usable)} run(s) with a training curve; need at least 2")
    log_x = [np.log(c.tokens * c.flops_per_token) for c in usable]
    lo = min(x[0] for x in log_x)
    hi = max(x[-1] for x in log_x)
    if not hi > lo:
        raise FitError(f"{what}: the curves span no range of FLOPs")
    grid = np.linspace(lo, hi, grid_points)
    # (runs, grid) table of interpolated log loss; +inf where a curve does not reach.
    table = np.full((len(usable), grid.size), np.inf)
    for row, (curve, x) in enumerate(zip(usable, log_x, strict=True)):
        inside = (grid >= x[0]) & (grid <= x[-1])
        table[row, inside] = np.interp(grid[inside], x, np.log(curve.loss))
    reached = np.isfinite(table)
    covered = reached.any(axis=0)  # curves that do not overlap leave gaps in the grid
    table, reached, grid = table[:, covered], reached[:, covered], grid[covered]
    winner = np.argmin(table, axis=0)
    sizes = np.array([c.n for c in usable])
    smallest = np.where(reached, sizes[:, None], np.inf).min(axis=0)
    largest = np.where(reached, sizes[:, None], -np.inf).max(axis=0)
    win_n = sizes[winner]
    per_token = np.array([c.flops_per_token for c in usable])
    flops = np.exp(grid)
    return Envelope(
        flops=flops,
        loss=np.exp(table[winner, np.arange(grid.size)]),
        n=win_n,
        tokens=flops / per_token[winner],
        interior=(win_n > smallest) & (win_n < largest),
        n_curves=len(usable),
    )


def interior_points(env: Envelope, *, what: str, min_winners: int = 3) -> Envelope:
    """The interior part of an envelope; FitError if it has too few distinct winning sizes."""
    sel = env.interior
    winners = np.unique(env.n[sel]).size
    if winners < min_winners:
        raise FitError(
            f"{what}: {winners} distinct model size(s) win at interior FLOP counts "
            f"({int(sel.sum())} of {sel.size} grid points are interior); need {min_winners}. "
            "Train sizes on both sides of the compute-optimal size."
        )
    return Envelope(flops=env.flops[sel], loss=env.loss[sel], n=env.n[sel],
                    tokens=env.tokens[sel], interior=env.interior[sel], n_curves=env.n_curves)

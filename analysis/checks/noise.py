"""Run-to-run noise from seed replicates, and one point per cell for the fits.

Why: a scaling law can only be judged against how much a run's final loss moves when
nothing but the seed changes. Runs that are identical except the seed (same ``CELL_COLUMNS``)
form a *replicate group*; their pooled within-group standard deviation (``pooled_sigma``) is
the noise σ, except in a balanced design (below, where σ is net of a seed's offset):

    σ² = Σ_g Σ_i (L_gi − L̄_g)² / ν,   ν = Σ_g (n_g − 1) degrees of freedom,

with the exact 95% interval for normal errors, σ·sqrt(ν / χ²_ν(0.975)) to
σ·sqrt(ν / χ²_ν(0.025)). ``rel_sigma`` is the same pooled estimate on ln L, i.e. σ/L to first
order (the scale of Approach 3's residuals, which are fitted on log L).

**A seed's offset is not noise of the fitted points.** Every run of one draw (seed) may share
an offset: with `sampling: shuffled` a seed fixes one order of the training windows that all
its runs read from their start, so on a small corpus a seed's share of the text suits the
validation split better or worse (the CPU chinchilla study: seed 1 worse than seed 0 in 14 of
20 cells, by 0.016 nats, p = 0.006; docs/recipes.md). The model

    L_gi = μ_g + s_draw(i) + ε_gi   (a mean per cell, an offset per draw; least squares)

separates the offsets wherever a draw is in two replicate groups or more: ``net_sigma`` =
sqrt(RSS / ν), ν = runs − its rank, and ``draw_effect_p`` is the F test of the offsets against
none. Where every fitted point averages the same draws (a *balanced* design: each cell trained
under the same seeds), an offset moves all of them alike, so it is no scatter a law should
leave: σ is then ``net_sigma``. Otherwise (some cells average other seeds than others, e.g. a
second seed at one budget only) the fitted points differ by the offsets too, and σ stays the
within-cell spread ``pooled_sigma``, which counts them. Without offsets the two agree up to a
degree of freedom (the GPU study: 0.0195 against 0.0191).

The fits use it through ``collapse_replicates``: the runs of a group are averaged into one
point (mean loss over seeds) before any fit, so a cell with 3 seeds counts once, not three
times, and the bootstrap resamples cells, not seeds. The point keeps the run_id (and so
the training curve, for Approach 1) of its lowest seed, and records ``n_seeds`` and
``loss_std``: a point that averages n seeds has noise σ/√n (see ``analysis.checks.residuals``).

A run's draw is its pair (``seed``, ``data_seed``): with ``train.data_seed`` two runs of one
seed on other batches are two replicates (pipeline.vocab.spec; ``data_seed`` is the seed where a
sweep did not set it). Rows that share a cell *and* a draw are not replicates (e.g. published
data without a seed column, where every row has seed 0): they are neither averaged nor used
for σ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.sparse import bmat, coo_matrix, diags
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import spsolve
from scipy.stats import chi2
from scipy.stats import f as f_dist

from analysis.fits.results import Skipped
from analysis.numerics.bootstrap import LEVEL, Interval
from analysis.runs.table import RunsTable

CELL_COLUMNS = ("family", "n_layer", "d_model", "N", "D", "lr", "schedule", "budget",
                "unique_tokens")
"""Runs equal in all of these (numbers to 6 significant digits) differ only in the seed."""


def _text(value: object) -> str:
    """One key part: numbers to 6 significant digits (so float noise does not split a cell)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return f"{float(value):.6g}"
    return str(value)


def _texts(column: pd.Series) -> list[str]:
    """_text of every value of a column. A number column is formatted once per distinct value
    (by bit pattern, so -0.0 stays "-0"): 100,000 runs share a few thousand N, D and budgets,
    and Series.map on them took seconds a call (three calls a fit)."""
    if isinstance(column.dtype, np.dtype) and column.dtype.kind in "fiu":
        values = np.ascontiguousarray(column.to_numpy(dtype=float))
        _, first, inverse = np.unique(values.view(np.int64), return_index=True,
                                      return_inverse=True)
        texts = [_text(v) for v in values[first]]
        return [texts[i] for i in inverse.ravel()]
    return [_text(v) for v in column.to_numpy(dtype=object)]


def row_keys(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.Series:
    """One string per row joining its ``columns`` (a missing column counts as blank)."""
    blank = [""] * len(frame)
    parts = [_texts(frame[name]) if name in frame.columns else blank for name in columns]
    keys = ["|" + "|".join(row) for row in zip(*parts, strict=True)] if parts else blank
    return pd.Series(keys, index=frame.index, dtype=object)


def cell_keys(runs: RunsTable) -> pd.Series:
    """One string per run naming its cell (its CELL_COLUMNS values)."""
    # U: runs of one N and D that repeat different amounts of data are different cells.
    frame = runs.frame.assign(lr=runs.values("lr").to_numpy(),
                              schedule=runs.values("schedule").to_numpy(),
                              unique_tokens=runs.unique_tokens())
    return row_keys(frame, CELL_COLUMNS)


def draws(runs: RunsTable) -> np.ndarray:
    """Each run's (seed, data_seed) as one row of an (n, 2) integer array."""
    return np.column_stack([runs.values("seed").to_numpy(dtype=np.int64),
                            runs.values("data_seed").to_numpy(dtype=np.int64)])


def first_draw(pairs: np.ndarray, rows: np.ndarray) -> int:
    """The row of ``rows`` with the lowest seed (then the lowest data seed)."""
    sub = pairs[rows]
    return int(rows[np.lexsort((sub[:, 1], sub[:, 0]))[0]])


def replicate_groups(runs: RunsTable) -> list[np.ndarray]:
    """Row positions of each replicate group: ≥ 2 runs of one cell, all with distinct draws
    (seed, data_seed)."""
    if len(runs) == 0:
        return []
    pairs = draws(runs)
    cell = pd.factorize(cell_keys(runs).to_numpy())[0]  # numbered by first appearance
    order = np.argsort(cell, kind="stable")  # each cell's rows together, ascending
    size = np.bincount(cell)
    # Runs of a cell with distinct draws: as many (cell, seed, data_seed) as runs.
    distinct = np.bincount(np.unique(np.column_stack([cell, pairs]), axis=0)[:, 0],
                           minlength=size.size)
    cells = np.split(order, np.cumsum(size)[:-1])
    return [rows for rows, n, d in zip(cells, size, distinct, strict=True) if n >= 2 and d == n]


@dataclass(frozen=True)
class NoiseGroup:
    """One replicate group: the cell, its seeds and the spread of their final losses."""

    family: str
    N: float
    D: float
    budget: float
    schedule: str
    seeds: tuple[int, ...]
    run_ids: tuple[str, ...]
    mean_loss: float
    std_loss: float
    """Sample standard deviation (ddof 1) of the final losses."""
    data_seeds: tuple[int, ...] = ()
    """Each run's batch seed (its seed unless the sweep set ``train.data_seed``; -1 unknown)."""


@dataclass(frozen=True)
class NoiseEstimate:
    """The pooled run-to-run noise of the final loss, from every replicate group."""

    n_groups: int
    n_runs: int
    """Runs in replicate groups."""
    dof: int
    """Degrees of freedom of σ: ν = Σ (n_g − 1), or runs − rank of the offset model where σ
    is ``net_sigma``."""
    sigma: float
    """One run's noise in its final loss (nats/token): ``net_sigma`` in a balanced design,
    else the pooled within-group standard deviation (module docstring)."""
    sigma_ci: Interval
    """95% interval of σ from the χ² distribution with ν degrees of freedom."""
    rel_sigma: float
    """The same on ln L (≈ σ/L)."""
    rel_sigma_ci: Interval
    groups: tuple[NoiseGroup, ...]
    pooled_sigma: float | None = None
    """Pooled within-group standard deviation (nats/token), a draw's offset included."""
    pooled_dof: int | None = None
    pooled_rel_sigma: float | None = None
    """The within-cell spread on ln L: one run's scatter about its cell's seed average, its
    seed's offset included (the scale of a single held-out run's miss)."""
    net_sigma: float | None = None
    """Standard deviation net of an offset per draw (None: no offset separable)."""
    net_dof: int | None = None
    balanced: bool = False
    """Every fitted point averages the same draws: σ is then ``net_sigma`` (module docstring)."""
    draw_effect_dof: int = 0
    """Draw offsets the model separates from the cells (0: none)."""
    draw_effect_p: float | None = None
    """F test of the draw offsets against none (None when ``draw_effect_dof`` is 0)."""


def _chi2_interval(sd: float, dof: int, level: float = LEVEL) -> Interval:
    tail = (1.0 - level) / 2.0
    return Interval(float(sd * np.sqrt(dof / chi2.ppf(1.0 - tail, dof))),
                    float(sd * np.sqrt(dof / chi2.ppf(tail, dof))))


def estimate_noise(runs: RunsTable) -> NoiseEstimate | Skipped:
    """Pooled σ from the replicate groups of ``runs``; Skipped when there is none."""
    groups = replicate_groups(runs)
    if not groups:
        return Skipped("no seed replicates (no two runs differ only in the seed)")
    frame = runs.frame
    loss = runs.column("loss")
    pairs = draws(runs)
    # Columns as arrays: frame.iloc per group cost ~1 ms, 20 s for a 100,000-run CSV.
    schedule = runs.values("schedule").astype(str).to_numpy()
    family, run_id = frame["family"].to_numpy(dtype=object), frame["run_id"].to_numpy(object)
    n, d, budget = runs.column("N"), runs.column("D"), runs.column("budget")
    sum_sq = sum_sq_log = 0.0
    dof = 0
    out = []
    for rows in groups:
        values = loss[rows]
        sum_sq += float(np.sum((values - values.mean()) ** 2))
        logs = np.log(values)
        sum_sq_log += float(np.sum((logs - logs.mean()) ** 2))
        dof += rows.size - 1
        first = rows[0]
        out.append(NoiseGroup(
            family=str(family[first]), N=float(n[first]), D=float(d[first]),
            budget=float(budget[first]), schedule=str(schedule[first]),
            seeds=tuple(int(s) for s in pairs[rows, 0]),
            run_ids=tuple(str(r) for r in run_id[rows]),
            mean_loss=float(values.mean()), std_loss=float(values.std(ddof=1)),
            data_seeds=tuple(int(s) for s in pairs[rows, 1])))
    n_runs = int(sum(g.size for g in groups))
    pooled, pooled_rel = float(np.sqrt(sum_sq / dof)), float(np.sqrt(sum_sq_log / dof))
    rows = np.concatenate(groups)
    cell = np.repeat(np.arange(len(groups)), [g.size for g in groups])
    two_way = _draw_model(loss[rows], cell, pairs[rows])
    common = dict(n_groups=len(groups), n_runs=n_runs, groups=tuple(out), pooled_sigma=pooled,
                  pooled_dof=dof, pooled_rel_sigma=pooled_rel)
    if two_way is None:  # no offset separable from the cells
        return NoiseEstimate(dof=dof, sigma=pooled, sigma_ci=_chi2_interval(pooled, dof),
                             rel_sigma=pooled_rel, rel_sigma_ci=_chi2_interval(pooled_rel, dof),
                             **common)
    rss, net_dof, effect_dof = two_way
    net = float(np.sqrt(rss / net_dof))
    stat = ((sum_sq - rss) / effect_dof) / (rss / net_dof)
    offsets = dict(net_sigma=net, net_dof=net_dof, draw_effect_dof=effect_dof,
                   draw_effect_p=float(f_dist.sf(stat, effect_dof, net_dof)))
    if not _balanced(runs, pairs, groups):  # the fitted points differ by the offsets
        return NoiseEstimate(dof=dof, sigma=pooled, sigma_ci=_chi2_interval(pooled, dof),
                             rel_sigma=pooled_rel, rel_sigma_ci=_chi2_interval(pooled_rel, dof),
                             **common, **offsets)
    rel = float(np.sqrt(_draw_model(np.log(loss[rows]), cell, pairs[rows])[0] / net_dof))
    return NoiseEstimate(dof=net_dof, sigma=net, sigma_ci=_chi2_interval(net, net_dof),
                         rel_sigma=rel, rel_sigma_ci=_chi2_interval(rel, net_dof),
                         balanced=True, **common, **offsets)


def _balanced(runs: RunsTable, pairs: np.ndarray, groups: list[np.ndarray]) -> bool:
    """Every fitted point averages the same draws: each replicate group's, and each run outside
    one (a point of its own: collapse_replicates), give one and the same set of draws."""
    grouped = np.zeros(len(pairs), dtype=bool)
    sets = set()
    for rows in groups:
        grouped[rows] = True
        sets.add(frozenset(map(tuple, pairs[rows])))
    sets |= {frozenset([tuple(pair)]) for pair in pairs[~grouped]}
    return len(sets) == 1


def _draw_model(values: np.ndarray, group: np.ndarray,
                pairs: np.ndarray) -> tuple[float, int, int] | None:
    """Least squares of values on a mean per group plus an offset per draw: (residual sum of
    squares, its degrees of freedom, the offsets' degrees of freedom), or None when no draw
    offset is separable from the groups or no degree of freedom would be left.

    Solved without the (runs x (groups + draws)) design matrix, which grows as the square of
    the runs (a 100,000-run CSV of 10 seeds a cell: 8 GB, and hours of lstsq): its rank is
    groups + draws - the connected components of the graph joining each group to its draws
    (an offset added to a component's draws and taken from its groups' means changes no
    fitted value), and the offsets are the least squares of the values centred within their
    group on the draw indicators centred the same way (Frisch-Waugh-Lovell), whose normal
    equations are (draws x draws) and sparse; one offset per component is fixed at 0.
    """
    draw = np.unique(pairs, axis=0, return_inverse=True)[1].ravel()
    n_groups, n_draws = int(group.max()) + 1, int(draw.max()) + 1
    cross = coo_matrix((np.ones(values.size), (group, draw)),
                       shape=(n_groups, n_draws)).tocsr()  # runs of group g under draw d
    n_parts, part = connected_components(bmat([[None, cross], [cross.T, None]]),
                                         directed=False)
    rank = n_groups + n_draws - n_parts
    effect_dof, dof = rank - n_groups, values.size - rank
    if effect_dof <= 0 or dof <= 0:
        return None
    size = np.bincount(group, minlength=n_groups).astype(float)
    within = values - (np.bincount(group, values, n_groups) / size)[group]
    normal = (diags(np.bincount(draw, minlength=n_draws).astype(float))
              - cross.T @ diags(1.0 / size) @ cross).tocsc()
    free = np.ones(n_draws, dtype=bool)
    free[np.unique(part[n_groups:], return_index=True)[1]] = False  # one per component
    offset = np.zeros(n_draws)
    offset[free] = spsolve(normal[free][:, free], np.bincount(draw, within, n_draws)[free])
    fitted = offset[draw] - (np.bincount(group, offset[draw], n_groups) / size)[group]
    resid = within - fitted
    rss = float(resid @ resid)
    if rss <= 1e-12 * float(within @ within):  # the offsets explain every difference:
        return None                            # no noise left to estimate (rounding only)
    return rss, dof, effect_dof


NEAR_FACTOR = 2.0
"""A replicate group is "near the optimum" when its N is within this factor of its budget's
Approach 2 N_opt."""


@dataclass(frozen=True)
class NoiseSplit:
    """σ near each budget's optimum and further out: the noise is not the same everywhere.

    Runs far from the optimum at a fixed budget are the short ones (large N, few steps) or
    the capacity-bound ones (small N, many epochs); short runs in particular scatter more
    from seed to seed, so the pooled σ overstates the noise where N_opt is read.
    """

    factor: float
    near: float | None
    """Pooled σ of the groups within `factor` of their budget's N_opt (None: no such group)."""
    near_dof: int
    far: float | None
    far_dof: int
    n_over_n_opt: tuple[float, ...]
    """N / N_opt of each group of NoiseEstimate.groups (NaN: no interior minimum there)."""


def split_by_optimum(noise: NoiseEstimate, n_opt: dict[float, float],
                     factor: float = NEAR_FACTOR) -> NoiseSplit:
    """Pool the groups' variances separately near and away from N_opt (budget -> N_opt)."""
    ratio = tuple(g.N / n_opt[g.budget] if g.budget in n_opt else float("nan")
                  for g in noise.groups)
    sums = {True: [0.0, 0], False: [0.0, 0]}
    for g, r in zip(noise.groups, ratio, strict=True):
        if not np.isfinite(r):
            continue
        near = abs(np.log(r)) <= np.log(factor)
        sums[near][0] += g.std_loss ** 2 * (len(g.seeds) - 1)
        sums[near][1] += len(g.seeds) - 1

    def pooled(key: bool) -> float | None:
        total, dof = sums[key]
        return float(np.sqrt(total / dof)) if dof else None

    return NoiseSplit(factor=factor, near=pooled(True), near_dof=int(sums[True][1]),
                      far=pooled(False), far_dof=int(sums[False][1]), n_over_n_opt=ratio)


def collapse_replicates(runs: RunsTable) -> RunsTable:
    """One row per replicate group (mean loss and val_bpb over its seeds); others unchanged.

    Adds ``n_seeds`` (runs averaged into the row) and ``loss_std`` (their sample standard
    deviation; NaN for a single run). The row of a group is its lowest seed's row otherwise
    (run_id, C...): the runs of a cell share N, D and C by definition. Their curves are
    averaged under that run_id by collapse_curves.
    """
    frame = runs.frame.reset_index(drop=True)  # positions = labels below (a new frame)
    # Columns as arrays, set once at the end: a frame.loc assignment per group took ~7 ms
    # (pandas' indexers), 70 s for the 10,000 groups of a 100,000-run CSV.
    loss = frame["loss"].to_numpy(dtype=float)
    mean, n_seeds, loss_std = loss.copy(), np.ones(len(frame), dtype=np.int64), \
        np.full(len(frame), np.nan)
    has_bpb = "val_bpb" in frame.columns
    bpb = frame["val_bpb"].to_numpy(dtype=float) if has_bpb else np.full(len(frame), np.nan)
    mean_bpb, bpb_set = bpb.copy(), False
    drop: list[int] = []
    pairs = draws(runs)
    for rows in replicate_groups(runs):
        keep = first_draw(pairs, rows)
        values = loss[rows]
        mean[keep], n_seeds[keep] = float(values.mean()), rows.size
        loss_std[keep] = float(values.std(ddof=1))
        finite = bpb[rows][np.isfinite(bpb[rows])]
        if finite.size:
            mean_bpb[keep], bpb_set = float(np.mean(finite)), True
        drop.extend(int(r) for r in rows if r != keep)
    if drop:  # else the loss column as it was (its dtype too)
        frame["loss"] = mean
    frame["n_seeds"], frame["loss_std"] = n_seeds, loss_std
    if bpb_set:
        frame["val_bpb"] = mean_bpb
    if not drop:
        return runs.with_frame(frame)
    return runs.with_frame(frame.drop(index=drop).reset_index(drop=True))


def collapse_curves(runs: RunsTable, curves: pd.DataFrame | None) -> pd.DataFrame | None:
    """The eval curves with each replicate group's seeds averaged, as collapse_replicates
    averages their final losses: under the run_id of the row it keeps (the lowest seed's),
    the mean loss at each token count that every seed of the group evaluated (the runs of a
    cell share their eval schedule). Curves of other runs are unchanged. Without this, a
    cell's curve would be one seed's while its final loss is the mean of all of them."""
    if curves is None or curves.empty:
        return curves
    groups = replicate_groups(runs)
    if not groups:
        return curves
    ids = runs.frame["run_id"].astype(str).to_numpy()
    pairs = draws(runs)
    curves = curves.assign(run_id=curves["run_id"].astype(str))
    merged: set[str] = set()
    parts = []
    for rows in groups:
        members = set(ids[rows])
        sub = curves[curves["run_id"].isin(members)]
        seen = sub.groupby("tokens")["run_id"].nunique()
        common = sub[sub["tokens"].isin(seen.index[seen == len(members)])]
        mean = common.groupby("tokens", as_index=False).agg(step=("step", "first"),
                                                             loss=("loss", "mean"))
        mean["run_id"] = ids[first_draw(pairs, rows)]
        parts.append(mean.reindex(columns=curves.columns))
        merged |= members
    rest = curves[~curves["run_id"].isin(merged)]
    return pd.concat([rest, *parts], ignore_index=True)

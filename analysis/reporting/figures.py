"""The report's figures (seaborn styling on plain matplotlib Figures; PNG at 150 dpi).

Each ``*_figure`` function draws from an Analysis and the runs it was fitted to, and returns
a matplotlib Figure, or raises ``NoData`` with a one-line reason when the sweep lacks what
the figure needs (the report prints the reason instead of an empty plot). Every number
drawn comes from the same fitted objects that ``fit.json`` serialises, or from the same
public functions (``budget_minimum``, ``fit_parabola``, ``holdout_split``...) applied to the
same runs. Figures are ``matplotlib.figure.Figure`` objects, never pyplot state, so drawing
does not depend on (or change) the interactive backend; PNGs are written by the Agg canvas.

Conventions: log axes for N, D and C (units in the labels); colour-blind-safe colours
(seaborn "colorblind" for categories, viridis for model size, cividis for loss, flare for
more than 10 budgets).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from analysis.analyze import Analysis, Estimate, Skipped
from analysis.checks.extrapolation import ExtrapolationCheck, holdout_split
from analysis.checks.heldout import FrontierLaw, HoldoutCheck
from analysis.errors import FitError
from analysis.fits.approach2 import budget_minimum, fit_approach2, fit_parabola
from analysis.fits.approach3 import fit_approach3
from analysis.fits.envelope import build_curves, envelope, interior_points
from analysis.fits.kaplan import lower_frontier
from analysis.runs.table import RunsTable

DPI = 150
PALETTE = sns.color_palette("colorblind")
APPROACH_COLOR = {"3": PALETTE[0], "2": PALETTE[1], "1": PALETTE[2]}
APPROACH_NAME = {"3": "Approach 3 (parametric)", "2": "Approach 2 (IsoFLOP)",
                 "1": "Approach 1 (envelope)"}
REFERENCE_COLOR = "0.25"
HIGHLIGHT = PALETTE[3]  # vermillion
SIZE_CMAP = "viridis"
LOSS_CMAP = "cividis"
BUDGET_CMAP = "flare"
"""Budgets when there are more than the 10 categorical colours: light (small) to dark."""
CHINCHILLA_A = 0.50
KAPLAN_A = 0.73


class NoData(Exception):
    """The sweep has no data for this figure; the message says what is missing."""


@dataclass(frozen=True)
class Context:
    """What every figure draws from."""

    result: Analysis
    runs: RunsTable
    curves: pd.DataFrame | None

    @property
    def n_label(self) -> str:
        conv = self.runs.n_convention
        return ("parameters N (all, incl. embeddings)" if conv == "params_total"
                else f"parameters N ({conv})")

    @property
    def c_label(self) -> str:
        conv = self.runs.c_convention
        name = {"6nd": "6ND", "6nd (6·N·D)": "6ND"}.get(conv, conv)
        return f"training compute C (FLOPs, {name})"

    @property
    def loss_label(self) -> str:
        return "validation loss (nats/token)" if "data_corpus" in self.runs.frame.columns \
            else "loss (nats/token)"

    def budgets(self) -> np.ndarray:
        b = self.runs.column("budget")
        return np.unique(b[np.isfinite(b)])

    def budget_colors(self) -> dict[float, tuple]:
        """One colour per budget: "colorblind" up to its 10 colours; beyond, a sequential
        map in budget order (the categorical palette would repeat its first colour)."""
        labels = self.budgets()
        if len(labels) <= len(PALETTE):
            colors = PALETTE
        else:
            colors = sns.color_palette(BUDGET_CMAP, len(labels))
        return {float(b): colors[i] for i, b in enumerate(labels)}


def sci(x: float, digits: int = 2) -> str:
    """Mathtext like 2×10¹⁰ (``$2\\times10^{10}$``) for legends and annotations."""
    if not np.isfinite(x) or x <= 0:
        return f"{x:.{digits}g}"
    exp = int(np.floor(np.log10(x)))
    mant = x / 10**exp
    if round(mant, digits - 1) >= 10:
        mant, exp = mant / 10, exp + 1
    text = f"{mant:.{digits - 1}f}".rstrip("0").rstrip(".")
    return rf"${text}\times10^{{{exp}}}$" if text != "1" else rf"$10^{{{exp}}}$"


def _figure(width: float, height: float, ncols: int = 1) -> tuple[Figure, list]:
    fig = Figure(figsize=(width, height), layout="constrained", dpi=DPI)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _styled(draw: Callable[[Context], Figure]) -> Callable[[Context], Figure]:
    """Draw under seaborn's whitegrid style and a compact notebook context."""
    @functools.wraps(draw)
    def inner(ctx: Context) -> Figure:
        with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.9):
            return draw(ctx)
    return inner


def _size_norm(runs: RunsTable) -> LogNorm:
    n = runs.column("N")
    lo, hi = float(n.min()), float(n.max())
    return LogNorm(vmin=lo / 1.05, vmax=hi * 1.05) if hi > lo else LogNorm(lo / 2, hi * 2)


MIN_BAND_FRACTION = 0.5
"""Draw a bootstrap band only when at least this share of the resamples could be fitted."""


def _power_band(est: Estimate, exponent: str, value: str, flops: np.ndarray,
                reference: float) -> tuple[np.ndarray, np.ndarray] | str:
    """95% band of value(C) = value(ref)·(C/ref)^exponent over bootstrap resamples, or why
    there is none.

    For Approaches 1-3 this is exact: N_opt and D_opt are power laws in C, and each resample
    records its exponent and its value at the reference compute."""
    boot = est.bootstrap
    if boot is None or exponent not in boot.samples or value not in boot.samples:
        return "no bootstrap"
    fitted = boot.n_resamples - boot.n_failed
    if fitted < max(10, MIN_BAND_FRACTION * boot.n_resamples):
        return f"no band: {fitted} of {boot.n_resamples} resamples fitted"
    e = np.asarray(boot.samples[exponent], dtype=float)
    v = np.asarray(boot.samples[value], dtype=float)
    ok = np.isfinite(e) & np.isfinite(v) & (v > 0)
    curves = v[ok, None] * np.power(flops[None, :] / reference, e[ok, None])
    low, high = np.percentile(curves, [2.5, 97.5], axis=0)
    return low, high


# --------------------------------------------------------------------------- IsoFLOP


@_styled
def isoflop_figure(ctx: Context) -> Figure:
    """Loss against N per budget, the fitted parabolas and their minima (Approach 2)."""
    labels = ctx.budgets()
    if labels.size == 0:
        raise NoData("the runs share no IsoFLOP compute budgets (no IsoFLOP curves to draw)")
    est = ctx.result.approach2
    fitted = {m.budget: m for m in est.fit.budgets} if isinstance(est, Estimate) else {}
    colors = ctx.budget_colors()
    fig, (ax,) = _figure(8.0, 5.0)
    n, d, c, loss, budget = (ctx.runs.column(k) for k in ("N", "D", "C", "loss", "budget"))
    handles = []
    any_flagged = False
    for label in labels:
        sel = budget == label
        color = colors[float(label)]
        m = fitted.get(float(label)) or budget_minimum(label, n[sel], d[sel], c[sel], loss[sel])
        ax.scatter(n[sel], loss[sel], color=color, s=34, edgecolor="white", linewidth=0.6,
                   zorder=3)
        if m.n_sizes >= 3:
            parabola = fit_parabola(n[sel], loss[sel])
            grid = np.geomspace(n[sel].min() / 1.15, n[sel].max() * 1.15, 120)
            ax.plot(grid, parabola(grid), color=color, lw=1.6, ls="-" if m.ok else "--",
                    zorder=2)
        if m.ok:
            ax.plot(m.n_opt, m.loss_opt, marker="*", ms=15, mfc=color, mec="black", mew=0.8,
                    ls="none", zorder=4)
        any_flagged |= not m.ok
        handles.append(Line2D([], [], color=color, marker="o", lw=1.6,
                              ls="-" if m.ok else "--", label=sci(label)))
    ax.set_xscale("log")
    _minor_labels(ax.xaxis)
    ax.set_xlabel(ctx.n_label)
    ax.set_ylabel(ctx.loss_label)
    ax.set_title("IsoFLOP profiles: loss against model size at fixed compute")
    extra = [Line2D([], [], marker="*", ms=12, mfc="white", mec="black", ls="none",
                    label="parabola minimum (N_opt)")]
    if any_flagged:
        extra.append(Line2D([], [], color="0.4", ls="--", label="no interior minimum:\nnot used"))
    first = ax.legend(handles=handles, title="budget C (FLOPs)", loc="upper left",
                      bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.add_artist(first)
    ax.legend(handles=extra, loc="lower left", bbox_to_anchor=(1.01, 0.0), frameon=False)
    return fig


# --------------------------------------------------------------------------- frontier


@_styled
def frontier_figure(ctx: Context) -> Figure:
    """Final loss against compute, training curves underneath, and Approach 3's L_opt(C)."""
    runs = ctx.runs
    n, c, loss = runs.column("N"), runs.column("C"), runs.column("loss")
    norm = _size_norm(runs)
    cmap = sns.color_palette(SIZE_CMAP, as_cmap=True)
    fig, (ax,) = _figure(8.0, 5.0)
    curves = [cv for cv in build_curves(runs, ctx.curves) if cv is not None]
    lo = c.min()
    for cv in curves:
        flops = cv.tokens * cv.flops_per_token
        lo = min(lo, flops.min())
        ax.plot(flops, cv.loss, color=cmap(norm(cv.n)), lw=0.9, alpha=0.55, zorder=1)
    ax.scatter(c, loss, c=n, cmap=cmap, norm=norm, s=34, edgecolor="black", linewidth=0.5,
               zorder=3)
    handles = [Line2D([], [], marker="o", ms=6, mfc="0.6", mec="black", ls="none",
                      label="final loss of each run (colour: N)")]
    if len(curves) >= 2:
        try:
            env = envelope(curves)
        except FitError:
            env = None
        if env is not None:  # lowest loss reached with at most C: a monotone frontier
            handles += ax.plot(env.flops, np.minimum.accumulate(env.loss), color="black",
                               lw=1.4, zorder=2, label="lowest loss reached with ≤ C")
    held = ctx.result.holdout
    top = c.max() * 2.0
    if isinstance(held, HoldoutCheck):  # never fitted: the predictions are checked on them
        hc = np.array([r.C for r in held.rows])
        top = max(top, hc.max() * 1.3)
        handles.append(ax.scatter(hc, [r.loss for r in held.rows], marker="*", s=220,
                                  color="white", edgecolor="black", linewidth=1.2, zorder=6,
                                  label="held-out run (never fitted)"))
        if isinstance(held.frontier, FrontierLaw):
            grid = np.geomspace(lo, top, 200)
            handles += ax.plot(grid, held.frontier(grid), color="0.35", lw=1.2, ls=":",
                               zorder=4, label="power law through the IsoFLOP minima")
    a3 = ctx.result.approach3
    if isinstance(a3, Estimate):
        grid = np.geomspace(lo, top, 200)
        handles += ax.plot(grid, a3.fit.optimal_loss(grid), color=HIGHLIGHT, lw=2.0, ls="--",
                           zorder=4, label="Approach 3 fit: L(N_opt(C), D_opt(C))")
    _log_axes(ax, loss_y=True)
    ax.set_xlabel(ctx.c_label)
    ax.set_ylabel(ctx.loss_label)
    title = "Compute frontier" + (": final losses over training curves" if curves
                                  else ": final losses (no training curves)")
    ax.set_title(title)
    ax.legend(handles=handles, loc="upper right", frameon=True, fontsize="small")
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=ctx.n_label, pad=0.01)
    return fig


def _log_axes(ax, *, loss_y: bool = False) -> None:
    """Log x and y; minor ticks labelled where the span is short (so every panel has a few
    labelled ticks, never crowded ones); a loss y axis gets plain decimal labels."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    _minor_labels(ax.xaxis)
    if loss_y:
        _plain_log_ticks(ax)
    else:
        _minor_labels(ax.yaxis)


def _minor_labels(axis) -> None:
    """Label minor ticks of a log axis: 2 and 5 when it spans up to 2.5 decades, also 3 when
    it spans up to one; none beyond (the decades are labelled)."""
    from matplotlib.ticker import FuncFormatter

    def label(value: float, _pos: int) -> str:
        lo, hi = sorted(axis.get_view_interval())
        span = np.log10(hi / lo) if lo > 0 else np.inf
        mantissa = round(value / 10 ** np.floor(np.log10(value)))
        wanted = (2, 3, 5) if span <= 1.0 else (2, 5) if span <= 2.5 else ()
        return sci(value, 1) if mantissa in wanted else ""

    axis.set_minor_formatter(FuncFormatter(label))


def _plain_log_ticks(ax) -> None:
    """Plain decimal tick labels on a log loss axis that spans less than a decade."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0)))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=np.arange(1.0, 10.0, 0.5)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


# --------------------------------------------------------------------------- allocation


def _fitted(ctx: Context) -> list[tuple[str, Estimate]]:
    out = []
    for name, est in (("3", ctx.result.approach3), ("2", ctx.result.approach2),
                      ("1", ctx.result.approach1)):
        if isinstance(est, Estimate):
            out.append((name, est))
    return out


def anchor_flops(ctx: Context) -> float:
    """Where the documented slopes are anchored: our middle budget (else the middle C)."""
    est = ctx.result.approach2
    if isinstance(est, Estimate):
        used = sorted(m.flops for m in est.fit.budgets if m.ok)
        return float(used[len(used) // 2])
    labels = ctx.budgets()
    if labels.size:
        sel = ctx.runs.column("budget") == labels[labels.size // 2]
        return float(np.exp(np.mean(np.log(ctx.runs.column("C")[sel]))))
    c = ctx.runs.column("C")
    return float(np.sqrt(c.min() * c.max()))


@_styled
def allocation_figure(ctx: Context) -> Figure:
    """N_opt(C) and D_opt(C) of every fitted approach with 95% bootstrap bands, and the
    slopes of Chinchilla and Kaplan anchored at our primary fit's middle budget."""
    fitted = _fitted(ctx)
    if not fitted:
        raise NoData("no approach could be fitted, so there is no compute-optimal allocation")
    c = ctx.runs.column("C")
    grid = np.geomspace(c.min() / 2.0, c.max() * 2.0, 120)
    ref = ctx.result.reference_flops
    fig, (ax_n, ax_d) = _figure(11.5, 5.2, ncols=2)
    banded = False
    for name, est in fitted:
        color = APPROACH_COLOR[name]
        for ax, exp, value, law in ((ax_n, "a", "n_opt", est.fit.n_opt),
                                    (ax_d, "b", "d_opt", est.fit.d_opt)):
            band = _power_band(est, exp, value, grid, ref)
            label = f"{APPROACH_NAME[name]}: {exp} = {est.point[exp]:.3f}"
            if isinstance(band, str):
                label += f"\n({band})"
            else:
                ax.fill_between(grid, *band, color=color, alpha=0.18, lw=0)
                banded = True
            ax.plot(grid, law(grid), color=color, lw=2.0, label=label)
    a2 = ctx.result.approach2
    if isinstance(a2, Estimate):
        ok = [m for m in a2.fit.budgets if m.ok]
        for ax, attr in ((ax_n, "n_opt"), (ax_d, "d_opt")):
            ax.scatter([m.flops for m in ok], [getattr(m, attr) for m in ok], s=46,
                       color=APPROACH_COLOR["2"], edgecolor="black", zorder=4,
                       label="IsoFLOP parabola minima")
    a1 = ctx.result.approach1
    if isinstance(a1, Estimate):
        env = a1.fit.envelope
        ax_n.scatter(env.flops, env.n, s=12, color=APPROACH_COLOR["1"], zorder=3,
                     label="envelope winners (Approach 1)")
        ax_d.scatter(env.flops, env.tokens, s=12, color=APPROACH_COLOR["1"], zorder=3,
                     label="envelope winners (Approach 1)")
    primary = fitted[0][1]
    anchor = anchor_flops(ctx)
    for ax, law, slopes in ((ax_n, primary.fit.n_opt, (CHINCHILLA_A, KAPLAN_A)),
                            (ax_d, primary.fit.d_opt, (1 - CHINCHILLA_A, 1 - KAPLAN_A))):
        y0 = float(law(anchor))
        ax.plot(grid, y0 * (grid / anchor) ** slopes[0], color=REFERENCE_COLOR, ls=":",
                lw=1.6, label=rf"Chinchilla slope $\propto C^{{{slopes[0]:.2f}}}$")
        ax.plot(grid, y0 * (grid / anchor) ** slopes[1], color=REFERENCE_COLOR, ls="-.",
                lw=1.3, label=rf"Kaplan slope $\propto C^{{{slopes[1]:.2f}}}$")
        ax.axvline(anchor, color=REFERENCE_COLOR, lw=0.9, ls=(0, (6, 3)), zorder=1.5,
                   label="anchor: our middle budget" if ctx.budgets().size
                   else "anchor: middle of our C range")
        _log_axes(ax)
        ax.set_xlabel(ctx.c_label)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False,
                  fontsize="small")
    ax_n.set_ylabel("compute-optimal parameters N_opt")
    ax_d.set_ylabel("compute-optimal training tokens D_opt")
    bands = " with 95% bootstrap bands" if banded else ""
    ax_n.set_title(f"N_opt(C){bands}")
    ax_d.set_title(f"D_opt(C){bands}")
    return fig


# --------------------------------------------------------------------------- Kaplan


@_styled
def kaplan_figure(ctx: Context) -> Figure:
    """L(N), L(D) (lower frontier of final losses) and L(C_min) (envelope), as fitted."""
    est = ctx.result.kaplan
    if isinstance(est, Skipped):
        raise NoData(f"Kaplan laws not fitted: {est.reason}")
    fit = est.fit
    n_k, _, _ = ctx.runs.kaplan_n_c()
    loss = ctx.runs.column("loss")
    n_name = ("non-embedding parameters N" if ctx.runs.has_kaplan_conventions
              else ctx.n_label)
    panels = []
    if fit.l_of_n is not None:
        panels.append(("L(N)", n_k, fit.l_of_n, n_name, "N"))
    if fit.l_of_d is not None:
        panels.append(("L(D)", ctx.runs.column("D"), fit.l_of_d, "training tokens D", "D"))
    env = None
    if fit.l_of_c is not None:
        try:
            env = interior_points(envelope(build_curves(ctx.runs, ctx.curves, kaplan=True)),
                                  what="Kaplan L(C)")
            c_name = ("compute C (FLOPs, 6·N_non-emb·D)" if ctx.runs.has_kaplan_conventions
                      else ctx.c_label)
            panels.append(("L(C_min)", env.flops, fit.l_of_c, c_name, "C"))
        except FitError:
            env = None
    if not panels:
        raise NoData("neither L(N), L(D) nor L(C) could be fitted: "
                     + "; ".join(f"{k}: {v}" for k, v in fit.skipped.items()))
    fig, axes = _figure(4.3 * len(panels) + 0.6, 4.6, ncols=len(panels))
    for ax, (title, x, law, xlabel, sym) in zip(axes, panels, strict=True):
        if sym == "C" and env is not None:
            ax.scatter(env.flops, env.loss, s=16, color=APPROACH_COLOR["2"], zorder=3,
                       label="envelope points (fitted)")
            xs = env.flops
        else:
            ax.scatter(x, loss, s=18, color="0.7", zorder=2, label="all runs")
            fx, fl = lower_frontier(x, loss)
            ax.scatter(fx, fl, s=34, color=APPROACH_COLOR["2"], edgecolor="black",
                       zorder=3, label="lower frontier (fitted)")
            xs = x
        grid = np.geomspace(xs.min() / 1.3, xs.max() * 1.3, 100)
        ax.plot(grid, law(grid), color=HIGHLIGHT, lw=2.0, zorder=4,
                label=rf"$({sym}_c/{sym})^{{\alpha}}$, $\alpha$ = {law.alpha:.3f}")
        _log_axes(ax, loss_y=True)
        ax.set_xlabel(xlabel)
        ax.set_title(f"Kaplan {title}")
        ax.legend(loc="lower left", fontsize="small")  # falling laws leave it empty
    axes[0].set_ylabel(ctx.loss_label)
    return fig


# --------------------------------------------------------------------------- Approach 3


@_styled
def approach3_figure(ctx: Context) -> Figure:
    """Iso-loss contours of L(N, D) with the compute-optimal frontier and the runs; and
    predicted against observed loss."""
    est = ctx.result.approach3
    if isinstance(est, Skipped):
        raise NoData(f"Approach 3 not fitted: {est.reason}")
    fit = est.fit
    n, d, loss = (ctx.runs.column(k) for k in ("N", "D", "loss"))
    fig, (ax, ax_r) = _figure(12.5, 5.2, ncols=2)
    ng = np.geomspace(n.min() / 3, n.max() * 3, 220)
    dg = np.geomspace(d.min() / 3, d.max() * 3, 220)
    nn, dd = np.meshgrid(ng, dg)
    surface = fit.loss(nn, dd)
    top = min(float(surface.max()), float(loss.max()) * 1.25)
    levels = MaxNLocator(nbins=14).tick_values(float(surface.min()), top)
    filled = ax.contourf(nn, dd, surface, levels=levels, cmap=LOSS_CMAP, extend="max")
    ax.contour(nn, dd, surface, levels=levels, colors="white", linewidths=0.4, alpha=0.7)
    fig.colorbar(filled, ax=ax, label="predicted loss L(N, D) (nats/token)", pad=0.01)
    for budget in _compute_levels(ctx):
        ax.plot(ng, budget / (6.0 * ng), color="white", ls=":", lw=0.9)
    cg = np.geomspace(6 * ng[0] * dg[0], 6 * ng[-1] * dg[-1], 300)
    ax.plot(fit.n_opt(cg), fit.d_opt(cg), color=HIGHLIGHT, lw=2.4,
            label=f"compute-optimal frontier (a = {fit.a:.3f})")
    ax.scatter(n, d, s=22, color="white", edgecolor="black", linewidth=0.7, zorder=4,
               label="runs")
    _log_axes(ax)
    ax.set_xlim(ng[0], ng[-1])
    ax.set_ylim(dg[0], dg[-1])
    ax.set_xlabel(ctx.n_label)
    ax.set_ylabel("training tokens D")
    ax.set_title(r"$L = E + A/N^{\alpha} + B/D^{\beta}$: iso-loss contours")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False,
              fontsize="small")

    predicted = fit.loss(n, d)
    norm = _size_norm(ctx.runs)
    cmap = sns.color_palette(SIZE_CMAP, as_cmap=True)
    ax_r.scatter(loss, predicted, c=n, cmap=cmap, norm=norm, s=30, edgecolor="black",
                 linewidth=0.4, zorder=3)
    lims = [min(loss.min(), predicted.min()) * 0.98, max(loss.max(), predicted.max()) * 1.02]
    ax_r.plot(lims, lims, color="0.3", lw=1.0, ls="--", label="predicted = observed")
    ax_r.set_xlim(lims)
    ax_r.set_ylim(lims)
    rms = float(np.sqrt(np.mean((np.log(predicted) - np.log(loss)) ** 2)))
    ax_r.text(0.03, 0.97, f"{len(loss)} runs; RMS of ln(pred/obs) = {rms:.2%}",
              transform=ax_r.transAxes, va="top", fontsize="small",
              bbox={"facecolor": "white", "edgecolor": "0.8", "alpha": 0.9})
    ax_r.set_xlabel(f"observed {ctx.loss_label}")
    ax_r.set_ylabel(f"predicted {ctx.loss_label}")
    ax_r.set_title("Residuals: predicted against observed")
    ax_r.legend(loc="lower right", fontsize="small")
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax_r, label=ctx.n_label, pad=0.01)
    return fig


def _compute_levels(ctx: Context) -> list[float]:
    """IsoFLOP lines to draw: each budget's mean C (at most 8, else none)."""
    labels = ctx.budgets()
    if labels.size == 0 or labels.size > 8:
        return []
    c, budget = ctx.runs.column("C"), ctx.runs.column("budget")
    return [float(np.exp(np.mean(np.log(c[budget == b])))) for b in labels]


# --------------------------------------------------------------------------- extrapolation


@_styled
def extrapolation_figure(ctx: Context) -> Figure:
    """Refit without the largest compute: predicted against observed loss of the held-out
    runs (Approach 3), and N_opt at the held-out compute (Approaches 2 and 3)."""
    checks = {k: v for k, v in ctx.result.extrapolation.items()
              if isinstance(v, ExtrapolationCheck)}
    if not checks:
        reasons = "; ".join(f"Approach {k}: {v.reason}" for k, v in
                            ctx.result.extrapolation.items()) or "no approach was fitted"
        raise NoData(f"no extrapolation check could be made ({reasons})")
    runs = ctx.runs
    split = holdout_split(runs)
    train, held = split.train, ~split.train
    n, d, c, loss, budget = (runs.column(k) for k in ("N", "D", "C", "loss", "budget"))
    panels = 2 if "3" in checks else 1
    fig, axes = _figure(6.0 * panels + 0.5, 5.0, ncols=panels)
    ax_n = axes[-1]
    refit3 = None
    if "3" in checks:
        ax = axes[0]
        chk = checks["3"]
        refit3 = fit_approach3(n[train], d[train], loss[train])
        pred = refit3.loss(n, d)
        ax.scatter(loss[train], pred[train], s=22, color="0.65", zorder=2,
                   label=f"fitted runs ({int(train.sum())})")
        ax.scatter(loss[held], pred[held], s=48, color=HIGHLIGHT, edgecolor="black",
                   zorder=3, label=f"held out ({int(held.sum())})")
        lims = [min(loss.min(), pred.min()) * 0.98, max(loss.max(), pred.max()) * 1.02]
        ax.plot(lims, lims, color="0.3", ls="--", lw=1.0, label="predicted = observed")
        ax.set_xlim(lims)
        ax.set_ylim(lims)
        ax.text(0.03, 0.97, f"held-out |error|: mean {chk.loss_mean_abs_rel_error:.2%}, "
                            f"max {chk.loss_max_abs_rel_error:.2%}",
                transform=ax.transAxes, va="top", fontsize="small",
                bbox={"facecolor": "white", "edgecolor": "0.8", "alpha": 0.9})
        ax.set_xlabel(f"observed {ctx.loss_label}")
        ax.set_ylabel(f"predicted {ctx.loss_label}")
        ax.set_title("Approach 3 refit without the largest compute")
        ax.legend(loc="lower right", fontsize="small")
    # N_opt: the refits' laws extended to the held-out compute, against the reference.
    grid = np.geomspace(c.min() / 1.5, c.max() * 1.5, 100)
    labels = np.unique(budget[train & np.isfinite(budget)])
    minima = [budget_minimum(b, *(col[budget == b] for col in (n, d, c, loss)))
              for b in labels]
    ok = [m for m in minima if m.ok]
    if ok:
        ax_n.scatter([m.flops for m in ok], [m.n_opt for m in ok], s=40,
                     color=APPROACH_COLOR["2"], edgecolor="black", zorder=3,
                     label="parabola minima of the fitted budgets")
    if "2" in checks:
        refit2 = fit_approach2(*(col[train] for col in (n, d, c, loss, budget)))
        ax_n.plot(grid, refit2.n_opt(grid), color=APPROACH_COLOR["2"], lw=1.8,
                  label=f"Approach 2 refit (a = {refit2.a:.3f})")
        ax_n.plot(checks["2"].flops, checks["2"].n_opt_predicted, marker="X", ms=10,
                  color=APPROACH_COLOR["2"], mec="black", ls="none", zorder=5)
    if refit3 is not None:
        ax_n.plot(grid, refit3.n_opt(grid), color=APPROACH_COLOR["3"], lw=1.8,
                  label=f"Approach 3 refit (a = {refit3.a:.3f})")
        ax_n.plot(checks["3"].flops, checks["3"].n_opt_predicted, marker="X", ms=10,
                  color=APPROACH_COLOR["3"], mec="black", ls="none", zorder=5)
    chk = next(iter(checks.values()))
    full = ctx.result.approach3
    if chk.n_opt_reference_kind == "full-data fit" and isinstance(full, Estimate):
        ax_n.plot(grid, full.fit.n_opt(grid), color=REFERENCE_COLOR, lw=1.2, ls="--",
                  label=f"Approach 3 on all runs (a = {full.fit.a:.3f})")
    ax_n.plot(chk.flops, chk.n_opt_reference, marker="*", ms=17, color=HIGHLIGHT, mec="black",
              ls="none", zorder=6, label=f"reference: {chk.n_opt_reference_kind}")
    ax_n.plot([], [], marker="X", ms=8, color="0.5", mec="black", ls="none",
              label="refit's prediction at the held-out C")
    ax_n.axvspan(c[held].min() / 1.05, c[held].max() * 1.05, color="0.9", zorder=0)
    _log_axes(ax_n)
    ax_n.set_xlabel(ctx.c_label)
    ax_n.set_ylabel("compute-optimal parameters N_opt")
    ax_n.set_title("N_opt at the held-out compute (shaded)")
    ax_n.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=1, frameon=False,
                fontsize="small")
    return fig


# --------------------------------------------------------------------------- all


@dataclass(frozen=True)
class Drawn:
    """One figure of the report: its file, or why it was not drawn."""

    name: str
    path: Path | None
    missing: str | None = None


FIGURE_NAMES = ("isoflop", "frontier", "allocation", "kaplan", "approach3", "extrapolation")


def draw_all(ctx: Context, folder: Path) -> dict[str, Drawn]:
    """Draw every figure into ``folder`` (PNG, DPI); NoData becomes a ``missing`` reason.

    Any other exception propagates: a figure that fails for a reason other than missing
    data is a bug, and the report must fail rather than be written without it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, Drawn] = {}
    for name in FIGURE_NAMES:
        draw = globals()[f"{name}_figure"]  # looked up at call time (tests replace them)
        try:
            fig = draw(ctx)
        except NoData as why:
            out[name] = Drawn(name, None, str(why))
            continue
        path = folder / f"{name}.png"
        fig.savefig(path, dpi=DPI, format="png", metadata={"Software": None})
        out[name] = Drawn(name, path)
    return out

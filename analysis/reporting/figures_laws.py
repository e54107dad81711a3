"""The report's figures of the laws and their checks: Kaplan's laws, Approach 3's loss
surface, and the extrapolation check (from the refits ``analysis.checks.extrapolation`` made)."""

from __future__ import annotations

import numpy as np
import seaborn as sns
from matplotlib.cm import ScalarMappable
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from analysis.analyze import Estimate, Skipped
from analysis.checks.extrapolation import ExtrapolationCheck, holdout_split
from analysis.errors import FitError
from analysis.fits.approach2 import budget_minimum
from analysis.fits.envelope import build_curves, envelope, interior_points
from analysis.fits.kaplan import lower_frontier
from analysis.fits.optimum import lines_from_runs, n_opt_along
from analysis.reporting.figure_style import (
    APPROACH_COLOR,
    HIGHLIGHT,
    LOSS_CMAP,
    REFERENCE_COLOR,
    SIZE_CMAP,
    Context,
    NoData,
    _figure,
    _log_axes,
    _size_norm,
    _styled,
)

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
        panels.append(("L(D)", ctx.runs.column("D"), fit.l_of_d,
                       f"training {ctx.runs.data_unit} D", "D"))
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
    fig.colorbar(filled, ax=ax, label=f"predicted loss L(N, D) ({ctx.runs.loss_unit})", pad=0.01)
    per_unit = ctx.runs.tokens_per_unit  # vit: C = 6·N·S·D, D in images
    for budget in _compute_levels(ctx):
        ax.plot(ng, budget / (6.0 * per_unit * ng), color="white", ls=":", lw=0.9)
    cg = np.geomspace(6 * ng[0] * dg[0], 6 * ng[-1] * dg[-1], 300)
    ax.plot(fit.n_opt(cg), fit.d_opt(cg), color=HIGHLIGHT, lw=2.4,
            label=f"compute-optimal frontier (a = {fit.a:.3f})")
    ax.scatter(n, d, s=22, color="white", edgecolor="black", linewidth=0.7, zorder=4,
               label="runs")
    _log_axes(ax)
    ax.set_xlim(ng[0], ng[-1])
    ax.set_ylim(dg[0], dg[-1])
    ax.set_xlabel(ctx.n_label)
    ax.set_ylabel(f"training {ctx.runs.data_unit} D")
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
    runs (Approach 3), and N_opt at the held-out compute (Approaches 2 and 3). The refits
    are the ones the check made (``ExtrapolationCheck.refit``), on the same fitted runs."""
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
        refit3 = chk.refit
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
        refit2 = checks["2"].refit
        ax_n.plot(grid, refit2.n_opt(grid), color=APPROACH_COLOR["2"], lw=1.8,
                  label=f"Approach 2 refit (a = {refit2.a:.3f})")
        ax_n.plot(checks["2"].flops, checks["2"].n_opt_predicted, marker="X", ms=10,
                  color=APPROACH_COLOR["2"], mec="black", ls="none", zorder=5)
    # Approach 3's N_opt is its law minimised along the sweep's IsoFLOP lines, as the check
    # and every allocation compute it (not the 6ND closed form, off on exact-FLOP sweeps).
    lines = lines_from_runs(runs)
    if refit3 is not None:
        ax_n.plot(grid, [n_opt_along(refit3.log_loss, lines, x)[0] for x in grid],
                  color=APPROACH_COLOR["3"], lw=1.8,
                  label="Approach 3 refit (minimised along the IsoFLOP lines)")
        ax_n.plot(checks["3"].flops, checks["3"].n_opt_predicted, marker="X", ms=10,
                  color=APPROACH_COLOR["3"], mec="black", ls="none", zorder=5)
    chk = next(iter(checks.values()))
    full = ctx.result.approach3
    if chk.n_opt_reference_kind == "full-data fit" and isinstance(full, Estimate):
        ax_n.plot(grid, [n_opt_along(full.fit.log_loss, lines, x)[0] for x in grid],
                  color=REFERENCE_COLOR, lw=1.2, ls="--", label="Approach 3 on all runs")
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



"""The report's allocation figures: IsoFLOP parabolas, the loss frontier, N_opt and D_opt
against compute (one per fitted approach)."""

from __future__ import annotations

import numpy as np
import seaborn as sns
from matplotlib.cm import ScalarMappable
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis.analyze import Estimate
from analysis.checks.heldout import FrontierLaw, HoldoutCheck
from analysis.errors import FitError
from analysis.fits.approach2 import budget_minimum, fit_parabola
from analysis.fits.envelope import build_curves, envelope
from analysis.reporting.figure_style import (
    APPROACH_COLOR,
    APPROACH_NAME,
    CHINCHILLA_A,
    HIGHLIGHT,
    KAPLAN_A,
    REFERENCE_COLOR,
    SIZE_CMAP,
    Context,
    NoData,
    _figure,
    _log_axes,
    _minor_labels,
    _power_band,
    _size_norm,
    _styled,
    sci,
)

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



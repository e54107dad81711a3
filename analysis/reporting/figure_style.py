"""What every report figure shares: the context it draws from (``Context``), ``NoData``,
the colours and the axis helpers.

Conventions: log axes for N, D and C (units in the labels); colour-blind-safe colours
(seaborn "colorblind" for categories, viridis for model size, cividis for loss, flare for
more than 10 budgets).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from analysis.analyze import Analysis, Estimate
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
        unit = self.runs.loss_unit
        return f"validation loss ({unit})" if "data_corpus" in self.runs.frame.columns \
            else f"loss ({unit})"

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



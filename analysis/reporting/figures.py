"""The report's figures (seaborn styling on plain matplotlib Figures; PNG at 150 dpi).

Each ``*_figure`` function draws from an Analysis and the runs it was fitted to, and returns
a matplotlib Figure, or raises ``NoData`` with a one-line reason when the sweep lacks what
the figure needs (the report prints the reason instead of an empty plot). Every number
drawn comes from the same fitted objects that ``fit.json`` serialises, or from the same
public functions (``budget_minimum``, ``fit_parabola``, ``holdout_split``...) applied to the
same runs. Figures are ``matplotlib.figure.Figure`` objects, never pyplot state, so drawing
does not depend on (or change) the interactive backend; PNGs are written by the Agg canvas.

Split by kind: ``figure_style`` (context, colours, axes), ``figures_allocation``
(IsoFLOP, frontier, allocation), ``figures_laws`` (Kaplan, Approach 3, extrapolation).

Conventions: log axes for N, D and C (units in the labels); colour-blind-safe colours
(seaborn "colorblind" for categories, viridis for model size, cividis for loss, flare for
more than 10 budgets).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from analysis.reporting.figure_style import CHINCHILLA_A, DPI, KAPLAN_A, Context, NoData
from analysis.reporting.figures_allocation import (
    allocation_figure,
    anchor_flops,
    frontier_figure,
    isoflop_figure,
)
from analysis.reporting.figures_laws import approach3_figure, extrapolation_figure, kaplan_figure

__all__ = ["CHINCHILLA_A", "FIGURE_NAMES", "KAPLAN_A", "Context", "Drawn", "NoData",
           "allocation_figure", "anchor_flops", "approach3_figure", "draw_all",
           "extrapolation_figure", "frontier_figure", "isoflop_figure", "kaplan_figure"]

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

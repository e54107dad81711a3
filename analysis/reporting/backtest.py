"""The report's first table: how well each law predicts compute it was not fitted on.

Only presentation of ``Analysis.backtests`` (analysis.checks.backtest): the held-out cells
(role holdout, or above --holdout-above) with each law's prediction, then the rolling-origin
backtest inside the fitted data that the headline rule reads (analysis.checks.verdict).
"""

from __future__ import annotations

from analysis.analyze import Analysis
from analysis.checks.backtest import Backtests, BacktestStep
from analysis.checks.verdict import HOLDOUT_TARGET
from analysis.fits.results import Skipped
from analysis.fits.table import headline_candidates
from analysis.reporting.document import Block, Heading, Paragraph, Table
from analysis.text import fmt


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.2%}"


def _worst(x: float | None) -> str:
    return "—" if x is None else f"{x:.2%}"


def _laws(tests: Backtests) -> tuple[str, ...]:
    if not isinstance(tests.heldout, Skipped) and tests.heldout.cells:
        return tests.heldout.laws
    if not isinstance(tests.rolling, Skipped) and tests.rolling:
        return tests.rolling[0].laws
    return ()


def _label(name: str, headline: str | None) -> str:
    return f"{name} (headline)" if name == headline else name


def _cells_table(step: BacktestStep, laws: tuple[str, ...], headline: str | None,
                 data_unit: str) -> Table:
    rows = tuple(
        (fmt(c.budget), fmt(c.N), fmt(c.D), f"{c.observed:.4f}"
         + (f" ({c.n_seeds} seeds)" if c.n_seeds > 1 else ""),
         *(_pct(c.rel_error(law)) for law in laws)) for c in step.cells)
    rows += (("worst", "", "", "", *(_worst(step.max_abs_rel_error(law)) for law in laws)),)
    return Table(("budget", "N", f"D ({data_unit})", "observed loss",
                  *(_label(law, headline) for law in laws)), rows,
                 (True, True, True, True, *(True for _ in laws)))


def backtest_summary(result: Analysis) -> str | None:
    """One summary line: the headline law's held-out and rolling-origin errors."""
    tests, verdict = result.backtests, result.verdict
    if isinstance(tests, Skipped) or verdict is None or verdict.headline is None:
        return None
    name = verdict.headline
    parts = []
    held = tests.heldout_error(name)
    if held is not None and not isinstance(tests.heldout, Skipped):
        ok = "within" if held <= HOLDOUT_TARGET else "outside"
        parts.append(f"the headline law ({name}) fitted up to C = "
                     f"{fmt(tests.heldout.fitted_up_to)} predicts the "
                     f"{len(tests.heldout.cells)} held-out cell(s) with a worst error of "
                     f"{held:.2%} ({ok} the {HOLDOUT_TARGET:.0%} target)")
    rolling = tests.rolling_error(name)
    if rolling is not None:
        warn = ("" if rolling <= HOLDOUT_TARGET else
                f": outside the {HOLDOUT_TARGET:.0%} target, so do not trust its "
                "predictions far beyond the fitted budgets")
        parts.append(f"refitted on the lower budgets it predicts each next budget up within "
                     f"{rolling:.2%} (rolling origin){warn}")
    return None if not parts else "**Backtest**: " + "; ".join(parts) + "."


def backtest_section(result: Analysis) -> list[Block]:
    """The held-out cells and the rolling-origin steps, every judged law side by side."""
    blocks: list[Block] = [Heading("Backtests: predicting compute that was not fitted")]
    tests = result.backtests
    if isinstance(tests, Skipped):
        return blocks + [Paragraph(f"Not made: {tests.reason}.")]
    laws = _laws(tests)
    headline = None if result.verdict is None else result.verdict.headline
    unit = result.fitted_runs.data_unit
    blocks.append(Paragraph(
        "Error = (predicted − observed) / observed of each law's final loss; the observed loss "
        "of a cell trained with several seeds is their mean. The parametric laws "
        f"({', '.join(headline_candidates())}) may headline; the quadratic surface is a "
        "model-free check, never extrapolated."))
    if isinstance(tests.heldout, Skipped):
        blocks.append(Paragraph(f"Held-out cells: none ({tests.heldout.reason})."))
    else:
        step = tests.heldout
        blocks.append(Paragraph(
            f"**Held-out cells**: every law fitted on the {step.n_fitted} points up to "
            f"C = {fmt(step.fitted_up_to)}, predicting runs it never saw (target: within "
            f"{HOLDOUT_TARGET:.0%}). They test the headline; they never choose it."))
        blocks.append(_cells_table(step, laws, headline, unit))
    if isinstance(tests.rolling, Skipped):
        blocks.append(Paragraph(f"Rolling-origin backtest: not made ({tests.rolling.reason})."))
        return blocks
    rows = tuple(
        (fmt(s.fitted_up_to), str(s.n_fitted), fmt(s.cells[0].budget) if s.cells else "—",
         *(_worst(s.max_abs_rel_error(law)) for law in laws)) for s in tests.rolling)
    rows += (("worst of all steps", "", "", *(_worst(tests.rolling_error(law))
                                              for law in laws)),)
    blocks.append(Paragraph(
        "**Rolling origin**, inside the fitted data: each law refitted on the budgets up to a "
        "point predicts the next budget up; the worst |error| of each step. The headline rule "
        "reads the last row."))
    blocks.append(Table(("fitted up to C", "points", "predicts C",
                         *(_label(law, headline) for law in laws)), rows,
                        (True, True, True, *(True for _ in laws))))
    skipped = [f"{law} at C ≤ {fmt(s.fitted_up_to)}: {why}" for s in tests.rolling
               for law, why in s.skipped.items()]
    if skipped:
        blocks.append(Paragraph("Laws that could not be refitted: " + "; ".join(skipped) + "."))
    return blocks

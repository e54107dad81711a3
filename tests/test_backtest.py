"""Backtests (analysis.checks.backtest), --holdout-above (analysis.runs.selection), the
stratified bootstrap by default on IsoFLOP designs (analysis.numerics.bootstrap.resolve_by) and
the spread of the answer across laws and fit windows (analysis.checks.model_spread): issue 51.

Small synthetic grids fitted with Approach 3 alone (the other laws are not asked for), so the
whole file takes a few seconds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.analyze import analyze
from analysis.checks.backtest import MIN_ORIGIN_BUDGETS, rolling_origin
from analysis.checks.model_spread import window_mask
from analysis.errors import DataError
from analysis.fit import main as fit_main
from analysis.fits.results import Estimate
from analysis.fits.spec import FitInput
from analysis.fits.table import FITS
from analysis.numerics.bootstrap import resolve_by
from analysis.runs.selection import select_runs
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs
from analysis.schema import analysis_to_json

BUDGETS = np.array([1e18, 3e18, 1e19, 3e19, 1e20])
LAW = ChinchillaLaw()


@pytest.fixture(scope="module")
def grid():
    return isoflop_runs(LAW, BUDGETS, sizes_per_budget=5, noise=0.002, seed=3)


def test_holdout_above_holds_out_every_run_above_the_cost_with_its_reason(grid):
    sel = select_runs(grid, holdout_above=1e19)
    assert len(sel.fitted) == 15 and len(sel.holdout) == 10
    assert sel.holdout.column("budget").min() == 3e19
    assert sum("above --holdout-above 1e+19" in e.reason for e in sel.left_out) == 10
    assert select_runs(grid).holdout is None  # not asked: nothing held out
    with pytest.raises(DataError, match="--holdout-above 1e\\+17 holds out every run"):
        select_runs(grid, holdout_above=1e17)


def test_rolling_origin_fits_below_and_predicts_the_next_budget_up(grid):
    steps = rolling_origin(grid, None, ("3",))
    assert len(steps) == BUDGETS.size - MIN_ORIGIN_BUDGETS
    assert [s.fitted_up_to for s in steps] == list(BUDGETS[MIN_ORIGIN_BUDGETS - 1:-1])
    assert [s.n_fitted for s in steps] == [10, 15, 20]
    for step, nxt in zip(steps, BUDGETS[MIN_ORIGIN_BUDGETS:], strict=True):
        assert {c.budget for c in step.cells} == {nxt} and len(step.cells) == 5
        # The refit saw only the budgets below (10 points for 5 parameters at first), yet it
        # is the true law: it predicts the next budget within a few percent...
        assert step.max_abs_rel_error("3") < 0.03
    # ...and more budgets fitted, a better prediction.
    assert steps[-1].max_abs_rel_error("3") < 0.01
    # Two budgets: nothing to backtest, and it says why.
    two = grid.subset(grid.column("budget") <= 3e18)
    assert "needs at least 3" in rolling_origin(two, None, ("3",)).reason


def test_a_law_that_cannot_be_refitted_on_less_data_is_named_not_dropped(grid):
    """A law fitted on every point that fails on the lower budgets has no backtest error,
    so the headline rule never prefers it for having none."""
    from analysis.fits.spec import FitSpec
    from analysis.fits.table import register

    def needs_all(inp: FitInput):
        est = FITS["3"].run(inp)
        if len(inp.runs) < 25:
            from analysis.fits.results import Skipped
            return Skipped("needs every budget")
        return est

    register(FitSpec("fragile", "a law that needs all points", needs_all,
                     words="fragile law", n_params=5, judged=True))
    try:
        steps = rolling_origin(grid, None, ("3", "fragile"))
        assert all(s.skipped == {"fragile": "needs every budget"} for s in steps)
        assert all(s.max_abs_rel_error("fragile") is None for s in steps)
    finally:
        del FITS["fragile"]


def test_fit_json_has_the_backtest_block_of_the_issue(grid):
    result = analyze(grid, bootstrap=0, approaches=("2", "3"), conventions=False,
                     holdout_above=1e19)
    out = json.loads(json.dumps(analysis_to_json(result), allow_nan=False))
    block = out["backtest"]
    assert block["status"] == "ok" and block["fitted_up_to"] == 1e19
    assert len(block["cells"]) == 10
    cell = block["cells"][0]
    assert set(cell) >= {"budget", "N", "D", "observed", "predicted"}
    assert set(cell["predicted"]) == {"3"}
    errors = [abs(c["predicted"]["3"] - c["observed"]) / c["observed"] for c in block["cells"]]
    assert block["max_abs_rel_error"]["3"] == pytest.approx(max(errors))
    assert max(errors) < 0.02  # the true law, fitted below 1e19, predicts 3e19 and 1e20
    # The rolling origin inside the three fitted budgets: one step, 1e18-3e18 -> 1e19.
    (step,) = block["rolling"]["steps"]
    assert step["fitted_up_to"] == 3e18 and {c["budget"] for c in step["cells"]} == {1e19}
    assert out["fitted"]["holdout_above"] == 1e19 and out["fitted"]["points"] == 15
    # The headline is judged on the rolling origin; the held-out cells test it.
    head = out["summary"]["headline"]
    assert head["backtest_max_abs_rel_error"] == block["rolling"]["max_abs_rel_error"]["3"]


def test_the_cli_takes_holdout_above_and_refuses_a_bad_value(tmp_path, capsys):
    csv = tmp_path / "runs.csv"
    grid = isoflop_runs(LAW, BUDGETS[:4], sizes_per_budget=5, noise=0.002, seed=4)
    grid.frame[["N", "D", "loss"]].to_csv(csv, index=False)
    assert fit_main(["--csv", str(csv), "--approach", "3", "--bootstrap", "0", "--json",
                     "--holdout-above", "3e18"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backtest"]["fitted_up_to"] == pytest.approx(3e18, rel=1e-3)
    assert len(out["backtest"]["cells"]) == 10
    from analysis.cli import run_main
    assert run_main(fit_main, ["--csv", str(csv), "--holdout-above", "-1"]) == 2
    assert "--holdout-above" in capsys.readouterr().err


def test_the_bootstrap_resamples_within_budgets_by_default_on_an_isoflop_design(grid):
    assert resolve_by("auto", grid.column("budget")) == "budget"
    assert resolve_by("auto", np.full(5, np.nan)) == "run"  # no design: pooled
    assert resolve_by("auto", np.array([1e18, 1e18, np.nan])) == "run"  # one budget
    assert resolve_by("run", grid.column("budget")) == "run"  # asked for: kept
    with pytest.raises(ValueError, match="bootstrap_by"):
        resolve_by("cells", grid.column("budget"))
    result = analyze(grid, bootstrap=4, approaches=("2",), conventions=False, backtests=False)
    assert result.bootstrap_by == "budget"
    assert analysis_to_json(result)["bootstrap"]["by"] == "budget"


def test_fit_windows_keep_the_sizes_near_each_budgets_best(grid):
    n, budget = grid.column("N"), grid.column("budget")
    for factor in (2.0, 4.0):
        keep = window_mask(grid, factor)
        for label in BUDGETS:
            members = budget == label
            best = n[members][np.argmin(grid.column("loss")[members])]
            ratio = n[members & keep] / best
            assert ratio.max() <= factor * (1 + 1e-9) and ratio.min() >= 1 / factor / (1 + 1e-9)
            assert (n[members & ~keep] / best > factor).any() or (~keep & members).sum() == 0
    assert window_mask(grid, None).all()
    assert window_mask(grid, 2.0).sum() < window_mask(grid, 4.0).sum() <= len(grid)


def test_the_headline_states_the_spread_across_laws_and_windows(grid):
    result = analyze(grid, bootstrap=0, conventions=False)
    spread = result.model_spread
    laws = spread.laws["a"]
    # Every law passing its backtest (within 2%) is in the spread; only they, when any does.
    passing = {k for k in ("3", "interaction", "kaplan_joint")
               if (e := result.backtests.rolling_error(k)) is not None and e <= 0.02}
    assert passing and set(laws.values) == passing
    assert laws.range == (min(laws.values.values()), max(laws.values.values()))
    windows = spread.windows["a"]
    headline = result.verdict.headline
    assert {"2 within 2x", f"{headline} all sizes"} <= set(windows.values)
    full = result.fits[headline]
    assert isinstance(full, Estimate)
    assert windows.values[f"{headline} all sizes"] == pytest.approx(full.point["a"])
    head = analysis_to_json(result)["summary"]["headline"]
    assert head["model_spread"]["a"]["laws"] == list(laws.range)
    assert head["not_identified"] == []  # the true law, E > 0, sizes over 16x: all pinned

"""Held-out runs: never fitted, predicted by Approach 3 (with a bootstrap interval) and by the
compute frontier of the Approach 2 minima."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from analysis.analyze import Estimate, Skipped, analyze
from analysis.checks.heldout import HoldoutCheck, HoldoutRow, _interval, check_holdout, fit_frontier
from analysis.errors import DataError
from analysis.fits.approach2 import Approach2Fit, BudgetMinimum
from analysis.fits.powerlaw import PowerLaw
from analysis.numerics.bootstrap import Bootstrap
from analysis.reporting.checks import holdout_summary
from analysis.runs.synthetic import ChinchillaLaw, replicated_runs
from analysis.schema import analysis_to_json

LAW = ChinchillaLaw()
BUDGETS = np.logspace(17, 19, 5)
HELD = (1e20,)


@pytest.fixture(scope="module")
def runs():
    return replicated_runs(LAW, BUDGETS, seeds=2, noise=0.004, holdout_budgets=HELD, seed=0)


@pytest.fixture(scope="module")
def result(runs):
    return analyze(runs, bootstrap=30, seed=0, approaches=("2", "3"), conventions=False)


def test_held_out_runs_are_never_fitted(runs, result):
    main = runs.subset(runs.frame["role"] == "main")
    without = analyze(main, bootstrap=0, approaches=("2", "3"), conventions=False)
    assert set(result.fitted_runs.frame["role"]) == {"main"}
    assert result.approach3.fit.alpha == without.approach3.fit.alpha
    assert result.approach2.fit.a == without.approach2.fit.a
    assert result.reference_flops == pytest.approx(BUDGETS[-1])  # not the held-out 1e20
    assert [e.reason for e in result.selection.left_out] == [
        "held out (role holdout): predicted, never fitted"]
    assert isinstance(without.holdout, Skipped)
    assert "no held-out runs" in without.holdout.reason


def test_approach3_predicts_the_held_out_budget_within_2_percent(runs, result):
    (row,) = result.holdout.rows
    held = runs.frame[runs.frame["role"] == "holdout"].iloc[0]
    assert (row.N, row.D, row.C, row.loss) == (held["N"], held["D"], held["C"], held["loss"])
    assert row.approach3 == pytest.approx(float(result.approach3.fit.loss(row.N, row.D)))
    assert row.approach3_error == pytest.approx((row.approach3 - row.loss) / row.loss)
    assert abs(row.approach3_error) < 0.02  # the true law, 0.4% noise
    assert result.holdout.within_target("approach3") is True
    assert row.approach3_ci.low < row.approach3 < row.approach3_ci.high
    # The run is compute-optimal by construction, where the frontier predictor applies.
    assert row.n_over_n_opt == pytest.approx(1.0, abs=0.15)
    assert abs(row.frontier_error) < 0.06


def test_interval_is_the_percentile_of_the_bootstrap_predictions():
    e = np.linspace(2.0, 3.0, 101)
    samples = {"E": e, "A": np.full(101, 100.0), "B": np.zeros(101),
               "alpha": np.full(101, 0.5), "beta": np.full(101, 0.3)}
    est = Estimate(fit=None, point={},
                   bootstrap=Bootstrap(n_resamples=101, n_failed=0, seed=0, samples=samples))
    iv = _interval(est, 1e4, 1e9)  # A/N^alpha = 1: predictions are E + 1
    assert (iv.low, iv.high) == pytest.approx((3.025, 3.975))
    assert _interval(Estimate(fit=None, point={}), 1e4, 1e9) is None


def test_frontier_law_through_the_budget_minima():
    flops = np.array([1e17, 1e18, 1e19])
    minima = tuple(BudgetMinimum(budget=c, flops=c, n_runs=5, n_sizes=5, ok=True,
                                 loss_opt=4.0 * (c / 1e18) ** -0.05) for c in flops)
    flagged = BudgetMinimum(budget=1e20, flops=1e20, n_runs=2, n_sizes=2, ok=False,
                            reason="2 model size(s)")
    line = PowerLaw(0.5, 0.0, 3, 0.0)
    law = fit_frontier(Approach2Fit(n_law=line, d_law=line, budgets=minima + (flagged,)))
    assert (law.n_points, law.C0) == (3, pytest.approx(1e18))
    assert (law.L0, law.g) == (pytest.approx(4.0), pytest.approx(0.05))
    assert law(1e20) == pytest.approx(4.0 * 100**-0.05)


def test_errors_and_the_2_percent_verdict():
    row = HoldoutRow(run="r", run_id="r", N=1.0, D=1.0, C=1.0, loss=2.0, approach3=2.05,
                     frontier=1.99)
    assert row.approach3_error == pytest.approx(0.025)
    assert row.frontier_error == pytest.approx(-0.005)
    check = HoldoutCheck(rows=(row,), target=0.02, approach3=None, frontier=Skipped("x"))
    assert check.max_abs_error("approach3") == pytest.approx(0.025)
    assert check.within_target("approach3") is False and check.within_target("frontier")


def test_without_a_fitted_approach_the_reason_travels(runs):
    check = check_holdout(runs.subset(runs.frame["role"] == "holdout"),
                          Skipped("a single compute budget"), Skipped("no budgets"))
    assert check.approach3 == "Approach 3 was not fitted: a single compute budget"
    assert check.frontier.reason == "Approach 2 was not fitted: no budgets"
    assert check.rows[0].approach3 is None and check.within_target("approach3") is None


def test_json_of_the_held_out_runs(result):
    out = json.loads(json.dumps(analysis_to_json(result), allow_nan=False))
    hold = out["holdout"]
    assert hold["status"] == "ok" and hold["target"] == 0.02
    (run,) = hold["runs"]
    assert run["approach3_within_target"] is True
    assert run["approach3_error"] == pytest.approx(result.holdout.rows[0].approach3_error)
    assert len(run["approach3_ci"]) == 2 and hold["frontier"]["status"] == "ok"
    assert out["fitted"]["holdout_runs"] == 1


def test_every_run_held_out_is_an_input_error(runs):
    held = runs.with_frame(runs.frame.assign(role="holdout"))
    with pytest.raises(DataError, match="every run has role 'holdout'"):
        analyze(held, bootstrap=0)


def test_seeds_of_a_held_out_cell_are_averaged(runs, result):
    held = runs.frame[runs.frame["role"] == "holdout"]
    loss = float(held["loss"].iloc[0])
    seeds = held.loc[held.index.repeat(3)].reset_index(drop=True)
    seeds["seed"] = [0, 1, 2]
    seeds["run_id"] = ["h0", "h1", "h2"]
    seeds["loss"] = [loss, loss * 1.01, loss * 0.97]
    check = check_holdout(runs.with_frame(seeds), result.approach3, result.approach2)
    (row,) = check.rows
    assert row.n_seeds == 3 and row.run_id == "h0"
    assert row.loss == pytest.approx(loss * (1 + 1.01 + 0.97) / 3)
    assert row.loss_std == pytest.approx(np.std([loss, loss * 1.01, loss * 0.97], ddof=1))
    assert row.approach3_error == pytest.approx((row.approach3 - row.loss) / row.loss)
    single = check_holdout(runs.with_frame(seeds.iloc[:1]), result.approach3, result.approach2)
    assert single.rows[0].n_seeds == 1 and single.rows[0].loss_std is None
    summary = holdout_summary(dataclasses.replace(result, holdout=check))
    assert summary.startswith("**Held-out budget** (3 run(s) in 1 cell(s), seeds averaged, "
                              "never fitted): Approach 3 max |error| ")

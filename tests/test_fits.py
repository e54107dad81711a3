"""Chinchilla Approaches 2 and 3: published refit reproduced, synthetic laws recovered,
degenerate input refused.

The reference numbers are Besiroglu et al. (2024), "Chinchilla Scaling: A replication
attempt" (arXiv:2404.10102), fitted to the Epoch data of tests/data/chinchilla_epoch_fig4.csv
(see tests/data/SOURCES.md) after dropping the 5 highest-loss points, with D = C/(6N).
Reproduce by hand (docs/analysis.md):
    python -m analysis.fit --csv tests/data/chinchilla_epoch_fig4.csv --n-col "Model Size" \
        --c-col "Training FLOP" --loss-col loss --drop-highest-loss 5 --approach 3 --json
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.analyze import analyze
from analysis.errors import FitError
from analysis.fits.approach2 import bootstrap_approach2, fit_approach2
from analysis.fits.approach3 import (
    DEFAULT_GRID,
    StartGrid,
    bootstrap_approach3,
    fit_approach3,
    huber_objective,
    huber_objective_batch,
)
from analysis.runs.load import load_csv
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs
from analysis.schema import analysis_to_json

EPOCH = Path(__file__).parent / "data" / "chinchilla_epoch_fig4.csv"


@pytest.fixture(scope="module")
def epoch():
    runs = load_csv(EPOCH, n_col="Model Size", c_col="Training FLOP", loss_col="loss",
                    drop_highest_loss=5, log=lambda _: None)
    return runs.column("N"), runs.column("D"), runs.column("loss")


@pytest.fixture(scope="module")
def epoch_fit(epoch):
    return fit_approach3(*epoch)


def test_epoch_data_is_the_240_points_of_besiroglu(epoch):
    n, d, loss = epoch
    assert n.size == 240
    assert loss.max() < 3.6  # the dropped five are the outliers above ~3.8 nats
    np.testing.assert_allclose(6 * n * d, load_csv(EPOCH, drop_highest_loss=5,
                                                   log=lambda _: None).column("C"))


def test_besiroglu_refit_is_reproduced(epoch_fit):
    fit = epoch_fit
    assert fit.alpha == pytest.approx(0.3478, rel=0.01)
    assert fit.beta == pytest.approx(0.3658, rel=0.01)
    np.testing.assert_allclose(fit.E, 1.817, rtol=0.01)
    # The objective is nearly flat along B (and A): a 3% change of B moves the summed Huber
    # loss by less than 1e-9, so only 5% agreement is meaningful for A and B.
    np.testing.assert_allclose([fit.A, fit.B], [482.0, 2085.0], rtol=0.05)
    assert fit.a == pytest.approx(0.513, abs=0.005)
    assert fit.converged
    assert fit.n_starts == 4500


def test_besiroglu_bootstrap_interval_of_alpha(epoch, epoch_fit):
    boot = bootstrap_approach3(*epoch, epoch_fit, flops=5.76e23, n_resamples=200, seed=0)
    assert boot.n_failed == 0
    alpha = boot.interval("alpha")
    assert alpha.low == pytest.approx(0.317, abs=0.006)
    assert alpha.high == pytest.approx(0.373, abs=0.006)
    beta = boot.interval("beta")  # published (0.331, 0.415); wider tolerance: B is flat
    assert beta.low == pytest.approx(0.331, abs=0.012)
    assert beta.high == pytest.approx(0.415, abs=0.012)


def test_screened_starts_equal_the_full_grid_on_a_smaller_grid(epoch):
    grid = StartGrid(a=(0.0, 10.0, 20.0), b=(0.0, 10.0, 20.0), e=(-1.0, 0.0, 1.0),
                     alpha=(0.0, 1.0, 2.0), beta=(0.0, 1.0, 2.0))
    full = fit_approach3(*epoch, grid=grid, keep=None)
    screened = fit_approach3(*epoch, grid=grid, keep=5)
    assert full.n_optimized == 243 and screened.n_optimized == 5
    assert screened.objective == pytest.approx(full.objective, rel=1e-9)
    for name in ("E", "alpha", "beta", "A", "B"):
        assert getattr(screened, name) == pytest.approx(getattr(full, name), rel=1e-3)


# Recorded by benchmarks/perf/bench_fits.py, which runs L-BFGS-B from all 4500 grid starts.
FULL_GRID_EPOCH = {"E": 1.81722, "A": 477.83, "B": 2143.4, "alpha": 0.347310, "beta": 0.367172}


def test_screened_default_fit_equals_recorded_full_grid(epoch_fit):
    for name, value in FULL_GRID_EPOCH.items():
        assert getattr(epoch_fit, name) == pytest.approx(value, rel=2e-4), name


def test_objective_gradient_matches_finite_differences(epoch):
    n, d, loss = epoch
    args = (np.log(n), np.log(d), np.log(loss))
    theta = np.array([6.0, 7.5, 0.6, 0.35, 0.37])
    f, grad = huber_objective(theta, *args)
    step = 1e-6
    numeric = [(huber_objective(theta + step * e, *args)[0]
                - huber_objective(theta - step * e, *args)[0]) / (2 * step) for e in np.eye(5)]
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-9)
    assert f > 0


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-30, 60), min_size=5, max_size=5))
def test_batch_objective_equals_scalar_and_never_overflows(theta):
    rng = np.random.default_rng(1)
    ln_n, ln_d = rng.uniform(10, 25, 40), rng.uniform(15, 30, 40)
    ln_loss = rng.uniform(0.5, 1.5, 40)
    scalar, grad = huber_objective(np.array(theta), ln_n, ln_d, ln_loss)
    batch = huber_objective_batch(np.array([theta]), ln_n, ln_d, ln_loss)[0]
    assert np.isfinite(scalar) and np.all(np.isfinite(grad))
    assert batch == pytest.approx(scalar, rel=1e-12)


def test_start_grid_is_the_documented_one():
    points = DEFAULT_GRID.points()
    assert points.shape == (4500, 5) and DEFAULT_GRID.size == 4500
    assert sorted(set(points[:, 3])) == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert sorted(set(points[:, 2])) == [-1.0, -0.5, 0.0, 0.5, 1.0]
    assert sorted(set(points[:, 0])) == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0]


# ----------------------------------------------------------------- synthetic recovery

LAW = ChinchillaLaw()  # Hoffmann et al. 2022 Approach 3 values: a = 0.28/0.62 = 0.4516
BUDGETS = np.logspace(17, 20, 7)


def test_approaches_2_and_3_recover_the_allocation_exponent_and_cover_it():
    covered = []
    for seed in (0, 1, 2):
        runs = isoflop_runs(LAW, BUDGETS, noise=0.005, seed=seed)
        n, d, c, loss, budget = (runs.column(k) for k in ("N", "D", "C", "loss", "budget"))
        fit2 = fit_approach2(n, d, c, loss, budget)
        fit3 = fit_approach3(n, d, loss)
        assert fit2.a == pytest.approx(LAW.a, abs=0.02), seed
        assert fit2.a + fit2.b == pytest.approx(1.0, abs=0.01)  # C = 6ND exactly
        assert fit3.a == pytest.approx(LAW.a, abs=0.02), seed
        assert fit3.alpha == pytest.approx(LAW.alpha, abs=0.05), seed
        np.testing.assert_allclose(fit3.E, LAW.E, rtol=0.1)
        assert fit2.flagged == ()
        boot2 = bootstrap_approach2(n, d, c, loss, budget, flops=1e20, n_resamples=100,
                                    seed=seed)
        boot3 = bootstrap_approach3(n, d, loss, fit3, flops=1e20, n_resamples=100, seed=seed)
        covered.append([boot2.interval("a").contains(LAW.a),
                        boot3.interval("a").contains(LAW.a)])
    # "Most seeds": the true exponent is inside the 95% interval in at least 2 of 3.
    assert min(np.sum(covered, axis=0)) >= 2, covered


def test_approach2_flags_budgets_without_an_interior_minimum():
    runs = isoflop_runs(LAW, BUDGETS, noise=0.0, seed=0)
    n, d, c, loss, budget = (runs.column(k) for k in ("N", "D", "C", "loss", "budget"))
    # Keep only the sizes below the optimum at the largest budget: its minimum is at the edge.
    top = budget == BUDGETS[-1]
    keep = ~top | (n < LAW.n_opt(BUDGETS[-1]) * 0.9)
    fit = fit_approach2(n[keep], d[keep], c[keep], loss[keep], budget[keep])
    assert len(fit.flagged) == 1
    assert fit.flagged[0].budget == pytest.approx(BUDGETS[-1])
    assert "outside the sampled sizes" in fit.flagged[0].reason
    assert len([m for m in fit.budgets if m.ok]) == len(BUDGETS) - 1


# ----------------------------------------------------------------- degenerate input


def test_fewer_points_than_parameters_raises():
    with pytest.raises(FitError, match="5 point.*need at least 6"):
        fit_approach3([1e6, 2e6, 4e6, 8e6, 1.6e7], [1e9, 3e9, 1e9, 3e9, 2e9],
                      [3.0, 2.9, 2.8, 2.7, 2.6])


def test_single_budget_raises():
    runs = isoflop_runs(LAW, [1e18], seed=0)
    n, d, c, loss, budget = (runs.column(k) for k in ("N", "D", "C", "loss", "budget"))
    with pytest.raises(FitError, match="collinear"):
        fit_approach3(n, d, loss)
    with pytest.raises(FitError, match="single compute budget"):
        fit_approach2(n, d, c, loss, budget)


def test_constant_and_non_finite_losses_raise():
    runs = isoflop_runs(LAW, BUDGETS, seed=0)
    n, d = runs.column("N"), runs.column("D")
    with pytest.raises(FitError, match="loss is constant"):
        fit_approach3(n, d, np.full(n.size, 2.5))
    bad = runs.column("loss").copy()
    bad[3] = np.nan
    with pytest.raises(FitError, match="non-finite value.*loss"):
        fit_approach3(n, d, bad)
    negative = runs.column("loss").copy()
    negative[0] = -1.0
    with pytest.raises(FitError, match="loss are <= 0"):
        fit_approach3(n, d, negative)


def test_approach2_too_few_good_budgets_names_the_flagged_ones():
    runs = isoflop_runs(LAW, BUDGETS[:2], seed=0)
    n, d, c, loss, budget = (runs.column(k) for k in ("N", "D", "C", "loss", "budget"))
    with pytest.raises(FitError, match="2 of 2 budgets have an interior minimum; need at least 3"):
        fit_approach2(n, d, c, loss, budget)


def test_a_stratified_bootstrap_keeps_every_budget_and_its_size() -> None:
    """--bootstrap-by budget: each column draws from its own budget, so every resample has
    each budget with as many points; the same seed draws the same resamples."""
    from analysis.numerics.bootstrap import resample_indices

    budget = np.array([1e10, 1e10, 1e10, 3e10, 3e10, np.nan, 1e11, 1e11])
    idx = resample_indices(len(budget), 500, 7, strata=budget)
    drawn = np.nan_to_num(budget[idx], nan=-1.0)
    assert np.array_equal(drawn, np.broadcast_to(np.nan_to_num(budget, nan=-1.0), idx.shape))
    assert np.array_equal(idx, resample_indices(len(budget), 500, 7, strata=budget))
    assert len(np.unique(idx[:, 0])) == 3  # the first budget's three runs are all drawn
    pooled = resample_indices(len(budget), 500, 7)
    assert not np.array_equal(np.nan_to_num(budget[pooled], nan=-1.0), drawn)
    with pytest.raises(ValueError, match="one label per unit"):
        resample_indices(3, 10, 0, strata=budget)


def test_analyze_by_budget_records_the_scheme_and_draws_other_resamples() -> None:
    """The scheme reaches every fit's bootstrap and the result (fit.json says it); its draws
    differ from the pooled ones. (A budget's own draw can still repeat sizes: a parabola
    then has too few, so Approach 2 can fail on a resample either way.)"""
    runs = isoflop_runs(ChinchillaLaw(), np.logspace(18, 20, 3), sizes_per_budget=5,
                        noise=0.002, seed=1)
    pooled = analyze(runs, bootstrap=60, seed=0, approaches=("2", "3"), conventions=False,
                     bootstrap_by="run")
    within = analyze(runs, bootstrap=60, seed=0, approaches=("2", "3"), conventions=False,
                     bootstrap_by="budget")
    assert (pooled.bootstrap_by, within.bootstrap_by) == ("run", "budget")
    assert within.approach2.bootstrap.by == within.approach3.bootstrap.by == "budget"
    assert within.approach3.ci95("a") != pooled.approach3.ci95("a")
    assert analysis_to_json(within)["bootstrap"]["by"] == "budget"
    with pytest.raises(ValueError, match="bootstrap_by"):
        analyze(runs, bootstrap=0, bootstrap_by="seed")


def test_a_fit_whose_n_term_vanishes_is_an_error_not_an_allocation():
    """exp(ln A) underflows to A = 0: the law then has no N term and G = (αA/(βB))^(1/(α+β))
    is 0; before, such a bootstrap refit counted as fitted and warned in log and power."""
    rng = np.random.default_rng(0)
    n, d = np.exp(rng.uniform(11, 14, 12)), np.exp(rng.uniform(15, 18, 12))
    loss = 1.5 + 400.0 / d ** 0.3  # no N dependence at all
    start = np.array([[-800.0, np.log(400.0), np.log(1.5), 0.3, 0.3]])
    with pytest.raises(FitError, match="the N term vanishes"):
        fit_approach3(n, d, loss, keep=0, warm_starts=start)

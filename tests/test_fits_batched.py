"""The batched L-BFGS (analysis.numerics.batched) and Approach 3's batched bootstrap refit: the
same optima as SciPy's L-BFGS-B one problem at a time, resample by resample (issue 21)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize, rosen, rosen_der

from analysis.fits import approach3 as a3
from analysis.numerics.batched import minimize_batch
from analysis.numerics.bootstrap import resample_indices, run_bootstrap
from analysis.runs.load import load_csv
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs

EPOCH = Path(__file__).parent / "data" / "chinchilla_epoch_fig4.csv"


def test_batched_lbfgs_reaches_the_minima_scipy_reaches():
    """Rosenbrock in 2 and 5 dimensions from scattered starts, and shifted quadratics: each
    problem of the batch ends at SciPy L-BFGS-B's end point."""
    rng = np.random.default_rng(0)
    x0 = rng.uniform(-2.0, 2.0, size=(12, 5))

    def fun(x, rows):
        return np.array([rosen(v) for v in x.T]), np.array([rosen_der(v) for v in x.T]).T

    res = minimize_batch(fun, x0, ftol=1e-15, gtol=1e-10, max_iter=15000)
    for start, end in zip(x0, res.x, strict=True):
        ref = minimize(rosen, start, jac=rosen_der, method="L-BFGS-B",
                       options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 15000})
        np.testing.assert_allclose(end, ref.x, atol=1e-6)
    assert res.success.all()
    centres = rng.normal(size=(7, 3))
    scales = rng.uniform(0.1, 10.0, size=(7, 3))  # badly scaled on purpose

    def quad(x, rows):
        diff = x - centres[rows].T  # problems are columns
        return (scales[rows].T * diff ** 2).sum(0), 2 * scales[rows].T * diff

    res = minimize_batch(quad, np.zeros((7, 3)), ftol=1e-15, gtol=1e-10, max_iter=1000)
    np.testing.assert_allclose(res.x, centres, atol=1e-8)


def test_a_problem_that_cannot_descend_stops_and_says_so():
    def flat_then_inf(x, rows):  # a finite point whose every step is infinite
        f = np.where(np.abs(x[0]) < 1e-300, 1.0, np.inf)
        return f, np.ones_like(x)

    res = minimize_batch(flat_then_inf, np.zeros((2, 2)), ftol=1e-15, gtol=1e-10,
                         max_iter=50)
    assert not res.success.any() and np.all(res.x == 0.0) and np.all(res.n_iter == 1)


def _data(which: str):
    if which == "epoch":
        runs = load_csv(EPOCH, n_col="Model Size", c_col="Training FLOP", loss_col="loss",
                        drop_highest_loss=5, log=lambda _m: None)
    else:
        runs = isoflop_runs(ChinchillaLaw(), np.logspace(17, 20, 5), sizes_per_budget=6,
                            noise=0.01, seed=3)
    return tuple(runs.column(k) for k in ("N", "D", "loss"))


@pytest.mark.parametrize("which", ["synthetic", "epoch"])
def test_batched_refits_equal_one_at_a_time_refits_resample_by_resample(which):
    n, d, loss = _data(which)
    fit = a3.fit_approach3(n, d, loss)
    starts = a3.refit_starts(n, d, loss, fit)
    indices = resample_indices(len(n), 40, seed=1)
    batched = a3.refit_batch(n, d, loss, starts, indices)
    for idx, many in zip(indices, batched, strict=True):
        one = a3.fit_approach3(n[idx], d[idx], loss[idx], keep=0, warm_starts=starts)
        assert many.objective == pytest.approx(one.objective, rel=1e-9)
        np.testing.assert_allclose(many.theta, one.theta, rtol=1e-5, atol=1e-6)
        assert many.n_points == one.n_points and many.n_optimized == one.n_optimized


def test_a_problem_ends_at_the_same_bits_alone_or_beside_others():
    """A problem's end point does not depend on the problems batched with it, to the last bit
    (a bootstrap's intervals must not depend on how many processes share its resamples; on a
    flat valley the last bits decide where a refit stops). Each resample refitted alone (its
    starts only, down to one running problem) and all together, and the interaction law's
    bounded refit in two different splits."""
    from analysis.fits import interaction as it

    n, d, loss = _data("synthetic")
    fit = a3.fit_approach3(n, d, loss)
    starts = a3.refit_starts(n, d, loss, fit)
    indices = resample_indices(len(n), 12, seed=3)
    together = a3.refit_batch(n, d, loss, starts, indices)
    for row, many in zip(indices, together, strict=True):
        (alone,) = a3.refit_batch(n, d, loss, starts, row[None])
        assert alone.theta == many.theta and alone.objective == many.objective
    law = it.fit_interaction(n, d, loss)
    thetas = [[law.theta for law in it.refit_batch(n, d, loss, law, part)]
              for part in (indices, *np.array_split(indices, 5))]
    assert thetas[0] == [t for part in thetas[1:] for t in part]


def test_a_resample_that_cannot_be_fitted_gives_the_same_message():
    n, d, loss = _data("synthetic")
    fit = a3.fit_approach3(n, d, loss)
    starts = a3.refit_starts(n, d, loss, fit)
    same_point = np.zeros((1, len(n)), dtype=int)  # every draw the same run
    (message,) = a3.refit_batch(n, d, loss, starts, same_point)
    with pytest.raises(Exception) as err:
        a3.fit_approach3(n[same_point[0]], d[same_point[0]], loss[same_point[0]], keep=0,
                         warm_starts=starts)
    assert message == str(err.value)


def test_the_bootstrap_takes_the_batched_path_and_keeps_its_intervals(monkeypatch):
    """run_bootstrap calls the refit's batch; the one-at-a-time path gives the same draws."""
    n, d, loss = _data("synthetic")
    fit = a3.fit_approach3(n, d, loss)
    refit = a3._Refit(n, d, loss, a3.refit_starts(n, d, loss, fit), fit.delta, 1e21)
    fast = run_bootstrap(len(n), refit, n_resamples=30, seed=4)
    monkeypatch.setattr(a3._Refit, "batch", property(lambda self: None))  # no batch path
    slow = run_bootstrap(len(n), refit, n_resamples=30, seed=4)
    np.testing.assert_array_equal(fast.fitted, slow.fitted)
    for name in ("alpha", "beta", "a", "tokens_per_param"):
        np.testing.assert_allclose(fast.samples[name], slow.samples[name], rtol=1e-5)


def test_interaction_batched_refits_equal_scipy_refits_resample_by_resample():
    """The interaction law's bootstrap path (every resample at once, then SciPy finishes the
    best end point) reaches the optimum of its SciPy reference (one L-BFGS-B run per start,
    resample by resample) on a seeded synthetic bootstrap: the objective, the identified
    parameters (ln E is left out: with E near 0 it is not identified) and the allocation."""
    from analysis.fits import interaction as it
    from analysis.fits.optimum import fit_lines, optimal_allocation

    runs = isoflop_runs(ChinchillaLaw(), np.logspace(17, 19, 3), sizes_per_budget=5,
                        noise=0.01, seed=7)
    n, d, loss = (runs.column(k) for k in ("N", "D", "loss"))
    lines = fit_lines(n, d, runs.column("C"), runs.column("budget"))
    full = it.fit_interaction(n, d, loss)
    indices = resample_indices(len(n), 10, seed=2)
    batched = it.refit_batch(n, d, loss, full, indices)
    for idx, many in zip(indices, batched, strict=True):
        one = it.fit_interaction(n[idx], d[idx], loss[idx], full)
        assert many.objective == pytest.approx(one.objective, rel=1e-8)
        np.testing.assert_allclose(np.delete(many.theta, 2), np.delete(one.theta, 2), rtol=1e-3)
        a_many = optimal_allocation(many.log_loss, lines, 1e19)
        a_one = optimal_allocation(one.log_loss, lines, 1e19)
        assert a_many.a == pytest.approx(a_one.a, abs=1e-4)
        assert a_many.tokens_per_param == pytest.approx(a_one.tokens_per_param, rel=1e-3)


def test_batched_least_squares_reaches_scipys_minima_with_weights():
    """Levenberg-Marquardt over a batch (least_squares_batch): exponential decays with
    counts as weights end where SciPy's least_squares ends on the repeated points."""
    from scipy.optimize import least_squares

    from analysis.numerics.batched import least_squares_batch

    rng = np.random.default_rng(4)
    t = np.linspace(0.0, 4.0, 9)
    y = 2.0 * np.exp(-0.7 * t) + 0.3 + rng.normal(0, 0.01, t.size)
    counts = rng.integers(0, 3, size=(6, t.size)).astype(float)
    counts[:, :4] += 1  # every problem keeps enough points

    def res(x, rows):
        a, k, c = (col[:, None] for col in x.T)
        e = np.exp(-k * t)
        return a * e + c - y, np.stack([e, -a * t * e, np.ones_like(e)], axis=2)

    x0 = np.tile([1.0, 0.2, 0.0], (6, 1))
    fit = least_squares_batch(res, x0, counts, ftol=1e-12, xtol=1e-12, gtol=1e-12,
                              max_iter=500, lower=np.array([0.0, 0.0, -np.inf]))
    assert fit.success.all()
    for w, end, cost in zip(counts, fit.x, fit.cost, strict=True):
        idx = np.repeat(np.arange(t.size), w.astype(int))
        ref = least_squares(lambda p, i=idx: p[0] * np.exp(-p[1] * t[i]) + p[2] - y[i],
                            [1.0, 0.2, 0.0], ftol=1e-12, xtol=1e-12, gtol=1e-12)
        np.testing.assert_allclose(end, ref.x, rtol=1e-6)
        assert cost == pytest.approx(ref.cost, rel=1e-9)

"""Kaplan et al. (2020) laws and Chinchilla Approach 1 recover known exponents from
synthetic runs and curves; the envelope refuses curves that cannot locate an optimum."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.errors import FitError
from analysis.fits.approach1 import bootstrap_approach1, fit_approach1
from analysis.fits.envelope import DEFAULT_GRID_POINTS, build_curves, envelope
from analysis.fits.kaplan import (
    _Refit,
    bootstrap_kaplan,
    fit_joint_law,
    fit_kaplan,
    fit_kaplan_joint,
    lower_frontier,
    refit_joint_batch,
)
from analysis.fits.powerlaw import fit_inverse_power_law, fit_power_law
from analysis.numerics.bootstrap import resample_indices, run_bootstrap
from analysis.runs.synthetic import ChinchillaLaw, KaplanLaw, kaplan_grid, training_curves

KAPLAN = KaplanLaw()  # alpha_N 0.076, alpha_D 0.095, N_c 8.8e13, D_c 5.4e13
CHINCHILLA = ChinchillaLaw()


def _fit(runs, curves=None):
    kaplan_curves = None if curves is None else build_curves(runs, curves, kaplan=True)
    return fit_kaplan(runs.column("N_kaplan"), runs.column("D"), runs.column("loss"),
                      kaplan_curves, conventions="test")


def test_l_of_n_recovers_alpha_n_when_data_is_not_the_bottleneck():
    # Every size also trained on 1e13 tokens: D_c/D = 5.4 << (N_c/N)^0.8 >= 9000.
    runs = kaplan_grid(KAPLAN, np.logspace(6, 9, 10), [1e9, 1e11, 1e13], seed=1)
    fit = _fit(runs)
    assert fit.l_of_n.alpha == pytest.approx(KAPLAN.alpha_N, abs=0.003)
    assert fit.l_of_n.n_points == 10  # the 1e13-token run of each size
    assert np.log10(fit.l_of_n.x_c) == pytest.approx(np.log10(KAPLAN.N_c), abs=0.3)


def test_l_of_d_recovers_alpha_d_when_the_model_is_not_the_bottleneck():
    runs = kaplan_grid(KAPLAN, [1e11, 1e12, 1e13], np.logspace(8, 11, 10), seed=2)
    fit = _fit(runs)
    assert fit.l_of_d.alpha == pytest.approx(KAPLAN.alpha_D, abs=0.005)


def test_joint_law_recovers_both_exponents_and_scales():
    runs = kaplan_grid(KAPLAN, np.logspace(6, 10, 8), np.logspace(8, 12, 8), seed=3)
    joint = fit_kaplan_joint(runs.column("N"), runs.column("D"), runs.column("loss"))
    assert joint.alpha_N == pytest.approx(KAPLAN.alpha_N, abs=0.005)
    assert joint.alpha_D == pytest.approx(KAPLAN.alpha_D, abs=0.005)
    assert np.log10(joint.N_c) == pytest.approx(np.log10(KAPLAN.N_c), abs=0.5)
    assert np.log10(joint.D_c) == pytest.approx(np.log10(KAPLAN.D_c), abs=0.5)
    assert joint.rmse_log < 0.005  # noise is 0.3%


def test_envelope_of_curves_recovers_alpha_c_and_the_n_opt_exponent():
    sizes = np.logspace(6, 9, 16)
    runs, curves = training_curves(KAPLAN, sizes, 200 * sizes, noise=0.001, seed=4)
    fit = _fit(runs, curves)
    assert fit.skipped == {}
    assert fit.l_of_c.alpha == pytest.approx(KAPLAN.alpha_C, abs=0.003)
    assert fit.n_opt.exponent == pytest.approx(KAPLAN.n_opt_exponent, abs=0.04)


def test_kaplan_bootstrap_intervals_cover_the_point_estimates():
    sizes = np.logspace(6, 9, 12)
    runs, curves = training_curves(KAPLAN, sizes, 200 * sizes, noise=0.001, seed=5)
    kaplan_curves = build_curves(runs, curves, kaplan=True)
    fit = _fit(runs, curves)
    boot = bootstrap_kaplan(runs.column("N_kaplan"), runs.column("D"), runs.column("loss"),
                            kaplan_curves, fit, n_resamples=40, seed=0)
    for name, value in fit.statistics().items():
        iv = boot.interval(name)
        assert iv.low <= iv.high, name
        assert iv.low - 0.02 <= value <= iv.high + 0.02, name


def test_without_curves_the_curve_laws_are_skipped_with_the_reason():
    runs = kaplan_grid(KAPLAN, np.logspace(6, 9, 5), [1e9, 1e10, 1e12], seed=6)
    fit = _fit(runs)
    assert fit.l_of_c is None and fit.n_opt is None
    assert fit.skipped == {"L(C)": "no training curves", "N_opt(C)": "no training curves"}


def test_lower_frontier_keeps_only_points_below_all_smaller_x():
    x = np.array([1.0, 1.0, 2.0, 3.0, 4.0])
    loss = np.array([3.0, 2.5, 2.7, 2.0, 2.1])
    xs, ls = lower_frontier(x, loss)
    np.testing.assert_array_equal(xs, [1.0, 3.0])
    np.testing.assert_array_equal(ls, [2.5, 2.0])


def test_approach1_recovers_the_chinchilla_allocation():
    sizes = np.logspace(6, 9, 16)
    runs, curves = training_curves(CHINCHILLA, sizes, 200 * sizes, noise=0.001, seed=7)
    fit = fit_approach1(build_curves(runs, curves))
    assert fit.a == pytest.approx(CHINCHILLA.a, abs=0.02)
    assert fit.b == pytest.approx(1 - CHINCHILLA.a, abs=0.02)
    assert fit.envelope.interior.all()
    assert np.unique(fit.envelope.n).size >= 5
    boot = bootstrap_approach1(build_curves(runs, curves), flops=1e18, n_resamples=40, seed=0)
    assert boot.interval("a").contains(fit.a)


def test_envelope_edges_are_not_interior():
    sizes = np.logspace(6, 9, 8)
    runs, curves = training_curves(CHINCHILLA, sizes, 200 * sizes, noise=0.0, seed=8)
    env = envelope(build_curves(runs, curves))
    # At the smallest C only the smallest model's curve has started: never interior.
    assert not env.interior[0]
    assert env.n[0] == sizes[0]
    assert env.interior.any()


def test_approach1_needs_curves_on_both_sides_of_the_optimum():
    sizes = np.logspace(6, 6.3, 3)  # all far below the optimum of their own longest runs
    runs, curves = training_curves(CHINCHILLA, sizes, 2e4 * sizes, noise=0.0, seed=9)
    with pytest.raises(FitError, match="distinct model size"):
        fit_approach1(build_curves(runs, curves))
    with pytest.raises(FitError, match="1 run.*need at least 2"):
        fit_approach1(build_curves(runs, curves)[:1])


def test_power_law_fits_refuse_degenerate_points():
    with pytest.raises(FitError, match="need at least 3"):
        fit_power_law([1.0, 2.0], [3.0, 4.0], what="t")
    with pytest.raises(FitError, match="x is constant"):
        fit_power_law([2.0, 2.0, 2.0], [1.0, 2.0, 3.0], what="t")
    with pytest.raises(FitError, match="loss is constant"):
        fit_inverse_power_law([1.0, 2.0, 3.0], [2.0, 2.0, 2.0], what="t")
    with pytest.raises(FitError, match="does not fall"):
        fit_inverse_power_law([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], what="t")
    with pytest.raises(FitError, match="non-finite"):
        fit_power_law([1.0, np.inf, 3.0], [1.0, 2.0, 3.0], what="t")


def test_batched_joint_refits_equal_one_at_a_time_refits_resample_by_resample():
    """The bootstrap's path for the joint law (every resample at once, Levenberg-Marquardt)
    reaches the minimum SciPy's least_squares reaches from the same start, resample by
    resample; a resample that cannot be fitted gets the reference's message."""
    runs = kaplan_grid(KAPLAN, np.logspace(6, 10, 5), np.logspace(8, 12, 5), seed=8)
    n, d, loss = (runs.column(k) for k in ("N", "D", "loss"))
    full = fit_joint_law(n, d, loss)
    indices = resample_indices(len(n), 30, seed=3)
    one_point = np.zeros((1, len(n)), dtype=int)  # loss constant: not a fit
    batched = refit_joint_batch(n, d, loss, full, np.vstack([indices, one_point]))
    for idx, many in zip(indices, batched[:-1], strict=True):
        one = fit_joint_law(n[idx], d[idx], loss[idx], full)
        assert many.rmse_log == pytest.approx(one.rmse_log, rel=1e-6)
        for name in ("alpha_N", "alpha_D"):
            assert getattr(many, name) == pytest.approx(getattr(one, name), rel=1e-4)
        for name in ("N_c", "D_c"):
            assert np.log(getattr(many, name)) == pytest.approx(np.log(getattr(one, name)),
                                                                abs=1e-3)
    with pytest.raises(FitError) as err:
        fit_joint_law(n[one_point[0]], d[one_point[0]], loss[one_point[0]], full)
    assert batched[-1] == str(err.value)


def test_the_kaplan_bootstrap_batched_equals_it_one_resample_at_a_time():
    """On a grid of N x D that identifies the joint law: the same statistics resample by
    resample. (On runs with D ∝ N it is not identified, and the two solvers stop at
    different points of its flat valley: refit_joint_batch's docstring.)"""
    runs = kaplan_grid(KAPLAN, np.logspace(6, 10, 5), np.logspace(8, 12, 5), seed=9)
    fit = _fit(runs)
    cols = tuple(runs.column(k) for k in ("N_kaplan", "D", "loss"))
    fast = bootstrap_kaplan(*cols, None, fit, n_resamples=20, seed=1)
    j = fit.joint
    one_by_one = _Refit(*cols, None,
                        (j.alpha_N, j.alpha_D, float(np.log(j.N_c)), float(np.log(j.D_c))),
                        DEFAULT_GRID_POINTS)
    slow = run_bootstrap(len(cols[0]), lambda idx: one_by_one(idx), n_resamples=20, seed=1)
    assert fast.samples.keys() == slow.samples.keys() >= {"joint_alpha_N", "alpha_N"}
    for name in fast.samples:
        np.testing.assert_allclose(fast.samples[name], slow.samples[name], rtol=1e-4,
                                   err_msg=name)

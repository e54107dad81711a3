"""The same runs under other N and C conventions: columns, the general Approach 3 allocation,
and how a and tokens per parameter move."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.analyze import Estimate, Skipped, analyze
from analysis.checks.conventions import (
    GRID,
    allocation,
    compare_conventions,
    convention_runs,
    resamples_for,
)
from analysis.errors import DataError
from analysis.fits.approach3 import fit_approach3
from analysis.fits.powerlaw import PowerLaw
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs
from analysis.runs.table import runs_from_arrays

LAW = ChinchillaLaw()
BUDGETS = np.logspace(17, 19, 5)
EMBEDDING = 3e6
"""Parameters in the embeddings: a constant share, large for the smallest models."""


@pytest.fixture(scope="module")
def runs():
    grid = isoflop_runs(LAW, BUDGETS, sizes_per_budget=7, noise=0.003, seed=4)
    n, d = grid.column("N"), grid.column("D")
    # Exact FLOPs: 6ND plus an attention term that matters most for small models.
    exact = 6 * n * d * (1 + 2e3 / np.sqrt(n))
    return runs_from_arrays(n, d, grid.column("loss"), budget=grid.column("budget"),
                            n_kaplan=n - EMBEDDING, extra={"flops_exact": exact})


@pytest.fixture(scope="module")
def table(runs):
    return compare_conventions(runs, bootstrap=20, seed=0)


def test_resamples_are_a_quarter_at_least_50_never_more_than_asked():
    assert [resamples_for(n) for n in (0, 20, 100, 400, 1000)] == [0, 20, 50, 100, 250]


def test_convention_runs_take_n_and_c_from_the_columns(runs):
    ne = convention_runs(runs, "non_embedding", "6nd")
    np.testing.assert_allclose(ne.column("N"), runs.column("N") - EMBEDDING)
    np.testing.assert_allclose(ne.column("C"), 6 * ne.column("N") * runs.column("D"))
    exact = convention_runs(runs, "total", "exact")
    np.testing.assert_array_equal(exact.column("C"), runs.column("flops_exact"))
    assert (exact.n_convention, exact.c_convention) == ("params_total", "exact")
    plain = runs_from_arrays(runs.column("N"), runs.column("D"), runs.column("loss"))
    with pytest.raises(DataError, match="flops_exact"):
        convention_runs(plain, "total", "exact")
    with pytest.raises(DataError, match="N_kaplan"):
        convention_runs(plain, "non_embedding", "6nd")


def test_allocation_for_6nd_is_hoffmanns_formula(runs):
    fit = fit_approach3(runs.column("N"), runs.column("D"), runs.column("loss"))
    out = allocation(fit.E, fit.A, fit.B, fit.alpha, fit.beta, PowerLaw(1.0, np.log(6.0), 9, 0),
                     1e21)
    assert out["a"] == pytest.approx(fit.a, rel=1e-12)
    assert out["b"] == pytest.approx(fit.b, rel=1e-12)
    assert out["n_opt"] == pytest.approx(fit.n_opt(1e21), rel=1e-10)
    assert out["tokens_per_param"] == pytest.approx(fit.tokens_per_param(1e21), rel=1e-10)


def test_allocation_minimises_the_loss_when_flops_per_token_is_k_n_p():
    k, p, flops = 40.0, 0.9, 1e20
    out = allocation(LAW.E, LAW.A, LAW.B, LAW.alpha, LAW.beta,
                     PowerLaw(p, np.log(k), 9, 0), flops)
    n = np.geomspace(1e6, 1e12, 200001)
    loss = LAW.loss(n, flops / (k * n**p))  # every N at this compute
    assert out["n_opt"] == pytest.approx(n[np.argmin(loss)], rel=1e-3)
    assert out["d_opt"] == pytest.approx(flops / (k * out["n_opt"] ** p), rel=1e-9)
    assert out["b"] == pytest.approx(1 - p * out["a"])


def test_four_rows_the_first_is_the_main_analysis(runs, table):
    assert [(r.n, r.c) for r in table.rows] == list(GRID)
    assert table.n_resamples == 20
    main = analyze(runs, bootstrap=0, approaches=("2", "3"), conventions=False)
    first = table.rows[0]
    assert first.label == "N = params_total, C = 6·N·D"
    assert first.approach2.point["a"] == pytest.approx(main.approach2.point["a"], rel=1e-12)
    # The main analysis reads the allocation numerically along the lines (analysis.fits.
    # optimum), the convention refit in closed form: equal to the optimiser's precision.
    assert first.approach3.point["tokens_per_param"] == pytest.approx(
        main.approach3.point["tokens_per_param"], rel=1e-5)
    for row in table.rows:
        for est in (row.approach2, row.approach3):
            assert isinstance(est, Estimate) and est.bootstrap.n_resamples == 20
            iv = est.ci95("a")
            assert iv.low <= iv.high


def test_counting_fewer_parameters_at_small_n_raises_a(table):
    by = {(r.n, r.c): r for r in table.rows}
    for name in ("approach2", "approach3"):
        total = getattr(by["total", "6nd"], name).point
        non_emb = getattr(by["non_embedding", "6nd"], name).point
        assert non_emb["a"] > total["a"] + 0.02, name
    # Exact FLOPs add more per token for small N (FLOPs per token ∝ N^p, p < 1): a larger
    # model costs relatively less, so a rises to β/(α + pβ).
    exact = by["total", "exact"].approach3
    p, fit = exact.fit.per_token.exponent, exact.fit.fit
    assert 0.8 < p < 1.0
    assert exact.point["a"] == pytest.approx(fit.beta / (fit.alpha + p * fit.beta), rel=1e-12)
    assert exact.point["a"] > by["total", "6nd"].approach3.point["a"]
    low, high = table.spread("3", "a")
    assert low < high and low == min(r.approach3.point["a"] for r in table.rows)


def test_missing_columns_become_rows_with_the_reason(runs):
    plain = runs_from_arrays(runs.column("N"), runs.column("D"), runs.column("loss"),
                             budget=runs.column("budget"))
    table = compare_conventions(plain, bootstrap=0, approaches=("2",))
    ok, *skipped = table.rows
    assert isinstance(ok.approach2, Estimate) and ok.approach3.reason == "not requested"
    assert all(isinstance(r.approach2, Skipped) for r in skipped)
    assert "exact FLOPs" in skipped[0].approach2.reason
    assert "N_kaplan" in skipped[1].approach2.reason

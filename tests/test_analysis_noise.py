"""Run-to-run noise: the pooled σ of seed replicates, one fitted point per cell, and the
residuals of the fits judged against σ."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.analyze import Skipped, analyze
from analysis.checks.noise import (
    collapse_curves,
    collapse_replicates,
    estimate_noise,
    replicate_groups,
)
from analysis.checks.residuals import approach3_residuals, expected_rms
from analysis.checks.verdict import LAWS
from analysis.runs.synthetic import ChinchillaLaw, replicated_runs
from analysis.runs.table import runs_from_arrays

LAW = ChinchillaLaw()
BUDGETS = np.logspace(17, 19, 5)
NOISE = 0.005


@pytest.fixture(scope="module")
def runs():
    return replicated_runs(LAW, BUDGETS, seeds=3, noise=NOISE, seed=1)


@pytest.fixture(scope="module")
def result(runs):
    return analyze(runs, bootstrap=0, conventions=False)


def _table(loss, seeds, n=None, d=None):
    size = len(loss)
    return runs_from_arrays(np.full(size, 1e6) if n is None else n,
                            np.full(size, 1e8) if d is None else d, loss,
                            run_ids=[f"r{i}" for i in range(size)], extra={"seed": seeds})


def test_pooled_sigma_and_its_chi2_interval_by_hand():
    # Groups (1.0, 1.2) and (2.0, 2.1, 2.2): squares 0.02 + 0.02 over 1 + 2 degrees of freedom.
    # No seed is in both groups, so no seed's offset can be told from its cell: σ is pooled.
    runs = _table([1.0, 1.2, 2.0, 2.1, 2.2], [0, 1, 2, 3, 4],
                  n=[1e6, 1e6, 2e6, 2e6, 2e6])
    noise = estimate_noise(runs)
    assert (noise.n_groups, noise.n_runs, noise.dof) == (2, 5, 3)
    assert (noise.draw_effect_dof, noise.draw_effect_p, noise.net_sigma) == (0, None, None)
    assert noise.pooled_sigma == noise.sigma and not noise.balanced
    assert noise.sigma == pytest.approx(np.sqrt(0.04 / 3), rel=1e-12)
    # chi2(3): 2.5% point 0.2158, 97.5% point 9.348.
    assert noise.sigma_ci.low == pytest.approx(noise.sigma * np.sqrt(3 / 9.3484), rel=1e-4)
    assert noise.sigma_ci.high == pytest.approx(noise.sigma * np.sqrt(3 / 0.21580), rel=1e-4)
    assert [g.std_loss for g in noise.groups] == pytest.approx([np.sqrt(0.02), 0.1])


def test_sigma_net_of_seed_offsets_by_hand():
    # Cells (1.0, 1.2) and (2.0, 2.3), seeds 0 and 1 in each: the seed-1 offset is the mean
    # difference 0.25; the residuals ±0.025 leave 4 squares of 0.000625 over 4 − 3 = 1 degree
    # of freedom. Within cells (offset included): (0.02 + 0.045) / 2.
    noise = estimate_noise(_table([1.0, 1.2, 2.0, 2.3], [0, 1, 0, 1], n=[1e6, 1e6, 2e6, 2e6]))
    assert noise.balanced and (noise.dof, noise.draw_effect_dof, noise.pooled_dof) == (1, 1, 2)
    assert noise.sigma == noise.net_sigma == pytest.approx(0.05, rel=1e-9)
    assert noise.pooled_sigma == pytest.approx(np.sqrt(0.0325), rel=1e-12)
    # F = (0.065 − 0.0025) / 0.0025 = 25 on (1, 1) degrees of freedom: p = 2/π·atan(1/5).
    assert noise.draw_effect_p == pytest.approx(2 / np.pi * np.arctan(0.2), rel=1e-9)
    # A third cell trained under seed 0 only: the fitted points no longer average the same
    # seeds (two carry half of seed 1's offset, one none), so σ keeps the offsets.
    uneven = estimate_noise(_table([1.0, 1.2, 2.0, 2.3, 3.0], [0, 1, 0, 1, 0],
                                   n=[1e6, 1e6, 2e6, 2e6, 4e6]))
    assert not uneven.balanced and uneven.net_sigma == pytest.approx(0.05, rel=1e-9)
    assert uneven.sigma == uneven.pooled_sigma and uneven.dof == 2
    # A cell whose seed repeats (0, 0, 1) is no replicate group: its runs are three points of
    # one draw each, so the points do not average the same seeds either.
    repeated = estimate_noise(_table([1.0, 1.2, 2.0, 2.3, 3.0, 3.05, 3.3], [0, 1, 0, 1, 0, 0, 1],
                                     n=[1e6, 1e6, 2e6, 2e6, 4e6, 4e6, 4e6]))
    assert repeated.n_groups == 2 and not repeated.balanced
    assert repeated.sigma == repeated.pooled_sigma


@pytest.mark.parametrize("offset", [0.0, 0.02])
def test_an_offset_shared_by_the_runs_of_a_seed_is_not_counted_as_noise(offset):
    """20 cells x 2 seeds, lognormal noise 0.005 and seed 1's losses raised by ``offset`` in
    ln L in every cell (as a seed's share of a small corpus does): σ recovers the noise either
    way (in ln L, where the model is exact); the pooled spread within cells carries the
    offset."""
    runs = replicated_runs(LAW, BUDGETS[:4], seeds=2, sizes_per_budget=5, noise=NOISE, seed=1)
    frame = runs.frame.copy()
    frame["loss"] = frame["loss"] * np.exp(offset * (frame["seed"] == 1))
    noise = estimate_noise(runs.with_frame(frame))
    assert (noise.n_groups, noise.dof, noise.draw_effect_dof, noise.balanced) == (20, 19, 1, True)
    assert noise.rel_sigma_ci.contains(NOISE)
    if offset:
        assert noise.draw_effect_p < 1e-6
        assert noise.pooled_sigma > 2 * noise.sigma  # sqrt(σ² + offset²/2) ≈ 0.015
    else:
        assert noise.draw_effect_p > 0.01
        assert noise.pooled_sigma == pytest.approx(noise.sigma, rel=0.3)


def test_sigma_recovers_the_generating_noise(runs):
    noise = estimate_noise(runs)
    # 5 budgets x 7 sizes, 3 seeds each: 70 degrees of freedom within cells, 2 to the offsets
    assert (noise.n_groups, noise.dof, noise.pooled_dof) == (35, 68, 70)
    assert noise.rel_sigma == pytest.approx(NOISE, rel=0.25)
    mean_loss = float(np.mean([g.mean_loss for g in noise.groups]))
    assert noise.sigma == pytest.approx(NOISE * mean_loss, rel=0.25)


def test_the_interval_covers_the_true_noise_95_percent_of_the_time():
    # Lognormal noise is normal in ln L, so the chi-square interval of rel_sigma is exact.
    draws = [estimate_noise(replicated_runs(LAW, BUDGETS[:2], seeds=2, sizes_per_budget=5,
                                            noise=NOISE, seed=s)) for s in range(300)]
    coverage = np.mean([n.rel_sigma_ci.contains(NOISE) for n in draws])
    assert 0.91 <= coverage <= 0.99


def test_no_replicates_and_repeated_seeds_are_not_noise():
    assert isinstance(estimate_noise(_table([3.0, 2.9, 2.8], [0, 0, 0],
                                            n=[1e6, 2e6, 4e6])), Skipped)
    # Two rows of one cell with the same seed (published data without seeds): not replicates.
    same_seed = _table([3.0, 3.1, 2.9], [0, 0, 1], n=[1e6, 1e6, 2e6])
    assert replicate_groups(same_seed) == []
    assert len(collapse_replicates(same_seed)) == 3


def test_collapse_averages_a_cell_into_its_lowest_seed_row():
    runs = _table([3.0, 3.3, 3.6, 2.5], [2, 0, 1, 0], n=[1e6, 1e6, 1e6, 2e6])
    points = collapse_replicates(runs)
    frame = points.frame.set_index("run_id")
    assert list(frame.index) == ["r1", "r3"]  # seed 0 represents the cell
    assert frame.loc["r1", "loss"] == pytest.approx(3.3)
    assert frame.loc["r1", "n_seeds"] == 3 and frame.loc["r3", "n_seeds"] == 1
    assert frame.loc["r1", "loss_std"] == pytest.approx(0.3)
    assert np.isnan(frame.loc["r3", "loss_std"])
    assert len(runs) == 4  # the input table is not modified


def test_curves_of_a_cell_are_averaged_under_its_kept_run_id():
    runs = _table([3.0, 3.3, 3.6, 2.5], [2, 0, 1, 0], n=[1e6, 1e6, 1e6, 2e6])
    rows = []
    for rid, shift in (("r0", 0.3), ("r1", 0.0), ("r2", 0.6), ("r3", -1.0)):
        for step, tokens in ((1, 100.0), (2, 200.0), (3, 300.0)):
            rows.append((rid, step, tokens, 5.0 - step + shift))
    rows.append(("r0", 4, 400.0, 9.9))  # evaluated by one seed only: not a mean, dropped
    curves = pd.DataFrame(rows, columns=["run_id", "step", "tokens", "loss"])
    out = collapse_curves(runs, curves)
    kept = out[out["run_id"] == "r1"].sort_values("tokens")
    assert kept["tokens"].tolist() == [100.0, 200.0, 300.0]
    assert kept["step"].tolist() == [1, 2, 3]
    assert kept["loss"].tolist() == pytest.approx([4.3, 3.3, 2.3])  # mean shift 0.3
    assert set(out["run_id"]) == {"r1", "r3"}  # r0 and r2 merged into r1
    assert out[out["run_id"] == "r3"]["loss"].tolist() == [3.0, 2.0, 1.0]  # alone: as it was
    assert list(out.columns) == list(curves.columns)
    assert len(curves) == 13  # the input is not modified
    assert collapse_curves(runs, None) is None


def test_fits_count_cells_not_seeds(runs, result):
    cells = len(runs) // 3
    assert result.n_runs == len(runs) and len(result.fitted_runs) == cells
    assert result.approach3.fit.n_points == cells
    assert result.selection.n_averaged == len(runs) - cells
    # The same as fitting the seed-averaged table directly.
    means = runs.frame.groupby(["N", "D"], sort=False)["loss"].mean()
    first = runs.frame.drop_duplicates(["N", "D"])
    direct = analyze(runs_from_arrays(first["N"], first["D"], means.to_numpy(),
                                      budget=first["budget"]), bootstrap=0,
                     approaches=("3",), conventions=False)
    # (Fitting all 105 runs instead gives alpha 0.3435: the test tells the two apart.)
    assert result.approach3.fit.alpha == pytest.approx(direct.approach3.fit.alpha, rel=1e-6)


def test_expected_rms_counts_seeds_and_degrees_of_freedom():
    assert expected_rms(0.1, np.ones(6), 3) == pytest.approx(0.1 * np.sqrt(3 / 6))
    assert expected_rms(0.1, np.full(6, 4.0), 3) == pytest.approx(0.05 * np.sqrt(3 / 6))
    assert expected_rms(0.1, np.ones(3), 3) is None  # an exact interpolation
    assert expected_rms(None, np.ones(6), 3) is None


def test_the_true_law_fits_down_to_the_noise(result):
    ratios = {r.what: r.ratio for r in result.residuals}
    fitted = result.approaches()  # the data-constrained laws are skipped: no run repeats
    laws = {what for name, (what, _) in LAWS.items()
            if name != "3" and not isinstance(fitted[name], Skipped)}
    assert {name for name in LAWS if isinstance(fitted[name], Skipped)} == {
        "data_constrained", "data_constrained_interaction"}
    assert set(ratios) == ({"Approach 3"} | laws
                           | {f"Approach 2, budget {b:.4g}" for b in BUDGETS})
    assert 0.7 < ratios["Approach 3"] < 1.4
    # The interaction law nests the true (additive) law: it fits down to the noise too.
    assert 0.7 < ratios[LAWS["interaction"][0]] < 1.4
    # One budget has 7 - 3 = 4 degrees of freedom: single ratios scatter, their median less.
    assert 0.5 < np.median([r for w, r in ratios.items() if w.startswith("Approach 2")]) < 1.5


def test_a_misfit_is_many_times_the_noise(runs, result):
    # A systematic wiggle in ln N that no E + A/N^α + B/D^β can follow.
    bent = runs.frame.assign(loss=runs.frame["loss"] * (1 + 0.03 * np.sin(2 * np.log(
        runs.frame["N"]))))
    bad = analyze(runs.with_frame(bent), bootstrap=0, approaches=("3",), conventions=False)
    check = approach3_residuals(bad.fitted_runs, bad.approach3.fit, bad.noise.sigma)
    assert check.ratio > 4
    assert bad.residuals[0] == check


def test_noise_is_pooled_separately_near_and_away_from_the_optimum() -> None:
    from analysis.checks.noise import NoiseEstimate, NoiseGroup, split_by_optimum
    from analysis.numerics.bootstrap import Interval

    def group(n: float, budget: float, std: float, seeds: int = 3) -> NoiseGroup:
        return NoiseGroup(family="gpt", N=n, D=1e6, budget=budget, schedule="cosine",
                          seeds=tuple(range(seeds)), run_ids=tuple("r" * (i + 1) for i in
                                                                   range(seeds)),
                          mean_loss=2.0, std_loss=std)

    groups = (group(1e4, 1e11, 0.01), group(3e4, 1e11, 0.1), group(1.5e4, 1e11, 0.02, 2),
              group(1e4, 5e11, 0.5))  # the last budget has no interior minimum
    noise = NoiseEstimate(n_groups=4, n_runs=11, dof=7, sigma=0.0, sigma_ci=Interval(0, 0),
                          rel_sigma=0.0, rel_sigma_ci=Interval(0, 0), groups=groups)
    split = split_by_optimum(noise, {1e11: 1e4}, factor=2.0)
    # Near: the 1e4 group (ratio 1, dof 2) and the 1.5e4 group (ratio 1.5, dof 1).
    assert split.near == pytest.approx(math.sqrt((2 * 0.01**2 + 1 * 0.02**2) / 3))
    assert (split.near_dof, split.far_dof) == (3, 2)
    assert split.far == pytest.approx(0.1)  # 3e4 is 3x N_opt
    assert split.n_over_n_opt[:3] == pytest.approx((1.0, 3.0, 1.5))
    assert math.isnan(split.n_over_n_opt[3])


def test_noise_propagation_is_the_spread_that_the_noise_alone_brings() -> None:
    from analysis.checks.propagation import propagate_noise_approach2
    from analysis.errors import FitError
    from analysis.fits.approach2 import fit_approach2

    runs = collapse_replicates(replicated_runs(LAW, BUDGETS, seeds=3, noise=0.0, seed=1))
    n, d, c, loss, budget = (runs.column(k) for k in ("N", "D", "C", "loss", "budget"))
    exact = fit_approach2(n, d, c, loss, budget).a
    ref = float(c.max())
    tiny = propagate_noise_approach2(runs, 1e-9, flops=ref, n_simulations=20, seed=0)
    assert tiny.interval("a").high - tiny.interval("a").low < 1e-5
    assert tiny.interval("a").contains(exact) or abs(tiny.samples["a"][0] - exact) < 1e-6
    small = propagate_noise_approach2(runs, 0.005, flops=ref, n_simulations=200, seed=0)
    large = propagate_noise_approach2(runs, 0.02, flops=ref, n_simulations=200, seed=0)
    width = [b.interval("a").high - b.interval("a").low for b in (small, large)]
    assert 0 < width[0] < width[1]  # more noise, a wider interval of a
    assert small.interval("a").contains(exact)
    with pytest.raises(FitError, match="positive σ"):
        propagate_noise_approach2(runs, 0.0, flops=ref, n_simulations=5, seed=0)


def test_analysis_reports_the_propagation_only_with_measured_noise() -> None:
    from analysis.numerics.bootstrap import Bootstrap

    with_seeds = analyze(replicated_runs(LAW, BUDGETS, seeds=3, noise=NOISE, seed=1),
                         bootstrap=30, approaches=("2",), conventions=False)
    assert isinstance(with_seeds.noise_propagation, Bootstrap)
    assert with_seeds.noise_propagation.n_resamples == 30
    one_seed = analyze(replicated_runs(LAW, BUDGETS, seeds=1, noise=NOISE, seed=1),
                       bootstrap=30, approaches=("2",), conventions=False)
    assert isinstance(one_seed.noise_propagation, Skipped)
    assert "no noise measured" in one_seed.noise_propagation.reason


def test_runs_of_one_seed_on_other_batches_are_replicates_of_their_cell():
    # train.data_seed (pipeline.vocab.spec): seed 1 on its own batches and seed 1 on seed 0's
    # batches are two draws of the cell; the same pair twice is not.
    runs = _table([3.0, 3.3, 3.6, 2.5, 2.6], [0, 1, 1, 0, 0], n=[1e6, 1e6, 1e6, 2e6, 2e6])
    runs = runs.with_frame(runs.frame.assign(data_seed=[0, 1, 0, 0, 0]))
    assert [list(g) for g in replicate_groups(runs)] == [[0, 1, 2]]
    noise = estimate_noise(runs)
    (group,) = noise.groups
    assert (group.seeds, group.data_seeds) == ((0, 1, 1), (0, 1, 0))
    assert noise.dof == 2 and group.std_loss == pytest.approx(0.3)
    frame = collapse_replicates(runs).frame.set_index("run_id")
    assert list(frame.index) == ["r0", "r3", "r4"]  # seed 0 on its own batches first
    assert frame.loc["r0", "loss"] == pytest.approx(3.3) and frame.loc["r0", "n_seeds"] == 3
    # Without the column (published data, old runs.csv files) only the seed tells draws apart.
    plain = _table([3.0, 3.3, 3.6], [0, 1, 1])
    assert replicate_groups(plain) == []


@pytest.mark.parametrize(("param", "expected"), [("0", 0), ("None", 1), (None, 1)])
def test_the_ledger_gives_each_run_its_batch_seed(param, expected):
    from types import SimpleNamespace

    from analysis.runs.load import _row
    from pipeline.vocab import keys

    params = {"train.seed": "1", **({} if param is None else {"train.data_seed": param})}
    metrics = {keys.PARAMS_TOTAL: 1e6, keys.FINAL_TOKENS: 1e8, keys.FINAL_VAL_LOSS: 3.0,
               keys.flops_key("exact"): 6e14}
    run = SimpleNamespace(data=SimpleNamespace(tags={}, metrics=metrics, params=params),
                          info=SimpleNamespace(run_id="m1", run_name="r"))
    row = _row(run, keys.flops_key("exact"))
    assert (row["seed"], row["data_seed"]) == (1, expected)

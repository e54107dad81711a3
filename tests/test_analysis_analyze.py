"""analyze(): every approach's typed result or the reason it was skipped, the comparison
with documented values, the extrapolation check, and one JSON schema."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading

import numpy as np
import pytest

from analysis.analyze import Estimate, Skipped, analyze
from analysis.checks.conventions import timed_refit_conventions
from analysis.checks.published import DOCUMENTED, compare
from analysis.fits.approach3 import DEFAULT_GRID, _prepare, _Refit, fit_approach3, screen_starts
from analysis.numerics import bootstrap as bootstrap_module
from analysis.numerics import workers as workers_module
from analysis.numerics.bootstrap import Interval, run_bootstrap
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs
from analysis.schema import analysis_to_json

LAW = ChinchillaLaw()
BUDGETS = np.logspace(17, 20, 7)


@pytest.fixture(scope="module")
def result():
    runs = isoflop_runs(LAW, BUDGETS, noise=0.005, seed=11)
    return analyze(runs, None, bootstrap=40, seed=3)


def test_every_approach_is_fitted_or_skipped_with_a_reason(result):
    assert isinstance(result.approach1, Skipped)
    assert result.approach1.reason == "no training curves"
    for est in (result.kaplan, result.approach2, result.approach3):
        assert isinstance(est, Estimate) and est.bootstrap.n_resamples == 40
    assert result.approach3.fit.a == pytest.approx(LAW.a, abs=0.02)
    assert result.reference_flops == pytest.approx(BUDGETS[-1])
    ci = result.approach3.ci95("tokens_per_param")
    assert ci.low <= result.approach3.point["tokens_per_param"] <= ci.high


def test_comparison_has_a_row_per_documented_value(result):
    rows = result.comparison
    assert len(rows) == len(DOCUMENTED)
    skipped = [r for r in rows if r.approach == "1"]
    assert all(r.estimate is None and "no training curves" in r.note for r in skipped)
    hoffmann_alpha = next(r for r in rows if r.quantity == "alpha" and r.approach == "3")
    assert hoffmann_alpha.documented == 0.34 and hoffmann_alpha.inside is True  # the true law
    for row in rows:
        if row.ci95 is not None:
            assert row.inside == row.ci95.contains(row.documented)


def test_extrapolation_predicts_the_held_out_budget(result):
    three, two = result.extrapolation["3"], result.extrapolation["2"]
    assert three.held_out.startswith("the largest budget C = 1e+20 (9 runs)")
    assert (three.n_train, three.n_held_out) == (54, 9)
    assert three.n_opt_reference_kind == "IsoFLOP parabola minimum of the held-out budget"
    assert three.loss_mean_abs_rel_error < 0.01  # noise is 0.5%
    assert abs(three.n_opt_rel_error) < 0.25
    assert abs(two.n_opt_rel_error) < 0.25 and two.loss_mean_abs_rel_error is None


def test_json_is_strict_and_has_the_documented_shape(result):
    out = json.loads(json.dumps(analysis_to_json(result), allow_nan=False))
    assert set(out) == {"schema", "source", "n_runs", "excluded", "conventions",
                        "reference_flops", "bootstrap", "approaches", "comparison",
                        "extrapolation", "fitted", "noise", "residuals", "holdout",
                        "convention_refits", "schedules", "noise_split", "noise_propagation",
                        "agreement", "laws", "summary", "backtest", "model_spread"}
    assert out["noise_split"] is None
    assert out["noise_propagation"]["status"] == "skipped"
    # No seeds, no held-out runs, no WSD runs: each check says so instead of inventing one.
    assert out["noise"]["status"] == out["holdout"]["status"] == "skipped"
    assert out["schedules"] == {"status": "skipped",
                                "reason": "no cell has both a cosine and a WSD run"}
    assert out["fitted"] == {"points": 63, "schedule": "", "averaged_runs": 0,
                             "holdout_runs": 0, "holdout_above": None, "left_out": [],
                             "repeated_data": [], "repeat_variants": 0}
    assert [r["what"] for r in out["residuals"]][:2] == ["Approach 3", "Approach 2, budget 1e+17"]
    assert all(r["ratio"] is None for r in out["residuals"])  # no noise scale to judge by
    assert out["approaches"]["1"] == {"status": "skipped", "reason": "no training curves"}
    two = out["approaches"]["2"]
    assert two["status"] == "ok" and len(two["budgets"]) == 7
    assert two["ci95"]["a"][0] <= two["a"] <= two["ci95"]["a"][1]
    assert out["extrapolation"]["3"]["status"] == "ok"
    # Approaches 2 and 3 on data drawn from one law: their paired difference contains 0.
    # Every bootstrapped approach and law is paired with every other, on the same draws.
    pairs = {(p["first"], p["second"]): p for p in out["agreement"]["pairs"]}
    assert set(pairs) == set(itertools.combinations(["2", "3", "interaction", "kaplan_joint",
                                                     "quadratic"], 2))
    pair = pairs["2", "3"]
    assert pair["n_paired"] == 40
    assert pair["difference_ci"][0] <= 0 <= pair["difference_ci"][1] and pair["agree"]
    # No noise measured: no law can be said to describe the runs; the headline says so.
    assert out["summary"]["headline"]["describes_runs"] is False
    assert all(law["residual_noise_ratio"] is None for law in out["laws"])
    assert {law["state"] for law in out["laws"]} == {"cannot be judged"}
    # No held-out runs; a rolling-origin backtest over the 7 budgets: 5 steps, every law.
    test = out["backtest"]
    assert test["status"] == "skipped" and test["rolling"]["status"] == "ok"
    steps = test["rolling"]["steps"]
    assert [s["n_fitted"] for s in steps] == [18, 27, 36, 45, 54]
    assert all(len(s["cells"]) == 9 for s in steps)
    worst = test["rolling"]["max_abs_rel_error"]
    assert set(worst) == {"3", "interaction", "kaplan_joint", "quadratic"}
    assert worst["3"] < 0.02  # the law the data were drawn from (0.5% noise)
    assert out["summary"]["headline"]["backtest_max_abs_rel_error"] == min(
        worst[k] for k in ("3", "interaction", "kaplan_joint"))


def test_a_single_budget_skips_approaches_2_and_3_with_the_reason():
    result = analyze(isoflop_runs(LAW, [1e18], seed=0), bootstrap=0, approaches=("2", "3"))
    assert "single compute budget" in result.approach2.reason
    assert "collinear" in result.approach3.reason
    assert result.kaplan.reason == "not requested"
    assert result.extrapolation["3"].reason == "approach 3 was not fitted"


def test_unknown_approach_is_refused():
    with pytest.raises(ValueError, match="unknown approach"):
        analyze(isoflop_runs(LAW, BUDGETS, seed=0), approaches=("4",))


def test_bootstrap_is_reproducible_by_seed_and_the_same_in_worker_processes(monkeypatch):
    monkeypatch.setattr(bootstrap_module, "MIN_PARALLEL_RESAMPLES", 1)  # pools even for 12
    runs = isoflop_runs(LAW, BUDGETS[:4], sizes_per_budget=5, seed=2)
    n, d, loss = runs.column("N"), runs.column("D"), runs.column("loss")
    fit = fit_approach3(n, d, loss)
    starts = np.vstack([fit.theta, screen_starts(_prepare(n, d, loss), DEFAULT_GRID, 3)])
    refit = _Refit(n, d, loss, starts, fit.delta, 1e20)
    one = run_bootstrap(len(n), refit, n_resamples=12, seed=5)
    again = run_bootstrap(len(n), refit, n_resamples=12, seed=5)
    other = run_bootstrap(len(n), refit, n_resamples=12, seed=6)
    two_jobs = run_bootstrap(len(n), refit, n_resamples=12, seed=5, n_jobs=2)
    with workers_module.worker_pool(2):  # one pool shared by two bootstraps
        shared = [run_bootstrap(len(n), refit, n_resamples=12, seed=5, n_jobs=2)
                  for _ in range(2)]
    np.testing.assert_array_equal(one.samples["alpha"], again.samples["alpha"])
    np.testing.assert_array_equal(one.samples["alpha"], two_jobs.samples["alpha"])
    for boot in shared:
        np.testing.assert_array_equal(one.samples["alpha"], boot.samples["alpha"])
        np.testing.assert_array_equal(one.fitted, boot.fitted)
    assert workers_module._POOL is None  # the pool ends with its block
    assert not np.array_equal(one.samples["alpha"], other.samples["alpha"])


def test_a_pool_left_at_once_waits_for_its_starting_workers_and_ends_them():
    """The workers start from a thread while the caller goes on (the report's full-data fits):
    a block that ends before they are up (an error at once) still ends with every worker
    gone and no thread left starting them."""
    with pytest.raises(RuntimeError, match="at once"), workers_module.worker_pool(2):
        pool = workers_module._POOL[1]
        raise RuntimeError("at once")
    assert not [t for t in threading.enumerate() if t.name == "pool-start"]
    assert workers_module._POOL is None
    workers = list(pool._processes.values()) if pool._processes else []
    assert all(w.exitcode is not None for w in workers)


def test_the_pool_preloads_what_its_workers_run_and_not_the_rest_of_the_report():
    """The fork server imports POOL_PRELOAD once for every worker; a task from a module beyond
    it would import that module in its worker, on the report's clock. The workers run the
    fits' refits and the convention refits; the preload holds both and leaves out what only
    the report's own process needs (analysis.analyze's checks, scipy.stats, matplotlib)."""
    code = ("import sys; import " + ", ".join(workers_module.POOL_PRELOAD) + "; print(sorted("
            "m for m in ('analysis.analyze', 'scipy.stats', 'matplotlib') if m in sys.modules), "
            "[n for n, s in __import__('analysis.fits.table').fits.table.FITS.items() "
            "if s.run.__module__ not in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["[]", "[]"]
    assert timed_refit_conventions.__module__ in workers_module.POOL_PRELOAD


def test_fit_json_is_the_same_with_one_process_or_a_pool(monkeypatch):
    """With --jobs 2 the fits run at once in threads and their resamples are split over two
    workers (analysis.analyze.fit_all, analysis.numerics.bootstrap); fit.json must be the one that
    a single process makes, to the last bit."""
    monkeypatch.setattr(bootstrap_module, "MIN_PARALLEL_RESAMPLES", 1)  # pools even for 16
    runs = isoflop_runs(LAW, BUDGETS[:4], sizes_per_budget=5, noise=0.01, seed=4)
    one, two = (analysis_to_json(analyze(runs, None, bootstrap=16, seed=2, n_jobs=jobs))
                for jobs in (1, 2))
    assert sum(isinstance(est, dict) and "ci95" in est for est in one["approaches"].values()) >= 5
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)


def test_compare_marks_inside_outside_and_missing():
    estimates = {
        "kaplan": ({"alpha_N": 0.08}, {"alpha_N": Interval(0.07, 0.09)}),
        "1": "no training curves",
        "2": ({"a": 0.6}, {"a": Interval(0.55, 0.65)}),
        "3": ({"a": 0.5}, {}),
    }
    rows = {(r.source, r.quantity, r.approach): r for r in compare(estimates)}
    assert rows[("Kaplan 2020", "alpha_N", "kaplan")].inside is True
    assert rows[("Hoffmann 2022", "a", "2")].inside is False
    no_ci = rows[("Hoffmann 2022", "a", "3")]
    assert no_ci.estimate == 0.5 and no_ci.ci95 is None and no_ci.inside is None
    assert rows[("Kaplan 2020", "alpha_D", "kaplan")].estimate is None
    assert "skipped: no training curves" in rows[("Hoffmann 2022", "a", "1")].note


def test_analysis_never_imports_torch():
    import subprocess
    import sys

    code = ("import sys, analysis.analyze, analysis.runs.load, analysis.fit, analysis.predict, "
            "analysis.render\n"
            "from analysis.runs.shapes import nearest_shape\n"
            "assert not isinstance(nearest_shape(1e6, 1e15, None), str)\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

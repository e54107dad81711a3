"""WSD against cosine: pairing by cell, differences in noise units, and the main fits kept
to one schedule."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from analysis.analyze import Skipped, analyze
from analysis.checks.schedules import compare_schedules
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs
from analysis.runs.table import runs_from_arrays

LAW = ChinchillaLaw()


def _runs(rows):
    """rows: (N, D, loss, schedule, seed, branch_of)."""
    n, d, loss, schedule, seed, branch = zip(*rows, strict=True)
    return runs_from_arrays(n, d, loss, run_ids=[f"r{i}" for i in range(len(rows))],
                            extra={"schedule": list(schedule), "seed": list(seed),
                                   "branch_of": list(branch)})


def test_pairs_are_cells_with_both_schedules():
    runs = _runs([
        (1e6, 1e8, 3.00, "cosine", 0, ""), (1e6, 1e8, 3.02, "cosine", 1, ""),
        (1e6, 1e8, 2.98, "wsd", 0, "trunk1"),
        (2e6, 1e8, 2.80, "cosine", 0, ""), (2e6, 1e8, 2.86, "wsd", 0, ""),
        (4e6, 1e8, 2.70, "cosine", 0, ""),  # no WSD run: not a pair
        (1e6, 2e8, 2.90, "wsd", 0, "trunk1"),  # no cosine run: not a pair
        (1e6, 1e8, 2.50, "constant", 0, ""),  # neither schedule
    ])
    comp = compare_schedules(runs, sigma=0.02)
    first, second = comp.pairs
    assert (first.N, first.n_cosine, first.n_wsd) == (1e6, 2, 1)
    assert first.cosine_loss == pytest.approx(3.01) and first.wsd_loss == pytest.approx(2.98)
    assert first.difference == pytest.approx(-0.03)
    assert first.z == pytest.approx(-0.03 / (0.02 * np.sqrt(1 / 2 + 1)))
    assert first.branched and not second.branched
    assert second.difference == pytest.approx(0.06)
    assert comp.mean_difference == pytest.approx(0.015)
    assert comp.se_difference == pytest.approx(np.std([-0.03, 0.06], ddof=1) / np.sqrt(2))


def test_without_noise_or_pairs():
    one = _runs([(1e6, 1e8, 3.0, "cosine", 0, ""), (1e6, 1e8, 3.1, "wsd", 0, "")])
    comp = compare_schedules(one)
    assert comp.pairs[0].z is None and comp.se_difference is None
    only_cosine = _runs([(1e6, 1e8, 3.0, "cosine", 0, ""), (2e6, 1e8, 2.9, "cosine", 0, "")])
    assert compare_schedules(only_cosine) == Skipped("no cell has both a cosine and a WSD run")


def test_main_fits_use_the_cosine_runs_only():
    grid = isoflop_runs(LAW, np.logspace(17, 19, 4), sizes_per_budget=6, noise=0.003, seed=2)
    size = len(grid)
    # The same cells again with WSD, 3% worse: fitting both would bend the law.
    n = np.concatenate([grid.column("N")] * 2)
    d = np.concatenate([grid.column("D")] * 2)
    loss = np.concatenate([grid.column("loss"), grid.column("loss") * 1.03])
    both = runs_from_arrays(n, d, loss, budget=np.concatenate([grid.column("budget")] * 2),
                            extra={"schedule": ["cosine"] * size + ["wsd"] * size})
    result = analyze(both, bootstrap=0, approaches=("2", "3"), conventions=False)
    alone = analyze(grid, bootstrap=0, approaches=("2", "3"), conventions=False)
    assert result.selection.schedule == "cosine" and len(result.fitted_runs) == size
    assert result.approach3.fit.alpha == pytest.approx(alone.approach3.fit.alpha, rel=1e-9)
    assert len(result.selection.left_out) == size
    assert result.selection.left_out[0].reason.startswith("schedule wsd: the fits use the "
                                                          "cosine runs only")
    assert len(result.schedules.pairs) == size
    assert result.schedules.mean_difference == pytest.approx(
        0.03 * float(np.mean(grid.column("loss"))), rel=1e-9)
    only_wsd = analyze(both.subset(both.frame["schedule"] == "wsd"), bootstrap=0,
                       approaches=("3",), conventions=False)
    assert only_wsd.selection.schedule == "wsd" and not only_wsd.selection.left_out


def test_repeated_data_runs_are_named_or_left_out_with_max_epochs(tmp_path):
    """Issue 17: runs that passed over their train split more than once are named in the
    selection (and fit.json) by default, and left out with --max-epochs, with the reason."""
    from analysis.fit import main as fit_main
    from analysis.reporting.sections import _fitted_words
    from analysis.runs.selection import select_runs
    from analysis.schema import analysis_to_json

    grid = isoflop_runs(LAW, np.logspace(17, 19, 4), sizes_per_budget=6, noise=0.003, seed=2)
    epochs = np.where(grid.column("D") > np.median(grid.column("D")), 2.5, 0.5)
    epochs[0] = np.nan  # a run recorded before epochs were: never counted as repeated
    runs = grid.with_frame(grid.frame.assign(epochs=epochs))
    n_over = int((epochs > 1).sum())
    kept = select_runs(runs)
    assert len(kept.fitted) == len(runs) and not kept.left_out
    assert len(kept.repeated) == n_over and {e for _, e in kept.repeated} == {2.5}
    strict = select_runs(runs, max_epochs=1.0)
    assert len(strict.fitted) == len(runs) - n_over and not strict.repeated
    assert all(e.reason == "repeats its data (2.50 epochs > --max-epochs 1)"
               for e in strict.left_out) and len(strict.left_out) == n_over
    assert len(select_runs(runs, max_epochs=3.0).repeated) == n_over  # allowed, still named
    result = analyze(runs, bootstrap=0, approaches=("3",), conventions=False)
    assert len(analysis_to_json(result)["fitted"]["repeated_data"]) == n_over
    assert (f"{n_over} fitted run(s) repeat their data, up to 2.50 epochs"
            in _fitted_words(result))  # the report's sentence on the fitted points
    # The CLIs: a CSV's epochs column and --max-epochs.
    csv = tmp_path / "runs.csv"
    runs.frame[["N", "D", "loss", "budget", "epochs"]].to_csv(csv, index=False)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert fit_main(["--csv", str(csv), "--budget-col", "budget", "--bootstrap", "0",
                         "--approach", "3", "--max-epochs", "1", "--json"]) == 0
    fitted = json.loads(printed.getvalue())["fitted"]
    assert len(fitted["left_out"]) == n_over and fitted["repeated_data"] == []

"""A new fit is one module-level fit function and one entry in the table of fits
(analysis.fits.table.FITS): with nothing else changed, fit.json, the console, the
--approach choices and the report all show it (docs/analysis.md "Adding a fit")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from analysis import fit as fit_command
from analysis.analyze import analyze
from analysis.fits import table
from analysis.fits.spec import FitInput, FitSpec, estimate
from analysis.numerics.bootstrap import run_bootstrap
from analysis.reporting.document import to_markdown
from analysis.reporting.sections import ReportInput, build
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs
from analysis.schema import analysis_to_json


# --- the toy "module": a fit returning a frozen dataclass with its statistics ---------------
@dataclass(frozen=True)
class LossTrend:
    """ln L = intercept + slope · ln C over every run."""

    slope: float
    intercept: float
    n_points: int

    def statistics(self) -> dict[str, float]:
        return {"loss_slope": self.slope}


def fit_loss_trend(c: np.ndarray, loss: np.ndarray) -> LossTrend:
    slope, intercept = np.polyfit(np.log(c), np.log(loss), 1)
    return LossTrend(float(slope), float(intercept), len(c))


def run_loss_trend(inp: FitInput):
    c, loss = inp.columns("C", "loss")
    boot = None if inp.n_resamples == 0 else (lambda f: run_bootstrap(
        len(c), lambda idx: fit_loss_trend(c[idx], loss[idx]).statistics(),
        n_resamples=inp.n_resamples, seed=inp.seed))
    return estimate(lambda: fit_loss_trend(c, loss), LossTrend.statistics, boot)


# --- the one table entry (in analysis/fits/table.py: register(TOY)) -----------------------------------------------------------------
TOY = FitSpec("trend", "Loss trend (ln L against ln C)", run_loss_trend,
              json_fields=lambda f: {"intercept": f.intercept, "n_points": f.n_points})


BUILTIN = ["kaplan", "1", "2", "3", "interaction", "kaplan_joint", "quadratic",
           "data_constrained", "data_constrained_interaction"]


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(table.FITS, TOY.name, TOY)  # = register(TOY), removed after the test
    return TOY


@pytest.fixture
def runs():
    return isoflop_runs(ChinchillaLaw(), np.logspace(18, 20, 4), sizes_per_budget=7, seed=5)


def test_a_registered_fit_is_in_fit_json_and_the_report(toy, runs):
    result = analyze(runs, bootstrap=16, seed=0, conventions=False)
    assert list(result.fits) == [*BUILTIN, "trend"]  # table order

    out = analysis_to_json(result)["approaches"]
    assert set(out) == {*BUILTIN, "trend"}
    trend = out["trend"]
    assert trend["status"] == "ok"
    assert trend["loss_slope"] == pytest.approx(result.fits["trend"].fit.slope)
    assert trend["loss_slope"] < 0  # loss falls with compute
    assert trend["n_points"] == len(result.fitted_runs)
    low, high = trend["ci95"]["loss_slope"]
    assert low <= trend["loss_slope"] <= high
    assert trend["bootstrap"]["resamples"] == 16

    ri = ReportInput(name="toy", command="pytest", runs=result.fitted_runs, figures={},
                     samples=None, sample_prompt="", provenance=("test",))
    md = to_markdown(build(result, ri))
    assert "## Loss trend (ln L against ln C) (approach trend)" in md
    row = next(line for line in md.splitlines() if line.startswith("| loss_slope"))
    assert f"{trend['loss_slope']:.4g}" in row


def test_a_registered_fit_is_an_approach_choice_and_can_be_left_out(toy, runs):
    choices = next(a.choices for a in fit_command.parser()._actions if a.dest == "approach")
    assert "trend" in choices and "all" in choices
    result = analyze(runs, bootstrap=0, approaches=("3",), conventions=False)
    assert analysis_to_json(result)["approaches"]["trend"] == {
        "status": "skipped", "reason": "not requested"}


def test_the_builtin_report_has_no_other_fits_section(runs):
    result = analyze(runs, bootstrap=0, conventions=False)
    assert list(result.fits) == BUILTIN
    ri = ReportInput(name="toy", command="pytest", runs=result.fitted_runs, figures={},
                     samples=None, sample_prompt="", provenance=("test",))
    assert "(approach " not in to_markdown(build(result, ri))

"""The answer (issue 55): the headline law's N_opt, D_opt, tokens per parameter and loss at the
reference compute, with intervals that can be shown, first in the report, in fit.json's
summary.answer and in the terminal's last lines."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.analyze import analyze
from analysis.checks.answer import answer
from analysis.checks.verdict import interval_problem
from analysis.fits.results import Estimate
from analysis.reporting.answer import answer_lines
from analysis.reporting.document import to_markdown
from analysis.reporting.sections import ReportInput, build
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs
from analysis.schema import analysis_to_json

BUDGETS = np.array([1e18, 3e18, 1e19, 3e19])


@pytest.fixture(scope="module")
def result():
    runs = isoflop_runs(ChinchillaLaw(), BUDGETS, sizes_per_budget=5, noise=0.002, seed=3)
    return analyze(runs, bootstrap=20, conventions=False, approaches=("3", "kaplan_joint"))


def test_the_answer_is_the_headline_law_at_the_reference_compute(result):
    found = result.answer()
    assert found is not None and found.law == result.verdict.headline
    est = result.fits[found.law]
    assert found.flops == result.reference_flops == pytest.approx(BUDGETS.max())
    for q in ("n_opt", "d_opt", "tokens_per_param", "loss_opt"):
        assert found.values[q] == est.point[q]
    assert found.next_flops == pytest.approx(3 * BUDGETS.max())
    summary = analysis_to_json(result)["summary"]["answer"]
    assert summary["law"] == found.law and summary["loss"] == est.point["loss_opt"]
    assert set(summary) >= {"n_opt", "n_opt_ci95", "d_opt", "d_opt_ci95", "tokens_per_param",
                            "tokens_per_param_ci95", "loss", "loss_ci95", "sure", "next"}
    assert "within" in summary["sure"]  # a backtest over four budgets


def test_the_report_leads_with_the_answer_and_the_terminal_says_it(result):
    ri = ReportInput(name="toy", command="pytest", runs=result.fitted_runs, figures={},
                     samples=None, sample_prompt="", provenance=("test",))
    md = to_markdown(build(result, ri))
    headings = [line for line in md.splitlines() if line.startswith("#")]
    assert headings[1].startswith("## Answer at C = 3e+19 FLOPs")
    n_opt = result.answer().values["n_opt"]
    assert f"| N_opt (parameters) | {n_opt:.3g} [" in md  # 3 significant figures
    lines = answer_lines(analysis_to_json(result)["summary"]["answer"])
    assert lines[0].startswith(f"answer at C = 3e+19 FLOPs ({result.verdict.headline}): "
                               f"N_opt {n_opt:.3g} [")
    assert answer_lines(None)[0].startswith("answer: none")


def test_an_interval_that_cannot_be_shown_is_not(result):
    """An interval that excludes its own estimate is said, not printed as an interval."""
    name = result.verdict.headline
    est = result.fits[name]
    samples = dict(est.bootstrap.samples)
    samples["n_opt"] = np.asarray(samples["n_opt"]) * 10.0  # every resample far above
    broken = Estimate(est.fit, est.point, bootstrap=type(est.bootstrap)(
        **{**est.bootstrap.__dict__, "samples": samples}))
    assert interval_problem(broken, "n_opt") is not None
    found = answer({**result.fits, name: broken}, result.verdict, result.model_spread,
                   result.reference_flops, float(BUDGETS.max()))
    assert found.intervals["n_opt"] is None and "excludes its own estimate" in found.cell("n_opt")
    assert found.intervals["d_opt"] is not None


def test_a_report_and_a_sweep_end_with_the_answer(result, tmp_path, capsys):
    """analysis.report's last lines and the sweep's, read from the report's fit.json (so a
    report kept because nothing changed says the same)."""
    from analysis.report import _say_answer as report_says
    from pipeline.sweep import _say_answer as sweep_says

    (tmp_path / "fit.json").write_text(json.dumps(analysis_to_json(result), allow_nan=False))
    lines: list[str] = []
    report_says(tmp_path, lines.append)
    assert lines == answer_lines(analysis_to_json(result)["summary"]["answer"])
    sweep_says(tmp_path / "report.html")
    out = " ".join(capsys.readouterr().out.split())
    assert " ".join(lines[0].split()) in out and "next: train the predicted optimum" in out

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


def test_predict_at_the_largest_budget_gives_the_answer(tmp_path, capsys):
    """One law answers everywhere (issue 55): `analysis.predict` without --approach uses the
    headline law, so at the largest budget it gives the report's N_opt and D_opt with the same
    intervals. Runs from an interaction law (γ = 0.8), where the headline is not Approach 3,
    predict's default before."""
    from analysis.fit import main as fit
    from analysis.predict import main as predict

    rng = np.random.default_rng(1)
    rows = ["N,D,C,loss"]
    for c in (1e17, 1e18, 1e19):
        for n in np.sqrt(c / 120) * np.geomspace(0.25, 4, 5):
            d = c / (6 * n)
            loss = (1.7 + (400 / n**0.34 + 410 / d**0.28) ** 0.8) * np.exp(rng.normal(0, 0.003))
            rows.append(f"{n:.6g},{d:.6g},{c:.6g},{loss:.6g}")
    (tmp_path / "runs.csv").write_text("\n".join(rows) + "\n")
    source = ["--csv", str(tmp_path / "runs.csv"), "--bootstrap", "10", "--json"]
    assert fit([*source, "--jobs", "1"]) == 0
    answer = json.loads(capsys.readouterr().out)["summary"]["answer"]
    assert answer["law"] == "interaction" and answer["flops"] == pytest.approx(1e19)
    assert predict([*source, "--flops", "1e19"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["approach"], out["approach_why"]) == (
        answer["law"], "the headline law, as in the report's answer")
    for q in ("n_opt", "d_opt"):
        assert out[q] == pytest.approx(answer[q], rel=1e-12)
        assert out["ci95"][q] == pytest.approx(answer[f"{q}_ci95"], rel=1e-12)

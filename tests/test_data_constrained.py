"""The data-constrained law (issue 52): its gradient, its reduction to the fresh-data laws,
recovery of known decay constants, identification flags, the published runs, the fixed-corpus
optimum and its place in the table of fits."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import predict
from analysis.checks.noise import replicate_groups
from analysis.checks.repetition import identify
from analysis.cli import run_main
from analysis.fits import approach3, interaction
from analysis.fits import data_constrained as dc
from analysis.fits.laws import predicted_loss
from analysis.fits.optimum import IsoFlopLines
from analysis.fits.results import Estimate, Skipped
from analysis.fits.spec import FitInput
from analysis.fits.table import FITS
from analysis.runs.table import RunsTable

DATA = Path(__file__).parent / "data" / "muennighoff2023_datablations_runs.csv"
# The paper's C4 base law (README "Parametric Fit"): 20 tokens per parameter at the optimum.
TRUE = np.array([6.255, 7.305, 0.625, 0.3527, 0.3527, math.log(15.0), math.log(5.0)])


def _design(noise: float, seed: int = 1, epochs: tuple[float, ...] = (2, 4, 8, 16, 32)
            ) -> tuple[np.ndarray, ...]:
    """Four sizes; fresh runs at 5, 20 and 80 tokens per parameter; runs that repeat
    U = 5N and 20N unique tokens for ``epochs`` epochs (52 runs with the default)."""
    n, d, u = [], [], []
    for size in (1e7, 3e7, 1e8, 3e8):
        for k in (5, 20, 80):
            n.append(size), d.append(k * size), u.append(k * size)
        for frac in (5, 20):
            for e in epochs:
                n.append(size), d.append(frac * size * e), u.append(frac * size)
    n, d, u = map(np.array, (n, d, u))
    ln = dc.log_loss(TRUE, np.log(n), np.log(d), np.log(u), "additive")
    rng = np.random.default_rng(seed)
    return n, d, u, np.exp(ln + noise * rng.standard_normal(n.size))


@pytest.mark.parametrize("form", dc.FORMS)
def test_gradient_matches_finite_differences(form: str) -> None:
    rng = np.random.default_rng(0)
    n = np.exp(rng.uniform(np.log(1e6), np.log(1e9), 40))
    d = np.exp(rng.uniform(np.log(1e7), np.log(1e10), 40))
    u = d / np.exp(rng.uniform(0, np.log(50), 40))
    theta = np.r_[TRUE[:5], [1.3] if form == "interaction" else [], TRUE[5:]] + 0.01
    ln_loss = dc.log_loss(theta, np.log(n), np.log(d), np.log(u), form) \
        + 0.01 * rng.standard_normal(40)
    args = (np.log(n), np.log(d), np.log(u), ln_loss, form)
    _, grad = dc.huber_objective(theta, *args)
    h = 1e-6
    numeric = np.array([(dc.huber_objective(theta + h * e, *args)[0]
                         - dc.huber_objective(theta - h * e, *args)[0]) / (2 * h)
                        for e in np.eye(theta.size)])
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-12)


def test_fresh_data_is_the_base_law() -> None:
    """U >= D and N up to N_opt(D): D' = D and N' = N, so each form is its base law."""
    law = dc.DataConstrainedLaw("additive", tuple(TRUE), 0.0, True, 1, 0)
    n, d = np.array([1e7, 1e8]), np.array([1e9, 1e10])  # 100 tokens/param: N < N_opt(D)
    a, b, e, alpha, beta = TRUE[:5]
    base = np.exp(e) + np.exp(a) / n**alpha + np.exp(b) / d**beta
    np.testing.assert_allclose(law.loss(n, d), base, rtol=1e-12)
    np.testing.assert_allclose(law.loss(n, d, 10 * d), base, rtol=1e-12)
    theta_i = (*TRUE[:5], 0.7, *TRUE[5:])
    law_i = dc.DataConstrainedLaw("interaction", theta_i, 0.0, True, 1, 0)
    ref = interaction.log_loss(np.array(theta_i[:6]), np.log(n), np.log(d))
    np.testing.assert_allclose(law_i.log_loss(np.log(n), np.log(d)), ref, rtol=1e-12)
    # Repeating the data costs loss; a repeated token is worth less than a fresh one.
    assert np.all(law.loss(n, d, d / 8) > base)
    assert np.all(law.loss(n, d, d / 8) < np.exp(e) + np.exp(a) / n**alpha
                  + np.exp(b) / (d / 8) ** beta)


@pytest.mark.parametrize(("noise", "tol"), [(0.0, 1e-3), (0.01, 0.10)])
def test_recovers_known_decay_constants(noise: float, tol: float) -> None:
    n, d, u, loss = _design(noise)
    law = dc.fit_data_constrained(n, d, u, loss)
    p = law.parameters()
    assert law.n_repeated == 40 and law.converged
    assert p["R_D_star"] == pytest.approx(15.0, rel=tol)
    if noise == 0.0:
        assert p["R_N_star"] == pytest.approx(5.0, rel=tol)
        assert p["alpha"] == pytest.approx(TRUE[3], rel=tol)
    flags, profiles = identify(law, n, d, u, loss)
    assert [f.parameter for f in flags] == []  # this design pins both
    assert min(profiles["R_D_star"], key=lambda vd: vd[1])[0] in (10.0, 30.0)


def test_design_that_barely_repeats_flags_r_d_star() -> None:
    """Runs repeating at most 1.3 epochs cannot tell R_D* = 1 from 1e4: said so."""
    n, d, u, loss = _design(0.01, seed=2, epochs=(1.1, 1.3))
    law = dc.fit_data_constrained(n, d, u, loss)
    flags, profiles = identify(law, n, d, u, loss)
    flagged = {f.parameter: f for f in flags}
    assert "R_D_star" in flagged
    assert flagged["R_D_star"].words.startswith("R_D* not identified")
    assert profiles["R_D_star"][-1][1] < 3.84  # the far end fits as well


def test_published_runs_fit_better_than_the_fresh_data_law() -> None:
    """Muennighoff et al.'s 296 runs (255 repeat their data): the data-constrained law's
    objective is 29% below the additive law's and its median error on the repeated runs
    2.5% against 3.2% (2026-12-07)."""
    frame = pd.read_csv(DATA)
    n, d, u, loss = (frame[k].to_numpy(float) for k in ("N", "D", "U", "loss"))
    repeated = d > u
    law = dc.fit_data_constrained(n, d, u, loss)
    base = approach3.fit_approach3(n, d, loss)
    assert law.n_repeated == int(repeated.sum()) == 255
    assert law.objective < 0.8 * base.objective

    def median_error(pred: np.ndarray) -> float:
        return float(np.median(np.abs(pred - loss)[repeated] / loss[repeated]))

    assert median_error(law.loss(n, d, u)) < 0.85 * median_error(base.loss(n, d))


def test_corpus_optimum_prefers_epochs_to_excess_parameters() -> None:
    """With R_D* = 15 > R_N* = 5 excess parameters lose value faster than repeated tokens,
    so a scarce corpus moves the optimum to a smaller model trained for more epochs
    (Muennighoff et al. 2023, Sec. 5: "allocate more compute to epochs than parameters")."""
    law = dc.DataConstrainedLaw("additive", tuple(TRUE), 0.0, True, 1, 0)
    flops = 6 * 1e9 * 20e9
    lines = IsoFlopLines((0.0,), math.log(1e7), math.log(1e10), (flops,))  # C = 6ND
    plenty = dc.corpus_optimum(law, lines, flops, 1e15)
    assert plenty.n_opt == pytest.approx(plenty.n_opt_fresh, rel=1e-5)
    assert plenty.repetition_cost == pytest.approx(0.0, abs=1e-9)
    assert plenty.d_opt / plenty.n_opt == pytest.approx(19.6, rel=0.02)  # 1/G² of the law
    scarce = dc.corpus_optimum(law, lines, flops, 1e9)  # ~20 epochs at the fresh optimum
    assert scarce.n_opt < 0.8 * scarce.n_opt_fresh and not scarce.on_bound
    assert scarce.d_opt > scarce.d_opt_fresh and scarce.epochs > 20
    assert scarce.repetition_cost > 0.1
    assert scarce.n_opt * scarce.d_opt * 6 == pytest.approx(flops, rel=1e-9)


def test_returns_vanish_where_the_optimum_repeats_2_3_r_d_star() -> None:
    law = dc.DataConstrainedLaw("additive", tuple(TRUE), 0.0, True, 1, 0)
    assert dc.epochs_vanish(law) == pytest.approx(1 + 15.0 * math.log(10))
    small, large = dc.returns_vanish_flops(law, 1e9), dc.returns_vanish_flops(law, 1e10)
    assert small is not None and large is not None and large > 10 * small
    lines = IsoFlopLines((0.0,), math.log(small / 6e11), math.log(small / 6e9), (small,))
    at = dc.corpus_optimum(law, lines, small, 1e9)
    assert at.epochs == pytest.approx(dc.epochs_vanish(law), rel=1e-3)


def _runs(n: np.ndarray, d: np.ndarray, u: np.ndarray | None, loss: np.ndarray,
          seeds: np.ndarray | None = None) -> RunsTable:
    frame = pd.DataFrame({"run_id": [f"r{i}" for i in range(n.size)], "N": n, "D": d,
                          "C": 6 * n * d, "loss": loss, "budget": np.nan, "N_kaplan": np.nan,
                          "C_kaplan": np.nan, "family": ""})
    if u is not None:
        frame["unique_tokens"] = u
    if seeds is not None:
        frame["seed"] = seeds
    return RunsTable(frame, source="test")


def test_table_entry_skips_without_u_or_repetition() -> None:
    n, d, u, loss = _design(0.0)
    spec = FITS["data_constrained"]
    no_u = spec.run(FitInput(_runs(n, d, None, loss), None, 1e18, 0, 0))
    assert isinstance(no_u, Skipped) and "--unique-col" in no_u.reason
    fresh = spec.run(FitInput(_runs(n, d, d, loss), None, 1e18, 0, 0))
    assert isinstance(fresh, Skipped) and "no run repeats its data" in fresh.reason
    partial = u.copy()
    partial[0] = np.nan
    some = spec.run(FitInput(_runs(n, d, partial, loss), None, 1e18, 0, 0))
    assert isinstance(some, Skipped) and "1 of 52 runs lack U" in some.reason


def test_table_entry_fits_predicts_with_u_and_bootstraps() -> None:
    n, d, u, loss = _design(0.005)
    runs = _runs(n, d, u, loss)
    est = FITS["data_constrained"].run(FitInput(runs, None, 1e18, 8, 0))
    assert isinstance(est, Estimate)
    assert est.point["R_D_star"] == pytest.approx(15.0, rel=0.1)
    assert est.ci95("R_D_star") is not None and est.ci95("a") is not None
    # The verdict and the backtests read each run's U: the fresh-data reading is off.
    with_u = predicted_loss(est.fit, runs)
    np.testing.assert_allclose(with_u, loss, rtol=0.03)
    fresh = est.fit.loss(n, d)
    assert np.max(np.abs(fresh - loss) / loss) > 0.05
    fields = FITS["data_constrained"].json_fields(est.fit)
    assert fields["n_repeated"] == 40 and fields["identification"] == []
    assert [p["value"] for p in fields["profiles"]["R_D_star"]][0] == 0.01


def test_runs_of_one_n_and_d_with_other_u_are_not_seeds() -> None:
    n = np.array([1e7, 1e7, 1e7, 1e7])
    d = np.full(4, 1e9)
    loss = np.array([3.0, 3.01, 3.2, 3.21])
    u = np.array([1e9, 1e9, 1e8, 1e8])
    groups = replicate_groups(_runs(n, d, u, loss, seeds=np.array([0, 1, 0, 1])))
    assert sorted(map(list, groups)) == [[0, 1], [2, 3]]


def test_epochs_give_u_when_no_column_does() -> None:
    runs = _runs(np.array([1e7, 1e7]), np.array([1e9, 1e9]), None, np.array([3.0, 3.1]))
    runs = runs.with_frame(runs.frame.assign(epochs=[0.5, 4.0]))
    np.testing.assert_allclose(runs.unique_tokens(), [1e9, 2.5e8])


# --------------------------------------------------------------------------- predict --unique-tokens


def _small_csv(tmp_path: Path, with_u: bool = True) -> Path:
    """The 52-run synthetic design as a published CSV (U in column U)."""
    n, d, u, loss = _design(0.005)
    frame = pd.DataFrame({"N": n, "D": d, "loss": loss})
    if with_u:
        frame["U"] = u
    path = tmp_path / "runs.csv"
    frame.to_csv(path, index=False)
    return path


def _error_line(err: str) -> str:
    """The one error line (the loader's notes on budgets may come before it)."""
    lines = err.strip().splitlines()
    assert sum(line.startswith("error: ") for line in lines) == 1 and "Traceback" not in err
    assert lines[-1].startswith("error: ")
    return lines[-1]


def test_predict_with_a_fixed_corpus(tmp_path, capsys) -> None:
    path = _small_csv(tmp_path)
    args = ["--csv", str(path), "--flops", "1.2e20", "--unique-tokens", "1e9", "--bootstrap",
            "4", "--json"]
    assert run_main(predict.main, args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["approach"] == "data_constrained"  # the default with --unique-tokens
    corpus = out["corpus"]
    assert corpus["unique_tokens"] == 1e9
    assert corpus["n_opt_corpus"] < out["n_opt"] and corpus["epochs_corpus"] > 20
    assert corpus["repetition_cost"] > 0.1
    assert corpus["epochs_vanish"] == pytest.approx(1 + math.log(10) * 15.0, rel=0.15)
    assert corpus["returns_vanish_flops"] > 0
    assert set(corpus["ci95"]) >= {"n_opt_corpus", "repetition_cost"}
    assert run_main(predict.main, args[:-1]) == 0  # the table and the sentence
    assert "More epochs stop paying beyond about" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(("extra", "says"), [
    (["--unique-tokens", "1e9", "--approach", "3"], "--unique-tokens needs a data-constrained"),
    (["--unique-tokens", "0"], "--unique-tokens '0'"),
    (["--unique-tokens", "corpus"], "the runs record no train split"),
])
def test_predict_refuses_a_bad_corpus_in_one_line(tmp_path, capsys, extra, says) -> None:
    path = _small_csv(tmp_path)
    args = ["--csv", str(path), "--flops", "1e20", "--bootstrap", "0", *extra]
    assert run_main(predict.main, args) == 2
    last = _error_line(capsys.readouterr().err)
    assert says in last


def test_predict_without_u_says_the_law_needs_it(tmp_path, capsys) -> None:
    path = _small_csv(tmp_path, with_u=False)
    args = ["--csv", str(path), "--flops", "1e20", "--bootstrap", "0", "--unique-tokens", "1e9"]
    assert run_main(predict.main, args) == 2
    assert "no run records U" in _error_line(capsys.readouterr().err)


def test_predict_refuses_more_unique_tokens_than_the_corpus(capsys) -> None:
    """vit_digits' runs record their train split (D / epochs): U beyond it is refused
    before any fit."""
    export = Path(__file__).parents[1] / "reports" / "vit_digits" / "runs_export.json"
    args = ["--export", str(export), "--flops", "1e12", "--bootstrap", "0",
            "--unique-tokens", "1e12"]
    assert run_main(predict.main, args) == 2
    assert "larger than the corpus the runs trained on" in _error_line(capsys.readouterr().err)


def _low_epochs_vit(tmp_path: Path) -> tuple[Path, Path]:
    """vit_digits' export, and its sweep file with data.max_epochs lowered to 5."""
    root = Path(__file__).parents[1]
    text = (root / "sweeps" / "vit_digits.yaml").read_text(encoding="utf-8")
    lines = [("  max_epochs: 5.0" if line.startswith("  max_epochs: 2000") else line)
             for line in text.splitlines()]
    assert "  max_epochs: 5.0" in lines
    source = tmp_path / "vit_low.yaml"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root / "reports" / "vit_digits" / "runs_export.json", source


def test_predict_writes_the_sweep_for_the_corpus_and_it_dry_runs(tmp_path, capsys,
                                                                   monkeypatch) -> None:
    """--write with --unique-tokens corpus: sizes around the optimum with only the corpus,
    data.max_epochs raised to the passes they make (and the file says why), and the sweep
    it writes passes the planner's repetition check in a dry run."""
    from pipeline.config import load_sweep
    from pipeline.sweep import main as sweep

    export, source = _low_epochs_vit(tmp_path)
    out = tmp_path / "vit_next.yaml"
    args = ["--export", str(export), "--sweep-file", str(source), "--flops", "3e12",
            "--unique-tokens", "corpus", "--bootstrap", "0", "--json", "--write", str(out)]
    assert run_main(predict.main, args) == 0
    found = json.loads(capsys.readouterr().out)
    cfg = load_sweep(out)
    assert cfg.data.max_epochs > max(5.0, found["corpus"]["epochs_corpus"])
    assert f"# data.max_epochs {cfg.data.max_epochs:g} (the source allows 5)" in \
        out.read_text(encoding="utf-8")
    assert found["shape"]["params_total"] == pytest.approx(found["corpus"]["n_opt_corpus"],
                                                           rel=0.6)  # the corpus optimum's
    monkeypatch.chdir(tmp_path)
    assert sweep([str(out), "--dry-run", "--no-estimate", "--quiet"]) == 0
    assert "error" not in capsys.readouterr().err


def test_predict_refuses_to_write_a_sweep_for_part_of_the_corpus(tmp_path, capsys) -> None:
    export, source = _low_epochs_vit(tmp_path)
    args = ["--export", str(export), "--sweep-file", str(source), "--flops", "3e12",
            "--unique-tokens", "1000", "--bootstrap", "0", "--write", str(tmp_path / "n.yaml")]
    assert run_main(predict.main, args) == 2
    assert "trains on its whole corpus" in _error_line(capsys.readouterr().err)
    assert not (tmp_path / "n.yaml").exists()


def test_the_report_warns_when_no_run_had_fresh_data() -> None:
    """All runs repeating one U (vit_digits): what the law owes to repetition is an
    extrapolation to data the runs never had, and the report says so."""
    from types import SimpleNamespace

    from analysis.reporting.document import to_markdown
    from analysis.reporting.repetition import repetition_section

    n = np.repeat([1e7, 3e7, 1e8, 3e8], 5)
    d = 1e9 * np.tile([2.0, 4.0, 8.0, 16.0, 32.0], 4)
    u = np.full(n.size, 1e9)
    loss = np.exp(dc.log_loss(TRUE, np.log(n), np.log(d), np.log(u), "additive"))
    est = FITS["data_constrained"].run(FitInput(_runs(n, d, u, loss), None, 1e19, 0, 0))
    assert isinstance(est, Estimate)
    md = to_markdown(repetition_section(SimpleNamespace(fits={"data_constrained": est},
                                                        verdict=None)))
    assert "Caution: every fitted run repeats its data, all the same U = 1e+09" in md
    fresh = FITS["data_constrained"].run(FitInput(_runs(*_design(0.0)[:3], _design(0.0)[3]),
                                                  None, 1e19, 0, 0))
    md = to_markdown(repetition_section(SimpleNamespace(fits={"data_constrained": fresh},
                                                        verdict=None)))
    assert "## Repeated data" in md and "Caution" not in md


def test_repeat_variants_are_fitted_by_the_data_constrained_laws_only() -> None:
    """analysis.runs.selection rule 4: cells at the N and D of a main cell on a tenth of its
    unique tokens (a sweep's isoflop.repeats) go to the laws that model U. Approach 3 then
    fits exactly what it fits without them, Approach 2's parabolas have the main sizes only,
    the backtest predicts the main cells, and the data-constrained law fits all 40."""
    from analysis.analyze import analyze
    from analysis.runs.selection import select_runs

    n, d, u, budget = [], [], [], []
    for c in (1e18, 3e18, 1e19, 3e19):
        for size in np.sqrt(c / 120) * np.geomspace(0.25, 4, 5):
            for share in (1.0, 0.1):  # the main cell, then its variant on a tenth
                n.append(size), d.append(c / (6 * size)), budget.append(c)
                u.append(share * c / (6 * size))
    n, d, u, budget = map(np.array, (n, d, u, budget))
    ln = dc.log_loss(TRUE, np.log(n), np.log(d), np.log(u), "additive")
    loss = np.exp(ln + 0.002 * np.random.default_rng(2).standard_normal(n.size))
    runs = _runs(n, d, u, loss)
    runs = runs.with_frame(runs.frame.assign(budget=budget))
    main = runs.subset(u == d)
    selection = select_runs(runs)
    assert len(selection.fitted) == len(selection.repeats) == 20
    np.testing.assert_array_equal(selection.fitted.column("N"), main.column("N"))
    laws = ("2", "3", "data_constrained")
    both = analyze(runs, bootstrap=0, conventions=False, approaches=laws)
    alone = analyze(main, bootstrap=0, conventions=False, approaches=("2", "3"), backtests=False)
    assert both.fits["3"].point == alone.fits["3"].point
    assert both.fits["2"].point == alone.fits["2"].point
    assert FITS["data_constrained"].json_fields(both.fits["data_constrained"].fit)[
        "n_repeated"] == 20
    first = both.backtests.rolling[0]
    assert len(first.cells) == 5 and "data_constrained" not in first.skipped
    assert all(cell.predicted["data_constrained"] is not None for cell in first.cells)

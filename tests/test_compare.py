"""analysis.comparison / analysis.compare: the compute multiplier of B over A recovered on
synthetic pairs of laws with a known multiplier (constant, and growing with C), the
refusals of sweeps whose losses do not compare, and the command's outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import brentq

from analysis.compare import main
from analysis.comparison import check_comparable, compare
from analysis.errors import DataError
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs

BUDGETS = np.logspace(18, 20, 5)
A = ChinchillaLaw()


def scaled(law: ChinchillaLaw, k: float) -> ChinchillaLaw:
    """B(N, D) = A(k^a N, k^b D) with a + b = 1: B at C is A at k·C along the optimum."""
    a = law.beta / (law.alpha + law.beta)
    return ChinchillaLaw(E=law.E, A=law.A * k ** (-a * law.alpha),
                         B=law.B * k ** (-(1 - a) * law.beta), alpha=law.alpha, beta=law.beta)


def true_multiplier(a: ChinchillaLaw, b: ChinchillaLaw, flops: float) -> float:
    """C_A(L_B(C)) / C from the closed-form frontiers (C = 6ND lines)."""
    def frontier(law, c):
        return law.loss(law.n_opt(c), c / (6 * law.n_opt(c)))
    target = frontier(b, flops)
    return float(np.exp(brentq(lambda x: frontier(a, np.exp(x)) - target,
                               np.log(flops) - 20, np.log(flops) + 20))) / flops


@pytest.mark.parametrize("b_law", [
    scaled(A, 2.0),  # a constant multiplier of 2
    # Exponents 8% steeper, coefficients 1.6x: 1.12x at 1e18, growing to 1.62x at 1e20.
    ChinchillaLaw(E=A.E, A=A.A * 1.6, B=A.B * 1.6, alpha=A.alpha * 1.08, beta=A.beta * 1.08),
], ids=["constant", "growing"])
def test_the_multiplier_is_recovered_within_5_percent_inside_the_budgets(b_law):
    ra = isoflop_runs(A, BUDGETS, sizes_per_budget=7, noise=0.002, seed=1)
    rb = isoflop_runs(b_law, BUDGETS, sizes_per_budget=7, noise=0.002, seed=2)
    result = compare(ra, rb, bootstrap=0)
    truth = [true_multiplier(A, b_law, c) for c in BUDGETS]
    got = [result.multiplier(c)[0] for c in BUDGETS]
    np.testing.assert_allclose(got, truth, rtol=0.05)
    if b_law.beta != A.beta:  # the growing case really grows over the 2 decades
        assert truth[-1] > 1.4 * truth[0]


def test_intervals_cover_the_truth_and_larger_budgets_are_marked_extrapolated():
    b_law = scaled(A, 2.0)
    ra = isoflop_runs(A, BUDGETS, sizes_per_budget=7, noise=0.005, seed=3)
    rb = isoflop_runs(b_law, BUDGETS, sizes_per_budget=7, noise=0.005, seed=4)
    result = compare(ra, rb, larger=(1e21, 1e24), bootstrap=60, seed=0)
    # At the top budget A's answer, 2 x 1e20, lies above A's budgets: extrapolated too.
    assert result.extrapolated == (False,) * (len(BUDGETS) - 1) + (True, True, True)
    # Four decades above the budgets the optimum leaves the searched sizes: no number.
    assert np.isnan(result.multiplier(1e24)[0])
    for c in BUDGETS:
        value, ci = result.multiplier(c)
        assert ci.low < value < ci.high
        assert ci.contains(2.0), (c, ci)
    assert result.intervals["gamma_diff"].contains(0.0)  # same exponents
    assert "the frontier exponents do not differ" in result.verdict()
    assert result.verdict().startswith("At C = 1e+20, A needs 2")
    assert "(an extrapolation: A's frontier read at 2" in result.verdict()


def test_sweeps_whose_losses_do_not_compare_are_refused():
    ra = isoflop_runs(A, BUDGETS, sizes_per_budget=5, seed=1)
    rb = isoflop_runs(A, BUDGETS, sizes_per_budget=5, seed=2)
    assert check_comparable(ra, rb) == ["data_corpus", "data_tokenizer", "data_fingerprint",
                                        "seq_len"]  # synthetic runs record none of them
    ra.frame["data_corpus"], rb.frame["data_corpus"] = "stdlib", "stdlib"
    ra.frame["data_tokenizer"], rb.frame["data_tokenizer"] = "bytes", "bpe-4096"
    with pytest.raises(DataError, match="differ in data_tokenizer \\(bytes against bpe-4096\\)"):
        check_comparable(ra, rb)
    rb.frame["data_tokenizer"] = "bytes"
    assert check_comparable(ra, rb) == ["data_fingerprint", "seq_len"]
    other = type(rb)(rb.frame, source="B", c_convention="exact")
    with pytest.raises(DataError, match="under 'exact': compare them under one FLOP"):
        check_comparable(ra, other)  # ra: synthetic, C = 6ND
    csv = type(rb)(rb.frame, source="B", c_convention="column 'C'")
    assert "flops_convention" in check_comparable(ra, csv)  # unknown: said, not refused


def test_the_command_writes_json_markdown_and_the_figure(tmp_path, capsys):
    paths = []
    for name, law, seed in (("a", A, 1), ("b", scaled(A, 2.0), 2)):
        path = tmp_path / f"{name}.csv"
        isoflop_runs(law, BUDGETS, sizes_per_budget=7, noise=0.002, seed=seed).frame.to_csv(
            path, index=False)
        paths.append(str(path))
    out = tmp_path / "cmp"
    assert main([*paths, "--flops", "1e21", "--bootstrap", "10", "--json",
                 "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((out / "compare.json").read_text())
    assert [m["extrapolated"] for m in printed["multiplier"]] == [False] * 4 + [True, True]
    assert printed["multiplier"][2]["value"] == pytest.approx(2.0, rel=0.05)
    assert printed["verdict"].startswith("At C = 1e+20, A needs")
    assert "| 1e+21 |" in (out / "compare.md").read_text()
    assert (out / "figures" / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_out_never_replaces_a_folder_that_is_not_a_comparison(tmp_path, capsys):
    from analysis.cli import run_main

    path = tmp_path / "a.csv"
    isoflop_runs(A, BUDGETS, sizes_per_budget=7, noise=0.002, seed=1).frame.to_csv(path,
                                                                                    index=False)
    precious = tmp_path / "work"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    assert run_main(main, [str(path), str(path), "--bootstrap", "0",
                           "--out", str(precious)]) == 2
    assert "holds no comparison" in capsys.readouterr().err
    assert (precious / "notes.txt").read_text() == "keep me"

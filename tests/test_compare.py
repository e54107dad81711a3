"""analysis.comparison / analysis.compare: the compute multiplier of B over A recovered on
synthetic pairs of laws with a known multiplier (constant, and growing with C), the
refusals of sweeps whose losses do not compare, and the command's outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import brentq

from analysis.compare import figure, main, to_json, to_markdown
from analysis.comparison import (
    ABOVE_SEARCH,
    BELOW_SEARCH,
    BEYOND_A,
    BEYOND_B,
    NOTES,
    Comparison,
    check_comparable,
    compare,
)
from analysis.errors import DataError
from analysis.numerics.bootstrap import Interval
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs
from analysis.runs.table import runs_from_arrays

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
    assert result.note(1e24) == BEYOND_B
    for c in BUDGETS:
        value, ci = result.multiplier(c)
        assert ci.low < value < ci.high
        assert ci.contains(2.0), (c, ci)
    assert result.intervals["gamma_diff"].contains(0.0)  # same exponents
    assert "the frontier exponents do not differ" in result.verdict()
    assert result.verdict().startswith("B saves 2")
    assert "extrapolated at 1e+20: A's frontier read beyond its budgets" in result.verdict()
    assert f"at 1e+24: {BEYOND_B}" in result.verdict()


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
    assert printed["verdict"].startswith("B saves 2")
    assert printed["summary"]["case"] == "B saves"
    assert [m["value"] for m in printed["summary"]["budgets"]] == [
        m["value"] for m in printed["multiplier"] if m["trained"]]
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


QUICKSTART_BUDGETS = np.array([1e18, 3e18, 1e19])


def fixed_sizes_runs(law: ChinchillaLaw, seed: int) -> object:
    """The quickstart's shape (issue 55): the same 4 sizes at each of 3 budgets spanning a
    decade, from 2x to 20x the smallest budget's N_opt (its dip lies below the sizes). The
    optimum search reaches 10x below the sizes, so 100x below the smallest budget (N_opt
    ~8x lower) A's frontier is not trusted, though it is at every budget and at 6x them."""
    sizes = law.n_opt(QUICKSTART_BUDGETS[0]) * np.logspace(0.3, 1.3, 4)
    n = np.tile(sizes, QUICKSTART_BUDGETS.size)
    c = np.repeat(QUICKSTART_BUDGETS, sizes.size)
    rng = np.random.default_rng(seed)
    loss = law.loss(n, c / (6 * n)) * np.exp(0.002 * rng.standard_normal(n.size))
    return runs_from_arrays(n, c / (6 * n), loss, budget=c, n_kaplan=n,
                            source=f"fixed sizes (seed {seed})")


def test_a_crossing_inside_the_budgets_is_found_where_the_old_search_edge_is_untrusted():
    b_law = scaled(A, 6.0)  # B is worth 6x A's compute at every C
    result = compare(fixed_sizes_runs(A, 1), fixed_sizes_runs(b_law, 2), bootstrap=0)
    fa = result.frontiers[0]
    assert np.isnan(fa.loss(QUICKSTART_BUDGETS[0] / 100))  # the old search's lower edge
    for c in QUICKSTART_BUDGETS:  # before issue 55's fix: NaN at each, "beyond A's reach"
        assert result.multiplier(c)[0] == pytest.approx(true_multiplier(A, b_law, c), rel=0.05)
        assert result.note(c) is None
    assert result.verdict().startswith("B saves 5.9x compute at the budgets trained (5.8x-5.9x; "
                                       "point estimates, without intervals; ")


def _hand_made(values: dict[float, tuple[float, tuple[float, float] | None]],
               notes: dict[float, str] | None = None,
               larger: tuple[float, ...] = ()) -> Comparison:
    """A comparison with the given multipliers (and intervals) at budgets trained, plus
    ``larger`` computes beyond them: the verdict's wording without fitting anything."""
    notes = notes or {}
    flops = tuple(sorted({*values, *notes, *larger}))
    point = {f"multiplier@{c:.6g}": values.get(c, (float("nan"),))[0] for c in flops}
    point["gamma_diff"] = 0.01
    intervals = {f"multiplier@{c:.6g}": Interval(*v[1]) for c, v in values.items()
                 if v[1] is not None}
    intervals["gamma_diff"] = Interval(-0.02, 0.04)
    return Comparison("a", "b", flops, tuple(c in larger for c in flops), max(flops), point,
                      intervals, notes=tuple(notes.get(c) for c in flops),
                      trained=tuple(c not in larger for c in flops))


@pytest.mark.parametrize(("values", "expected"), [
    ({1e18: (5.45, (4.0, 7.0)), 1e19: (6.07, (4.5, 8.0)), 1e20: (7.57, (5.0, 11.0))},
     "B saves 6.1x compute at the budgets trained (5.5x-7.6x); "),
    ({1e18: (0.5, (0.4, 0.6)), 1e19: (0.25, (0.2, 0.3))},
     "A saves 2.8x compute at the budgets trained (2x-4x); "),
    ({1e18: (0.9, (0.7, 1.2)), 1e19: (1.1, (0.8, 1.5))},
     "A and B are indistinguishable at the budgets trained: every interval contains 1x "
     "(0.9x-1.1x); "),
    ({1e18: (1.5, (1.2, 1.9)), 1e19: (1.1, (0.8, 1.5)), 1e20: (0.5, (0.4, 0.6))},
     "The budgets trained disagree: B saves compute at 1e+18 (1.5x), A saves compute at "
     "1e+20 (0.5x), the interval contains 1x at 1e+19 (1.1x); "),
    ({1e18: (3.0, None), 1e19: (4.0, None)},
     "B saves 3.5x compute at the budgets trained (3x-4x; point estimates, without "
     "intervals); "),
], ids=["B saves", "A saves", "indistinguishable", "mixed", "no intervals"])
def test_the_verdict_says_who_saves_how_much_at_the_budgets_trained(values, expected):
    verdict = _hand_made(values).verdict()
    assert verdict.startswith(expected)
    assert verdict.endswith("beyond them, nothing was read; the frontier exponents do not "
                            "differ (B − A = +0.010 [-0.020, +0.040]).")


def test_table_and_verdict_name_each_missing_multiplier_with_one_word():
    c = _hand_made({1e18: (2.0, (1.5, 2.5)), 1e19: (2.1, (1.6, 2.6))},
                   notes={1e20: BEYOND_A, 1e24: BEYOND_B, 1e21: ABOVE_SEARCH,
                          1e15: BELOW_SEARCH}, larger=(1e21, 1e24))
    out = to_json(c, [])
    text = to_markdown(out)
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1]
            for line in text.splitlines() if line.startswith("| 1e+")}
    for flops, word in ((1e15, BELOW_SEARCH), (1e20, BEYOND_A), (1e21, ABOVE_SEARCH),
                        (1e24, BEYOND_B)):
        assert rows[f"{flops:.3g}"] == word  # the table's cell
        entry = next(m for m in out["multiplier"] if m["flops"] == flops)
        assert entry["note"] == word and entry["value"] is None  # the JSON
    assert out["verdict"].startswith("B saves 2x compute at the budgets trained (2x-2.1x; "
                                     f"1e+15: {BELOW_SEARCH}; 1e+20: {BEYOND_A}); beyond "
                                     f"them, at 1e+21: {ABOVE_SEARCH}; at 1e+24: {BEYOND_B}; ")
    for retired in ("beyond A's reach", "out of the frontiers' trusted range",
                    "out of trusted range"):
        assert retired not in text
    assert set(NOTES) == {BEYOND_A, BEYOND_B, ABOVE_SEARCH, BELOW_SEARCH}
    assert out["summary"]["case"] == "B saves"
    assert out["summary"]["missing"] == [{"note": BELOW_SEARCH, "flops": [1e15]},
                                         {"note": BEYOND_A, "flops": [1e20]}]


def test_the_figure_draws_each_multiplier_as_a_point_with_its_interval():
    b_law = scaled(A, 6.0)
    result = compare(fixed_sizes_runs(A, 1), fixed_sizes_runs(b_law, 2), bootstrap=0)
    right = figure(result).axes[1]
    points = [line for line in right.get_lines() if line.get_marker() == "o"]
    drawn = dict(zip(np.concatenate([line.get_xdata() for line in points]),
                     np.concatenate([line.get_ydata() for line in points]), strict=True))
    assert sorted(drawn) == pytest.approx(QUICKSTART_BUDGETS)
    for c, m in drawn.items():
        assert m == pytest.approx(result.multiplier(float(c))[0])
    assert right.containers  # the error bars (zero length here: no bootstrap)


def test_the_command_prints_every_number_and_one_word_per_missing_case(tmp_path, capsys):
    paths = []
    for name, law, seed in (("a", A, 1), ("b", scaled(A, 6.0), 2)):
        paths.append(str(tmp_path / f"{name}.csv"))
        fixed_sizes_runs(law, seed).frame.to_csv(paths[-1], index=False)
    # 1e21: A needs 6e21, above its 2-decade search window (1e21); 1e24: B's own optimum
    # leaves B's searched sizes.
    assert main([*paths, "--flops", "1e21", "--flops", "1e24", "--bootstrap", "0"]) == 0
    text = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1]
            for line in text.splitlines() if line[:3] in {"| 1", "| 3"}}
    assert [float(rows[f"{c:.3g}"]) for c in QUICKSTART_BUDGETS] == pytest.approx([6] * 3,
                                                                                   rel=0.05)
    assert (rows["1e+21"], rows["1e+24"]) == (ABOVE_SEARCH, BEYOND_B)
    assert (f"beyond them, at 1e+21: {ABOVE_SEARCH}; at 1e+24: {BEYOND_B}; "
            in text.splitlines()[2])  # the verdict, under the title

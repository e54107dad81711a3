"""Published data read like a careful researcher would (issue 51): IsoFLOP budgets grouped
within a relative tolerance, rows filtered with --where (a small parser, never eval), a C column
checked against 6ND for its unit, compare with the CSV options of fit, and predict on a CSV
without the shape rule's irrelevant advice.

Why these: a real ladder's C is 6·N·D with D rounded to whole batches, so its budgets differ
in the 4th significant digit and grouping by exact C made fake 3-run sets; a published file
holds several recipes (Porian et al. 2024: 15 configurations in one table) that must be
separated before a fit; and a C column in GFLOPs fits the same exponents at budgets 1e9 off.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import compare, fit, predict
from analysis.cli import run_main
from analysis.errors import DataError
from analysis.runs import published
from analysis.runs.load import load_csv
from analysis.runs.published import parse_where
from analysis.runs.synthetic import ChinchillaLaw

DATA = Path(__file__).parent / "data"
EPOCH = DATA / "chinchilla_epoch_fig4.csv"
PORIAN = DATA / "porian2024_isoflop_points.csv"
COSINE_RW = "dataset == 'rw' and decay == 'chinchilla' and param_count == 'standard'"
"""One of Porian et al.'s 15 configurations: RefinedWeb, cosine decay, standard N count."""
PORIAN_A = 0.571425
"""The authors' N_opt ∝ C^a for COSINE_RW (porian2024_isoflop_fits.csv, basic.n_exponent)."""
BATCH_TOKENS = 2**20
"""A ladder's batch in tokens (OLMo's 1B runs: 1,048,576): D is a whole number of batches."""
BUDGETS = (1e18, 3e18, 1e19, 3e19)


def _quiet(_: str) -> None:
    pass


def _ladder(tmp_path: Path, *, sizes: int = 5, budget_col: bool = False) -> Path:
    """A published-style IsoFLOP ladder: per budget, ``sizes`` sizes around the law's N_opt,
    D rounded to whole batches, and C = 6·N·D as published (so C is off the nominal budget
    in the 4th significant digit)."""
    law, rows = ChinchillaLaw(), []
    for budget in BUDGETS:
        for n in law.n_opt(budget) * np.geomspace(0.25, 4.0, sizes):
            n = float(round(n))
            d = round(budget / (6.0 * n) / BATCH_TOKENS) * BATCH_TOKENS
            rows.append({"N": n, "D": float(d), "C": 6.0 * n * d,
                         "loss": float(law.loss(n, d)), "nominal": budget})
    frame = pd.DataFrame(rows)
    if not budget_col:
        frame = frame.drop(columns="nominal")
    path = tmp_path / "ladder.csv"
    frame.to_csv(path, index=False)
    return path


# ------------------------------------------------------------------------- budgets


def test_a_ladder_whose_budgets_differ_in_the_4th_digit_groups_into_its_real_budgets(tmp_path):
    path = _ladder(tmp_path)
    c = pd.read_csv(path)["C"].to_numpy()
    # The file is what the test says: within a budget, C differs in the 4th significant
    # digit, so grouping by C to 6 digits (the rule before) sees more Cs than budgets.
    fourth = [np.unique([f"{v:.4g}" for v in c[i:i + 5]]).size for i in range(0, c.size, 5)]
    assert sum(k > 1 for k in fourth) >= 2
    assert np.unique([f"{v:.6g}" for v in c]).size > len(BUDGETS)
    messages: list[str] = []
    runs = load_csv(path, c_col="C", log=messages.append)
    budget = runs.column("budget")
    labels, counts = np.unique(budget, return_counts=True)
    assert labels.size == len(BUDGETS) and (counts == 5).all()
    np.testing.assert_allclose(labels, BUDGETS, rtol=published.BUDGET_RTOL)
    np.testing.assert_allclose(budget, np.repeat(labels, 5))  # each run in its own budget
    assert messages == []  # nothing to warn about


def test_the_ladder_fits_approach_2_on_its_real_budgets(tmp_path, capsys):
    """Grouped right, Approach 2 recovers the law's a from the 4th-digit ladder (before: every
    run was alone at its C, and Approach 2 had no budget)."""
    args = ["--csv", str(_ladder(tmp_path, sizes=7)), "--approach", "2", "--bootstrap", "0",
            "--json"]
    assert run_main(fit.main, args) == 0
    out = json.loads(capsys.readouterr().out)
    two = out["approaches"]["2"]
    assert two["status"] == "ok"
    assert two["a"] == pytest.approx(ChinchillaLaw().a, abs=0.02)


def test_budget_col_still_gives_the_budgets(tmp_path):
    runs = load_csv(_ladder(tmp_path, budget_col=True), budget_col="nominal", log=_quiet)
    np.testing.assert_array_equal(np.unique(runs.column("budget")), BUDGETS)


def test_a_group_of_fewer_than_3_sizes_is_named(tmp_path):
    path = tmp_path / "runs.csv"
    rows = ["N,D,loss,seed"]
    rows += [f"{n:g},{1e18 / (6 * n):g},{3 - 0.1 * i},{i % 2}"  # 4 runs, 2 sizes (2 seeds)
             for i, n in enumerate((1e7, 1e7, 2e7, 2e7))]
    rows += [f"{n:g},{1e19 / (6 * n):g},{2.5 - 0.1 * i},0" for i, n in enumerate((1e7, 2e7, 4e7))]
    rows += [f"{n:g},{1e20 / (6 * n):g},{2.2 - 0.1 * i},0" for i, n in enumerate((1e8, 2e8))]
    path.write_text("\n".join(rows) + "\n")
    messages: list[str] = []
    runs = load_csv(path, log=messages.append)
    assert len(messages) == 1
    assert "2 group(s) of runs sharing a C (within 1%) have fewer than 3 sizes" in messages[0]
    assert "C ≈ 1e+18 (4 runs, 2 sizes)" in messages[0]
    assert "C ≈ 1e+20 (2 runs, 2 sizes)" in messages[0]
    assert "keep one with --where" in messages[0]  # a size twice: several recipes?
    budget = runs.column("budget")  # 3 runs or more are a budget (Approach 2 flags it)
    assert np.isfinite(budget[:7]).all() and np.isnan(budget[7:]).all()


def test_digitized_c_forms_no_fake_budgets():
    """The Epoch points were read off a plot: C lies within ~8% of 9 nominal budgets, ~1%
    apart, so runs fall within 1% of each other by chance. They are named, not grouped."""
    messages: list[str] = []
    runs = load_csv(EPOCH, n_col="Model Size", c_col="Training FLOP", log=messages.append)
    assert np.isnan(runs.column("budget")).all()
    assert any("form no IsoFLOP budget" in m and "--budget-col" in m for m in messages)


def test_without_the_isolation_rule_digitized_c_makes_fake_budgets(monkeypatch):
    """The rule the previous test relies on: at 1% alone, 3-4 run sets appear."""
    monkeypatch.setattr(published, "BUDGET_SEPARATION", 0.0)
    runs = load_csv(EPOCH, n_col="Model Size", c_col="Training FLOP", log=_quiet)
    assert np.unique(runs.column("budget")[np.isfinite(runs.column("budget"))]).size >= 5


# ------------------------------------------------------------------------- --where


def test_where_keeps_one_configuration_of_a_published_table(capsys):
    """Porian et al.'s table mixes 15 configurations; one of them, kept with --where, gives the
    authors' exponent, and the whole table a biased one."""
    base = ["--csv", str(PORIAN), "--c-col", "flops", "--approach", "2", "--bootstrap", "0",
            "--json"]
    assert run_main(fit.main, [*base, "--where", COSINE_RW]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["n_runs"] == 88 and f"rows where {COSINE_RW}" in out["source"]
    assert "keeps 88 of 1745 rows" in captured.err
    assert out["approaches"]["2"]["a"] == pytest.approx(PORIAN_A, abs=0.02)
    assert run_main(fit.main, base) == 0
    mixed = json.loads(capsys.readouterr().out)
    assert abs(mixed["approaches"]["2"]["a"] - PORIAN_A) > 0.1


def test_where_compares_numbers_and_text(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("N,D,loss,model_type,Model Size\n"
                    "1e7,1e9,3.0,dense,1\n2e7,1e9,2.9,moe,2\n4e8,1e10,2.5,dense,3\n"
                    "8e8,1e11,2.4,,4\n6e8,2e10,2.45,dense,5\n3e7,2e9,2.8,moe,6\n")
    def kept(expr: str) -> list[float]:
        return load_csv(path, where=expr, log=_quiet).column("N").tolist()

    assert kept("model_type == 'dense'") == [1e7, 4e8, 6e8]
    assert kept('model_type != "dense"') == [2e7, 3e7]  # a blank cell matches no comparison
    assert kept("N >= 1e8 and D < 5e10") == [4e8, 6e8]
    assert kept("`Model Size` > 1 and `Model Size` <= 3") == [2e7, 4e8]
    assert kept("N>=2e7 and N<7e8") == [2e7, 4e8, 6e8, 3e7]  # no spaces needed


def test_parse_where_reads_the_grammar_and_nothing_more():
    parsed = parse_where("N >= 1e8 and model_type == 'dense'")
    assert [(c.column, c.op, c.value) for c in parsed] == [("N", ">=", 1e8),
                                                           ("model_type", "==", "dense")]


HOSTILE = "__import__('os').system('touch PWNED') == 1"


@pytest.mark.parametrize(("expr", "says"), [
    ("size == 1", "no column 'size'; the columns are 'N', 'D', 'loss', 'model_type'"),
    ("N >> 3", "expected a number or a quoted text after 'N >', got '>'"),
    ("N > 1 or D < 3", "comparisons are joined by 'and'"),
    ("model_type == dense", "value 'dense' of column 'model_type' is not a number"),
    ("model_type < 'dense'", "text compares with == or != only"),
    ("model_type > 3", "column 'model_type' is not numeric"),
    ("N > 1 and", "comparisons are joined by 'and'"),
    ("N == 'x", "a quote or backquote left open"),
    ("", "is empty"),
    ("model_type == 'moe'", "leaves no row: model_type == 'moe' matches none of 2 rows "
                            "(column 'model_type' has 'dense')"),
    ("N > 1e9", "leaves no row: N > 1e+09 matches none of 2 rows (column 'N' runs from 1e+07 "
                "to 2e+07)"),
    ("N > 1.5e7 and N < 1.5e7", "no row meets all of its comparisons"),
    (HOSTILE, "expected COLUMN OP VALUE"),
])
def test_a_bad_where_is_one_error_line_naming_option_expression_and_column(
        tmp_path, monkeypatch, capsys, expr, says):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "runs.csv"
    path.write_text("N,D,loss,model_type\n1e7,1e9,3.0,dense\n2e7,1e10,2.9,dense\n")
    assert run_main(fit.main, ["--csv", str(path), "--where", expr, "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert f"runs.csv: --where {expr!r}" in err and says in err
    assert not (tmp_path / "PWNED").exists()


def test_where_on_a_sweep_or_export_is_refused(capsys):
    assert run_main(fit.main, ["--export", "x.json", "--where", "N > 1"]) == 2
    assert "--where 'N > 1': filters the rows of a --csv file only" in capsys.readouterr().err


# ------------------------------------------------------------------------- units


def _with_c(tmp_path: Path, factor: float, *, drop: str | None = None) -> Path:
    frame = pd.read_csv(_ladder(tmp_path))
    frame["C"] = frame["C"] * factor
    if drop:
        frame = frame.drop(columns=drop)
    path = tmp_path / "units.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize(("factor", "unit", "median"), [
    (1e-9, "GFLOPs", "1.0e-09"), (1e-12, "TFLOPs", "1.0e-12"), (1e-15, "PFLOPs", "1.0e-15"),
    (1 / 8.64e19, "PF-days", "1.2e-20"), (1e-3, "kFLOPs", "1.0e-03"),
])
def test_a_c_column_in_another_unit_is_named(tmp_path, factor, unit, median):
    with pytest.raises(DataError) as err:
        load_csv(_with_c(tmp_path, factor), c_col="C", log=_quiet)
    assert str(err.value) == (f"{tmp_path / 'units.csv'}: column 'C' looks like {unit}: "
                              f"C/(6ND) has median {median} (FLOPs give 0.1 to 10); give FLOPs")


def test_a_c_column_in_gflops_without_d_is_named(tmp_path):
    with pytest.raises(DataError, match=r"units\.csv: column 'C' looks like GFLOPs: D = C/\(6N\) "
                                        r"gives a median of .*e-0[89] tokens per parameter"):
        load_csv(_with_c(tmp_path, 1e-9, drop="D"), c_col="C", log=_quiet)


def test_n_counted_in_millions_is_named(tmp_path):
    frame = pd.read_csv(_ladder(tmp_path))
    frame["N"] = frame["N"] / 1e6
    frame.to_csv(tmp_path / "m.csv", index=False)
    with pytest.raises(DataError, match=r"column 'C' is 1\.0e\+06 times 6·N·D.*columns 'N' or "
                                        r"'D' counted in thousands or millions"):
        load_csv(tmp_path / "m.csv", log=_quiet)


def test_c_within_the_band_of_other_flop_counts_passes(tmp_path):
    """An exact count (attention, embeddings) moves C/(6ND) by tens of percent, not 10x."""
    for factor in (0.5, 1.3, 3.0):
        load_csv(_with_c(tmp_path, factor), c_col="C", log=_quiet)


def test_the_published_files_pass_the_units_check():
    load_csv(EPOCH, n_col="Model Size", c_col="Training FLOP", log=_quiet)  # D derived
    load_csv(PORIAN, c_col="flops", where=COSINE_RW, log=_quiet)  # N, D and C given
    load_csv(PORIAN, c_col="flops", log=_quiet)  # every configuration, kaplan N included


# ------------------------------------------------------------------------- compare, predict


def test_compare_takes_fits_csv_options_per_side(capsys):
    owt2 = COSINE_RW.replace("'rw'", "'owt2'")
    args = [str(PORIAN), str(PORIAN), "--c-col", "flops", "--where-a", COSINE_RW,
            "--where-b", owt2, "--bootstrap", "0", "--json"]
    assert run_main(compare.main, args) == 0
    out = json.loads(capsys.readouterr().out)
    assert f"rows where {COSINE_RW}" in out["a"] and f"rows where {owt2}" in out["b"]
    assert out["point"]["a_A"] != out["point"]["a_B"]


def test_compare_errors_name_its_own_options(tmp_path, capsys):
    path = tmp_path / "runs.csv"
    path.write_text("N,D,err\n1e6,1e7,3\n2e6,1e8,2.9\n")
    assert run_main(compare.main, [str(path), str(EPOCH), "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert "(give --loss-col-a (or --loss-col))" in err
    assert run_main(compare.main, [str(path), str(EPOCH), "--loss-col-a", "loss"]) == 2
    assert "no column 'loss' (--loss-col-a)" in capsys.readouterr().err
    assert run_main(compare.main, ["sweep_a", str(EPOCH), "--where-a", "N > 1"]) == 2
    assert "--where-a: side A (sweep_a) is not a CSV" in capsys.readouterr().err
    help_text = compare.parser().format_help()
    for option in ("--n-col", "--d-col-a", "--c-col-b", "--loss-col", "--budget-col-a",
                   "--where-b", "--drop-highest-loss"):
        assert option in help_text


def test_predict_on_a_csv_says_shapes_need_a_family(capsys):
    args = ["--csv", str(EPOCH), "--n-col", "Model Size", "--c-col", "Training FLOP",
            "--loss-col", "loss", "--drop-highest-loss", "5", "--flops", "5.76e23",
            "--bootstrap", "0"]
    assert run_main(predict.main, args) == 0
    text = " ".join(capsys.readouterr().out.split())  # rich wraps lines
    assert "n_opt" in text and "max_depth" not in text
    assert "the runs name no model family (published data)" in text
    assert "a buildable shape needs a sweep's family (--sweep or --export)" in text

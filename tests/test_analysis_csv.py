"""CSV input: loading published data (column mapping, derived D or C, budgets) and its
errors, and the fit/predict commands on the Epoch Chinchilla data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.errors import DataError
from analysis.runs.load import load_csv

EPOCH = Path(__file__).parent / "data" / "chinchilla_epoch_fig4.csv"
EPOCH_ARGS = ["--csv", str(EPOCH), "--n-col", "Model Size", "--c-col", "Training FLOP",
              "--loss-col", "loss", "--drop-highest-loss", "5"]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "runs.csv"
    path.write_text(text)
    return path


def test_csv_derives_d_from_c_and_finds_repeated_budgets(tmp_path):
    rows = ["N,C,loss"] + [f"{n},{c},{3 - i * 0.1}" for i, (n, c) in enumerate(
        [(1e6, 1e18), (2e6, 1e18), (4e6, 1e18), (1e6, 3e18), (2e7, 5e18)])]
    runs = load_csv(_write(tmp_path, "\n".join(rows)), log=lambda _: None)
    np.testing.assert_allclose(runs.column("D"), runs.column("C") / (6 * runs.column("N")))
    budget = runs.column("budget")
    assert np.all(budget[:3] == 1e18) and np.isnan(budget[3:]).all()
    assert "D = C/(6N)" in runs.source


def test_csv_derives_n_from_c_and_d_for_isoflop_points_published_without_n(tmp_path):
    """Dubey et al. 2024 (Fig. 2) publish IsoFLOP points as C and D: N = C/(6D)."""
    rows = ["C,D,L"] + [f"{c},{d},{3 - i * 0.05}" for i, (c, d) in enumerate(
        [(1e18, 1e9), (1e18, 2e9), (1e18, 4e9), (4e18, 2e9), (4e18, 4e9), (4e18, 8e9)])]
    runs = load_csv(_write(tmp_path, "\n".join(rows)), c_col="C", d_col="D", loss_col="L",
                    budget_col="C", log=lambda _: None)
    np.testing.assert_allclose(runs.column("N"), runs.column("C") / (6 * runs.column("D")))
    assert "N = C/(6D)" in runs.source and runs.n_convention == "C/(6D) (no N column)"
    np.testing.assert_array_equal(np.unique(runs.column("budget")), [1e18, 4e18])


def test_csv_derives_c_from_n_and_d_with_explicit_columns(tmp_path):
    path = _write(tmp_path, "params,toks,L\n1e6,2e7,3.0\n2e6,2e7,2.9\n4e6,8e7,2.7\n")
    runs = load_csv(path, n_col="params", d_col="toks", loss_col="L", log=lambda _: None)
    np.testing.assert_allclose(runs.column("C"), 6 * runs.column("N") * runs.column("D"))
    assert runs.c_convention == "6nd (6·N·D)"


def test_csv_drop_highest_loss(tmp_path):
    path = _write(tmp_path, "N,D,loss\n1e6,1e7,9.0\n2e6,1e7,3.0\n4e6,1e7,2.5\n8e6,1e8,8.0\n")
    messages: list[str] = []
    runs = load_csv(path, drop_highest_loss=2, log=messages.append)
    assert sorted(runs.column("loss")) == [2.5, 3.0]
    assert "dropped the 2 highest-loss rows" in messages[0]


def test_csv_seed_role_and_recipe_columns_are_optional(tmp_path):
    plain = load_csv(_write(tmp_path, "N,D,loss\n1e6,1e7,3\n2e6,1e7,2.9\n"), log=print)
    assert plain.frame["seed"].tolist() == [0, 0] and set(plain.frame["role"]) == {"main"}
    assert "schedule" not in plain.frame.columns  # absent: RunsTable.values gives ""
    path = _write(tmp_path, "N,D,loss,seed,role,schedule,N_kaplan,flops_exact\n"
                            "1e6,1e7,3.0,0,main,cosine,8e5,7e13\n"
                            "1e6,1e7,3.1,1,,wsd,8e5,7e13\n"
                            "4e6,1e8,2.5,0,holdout,cosine,3.2e6,2.6e15\n")
    runs = load_csv(path, log=lambda _: None)
    frame = runs.frame
    assert frame["seed"].tolist() == [0, 1, 0]
    assert frame["role"].tolist() == ["main", "main", "holdout"]  # a blank role is main
    assert frame["schedule"].tolist() == ["cosine", "wsd", "cosine"]
    assert frame["flops_exact"].tolist() == [7e13, 7e13, 2.6e15]
    np.testing.assert_allclose(runs.column("C_kaplan"), 6 * runs.column("N_kaplan") * 1e7 *
                               np.array([1, 1, 10]))
    assert runs.has_kaplan_conventions


def test_a_report_runs_csv_loads_back_with_what_the_fits_need(tmp_path):
    from analysis.runs.table import runs_from_arrays

    n = np.array([1e6, 1e6, 2e6, 4e6])
    runs = runs_from_arrays(n, np.full(4, 1e8), [3.0, 3.1, 2.9, 2.8],
                            budget=[6e14, 6e14, np.nan, np.nan], n_kaplan=0.8 * n,
                            extra={"seed": [0, 1, 0, 0], "role": ["main"] * 3 + ["holdout"],
                                   "schedule": "cosine", "flops_exact": 7 * n * 1e8})
    runs.frame.to_csv(tmp_path / "runs.csv", index=False)  # as analysis.report writes it
    back = load_csv(tmp_path / "runs.csv", budget_col="budget", log=lambda _: None)
    for col in ("N", "D", "C", "loss", "N_kaplan", "C_kaplan", "flops_exact", "seed"):
        np.testing.assert_allclose(back.column(col), runs.column(col), err_msg=col)
    for col in ("role", "schedule"):
        assert back.frame[col].tolist() == runs.frame[col].tolist()
    np.testing.assert_array_equal(back.column("budget"), runs.column("budget"))


@pytest.mark.parametrize(("text", "kwargs", "pattern"), [
    ("N,D,loss,seed\n1e6,1e7,3,0\n2e6,2e7,2.9,1.5\n", {},
     r"runs\.csv: column 'seed' has 1 value\(s\) that are not integers \(lines 3\)"),
    ("N,D,loss,role\n1e6,1e7,3,main\n2e6,2e7,2.9,test\n", {},
     r"runs\.csv: column 'role' must be one of main, holdout; lines 3 are not"),
    ("N,D,loss\n1e6,1e7,3\n2e6,2e7,2.9\n", {"n_col": "params"},
     r"runs\.csv: no column 'params' \(--n-col\); the columns are 'N', 'D', 'loss'"),
    ("size,D,loss\n1e6,1e7,3\n", {},
     r"runs\.csv: needs two of N, D and C; no N \(parameters, --n-col\) and C \(FLOPs, "
     r"--c-col\) column \(aliases N, params.*the columns are 'size', 'D', 'loss'"),
    ("N,loss\n1e6,3\n2e6,2.9\n", {}, r"runs\.csv: needs two of N, D and C; no D \(tokens"),
    ("N,D,err\n1e6,1e7,3\n", {}, r"runs\.csv: no loss column: none of .*\(give --loss-col\)"),
    ("N,D,loss\n1e6,1e7,3\n2e6,2e7,\n4e6,1e8,2.5\n", {},
     r"runs\.csv: column 'loss' has 1 missing or non-numeric value\(s\) \(lines 3\)"),
    ("N,D,loss\n1e6,1e7,3\n-2e6,2e7,2.9\n", {},
     r"runs\.csv: column 'N' has 1 value\(s\) <= 0 \(lines 3\)"),
    ("N,C,loss\n1e6,1e18,3\n2e6,1e18,2.9\n4e6,1e18,2.8\n", {},
     r"runs\.csv: column 'C' has a single compute budget"),
    ("N,D,loss\n1e6,1e7,3\n", {"drop_highest_loss": 1}, r"cannot drop 1 of 1 rows"),
])
def test_csv_errors_name_the_file_and_column(tmp_path, text, kwargs, pattern):
    with pytest.raises(DataError, match=pattern):
        load_csv(_write(tmp_path, text), log=lambda _: None, **kwargs)


def test_missing_csv_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="nope.csv: cannot read"):
        load_csv(tmp_path / "nope.csv")


def test_fit_json_on_the_epoch_data(capsys):
    from analysis.fit import main

    assert main([*EPOCH_ARGS, "--approach", "3", "--bootstrap", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_runs"] == 240 and out["bootstrap"] == {"resamples": 20, "seed": 0, "by": "run"}
    three = out["approaches"]["3"]
    assert three["status"] == "ok"
    assert three["alpha"] == pytest.approx(0.3478, rel=0.01)
    assert set(three["ci95"]) >= {"E", "A", "B", "alpha", "beta", "a", "b", "tokens_per_param"}
    assert all(len(pair) == 2 for pair in three["ci95"].values())
    for name in ("kaplan", "1", "2"):
        assert out["approaches"][name] == {"status": "skipped", "reason": "not requested"}
    besiroglu = [r for r in out["comparison"] if r["source"] == "Besiroglu 2024"]
    assert besiroglu[0]["quantity"] == "a" and besiroglu[0]["inside"] is True


def test_fit_tables_on_the_epoch_data(capsys):
    from analysis.fit import main

    assert main([*EPOCH_ARGS, "--bootstrap", "0"]) == 0
    text = capsys.readouterr().out
    assert "Chinchilla Approach 3" in text and "Documented results vs ours" in text
    assert "Approach 1 (envelope): skipped: no training curves" in text
    assert "0.3473" in text  # alpha


def test_predict_on_published_data_uses_a_default_gpt_shape(capsys):
    from analysis.predict import main
    from pipeline.config import parse_sweep

    assert main([*EPOCH_ARGS, "--flops", "1e15", "--bootstrap", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens_per_param"] == pytest.approx(out["d_opt"] / out["n_opt"])
    shape = out["shape"]
    assert (shape["family"], shape["vocab_size"], shape["seq_len"]) == ("gpt", 256, 256)
    assert 0.5 < shape["params_total"] / out["n_opt"] < 2.0
    assert out["shape_note"].startswith("a stand-in: published data names no model family")
    assert parse_sweep(out["snippet"], "snippet.yaml").runs[0].n_layer == shape["n_layer"]


def test_predict_beyond_the_family_says_why_there_is_no_shape(capsys):
    from analysis.predict import main

    assert main([*EPOCH_ARGS, "--flops", "5.76e23", "--approach", "3", "--bootstrap", "0",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # Published runs name no family: the stand-in's rule and its "raise max_depth" are not
    # the user's to change, so the note says what a shape needs instead.
    assert out["shape"] is None and "max_depth" not in out["shape_note"]
    assert out["shape_note"].startswith("the runs name no model family (published data)")
    assert np.log10(out["n_opt"]) == pytest.approx(np.log10(7e10), abs=0.3)  # Chinchilla 70B


def test_bad_csv_is_one_error_line_and_status_2(tmp_path, capsys):
    from analysis.cli import run_main
    from analysis.fit import main

    path = _write(tmp_path, "N,D,loss\n1e6,1e7,3\n2e6,nan,2.9\n")
    assert run_main(main, ["--csv", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "runs.csv: column 'D'" in err
    assert DataError.__mro__[1].__name__ == "AnalysisError"


def test_a_non_embedding_column_gives_both_parameter_conventions(tmp_path, capsys):
    """Issue 51: both N conventions when the data allows. A ladder whose loss follows the
    non-embedding count (an embedding of 5e7 on top) is fitted under total N and refitted
    under non-embedding N, and the two answers differ; a named column that is missing or
    larger than N is refused with the file, the option and the column."""
    from analysis.cli import run_main
    from analysis.fit import main as fit_main
    from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs

    grid = isoflop_runs(ChinchillaLaw(), np.logspace(18, 20, 5), sizes_per_budget=6,
                        noise=0.002, seed=2)
    frame = grid.frame[["N", "D", "C", "loss"]].rename(columns={"N": "non_emb"})
    frame["params"] = frame["non_emb"] + 5e7
    path = tmp_path / "ladder.csv"
    frame.to_csv(path, index=False)
    args = ["--csv", str(path), "--n-col", "params", "--d-col", "D", "--c-col", "C",
            "--approach", "2", "--bootstrap", "0", "--json"]
    assert fit_main([*args, "--n-nonembed-col", "non_emb"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {(r["n"], r["c"]): r["approaches"]["2"] for r in out["convention_refits"]["rows"]}
    total, non_embedding = rows["total", "6nd"], rows["non_embedding", "6nd"]
    assert total["status"] == non_embedding["status"] == "ok"
    assert abs(total["a"] - non_embedding["a"]) > 0.01
    # Without the column the non-embedding refit says why it is missing.
    assert fit_main(args) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {(r["n"], r["c"]): r["approaches"]["2"] for r in out["convention_refits"]["rows"]}
    assert "N_kaplan" in rows["non_embedding", "6nd"]["reason"]
    assert run_main(fit_main, [*args, "--n-nonembed-col", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no column 'nope' (--n-nonembed-col)" in err and str(path) in err
    assert run_main(fit_main, ["--csv", str(path), "--n-col", "non_emb", "--d-col", "D",
                               "--c-col", "C", "--n-nonembed-col", "params"]) == 2
    assert "exceeds N on 30 row(s)" in capsys.readouterr().err

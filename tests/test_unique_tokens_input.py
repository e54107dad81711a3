"""U, the unique tokens each run trained on, read from a published CSV (issue 52): a column
named U, unique_tokens or unique, or the one --unique-col names, becomes the runs table's
``unique_tokens`` (and ``epochs`` = D/U where the file has none), for fit, predict, report and
each side of compare.

Why these: the data-constrained law (Muennighoff et al. 2023) reads every run's repetition off
D/U, so a blank, zero or too-large U must stop the read with the file, the column and the lines
(a U above D is a run seeing more distinct tokens than it trained on: most often a corpus size
given where the unique tokens a run saw, min(corpus, D), were meant).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import compare, fit
from analysis.cli import run_main
from analysis.errors import DataError
from analysis.report import parser as report_parser
from analysis.report import regenerate_command
from analysis.runs.load import load_csv
from analysis.runs.published import UNIQUE_ALIASES
from analysis.runs.synthetic import ChinchillaLaw

DATA = Path(__file__).parent / "data"
DATABLATIONS = DATA / "muennighoff2023_datablations_runs.csv"
"""Muennighoff et al.'s 296 runs (tests/data/SOURCES.md): name, seed, N, D, U, epochs, loss."""
BUDGETS = (1e17, 1e18, 1e19)
SIZES = 5


def _quiet(_: str) -> None:
    pass


def _frame(*, repeats: float = 4.0) -> pd.DataFrame:
    """An IsoFLOP ladder (3 budgets, 5 sizes each) whose smallest size at every budget trained
    on ``repeats`` epochs of its data (U = D/repeats) and the others on one (U = D)."""
    law, rows = ChinchillaLaw(), []
    for budget in BUDGETS:
        for i, n in enumerate(law.n_opt(budget) * np.geomspace(0.25, 4.0, SIZES)):
            d = budget / (6.0 * n)
            rows.append({"N": float(n), "D": d, "loss": float(law.loss(n, d)),
                         "U": d / repeats if i == 0 else d})
    return pd.DataFrame(rows)


def _write(tmp_path: Path, frame: pd.DataFrame, name: str = "runs.csv") -> Path:
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def _one_error_line(err: str) -> None:
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


# ------------------------------------------------------------------------- load_csv


@pytest.mark.parametrize("alias", UNIQUE_ALIASES)
def test_a_column_named_u_is_read_as_the_unique_tokens(tmp_path, alias):
    frame = _frame()
    path = _write(tmp_path, frame.rename(columns={"U": alias}))
    runs = load_csv(path, log=_quiet)
    np.testing.assert_array_equal(runs.column("unique_tokens"), frame["U"])
    # No epochs column in the file: epochs = D/U (4 for the first size of each budget).
    np.testing.assert_allclose(runs.column("epochs"), frame["D"] / frame["U"])
    assert (runs.column("epochs") > 1).sum() == len(BUDGETS)


def test_an_epochs_column_of_the_file_is_kept(tmp_path):
    frame = _frame()
    frame["epochs"] = 1.0  # the file's own count wins over D/U
    runs = load_csv(_write(tmp_path, frame), log=_quiet)
    np.testing.assert_array_equal(runs.column("unique_tokens"), frame["U"])
    np.testing.assert_array_equal(runs.column("epochs"), 1.0)


def test_unique_col_names_a_column_of_another_name(tmp_path):
    frame = _frame().rename(columns={"U": "distinct_tokens"})
    path = _write(tmp_path, frame)
    assert "unique_tokens" not in load_csv(path, log=_quiet).frame.columns  # not an alias
    runs = load_csv(path, unique_col="distinct_tokens", log=_quiet)
    np.testing.assert_array_equal(runs.column("unique_tokens"), frame["distinct_tokens"])


def test_a_missing_named_column_names_file_option_and_columns(tmp_path):
    path = _write(tmp_path, _frame())
    with pytest.raises(DataError) as err:
        load_csv(path, unique_col="nope", log=_quiet)
    assert str(err.value) == (f"{path}: no column 'nope' (--unique-col); the columns are "
                              "'N', 'D', 'loss', 'U'")


U_SAYS = "column 'U' (--unique-col: U, the unique tokens each run trained on)"


@pytest.mark.parametrize(("cell", "says"), [
    (None, "is blank or not a number on 1 row(s) (lines 4)"),
    ("many", "is blank or not a number on 1 row(s) (lines 4)"),
    (0.0, "is <= 0 on 1 row(s) (lines 4): a run with U of zero trained on no data"),
    (-1e9, "is <= 0 on 1 row(s) (lines 4)"),
])
def test_a_blank_non_numeric_or_zero_u_is_refused_with_its_line(tmp_path, cell, says):
    frame = _frame().astype({"U": object})
    frame.loc[2, "U"] = cell  # line 4 of the file: the header is line 1
    path = _write(tmp_path, frame)
    with pytest.raises(DataError) as err:
        load_csv(path, log=_quiet)
    message = str(err.value)
    assert message.startswith(f"{path}: {U_SAYS} {says}") and "\n" not in message


def test_u_above_d_is_refused_and_a_corpus_size_is_named(tmp_path):
    frame = _frame()
    frame.loc[[0, 6], "U"] = frame.loc[[0, 6], "D"] * 3  # a corpus size, not the tokens seen
    path = _write(tmp_path, frame)
    with pytest.raises(DataError) as err:
        load_csv(path, log=_quiet)
    assert str(err.value) == (
        f"{path}: {U_SAYS} exceeds D on 2 row(s) (lines 2, 8): a run cannot see more distinct "
        "tokens than it trained on (if the column holds a corpus size, the unique tokens a run "
        "saw are min(corpus, D))")


def test_u_equal_to_d_up_to_rounding_is_one_epoch(tmp_path):
    frame = _frame()
    frame["U"] = frame["D"] * (1 + 1e-7)  # within the 1e-6 tolerance
    runs = load_csv(_write(tmp_path, frame), log=_quiet)
    np.testing.assert_allclose(runs.column("epochs"), 1.0, rtol=1e-6)


def test_an_all_blank_alias_column_is_not_given_but_one_blank_cell_is_an_error(tmp_path):
    """A report's runs.csv of runs whose U was unknown has the column empty: nothing to read.
    One blank cell among filled ones is a hole in the data."""
    frame = _frame()
    frame["unique_tokens"] = np.nan
    blank = load_csv(_write(tmp_path, frame.drop(columns="U"), "blank.csv"), log=_quiet)
    assert "unique_tokens" not in blank.frame.columns
    frame["unique_tokens"] = frame.pop("U")
    frame.loc[0, "unique_tokens"] = np.nan
    with pytest.raises(DataError, match=r"column 'unique_tokens' \(--unique-col: U, the unique "
                                        r"tokens each run trained on\) is blank"):
        load_csv(_write(tmp_path, frame, "hole.csv"), log=_quiet)


def test_where_applies_before_u_is_checked(tmp_path):
    """A blank U in a row --where drops is no error (as every other column)."""
    frame = _frame()
    frame["keep"] = 1
    extra = frame.iloc[[0]].assign(U=np.nan, keep=0)
    path = _write(tmp_path, pd.concat([frame, extra], ignore_index=True))
    runs = load_csv(path, where="keep == 1", log=_quiet)
    np.testing.assert_array_equal(runs.column("unique_tokens"), frame["U"])


def test_the_datablations_runs_load_with_their_u():
    """Muennighoff et al.'s runs: U is the column U, 41 runs trained a single epoch (D == U),
    and epochs stays the file's (D/U to 6 digits)."""
    runs = load_csv(DATABLATIONS, n_col="N", d_col="D", loss_col="loss", log=_quiet)
    source = pd.read_csv(DATABLATIONS)
    assert len(runs.frame) == len(source) == 296
    u = runs.column("unique_tokens")
    np.testing.assert_array_equal(u, source["U"])
    assert int((runs.column("D") == u).sum()) == 41
    np.testing.assert_allclose(runs.column("epochs"), runs.column("D") / u, rtol=1e-5)
    np.testing.assert_array_equal(runs.column("seed"), source["seed"])


# ------------------------------------------------------------------------- the commands


def test_fit_reads_unique_col_and_leaves_out_the_repeated_runs(tmp_path, capsys):
    """U read by --unique-col gives each run's epochs, which --max-epochs reads."""
    path = _write(tmp_path, _frame().rename(columns={"U": "distinct"}))
    args = ["--csv", str(path), "--unique-col", "distinct", "--approach", "2", "--bootstrap",
            "0", "--json"]
    assert run_main(fit.main, args) == 0
    out = json.loads(capsys.readouterr().out)
    repeated = out["fitted"]["repeated_data"]
    assert [r["run"] for r in repeated] == ["line2", "line7", "line12"]
    assert [r["epochs"] for r in repeated] == pytest.approx([4.0] * 3)
    assert run_main(fit.main, [*args, "--max-epochs", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fitted"]["points"] == len(BUDGETS) * (SIZES - 1)
    assert all("4.00 epochs > --max-epochs 2" in r["reason"] for r in out["fitted"]["left_out"])


@pytest.mark.parametrize(("extra", "says"), [
    (["--unique-col", "nope"], "runs.csv: no column 'nope' (--unique-col); the columns are"),
    ([], "runs.csv: column 'U' (--unique-col: U, the unique tokens each run trained on) "
         "exceeds D on 1 row(s) (lines 3)"),
])
def test_fit_refuses_bad_u_in_one_error_line(tmp_path, capsys, extra, says):
    frame = _frame()
    frame.loc[1, "U"] = frame.loc[1, "D"] * 2
    path = _write(tmp_path, frame)
    assert run_main(fit.main, ["--csv", str(path), *extra, "--bootstrap", "0", "--json"]) == 2
    captured = capsys.readouterr()
    _one_error_line(captured.err)
    assert says in captured.err and captured.out == ""


@pytest.mark.parametrize("source", [["--sweep", "some_sweep"], ["--export", "x.json"]])
def test_unique_col_without_a_csv_is_refused(capsys, source):
    assert run_main(fit.main, [*source, "--unique-col", "U"]) == 2
    err = capsys.readouterr().err
    _one_error_line(err)
    assert "--unique-col 'U': names a column of a --csv file only" in err


def test_a_report_of_a_csv_regenerates_with_its_unique_col():
    args = report_parser().parse_args(["--csv", "runs.csv", "--unique-col", "distinct"])
    assert "--csv runs.csv --unique-col distinct" in regenerate_command(args)


def test_compare_reads_unique_col_per_side(tmp_path, capsys):
    a = _write(tmp_path, _frame().rename(columns={"U": "distinct"}), "a.csv")
    b = _write(tmp_path, _frame(repeats=2.0), "b.csv")
    base = [str(a), str(b), "--bootstrap", "0", "--json"]
    assert run_main(compare.main, [*base, "--unique-col-a", "distinct"]) == 0
    json.loads(capsys.readouterr().out)
    side_a = compare.load_side(str(a), None, compare.parser().parse_args(
        [str(a), str(b), "--unique-col-a", "distinct"]), "A", _quiet)
    np.testing.assert_allclose(side_a.column("epochs")[[0, 5, 10]], 4.0)
    # The side's own option is named in its errors, and B keeps its alias column U.
    assert run_main(compare.main, [*base, "--unique-col-a", "nope"]) == 2
    err = capsys.readouterr().err
    _one_error_line(err)
    assert "a.csv: no column 'nope' (--unique-col-a)" in err
    assert run_main(compare.main, [*base, "--unique-col", "distinct"]) == 2  # B has none
    assert "b.csv: no column 'distinct' (--unique-col)" in capsys.readouterr().err
    assert run_main(compare.main, ["sweep_a", str(b), "--unique-col-a", "U"]) == 2
    assert "--unique-col-a: side A (sweep_a) is not a CSV" in capsys.readouterr().err
    help_text = compare.parser().format_help()
    assert all(f"--unique-col{s}" in help_text for s in ("", "-a", "-b"))

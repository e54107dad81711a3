"""Committed reports never name the folders of the machine that made them."""

from __future__ import annotations

import argparse
import os
import re

from analysis.report import regenerate_command
from analysis.reporting.provenance import PACKAGE_ROOT, portable

ABSOLUTE = re.compile(r"(^|[\s=:'\"(])/[^/\s]")


def test_portable_paths_are_relative_to_the_checkout_or_hidden():
    root = str(PACKAGE_ROOT)
    assert (PACKAGE_ROOT / "pyproject.toml").is_file()  # the checkout, not a package folder
    assert portable(f"--out {root}/reports/x") == "--out reports/x"
    assert portable(f"sqlite:///{root}/mlflow.db") == "sqlite:///mlflow.db"
    assert portable("sqlite:////tmp/ledger/mlflow.db") == "sqlite:///<local>/mlflow.db"
    assert portable(os.path.expanduser("~") + "/.cache/x") == "~/.cache/x"
    assert portable("http://host:5000/api") == "http://host:5000/api"


def test_the_regenerate_command_holds_no_absolute_path(monkeypatch):
    monkeypatch.chdir(PACKAGE_ROOT)
    args = argparse.Namespace(
        sweep="chinchilla", csv=None, tracking_uri="sqlite:////tmp/l/mlflow.db",
        sweep_file=str(PACKAGE_ROOT / "sweeps" / "chinchilla.yaml"), name=None,
        out=str(PACKAGE_ROOT / "reports" / "chinchilla"), flops_convention="exact",
        bootstrap=1000, seed=0, bootstrap_by="run", jobs=1, prompt="def ", n_col=None,
        d_col=None, c_col=None, loss_col=None, budget_col=None, drop_highest_loss=0,
        where=None, holdout_above=None)
    command = regenerate_command(args)
    assert not ABSOLUTE.search(command), command
    assert "--sweep-file sweeps/chinchilla.yaml --out reports/chinchilla" in command


def test_the_arithmetic_is_recorded_and_a_report_made_on_another_is_made_again(monkeypatch):
    """The bootstrap intervals of the iterative fits move with the BLAS kernels (provenance.
    arithmetic): the report names them, and the reuse key changes with them."""
    from analysis.reporting import provenance, reuse

    here = provenance.arithmetic()
    assert set(here) == {"blas", "numpy_simd"}
    assert "kernels" in here["blas"] and here["numpy_simd"].startswith("baseline ")
    export = {"runs": [], "curves": []}
    key = reuse.report_key(export, sweep_text="x", options={}, code="c")
    assert reuse.report_key(export, sweep_text="x", options={}, code="c") == key
    monkeypatch.setattr(reuse, "arithmetic",
                        lambda: {**here, "blas": "openblas 0.3.31 SkylakeX kernels"})
    assert reuse.report_key(export, sweep_text="x", options={}, code="c") != key

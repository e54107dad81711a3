"""Command-line plumbing shared by `python -m analysis.fit` and `python -m analysis.predict`.

Why shared: both read runs the same way (--sweep from MLflow, or --csv with column
mapping) and report input errors the same way (one line on stderr, exit status 2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

import pandas as pd

from analysis.errors import AnalysisError, DataError
from analysis.inputs import finite_positive
from analysis.runs.table import RunsTable

EXIT_INPUT_ERROR = 2


class UsageError(AnalysisError):
    """An argument argparse refuses (unknown option, missing value, bad number)."""


class Parser(argparse.ArgumentParser):
    """argparse whose refusals are one `error:` line (run_main), as every other input error:
    argparse's own prints its usage and "PROG: error: ...", and exits from inside parse_args."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def add_bootstrap_by(parser: argparse.ArgumentParser) -> None:
    """--bootstrap-by: what each bootstrap resample draws from (analysis.fits.bootstrap.BY)."""
    parser.add_argument("--bootstrap-by", choices=("run", "budget"), default="run",
                        help="resample all runs together (run, the default) or each IsoFLOP "
                             "budget's runs within it (budget: every resample keeps the design)")


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--sweep", metavar="NAME", help="sweep (MLflow experiment) name")
    source.add_argument("--csv", metavar="FILE", help="CSV of published runs, one per row")
    source.add_argument("--export", metavar="FILE",
                        help="a report's runs_export.json: the runs and curves of a sweep, "
                             "as fitted, without its MLflow store")
    parser.add_argument("--n-col", metavar="COL", help="CSV column of N (parameters)")
    parser.add_argument("--d-col", metavar="COL",
                        help="CSV column of D (tokens); without one, D = C/(6N)")
    parser.add_argument("--c-col", metavar="COL",
                        help="CSV column of C (FLOPs); without one, C = 6ND")
    parser.add_argument("--loss-col", metavar="COL", help="CSV column of the final loss")
    parser.add_argument("--budget-col", metavar="COL",
                        help="CSV column of the IsoFLOP budget (default: runs sharing C)")
    parser.add_argument("--drop-highest-loss", type=int, default=0, metavar="K",
                        help="drop the K highest-loss CSV rows (Besiroglu et al. drop 5)")
    parser.add_argument("--tracking-uri", metavar="URI",
                        help="MLflow tracking URI (default: MLFLOW_TRACKING_URI or MLflow's)")
    parser.add_argument("--flops-convention", default=None,
                        help="which final/flops_<convention> is C (default: the sweep file's "
                             "flops_convention with --sweep-file, else 6nd: C = 6ND)")
    parser.add_argument("--max-epochs", type=finite_positive, metavar="E",
                        help="leave out runs that passed over their train split more than E "
                             "times (their recorded epochs); by default they are fitted and "
                             "named in the output")
    parser.add_argument("--sweep-file", metavar="FILE",
                        help="the sweep's YAML file: with --sweep, only the runs it plans now "
                             "are used (not those of an earlier recipe); recorded with its "
                             "sha256 in a report's provenance")


def flops_convention(args: argparse.Namespace) -> str:
    """The C the fits read: --flops-convention if given, else an export's own, else the sweep
    file's (the budgets of its IsoFLOP lines are in that convention, so Approach 2's sets lie
    on them), else 6nd (Chinchilla's C = 6ND, the only one a CSV of published runs has)."""
    if args.flops_convention is not None:
        return str(args.flops_convention)
    if getattr(args, "export", None):
        from analysis.runs.export import export_convention

        return export_convention(args.export)  # what its C column holds
    if args.sweep and args.sweep_file:
        from pipeline.config import SweepError, load_sweep

        try:
            return str(load_sweep(args.sweep_file).flops_convention)
        except SweepError as e:
            raise DataError(str(e)) from e
    return "6nd"


def load_input(args: argparse.Namespace) -> tuple[RunsTable, pd.DataFrame | None]:
    """Runs (and curves, for a sweep) as the arguments ask."""
    from analysis.runs.load import load_csv, load_sweep

    if args.export:
        from analysis.runs.export import read_export

        runs, curves = read_export(args.export)
        wanted = args.flops_convention
        if wanted is not None and wanted != runs.c_convention:
            raise DataError(f"{args.export}: its C is under the {runs.c_convention!r} "
                            f"convention; --flops-convention {wanted} cannot be applied to it")
        return runs, curves
    if args.sweep:
        data = load_sweep(args.sweep, tracking_uri=args.tracking_uri,
                          flops_convention=flops_convention(args))
        runs = data.runs
        if args.sweep_file:
            from analysis.runs.planned import restrict_to_sweep_file

            runs = restrict_to_sweep_file(runs, args.sweep_file)
        return runs, data.curves
    runs = load_csv(args.csv, n_col=args.n_col, d_col=args.d_col, c_col=args.c_col,
                    loss_col=args.loss_col, budget_col=args.budget_col,
                    drop_highest_loss=args.drop_highest_loss)
    return runs, None


def one_line(message: str) -> str:
    """``message`` as one printable line: its lines joined with "; " (a sweep file's problems
    come one a line) and control characters escaped (a file or run name may carry a terminal
    escape sequence)."""
    joined = "; ".join(line.strip() for line in message.splitlines() if line.strip())
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in joined)


def run_main(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a CLI main; an AnalysisError becomes one line on stderr and exit status 2."""
    try:
        return main(argv)
    except AnalysisError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_INPUT_ERROR

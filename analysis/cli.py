"""Command-line plumbing shared by `python -m analysis.fit`, `.predict` and `.report`.

Why shared: they read runs the same way (--sweep from MLflow, --export, or --csv with column
mapping) and report input errors the same way (one line on stderr, exit status 2).

A ``--sweep-file`` is read by the planner, which the analysis does not import
(tests/test_architecture.py): each entry point passes its ``SweepFileView`` (pipeline.planned_view)
to ``add_input_arguments``, which keeps it on the parsed arguments for ``flops_convention`` and
``load_input``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, Protocol

import pandas as pd

from analysis.errors import AnalysisError, DataError
from analysis.inputs import finite_positive
from analysis.numerics.bootstrap import BY
from analysis.runs.table import RunsTable
from pipeline.vocab.manifest import PlanManifest

EXIT_INPUT_ERROR = 2


class UsageError(AnalysisError):
    """An argument argparse refuses (unknown option, missing value, bad number)."""


class Parser(argparse.ArgumentParser):
    """argparse whose refusals are one `error:` line (run_main), as every other input error:
    argparse's own prints its usage and "PROG: error: ...", and exits from inside parse_args."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


class SweepFileView(Protocol):
    """What a command asks the planner about a ``--sweep-file`` (pipeline.planned_view gives
    it): each method raises ``error`` on a file that is not a sweep."""

    error: type[Exception]

    def convention(self, sweep_file: str) -> str:
        """The file's FLOP convention."""

    def manifest(self, sweep_file: str, held_out_cells: list[tuple[float, float]],
                 sha256: str) -> PlanManifest | None:
        """The runs the file plans now; None when that needs the corpus read (chars)."""

    def corpus(self, sweep_file: str) -> str | None:
        """The corpus the file names, as its runs record it; None if it cannot be read."""


def sweep_file_view(args: argparse.Namespace) -> SweepFileView:
    """The view the command was given (``add_input_arguments``); DataError without one."""
    view = getattr(args, "sweep_file_view", None)
    if view is None:
        raise DataError("--sweep-file: this command cannot read sweep files (no planner "
                        "view was given to analysis.cli.add_input_arguments)")
    return view


def _asked(view: SweepFileView, call: Callable[[], object]) -> object:
    """``call()``, with the view's refusal of a sweep file as a DataError."""
    try:
        return call()
    except view.error as e:
        raise DataError(str(e)) from e


def add_bootstrap_by(parser: argparse.ArgumentParser) -> None:
    """--bootstrap-by: what each bootstrap resample draws from (analysis.numerics.bootstrap.BY)."""
    parser.add_argument("--bootstrap-by", choices=BY, default="auto",
                        help="resample each IsoFLOP budget's runs within it (budget: every "
                             "resample keeps the design), or all runs together (run); auto, "
                             "the default: budget when the runs have two budgets or more")


def add_input_arguments(parser: argparse.ArgumentParser,
                        sweep_files: SweepFileView | None = None) -> None:
    """The input options; ``sweep_files``: how --sweep-file is read (the entry point's)."""
    parser.set_defaults(sweep_file_view=sweep_files)
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
    parser.add_argument("--n-nonembed-col", metavar="COL",
                        help="CSV column of the non-embedding parameter count (default: a "
                             "column named N_kaplan, non_embedding_params or "
                             "params_non_embedding): the fits are then also made under it")
    parser.add_argument("--unique-col", metavar="COL",
                        help="CSV column of U, the unique tokens each run trained on (default: "
                             "a column named U, unique_tokens or unique): the data-constrained "
                             "laws need it")
    parser.add_argument("--budget-col", metavar="COL",
                        help="CSV column of the IsoFLOP budget (default: runs whose C agree "
                             "within 1%%, analysis.runs.published.BUDGET_RTOL)")
    parser.add_argument("--where", metavar="EXPR",
                        help="keep the CSV rows that meet EXPR: COL OP VALUE (OP one of == != "
                             "< <= > >=, VALUE a number or quoted text; `a name` for a column "
                             "with spaces) joined by 'and', e.g. \"N >= 1e8 and model_type == "
                             "'dense'\"")
    parser.add_argument("--drop-highest-loss", type=int, default=0, metavar="K",
                        help="drop the K highest-loss CSV rows (Besiroglu et al. drop 5)")
    parser.add_argument("--tracking-uri", metavar="URI",
                        help="MLflow tracking URI (default: MLFLOW_TRACKING_URI or MLflow's)")
    parser.add_argument("--flops-convention", default=None,
                        help="which final/flops_<convention> is C (default: the sweep file's "
                             "flops_convention with --sweep-file, else the one the sweep "
                             "planned in (recorded in its ledger), else the one its runs "
                             "recorded, else 6nd: C = 6ND)")
    parser.add_argument("--max-epochs", type=finite_positive, metavar="E",
                        help="leave out runs that passed over their train split more than E "
                             "times (their recorded epochs); by default they are fitted and "
                             "named in the output")
    parser.add_argument("--holdout-above", type=finite_positive, metavar="C",
                        help="a backtest: leave every run whose budget (or C, without one) is "
                             "above C out of every fit; each law then predicts them (fit.json "
                             "\"backtest\", the report's first table)")
    parser.add_argument("--sweep-file", metavar="FILE",
                        help="the sweep's YAML file: with --sweep, the runs it plans now are "
                             "used, not those of the plan the sweep's last launch recorded "
                             "(the default view); recorded with its sha256 in a report's "
                             "provenance")


def flops_convention(args: argparse.Namespace) -> str | None:
    """The C the fits read: --flops-convention if given, else an export's own, else the sweep
    file's (the budgets of its IsoFLOP lines are in that convention, so Approach 2's sets lie
    on them); None for a sweep without a file: the convention it planned in, recorded in its
    ledger (analysis.runs.load.load_sweep); 6nd (Chinchilla's C = 6ND) for a CSV."""
    if args.flops_convention is not None:
        return str(args.flops_convention)
    if getattr(args, "export", None):
        from analysis.runs.export import export_convention

        return export_convention(args.export)  # what its C column holds
    if args.sweep and args.sweep_file:
        view = sweep_file_view(args)
        return str(_asked(view, lambda: view.convention(args.sweep_file)))
    return None if args.sweep else "6nd"


def file_plan(args: argparse.Namespace, runs: RunsTable,
              ledger_plan: PlanManifest | None) -> RunsTable:
    """``runs`` (a sweep's, every one of its ledger) as --sweep-file plans them now. A file
    whose plan needs its corpus read (chars) keeps the ledger's plan when that plan was made
    from the same bytes (its sha256), else every run."""
    from analysis.reporting.provenance import sha256_file
    from analysis.runs.planned import held_out_cells, restrict_to_manifest

    view, path = sweep_file_view(args), args.sweep_file
    sha = sha256_file(Path(path)) if Path(path).is_file() else ""
    plan = _asked(view, lambda: view.manifest(path, held_out_cells(runs), sha))
    if plan is None and ledger_plan is not None and ledger_plan.sweep_sha256 == sha:
        plan = ledger_plan
    return runs if plan is None else restrict_to_manifest(runs, plan, path)


def load_input(args: argparse.Namespace, *,
               log: Callable[[str], None] | None = None) -> tuple[RunsTable, pd.DataFrame | None]:
    """Runs (and curves, for a sweep) as the arguments ask: a sweep's are those of the plan
    its ledger records, or with --sweep-file those the file plans now (``file_plan``)."""
    from analysis.runs.load import load_csv, load_sweep

    if getattr(args, "where", None) is not None and not args.csv:  # else silently ignored
        raise DataError(f"--where {args.where!r}: filters the rows of a --csv file only")
    if getattr(args, "unique_col", None) is not None and not args.csv:  # likewise
        raise DataError(f"--unique-col {args.unique_col!r}: names a column of a --csv file "
                        "only")
    if args.export:
        from analysis.runs.export import read_export

        runs, curves = read_export(args.export)
        wanted = args.flops_convention
        if wanted is not None and wanted != runs.c_convention:
            raise DataError(f"{args.export}: its C is under the {runs.c_convention!r} "
                            f"convention; --flops-convention {wanted} cannot be applied to it")
        return runs, curves
    logs = {} if log is None else {"log": log}
    if args.sweep:
        data = load_sweep(args.sweep, tracking_uri=args.tracking_uri,
                          flops_convention=flops_convention(args),
                          use_plan=not args.sweep_file, **logs)
        runs = file_plan(args, data.runs, data.plan) if args.sweep_file else data.runs
        return runs, data.curves
    runs = load_csv(args.csv, n_col=args.n_col, d_col=args.d_col, c_col=args.c_col,
                    loss_col=args.loss_col, budget_col=args.budget_col,
                    drop_highest_loss=args.drop_highest_loss,
                    where=getattr(args, "where", None),
                    n_nonembed_col=getattr(args, "n_nonembed_col", None),
                    unique_col=getattr(args, "unique_col", None), **logs)
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

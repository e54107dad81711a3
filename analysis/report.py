"""`python -m analysis.report`: the report of a sweep (or of published runs) in one folder.

    python -m analysis.report --sweep chinchilla [--tracking-uri URI] [--sweep-file FILE]
    python -m analysis.report --export reports/chinchilla/runs_export.json --out DIR
    python -m analysis.report --csv tests/data/chinchilla_epoch_fig4.csv --n-col "Model Size" \\
        --c-col "Training FLOP" --loss-col loss --drop-highest-loss 5 --name besiroglu

writes reports/<name>/ (or --out DIR): report.md, report.html (one self-contained file,
figures embedded), figures/*.png, fit.json (the schema of `python -m analysis.fit --json`)
runs.csv (the runs the fits used) and, for a sweep, runs_export.json (runs and curves in one
file: `--export` regenerates the report from it without the MLflow store). The folder is built next to the target and swapped
in only when complete, so a failed report leaves the previous one as it was. The last line
printed is the path of report.html. Input errors print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path

import pandas as pd

from analysis.analyze import analyze
from analysis.checks.conventions import timed_refit_conventions
from analysis.cli import Parser, add_bootstrap_by, add_input_arguments, load_input, run_main
from analysis.errors import AnalysisError
from analysis.inputs import BOOTSTRAP, SEED, check_name, jobs
from analysis.numerics.workers import default_jobs, in_worker, worker_pool
from analysis.reporting.document import to_html, to_markdown
from analysis.reporting.figures import Context, draw_all
from analysis.reporting.provenance import PACKAGE_ROOT, portable, provenance_lines
from analysis.reporting.reuse import is_current, report_key, write_key
from analysis.reporting.samples import PROMPT, sample_jobs
from analysis.reporting.sections import ReportInput, build
from analysis.runs.export import FILE_NAME as EXPORT_FILE
from analysis.runs.export import export_name, to_json_dict, write_export
from analysis.schema import analysis_to_json
from analysis.text import spreadsheet_cell
from pipeline.planned_view import SWEEP_FILE_VIEW
from pipeline.vocab.disk import DiskFullError, disk_full, missing_folders
from pipeline.vocab.store import folder_problem

DEFAULT_BOOTSTRAP = 400
"""Fewer than `analysis.fit`'s 1000: the Approach 3 bootstrap is ~95% of a report's time
(1000 resamples of the 30-run chinchilla sweep: 39 s of CPU on one core; 400: 16 s). Pass
--bootstrap 1000 (and --jobs) for the numbers of `analysis.fit`."""


KEPT = ("ledger.tar.gz",)
"""Files of a report folder that a new report keeps: the ledger committed beside a report
(`python -m pipeline.ledger pack`) is the study's record, not the report's to delete."""


class ReportError(AnalysisError):
    """The report cannot be written where it was asked to be (the message says why)."""


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m analysis.report", description=__doc__.split("\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_arguments(p, SWEEP_FILE_VIEW)
    p.add_argument("--name", help="report name, the folder under reports/ (default: the sweep "
                                  "name, the export's, or the CSV's stem)")
    p.add_argument("--out", metavar="DIR", help="output folder (default: reports/<name>)")
    p.add_argument("--bootstrap", type=BOOTSTRAP, default=DEFAULT_BOOTSTRAP, metavar="N",
                   help=f"bootstrap resamples (default {DEFAULT_BOOTSTRAP}; 0: no intervals)")
    p.add_argument("--seed", type=SEED, default=0, help="bootstrap seed (default 0)")
    add_bootstrap_by(p)
    p.add_argument("--jobs", type=jobs, default=default_jobs(), metavar="J",
                   help="processes for the bootstraps of the parametric laws (default: the "
                        f"cores this process may use, {default_jobs()} here; the intervals "
                        "are the same with any number)")
    p.add_argument("--prompt", default=PROMPT,
                   help=f"prompt of the text samples (default {PROMPT!r})")
    p.add_argument("--force", action="store_true",
                   help="make the report even when the folder holds one made from the same "
                        "runs, sweep file, options and code (by default it is kept)")
    return p


def regenerate_command(args: argparse.Namespace) -> str:
    """The exact command (with the folder it runs in) that rebuilds this report."""
    parts = ["python", "-m", "analysis.report"]
    if args.sweep:
        parts += ["--sweep", args.sweep]
    elif args.export:
        parts += ["--export", args.export]
    else:
        parts += ["--csv", args.csv]
        for flag, value in (("--n-col", args.n_col), ("--d-col", args.d_col),
                            ("--c-col", args.c_col), ("--loss-col", args.loss_col),
                            ("--budget-col", args.budget_col), ("--where", args.where),
                            ("--n-nonembed-col", getattr(args, "n_nonembed_col", None)),
                            ("--unique-col", getattr(args, "unique_col", None))):
            if value is not None:
                parts += [flag, value]
        if args.drop_highest_loss:
            parts += ["--drop-highest-loss", str(args.drop_highest_loss)]
    for flag, value in (("--tracking-uri", args.tracking_uri),
                        ("--sweep-file", args.sweep_file), ("--name", args.name),
                        ("--out", args.out)):
        if value is not None:
            parts += [flag, value]
    if args.flops_convention is not None:
        parts += ["--flops-convention", args.flops_convention]
    parts += ["--bootstrap", str(args.bootstrap), "--seed", str(args.seed)]
    if args.bootstrap_by != "auto":
        parts += ["--bootstrap-by", args.bootstrap_by]
    if args.holdout_above is not None:
        parts += ["--holdout-above", f"{args.holdout_above:g}"]
    # Not --jobs: the intervals are the same with any number of processes.
    if args.prompt != PROMPT:
        parts += ["--prompt", args.prompt]
    # Run from the checkout (paths relative to it); other folders as portable() shows them.
    command = portable(shlex.join(parts))
    here = Path.cwd().resolve()
    return command if here == PACKAGE_ROOT else f"cd {portable(str(here))} && {command}"


def _export_command(args: argparse.Namespace, name: str, out: Path) -> str:
    """regenerate_command for the export written into ``out``: the same report, no store."""
    again = argparse.Namespace(**{**vars(args), "sweep": None, "tracking_uri": None,
                                  "export": str(out / EXPORT_FILE), "name": name})
    return regenerate_command(again)


def check_target(out: Path, marker: str = "report.md", what: str = "report") -> None:
    """Refuse to replace anything that is not a previous output of the command (a folder
    holding ``marker``) or an empty folder."""
    if out.name in ("", ".."):  # "", "." and "a/.." name no folder that could be swapped in
        raise ReportError(f"--out {str(out)!r} names no folder of its own: give one, "
                          f"for example reports/NAME")
    if problem := folder_problem(out):  # checked before any fit: nothing is lost to it
        raise ReportError(f"cannot write {what} to {out}: {problem}")
    if out.exists() and not out.is_dir():
        raise ReportError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / marker).exists():
        raise ReportError(f"{out} is a folder that holds no {what} (no {marker}); "
                          "refusing to replace it: give an empty or new folder with --out")


def _folder_bytes(folder: Path) -> int:
    """Bytes of the files under folder (what a report had written when the disk filled)."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


@contextmanager
def staged_folder(target: Path) -> Iterator[Path]:
    """A temporary folder next to ``target`` that replaces it when the block succeeds.

    On any exception the temporary folder is removed and ``target`` is untouched (a full
    disk is a ReportError naming the bytes written and free). The swap
    is two renames on one file system (old aside, new in), then the old folder is removed.
    """
    # Absolute, so that no library expands a leading "~" of a relative folder named "~"
    # (pandas' to_csv does), and joined, not normalised: the OS resolves "..".
    target = Path.cwd() / target
    made = missing_folders(target.parent)  # removed again unless the report is swapped in
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    except OSError as e:  # what folder_problem cannot see (e.g. /proc, a read-only mount)
        _remove_empty(made)
        raise ReportError(f"cannot write to {target}: {e.strerror or e} "
                          f"({e.filename or target.parent})") from e
    swapped = False
    try:
        try:
            yield tmp
        except OSError as e:
            full = disk_full(e, target, _folder_bytes(tmp), at_least=True)
            if isinstance(full, DiskFullError):  # the old report stays as it was
                raise ReportError(f"{full.strerror}; {target} is unchanged") from e
            raise
        tmp.chmod(0o755)
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
            os.replace(target, old)
        try:
            os.replace(tmp, target)
        except OSError:
            if old is not None:
                os.replace(old, target)
            raise
        swapped = True
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if not swapped:
            _remove_empty(made)


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders a failed write made (innermost first), where they are still empty."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:
            return  # not empty (someone else's file) or gone: leave it and those above


def _no_samples_reason(args: argparse.Namespace, runs) -> str:
    """Why the report has no text samples."""
    if not runs.generates:
        return (f"Not applicable: {runs.family()} is {runs.described} and does not "
                "generate text.")
    if args.export:
        return "Not available: the report was made from an export, without the checkpoints."
    return "Not available: published data has no checkpoints."


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def report_name(args: argparse.Namespace) -> str:
    """--name, else the sweep's, the export's or the CSV's stem; checked as one folder name
    where it makes the folder (without --out): an export's name is whatever its file says."""
    if args.name is not None:
        return check_name(args.name, "--name")
    if args.sweep:
        name, origin = args.sweep, "--sweep"
    elif args.export:
        name, origin = export_name(args.export), f"the name recorded in --export {args.export}"
    else:
        name, origin = Path(args.csv).stem, f"the stem of --csv {args.csv}"
    if args.out is None:
        try:
            check_name(name, origin)
        except AnalysisError as e:
            raise ReportError(f"{e}; give --name or --out") from e
    return name


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell that a spreadsheet would run as a formula quoted
    (analysis.text.spreadsheet_cell); numeric columns as they are."""
    text = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    return frame.assign(**{c: frame[c].map(spreadsheet_cell) for c in text})


def write_report(args: argparse.Namespace, *, log: Callable[[str], None] = _log,
                 corpus: str | None = None, quoted_file: Path | None = None) -> Path:
    """Load, fit, draw and write; returns the path of report.html. ``log``: the progress
    lines; ``corpus``: the one text samples may read (default: the --sweep-file's);
    ``quoted_file``: a sweep file quoted in the report (with its sha256 in the provenance)
    without choosing the runs, as --sweep-file does (the sweep driver's own file: the runs
    are those of the plan it recorded)."""
    started = time.monotonic()
    name = report_name(args)
    out = Path(args.out) if args.out is not None else Path("reports") / name
    check_target(out)  # before the runs are read: a refused folder costs no load
    runs, curves = load_input(args, log=log)  # the ledger's plan, or --sweep-file's view
    sweep_file = Path(args.sweep_file) if args.sweep_file else quoted_file
    sweep_text = None
    if sweep_file is not None and sweep_file.is_file():
        sweep_text = sweep_file.read_text(errors="replace")
    key = report_key(to_json_dict(runs, curves, name), sweep_text=sweep_text,
                     options={"bootstrap": args.bootstrap, "seed": args.seed,
                              "prompt": args.prompt,
                              # only when given: reports made before the option stay current
                              **({"max_epochs": args.max_epochs}
                                 if args.max_epochs is not None else {}),
                              "bootstrap_by": args.bootstrap_by,
                              **({"holdout_above": args.holdout_above}
                                 if args.holdout_above is not None else {})})
    if not args.force and is_current(out, key):
        log(f"report: {out} kept: it was made from the same runs, curves, sweep file, "
            f"options and code (--force makes it again); checked in "
            f"{time.monotonic() - started:.1f} s")
        _say_answer(out, log)
        return (out / "report.html").resolve()
    uri = args.tracking_uri
    if args.sweep and not uri:
        import mlflow

        uri = mlflow.get_tracking_uri()  # the store load_sweep read: samples use the same
    with ExitStack() as stack:
        stack.enter_context(worker_pool(args.jobs))  # its workers start while this goes on
        if corpus is None and args.sweep_file and sweep_text:
            corpus = args.sweep_file_view.corpus(str(sweep_file))
        jobs = (stack.enter_context(sample_jobs(runs, tracking_uri=uri, prompt=args.prompt,
                                                corpus=corpus))
                if args.sweep else None)
        t0, cpu0 = time.monotonic(), time.process_time()
        result = analyze(runs, curves, bootstrap=args.bootstrap, seed=args.seed,
                         n_jobs=args.jobs, max_epochs=args.max_epochs, conventions=False,
                         holdout_above=args.holdout_above,
                         progress=lambda line: log(f"report: {line}"),
                         bootstrap_by=args.bootstrap_by)
        log(f"report: fits with {args.bootstrap} bootstrap resamples in "
            f"{time.monotonic() - t0:.1f} s ({time.process_time() - cpu0:.1f} s CPU)")
        # The refits under the other conventions (analyze's last step) run in a worker while
        # this process draws the figures, which do not show them (issue 21: ~2 s each).
        refits = in_worker(timed_refit_conventions, result.fitted_runs, tuple(result.fits),
                           args.bootstrap, args.seed, 1, result.bootstrap_by)
        with staged_folder(out) as tmp:
            t0, cpu0 = time.monotonic(), time.process_time()
            # The figures draw the fitted points (seeds averaged, held-out runs apart).
            figures = draw_all(Context(result, result.fitted_runs, curves), tmp / "figures")
            log(f"report: {sum(d.path is not None for d in figures.values())} figures in "
                f"{time.monotonic() - t0:.1f} s ({time.process_time() - cpu0:.1f} s CPU)")
            table, seconds = refits.result()
            result = replace(result, convention_refits=table)
            log(f"report: refits under the other N and C conventions in {seconds:.1f} s"
                + (" (in a worker, beside the figures)" if args.jobs > 1 else ""))
            samples = jobs.results() if jobs is not None and runs.generates else None
            info = ReportInput(
                name=name, command=regenerate_command(args), runs=runs, figures=figures,
                export_command=_export_command(args, name, out) if args.sweep else None,
                no_samples_reason=_no_samples_reason(args, runs),
                samples=samples, sample_prompt=args.prompt,
                provenance=provenance_lines(runs, sweep_file=sweep_file),
                sweep_text=sweep_text, has_curves=curves is not None and not curves.empty)
            blocks = build(result, info)
            (tmp / "report.md").write_text(to_markdown(blocks), encoding="utf-8")
            (tmp / "report.html").write_text(
                to_html(blocks, title=f"Scaling report: {name}", folder=tmp), encoding="utf-8")
            (tmp / "fit.json").write_text(
                json.dumps(analysis_to_json(result), indent=2, allow_nan=False) + "\n",
                encoding="utf-8")
            spreadsheet_safe(runs.frame).to_csv(tmp / "runs.csv", index=False)
            for kept in KEPT:
                if (out / kept).is_file():
                    shutil.copy2(out / kept, tmp / kept)
            if not args.csv:  # a CSV is its own export; a sweep's store may not travel
                write_export(tmp / EXPORT_FILE, runs, curves, name=name)
            write_key(tmp, key)  # last: a folder without it is made again
    log(f"report: {out} written in {time.monotonic() - started:.1f} s")
    _say_answer(out, log)
    return (out / "report.html").resolve()


def _say_answer(out: Path, log: Callable[[str], None]) -> None:
    """The answer's lines (analysis.reporting.answer), from the report's fit.json."""
    from analysis.reporting.answer import answer_lines

    try:
        summary = json.loads((out / "fit.json").read_text(encoding="utf-8")).get("summary")
    except (OSError, ValueError):
        return  # a report without a readable fit.json has no answer to say
    for line in answer_lines((summary or {}).get("answer")):
        log(line)


def report_sweep(name: str, uri: str, *, corpus: str | None, quoted_file: Path | None = None,
                 log: Callable[[str], None] = _log, force: bool = False) -> Path:
    """The report of sweep ``name`` in the store ``uri``, into reports/<name>/, as
    `python -m analysis.report --sweep NAME --tracking-uri URI` makes it: the runs of the plan
    the sweep recorded in its ledger, C in its convention. ``corpus``: the corpus its text
    samples may read (the sweep's own; None: only a built-in one); ``quoted_file``: the sweep
    file quoted in the report, with its sha256 in the provenance beside the plan's (it does
    not choose the runs); ``log``: the progress lines. Returns the path of report.html;
    AnalysisError (one line: analysis.cli.one_line) when there can be no report.

    For the sweep driver: a call, not `main([...argv])` with stdout redirected."""
    args = parser().parse_args(["--sweep", name, "--tracking-uri", uri,
                                *(["--force"] if force else [])])
    return _make(args, log, corpus, quoted_file)


def _make(args: argparse.Namespace, log: Callable[[str], None], corpus: str | None,
          quoted_file: Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only; never a window
    return write_report(args, log=log, corpus=corpus, quoted_file=quoted_file)


def _main(argv: list[str] | None) -> int:
    print(_make(parser().parse_args(argv), _log, None))
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command line; input errors print one line on stderr and return 2."""
    return run_main(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())

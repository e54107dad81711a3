"""`python -m pipeline.sweep FILE`: plan a sweep, run it on Ray, record it in MLflow, report.

  1. load + validate the sweep file (errors before Ray or MLflow is touched)
  2. expand to RunSpecs; --dry-run prints the plan with a measured time estimate and stops
  3. build the token cache once, here, so workers only read it
  4. MLflow ledger: create the store (once, here), the parent run with the plan manifest
     (keys.PLAN_ARTIFACT: the run ids, roles, budgets and FLOP convention the analysis reads
     instead of planning the file again; the held-out runs join it once planned), and a child
     run per spec; finished and diverged runs are skipped, failed ones retried, interrupted
     ones resumed from their last checkpoint; a run is trained only under its lease, so two
     drivers of one sweep train each run once (pipeline.driver.runner, pipeline.ledger.lease)
  5. one Ray task per run (Ray Core, not Tune: we need no search algorithm or scheduler, and
     a task per RunSpec keeps the ledger, retries and resume in our hands; Tune's experiment
     state is what made restoring failed sweeps fragile for users)
  6. progress on the terminal; Ctrl-C marks runs in flight killed (they resume next time);
     held-out budgets once the main runs are in: Approach 2 fitted on them here (this entry
     point composes the analysis), the runs planned at its optimum by pipeline.planner.holdout
  7. summary table, then the fit and report (analysis.report), the path to it and its
     answer (what to train, how sure, what next: fit.json summary.answer)
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import time
from pathlib import Path

from rich.markup import escape

from pipeline.config import SweepConfig, SweepError, load_sweep_and_sha256
from pipeline.data.repetition import repetition_problem
from pipeline.driver.capacity import local_problem
from pipeline.driver.runner import run_sweep, sigterm_as_interrupt, slots_here
from pipeline.estimate.device import cpu_has_native_bf16
from pipeline.estimate.timing import Timing
from pipeline.planner import (
    HoldoutError,
    Plan,
    data_spec_for,
    expand,
    holdout_plan,
    vocab_size_for,
)
from pipeline.preflight import driver_problem
from pipeline.terminal import chatty, configure, console, json_mode, say
from pipeline.terminal.tables import dur, print_plan, summary
from pipeline.vocab import flops, keys
from pipeline.vocab.manifest import PlanManifest, plan_manifest


def _positive(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _fraction(text: str) -> float:
    value = _positive(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def parser() -> argparse.ArgumentParser:
    """The command line of `python -m pipeline.sweep`."""
    p = argparse.ArgumentParser(prog="python -m pipeline.sweep",
                                description="Plan, run, record and report a scaling sweep.")
    p.add_argument("sweep_file")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    p.add_argument("--no-estimate", action="store_true",
                   help="no throughput calibration (a few seconds of CPU): the plan without "
                        "times, and the progress's time left from the FLOP rate of the runs "
                        "finished")
    p.add_argument("--address", default=os.environ.get("RAY_ADDRESS"),
                   help="Ray cluster address (default: $RAY_ADDRESS, else a local Ray)")
    p.add_argument("--cpus", type=int, default=None, help="CPUs for a local Ray (default: all)")
    p.add_argument("--checkpoint-dir",
                   default=os.environ.get("SCALING_CHECKPOINT_DIR") or "checkpoints",
                   help="root of run checkpoints (default: $SCALING_CHECKPOINT_DIR, else "
                        "./checkpoints); on a cluster, a folder every node mounts")
    p.add_argument("--no-report", action="store_true", help="skip the fit and report")
    p.add_argument("--device-peak", type=_positive, metavar="TFLOPS",
                   help="the plan's times: at this peak (TFLOP/s) x --mfu instead of "
                        "measuring (default: measured when the runs' device is here, else "
                        "an H100's 989 for a GPU sweep)")
    p.add_argument("--mfu", type=_fraction, help="the plan's times: the share of --device-peak "
                   "sustained (default 0.3 on a GPU, 0.5 on the CPU)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--quiet", action="store_true",
                     help="print only errors, warnings and where the results are")
    out.add_argument("--json", action="store_true",
                     help="human output on stderr; stdout is one JSON object at the end")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure(quiet=args.quiet, json_out=args.json)

    if (checked := _checked_sweep(args)) is None:
        return 2
    cfg, sweep_sha256 = checked  # the hash of the bytes validated, for the plan manifest
    vocab = vocab_size_for(cfg)
    if vocab is None:  # chars: the vocabulary depends on the corpus
        from pipeline.data import load_data

        if (chars := _data_for(cfg, args.sweep_file, load_data)) is None:
            return 2
        vocab = chars.vocab_size
    # precision auto follows the CPUs here (a cluster of other CPUs sets precision itself)
    plan = expand(cfg, args.sweep_file, vocab, cpu_bf16=cpu_has_native_bf16())
    if not plan.specs:
        print(f"error: {args.sweep_file}: the sweep has no buildable run "
              f"({len(plan.skipped)} cell(s) skipped)", file=sys.stderr)
        for sk in plan.skipped:
            print(f"  {sk.label}: {sk.reason}", file=sys.stderr)
        return 2
    slots = slots_here(cfg.resources.cpus_per_run, args.cpus)
    est = _estimate(cfg, plan, args, slots, measure=False)  # memory, from the config alone
    if not args.dry_run and _refused(plan, est, args.sweep_file):
        return 2  # before the ledger is touched: a pure estimate
    # The runs' times, measured as the dry run's while this driver gets ready (in a child)
    timing = None if args.dry_run or args.no_estimate else Timing(plan.specs, est)
    uri = ""
    if not args.dry_run:  # the driver's checks come before the data, which can take minutes
        from pipeline.tracking import default_tracking_uri

        uri = default_tracking_uri()
        if problem := driver_problem(args.address, args.checkpoint_dir, uri, cfg.name):
            print(f"error: {problem}", file=sys.stderr)
            return 2
    from pipeline.data import load_data

    if args.dry_run and cfg.data.corpus.startswith("hf:"):
        # A streamed dataset is prepared at launch, not for a plan: its D is checked then.
        console.print("note: data.max_epochs is checked at launch for a Hugging Face corpus")
        return _dry_run(cfg, plan, args, slots)
    if (data := _data_for(cfg, args.sweep_file, load_data)) is None:  # once, before any worker
        return 2
    if problem := repetition_problem(plan.specs, len(data.train), cfg.data.max_epochs,
                                     args.sweep_file):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.dry_run:
        return _dry_run(cfg, plan, args, slots)
    est = est if timing is None else timing.result()
    print_plan(cfg, plan, est.seconds, slots, est, sweep_file=args.sweep_file)
    t0 = time.monotonic()
    sigterm_as_interrupt()
    manifest = plan_manifest(cfg.name, sweep_sha256, cfg.flops_convention, plan.specs)
    try:
        results = run_sweep(cfg, plan, data, address=args.address, uri=uri,
                            checkpoint_root=Path(args.checkpoint_dir).resolve(), cpus=args.cpus,
                            manifest=manifest, seconds=est.seconds)
        plan = _run_holdout(cfg, plan, data, args, uri, vocab, slots, results, manifest)
    except SweepError as e:  # the ledger holds runs on other tokens
        print(f"error: {args.sweep_file}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        say(f"stopped; run the same command to resume: python -m pipeline.sweep "
            f"{args.sweep_file}")
        return 130
    summary(results, plan)
    failed = [r for r in results.values() if r.get("status") == keys.STATUS_FAILED]
    from pipeline.tracking import runs_page

    page = runs_page(uri, cfg.name)
    say(f"sweep {cfg.name!r}: {len(results)} runs in {dur(time.monotonic() - t0)}; "
        f"tracking at {uri}")
    say(f"compare them in the MLflow UI: {page}")
    by_budget = _say_budget_pages(cfg, plan, uri)
    report = (None if args.no_report else
              _report(cfg.name, uri, data_spec_for(cfg, args.sweep_file).corpus,
                      args.sweep_file))
    if json_mode():
        print(json.dumps(sweep_json(cfg.name, uri, page, plan, results, report,
                                    by_budget=by_budget), indent=2))
    return 1 if failed else 0


def _say_budget_pages(cfg: SweepConfig, plan: Plan, uri: str) -> dict[float, str]:
    """Of an IsoFLOP sweep, a link per budget under the runs table's: its runs overlaid on
    the token axis in the UI's chart view, with useful columns (pipeline.tracking.budget_pages).
    Shown in the default mode (--quiet keeps the one link; --json has them all)."""
    from pipeline.ledger.ui import sci
    from pipeline.tracking import budget_pages

    budgets = [s.budget for s in plan.specs if s.budget is not None]
    if cfg.kind != "isoflop" or not budgets:
        return {}
    try:
        pages = budget_pages(uri, cfg.name, budgets)
    except Exception as e:  # noqa: BLE001 - the runs are in; a missing link is no failure
        console.print(f"[yellow]no per-budget UI links[/]: {type(e).__name__}: {e}")
        return {}
    for budget, url in pages.items():
        console.print(f"  C={sci(budget)}, its runs against tokens: {escape(url)}",
                      soft_wrap=True)
    return pages


def _checked_sweep(args: argparse.Namespace) -> tuple[SweepConfig, str] | None:
    """The sweep file, validated, whose runs fit where they would train (a run no node can
    hold would leave Ray waiting for ever: pipeline.driver.capacity), and the sha256 of its
    bytes (one read); None after one error line on stderr."""
    try:
        cfg, sha256 = load_sweep_and_sha256(args.sweep_file)
    except SweepError as e:
        print(f"error: {e}", file=sys.stderr)
        return None
    if problem := local_problem(cfg.resources, args.cpus, address=args.address,
                                dry_run=args.dry_run):
        print(f"error: {args.sweep_file}: {problem}", file=sys.stderr)
        return None
    return cfg, sha256


def _run_holdout(cfg: SweepConfig, plan: Plan, data, args: argparse.Namespace, uri: str,
                 vocab: int, slots: int, results: dict[str, dict],
                 manifest: PlanManifest) -> Plan:
    """The held-out budgets, once the main runs are in: planned at the optimum their fit
    predicts, recorded in the plan manifest, then trained; returns the whole plan (main +
    held-out) for the summary."""
    holdout = cfg.isoflop.holdout if cfg.isoflop is not None else None
    if holdout is None:
        return plan
    try:
        n_opt = predicted_optimum(cfg, args.sweep_file, uri, plan)
        h_plan = holdout_plan(cfg, n_opt, args.sweep_file, vocab,
                              cpu_bf16=cpu_has_native_bf16())
    except HoldoutError as e:
        say(f"[red]held-out budgets not run[/]: {e}")
        results["holdout"] = {"status": keys.STATUS_FAILED, "error": str(e)}
    else:
        h_plan = _refuse_repetition(h_plan, cfg, len(data.train), args.sweep_file, results)
        print_plan(cfg, h_plan, None, slots)
        held_out = plan_manifest(cfg.name, manifest.sweep_sha256, cfg.flops_convention,
                                 h_plan.specs)
        try:
            results.update(run_sweep(cfg, h_plan, data, address=args.address, uri=uri,
                                     checkpoint_root=Path(args.checkpoint_dir).resolve(),
                                     cpus=args.cpus, manifest=manifest.with_runs(held_out.runs)))
        except SweepError as e:
            say(f"[red]held-out budgets not run[/]: {e}")
            results["holdout"] = {"status": keys.STATUS_FAILED, "error": str(e)}
        plan = Plan(plan.specs + h_plan.specs, plan.skipped + h_plan.skipped)
    return plan


def predicted_optimum(cfg: SweepConfig, sweep_file: str, uri: str,
                      plan: Plan) -> dict[float, float]:
    """The compute-optimal N at each held-out budget, as Approach 2 (IsoFLOP parabolas ->
    N_opt = k C^a) fitted on the sweep's main runs in the ledger predicts it; the lines say it.

    C is read under the sweep's planning convention, so N_opt(C) is read at the held-out
    budget in the same units. ``plan`` is the main plan the driver ran: the ledger's runs
    outside it (of an earlier version of the file, or its held-out runs) are not fitted, and a
    file edited meanwhile changes nothing. HoldoutError when there is no fit. The analysis is
    composed here, in the entry point: pipeline.planner.holdout plans from the numbers alone."""
    from analysis.errors import AnalysisError
    from analysis.fits.approach2 import fit_approach2
    from analysis.runs.load import load_sweep as load_runs
    from analysis.runs.planned import restrict_to_plan

    assert cfg.isoflop is not None and cfg.isoflop.holdout is not None
    try:
        runs = load_runs(cfg.name, tracking_uri=uri, flops_convention=cfg.flops_convention,
                         with_curves=False, log=lambda _m: None).runs
    except AnalysisError as e:
        raise HoldoutError(f"cannot load the main runs: {e}") from e
    # Cells on part of the train split (isoflop.repeats) repeat their data: their loss at a
    # given N and D is not the IsoFLOP curve the optimum is read from.
    fitted = {s.run_id for s in plan.specs if s.data.train_fraction == 1}
    try:
        runs = restrict_to_plan(runs, fitted, sweep_file)
    except AnalysisError as e:
        raise HoldoutError(f"cannot tell the main runs of {sweep_file}: {e}") from e
    main = runs.frame[runs.frame["role"] != keys.ROLE_HOLDOUT]
    try:
        fit = fit_approach2(*(main[k].to_numpy(float) for k in ("N", "D", "C", "loss", "budget")))
    except AnalysisError as e:
        raise HoldoutError(f"Approach 2 cannot be fitted on the main budgets, so there is no "
                           f"predicted optimum to train at: {e}") from e
    n_opt = {c: float(fit.n_opt(c)) for c in cfg.isoflop.holdout.budgets}
    for c, n in n_opt.items():
        console.print(f"held-out budget C={c:.3g}: Approach 2 on the main budgets "
                      f"(a = {fit.a:.3f}) predicts N_opt = {n:,.0f}")
    return n_opt


def _estimate(cfg: SweepConfig, plan: Plan, args: argparse.Namespace, slots: int,
              measure: bool):
    """Each run's peak memory (and with measure, its time) on the device it trains on:
    measured here, or assumed (--device-peak, --mfu)."""
    from pipeline.estimate.device import target_for
    from pipeline.estimate.plan import estimate_plan

    res = cfg.resources
    peak = None if args.device_peak is None else args.device_peak * 1e12
    target = target_for(res.num_gpus, res.num_cpus, slots, res.device_memory_gb, peak,
                        args.mfu)
    return estimate_plan(plan.specs, target, measure=measure)


def _refused(plan: Plan, est, sweep_file: str) -> bool:
    """Print why each run that cannot fit its device's memory is refused; True if any is."""
    from pipeline.estimate.plan import too_big

    refused = too_big(plan.specs, est, sweep_file)
    for message in refused:
        print(f"error: {message}", file=sys.stderr)
    return bool(refused)


def _dry_run(cfg: SweepConfig, plan: Plan, args: argparse.Namespace, slots: int) -> int:
    est = _estimate(cfg, plan, args, slots, measure=not args.no_estimate)
    print_plan(cfg, plan, est.seconds, slots, est, sweep_file=args.sweep_file)
    refused = _refused(plan, est, args.sweep_file)
    if json_mode():
        print(json.dumps(sweep_json(cfg.name, "", "", plan, {}, None, est), indent=2))
    return 2 if refused else 0


def _refuse_repetition(h_plan: Plan, cfg: SweepConfig, train_tokens: int, sweep_file: str,
                       results: dict) -> Plan:
    """The held-out plan, emptied (and the refusal recorded) if it would repeat data."""
    where = f"{sweep_file} (held-out budgets)"
    if problem := repetition_problem(h_plan.specs, train_tokens, cfg.data.max_epochs, where):
        say(f"[red]held-out budgets not run[/]: {problem}")
        results["holdout"] = {"status": keys.STATUS_FAILED, "error": problem}
        return Plan([], h_plan.skipped)
    return h_plan


def _data_for(cfg: SweepConfig, sweep_file: str, load_data):
    """The sweep's tokens, built once here (a first build of a corpus says what it does);
    None, after one line on stderr, when the corpus cannot be read (a bad record, a file that
    is not UTF-8) or the disk cannot hold them (nothing partial is kept)."""
    from pipeline.data import DataError
    from pipeline.data.files import DiskFullError

    try:
        return load_data(data_spec_for(cfg, sweep_file),
                         progress=lambda line: console.print(f"data: {line}"))
    except DataError as e:
        print(f"error: {sweep_file}: data: {e}", file=sys.stderr)
    except DiskFullError as e:
        print(f"error: {sweep_file}: {e.strerror}", file=sys.stderr)
    return None


def _report(name: str, uri: str, corpus: str, sweep_file: str) -> str | None:
    """Fit and report (analysis.report.report_sweep: the runs of the plan this sweep recorded,
    C in its convention); a failure here never touches the runs (they are in the ledger).
    Returns the report's path, None when there is none. Its progress lines go to stderr by
    default and with --json, and are kept back with --quiet unless it fails. ``corpus``: the
    sweep's own, which the report's text samples may read; ``sweep_file`` is quoted in it."""
    from analysis.errors import AnalysisError
    from analysis.report import report_sweep

    regenerate = f"python -m analysis.report --sweep {name} --tracking-uri {uri}"
    kept: list[str] = []  # --quiet keeps the report's lines back, to show them if it fails
    def log(line: str) -> None:
        if chatty() or json_mode():
            print(line, file=sys.stderr, flush=True)
        else:
            kept.append(line)

    try:
        path = report_sweep(name, uri, corpus=corpus, quoted_file=Path(sweep_file), log=log)
    except AnalysisError as e:
        print("".join(f"{line}\n" for line in kept), end="", file=sys.stderr)
        say(f"[yellow]no report[/]: {e}; retry with: {regenerate}")
        return None
    except Exception as e:  # noqa: BLE001 - the sweep succeeded; say what failed and how to retry
        say(f"[red]report failed[/]: {type(e).__name__}: {e}. The runs are safe; "
            f"retry with: {regenerate}")
        return None
    say(f"report: {path}")
    _say_answer(path)
    return str(path)


def _say_answer(report_html: Path) -> None:
    """The report's answer (fit.json summary.answer: analysis.reporting.answer) as the sweep's
    last lines: what to train, how sure, what next (issue 55)."""
    from analysis.reporting.answer import answer_lines

    try:
        fit = json.loads((report_html.parent / "fit.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    for line in answer_lines((fit.get("summary") or {}).get("answer")):
        say(escape(line))


def sweep_json(name: str, uri: str, page: str, plan: Plan, results: dict[str, dict],
               report: str | None, est=None, by_budget: dict[float, str] | None = None) -> dict:
    """The --json object: the sweep, where to look (mlflow_ui; of an IsoFLOP sweep,
    mlflow_ui_budgets: a link per budget), and every planned run's outcome (of a dry run: its
    estimated seconds and peak memory instead)."""
    runs = []
    for s in plan.specs:
        out = results.get(s.run_id, {})
        loss = out.get("final_val_loss")
        if est is not None:
            out = {"est_seconds": est.seconds.get(s.run_id) if est.seconds else None,
                   "peak_memory_bytes": est.memory[s.run_id].total,
                   "micro_batch_size": s.exec.micro_batch_size or s.train.batch_size}
        runs.append({**({} if est is None else out), "run_id": s.run_id, "budget": s.budget, "role": s.role,
                     "family": s.model.family, "n_layer": s.model.n_layer,
                     "d_model": s.model.d_model, "N": flops.params_total(s.model),
                     "D": s.tokens, "status": out.get("status"),
                     "already_done": bool(out.get("skipped")),
                     "final_val_loss": loss if isinstance(loss, float) else None,
                     "error": out.get("error")})
    extra = {k: v for k, v in results.items() if k == "holdout"}  # a refused held-out plan
    budgets = [{"budget": b, "url": url} for b, url in (by_budget or {}).items()]
    return {"sweep": name, "tracking_uri": uri, "mlflow_ui": page, "mlflow_ui_budgets": budgets,
            "report": report, "runs": runs, **extra}


if __name__ == "__main__":
    code = main()
    # The interpreter's last garbage collection walks every object MLflow, Ray and pydantic
    # made (1.3 s of a sweep's exit, measured 2026-12-04); frozen, they are left to the OS.
    # Files and the ledger are closed by then.
    gc.freeze()
    sys.exit(code)

"""A sweep trained on one GPU machine without Ray or MLflow, then written into the ledger.

    python benchmarks/tools/gpu_study.py run SWEEP_FILE OUT [--workers W] [--deadline-s S]
                                                 [--done RUNS_CSV_OR_FOLDER ...]
    python benchmarks/tools/gpu_study.py import OUT --sweep-file SWEEP_FILE [--tracking-uri URI]

Why: the GPU machine lent to some sessions has torch but neither Ray nor MLflow, and nothing
can be installed there beyond a few small wheels (pydantic). `pipeline.sweep` is the tool on
any machine that has them; this script is for the other case, and keeps everything that
decides a result the same: the plan is `pipeline.planner.expand` of the sweep file (same run ids,
shapes, steps, recipe), the same repetition refusal, the held-out budget planned by
`pipeline.planner.plan_holdout` at the N_opt of Approach 2 fitted on the main runs (as
`pipeline.planner.holdout` does from the ledger), and every run is `pipeline.train.train`.

run: builds the sweep's tokens once, then trains the main runs in W processes sharing the
device (largest first, so the last to finish are short), then the held-out runs. Each run
records what the trainer gave its tracker (metrics by step, summary, tags, dataset) and its
RunResult as one gzip member appended to OUT/runs.jsonl.gz as it finishes, so a deadline or a
crash keeps every finished run. Runs are not checkpointed (a lost run is trained again).
--deadline-s: no run starts after that many seconds (the held-out runs only start if every
main run finished).

A study larger than one GPU session (the lent machine: 15 minutes of device time a session)
accumulates: --done names what earlier sessions trained, a report's runs.csv (the committed
ledger's runs) or an earlier OUT folder (its records), and OUT's own records count too (a
rerun into the same folder resumes). Those runs are not trained again, they enter the fit that
plans the held-out runs, and if any of them was trained on other tokens than the data built
here (another data fingerprint: e.g. site-packages differ between machines) nothing is trained
and the error names the run and both fingerprints.

import: replays each record into the sweep's MLflow experiment through pipeline.tracking, the
ledger's only writer: the child run, params and spec artifact the driver creates, then the
trainer's tags, dataset, metric history, summary and curve, and the status. Tags added:
`imported_from` (this script), `device` and the producer's git commit, Python and torch.
Metric timestamps are those of the import. A run_id already finished in the ledger is
skipped, so importing twice adds nothing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import multiprocessing as mp
import os
import platform
import socket
import sys
import time
import traceback
import zlib
from dataclasses import asdict
from pathlib import Path

RECORDS = "runs.jsonl.gz"
IMPORTED_FROM = "benchmarks/tools/gpu_study.py"
IMPORTED_FROM_TAG = "imported_from"  # on the sweep run and every imported run


# --- run (the GPU machine: torch, no Ray, no MLflow) ----------------------------------------

_DATA = None  # the worker's TokenData, loaded once per process


def _worker_init(data_spec: dict, threads: int) -> None:
    global _DATA
    import torch

    from pipeline.data import load_data
    from pipeline.vocab.spec import DataSpec

    torch.set_num_threads(threads)
    _DATA = load_data(DataSpec(**data_spec))


def _train_one(job: tuple[dict, float]) -> dict:
    import torch

    from pipeline.train import NullTracker, train
    from pipeline.vocab.spec import RunSpec

    spec_dict, deadline = job
    if time.time() > deadline:
        return {"spec": spec_dict, "status": "not_started", "error": "past the deadline"}
    spec = RunSpec.from_dict(spec_dict)
    tracker = NullTracker()
    start = time.time()
    try:
        result = train(spec, tracker, data=_DATA, resume=False)
    except Exception as e:  # noqa: BLE001 - recorded as a failed run, the others go on
        return {"spec": spec_dict, "status": "failed", "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc()}
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor()
    return {"spec": spec_dict, "status": result.status, "result": asdict(result),
            "metrics": tracker.metrics, "summary": tracker.summary, "tags": tracker.tags,
            "datasets": tracker.datasets, "wall_s": time.time() - start, "device": device,
            "host": socket.gethostname(), "python_version": platform.python_version(),
            "torch_version": torch.__version__}


def _append(out: Path, record: dict) -> None:
    # One gzip member per run: members concatenate into one valid stream, and a run that
    # finished is on disk before the next one is.
    with gzip.open(out / RECORDS, "ab") as f:
        f.write((json.dumps(record) + "\n").encode())


def _train_all(specs: list, data_spec: dict, workers: int, out: Path, deadline: float,
               extra: dict, label: str) -> list[dict]:
    """Train specs in `workers` processes, largest budget and D first; every record (runs
    past the deadline come back "not_started" and are not written)."""
    if not specs:
        return []
    order = sorted(specs, key=lambda s: (-(s.budget or 0.0), -s.tokens, s.run_id))
    records: list[dict] = []
    ctx = mp.get_context("spawn")  # CUDA in the children needs a fresh interpreter
    t0 = time.time()
    with ctx.Pool(workers, initializer=_worker_init, initargs=(data_spec, 1)) as pool:
        jobs = [(s.to_dict(), deadline) for s in order]
        for record in pool.imap_unordered(_train_one, jobs):
            records.append(record)
            if record["status"] == "not_started":
                continue
            record.update(extra)
            _append(out, record)
            result = record.get("result") or {}
            print(f"[{label} {len(records)}/{len(order)} {time.time() - t0:6.1f}s] "
                  f"{record['spec']['run_id']} C={record['spec']['budget'] or 0:.3g} "
                  f"N={result.get('params_total', 0):,} {record['status']} "
                  f"loss={result.get('final_val_loss', math.nan):.4f} "
                  f"({record.get('wall_s', math.nan):.1f} s)"
                  + (f" {record['error']}" if "error" in record else ""), flush=True)
    late = sum(r["status"] == "not_started" for r in records)
    if late:
        print(f"deadline: {late} {label} run(s) not started", flush=True)
    return [r for r in records if r["status"] != "not_started"]


def ended_before(paths: list[Path], convention: str) -> dict[str, dict]:
    """Runs that ended in earlier sessions (finished, or diverged: a result too, never trained
    again, as the sweep driver has it): run_id -> {fingerprint, role, row (N, D, C, loss,
    budget; None for a diverged run), source}, from a report's runs.csv (its finished runs)
    or a folder of this script's records."""
    import csv

    done: dict[str, dict] = {}
    for path in paths:
        if path.is_dir():
            if not (path / RECORDS).is_file():
                continue  # OUT before its first run; --done folders are checked in main()
            for r in read_records(path):
                if r["status"] not in ("finished", "diverged"):
                    continue
                res, spec = r["result"], r["spec"]
                row = (res["params_total"], res["tokens"], res["flops"][convention],
                       res["final_val_loss"], spec["budget"])
                done[spec["run_id"]] = {
                    "fingerprint": r.get("data_fingerprint", ""), "role": spec["role"],
                    "row": row if r["status"] == "finished" else None,
                    "source": str(path / RECORDS)}
            continue
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        column = f"flops_{convention}"
        for need in ("run_id", "data_fingerprint", "role", "N", "D", column, "loss", "budget"):
            if rows and need not in rows[0]:
                raise SystemExit(f"error: {path}: no column {need!r} (a report's runs.csv "
                                 f"has it)")
        for line, row in enumerate(rows, start=2):
            try:
                values = (float(row["N"]), float(row["D"]), float(row[column]),
                          float(row["loss"]), float(row["budget"]) if row["budget"] else None)
            except ValueError as e:
                raise SystemExit(f"error: {path}: line {line} (run {row['run_id']}): {e}") \
                    from None
            done[row["run_id"]] = {"fingerprint": row["data_fingerprint"], "role": row["role"],
                                   "row": values, "source": str(path)}
    return done


def other_tokens(done: dict[str, dict], fingerprint: str) -> str | None:
    """A run of `done` trained on other tokens than `fingerprint`, in words; None if none."""
    for run_id, d in sorted(done.items()):
        if d["fingerprint"] and d["fingerprint"] != fingerprint:
            return (f"{d['source']}: run {run_id} was trained on tokens "
                    f"{d['fingerprint'][:12]}, the data built here are {fingerprint[:12]} (the "
                    f"corpus, tokenizer or split differ); nothing trained")
    return None


def run(sweep_file: str, out: Path, workers: int, deadline_s: float, git_commit: str,
        done_paths: tuple[Path, ...] = ()) -> int:
    from analysis.fits.approach2 import fit_approach2
    from pipeline.config import load_sweep
    from pipeline.data import load_data
    from pipeline.data.repetition import repetition_problem
    from pipeline.planner import data_spec_for, expand, plan_holdout, vocab_size_for

    start = time.time()
    deadline = start + deadline_s
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_sweep(sweep_file)
    done = ended_before([out, *done_paths], cfg.flops_convention)
    data_spec = data_spec_for(cfg, sweep_file)
    data = load_data(data_spec, progress=lambda m: print(f"data: {m}", flush=True))
    vocab = vocab_size_for(cfg) or data.vocab_size
    plan = expand(cfg, sweep_file, vocab)
    if problem := repetition_problem(plan.specs, len(data.train), cfg.data.max_epochs,
                                     sweep_file):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if problem := other_tokens(done, data.fingerprint):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    extra = {"git_commit": git_commit, "data_fingerprint": data.fingerprint}
    (out / "plan.json").write_text(json.dumps(
        {"sweep_file": sweep_file, "runs": len(plan.specs), "workers": workers,
         "data_fingerprint": data.fingerprint, "train_tokens": len(data.train)}, indent=1))
    todo = [s for s in plan.specs if s.run_id not in done]
    print(f"{len(plan.specs)} main runs, {len(plan.specs) - len(todo)} finished before, "
          f"{len(todo)} to train on {workers} processes; data {data.fingerprint[:12]} "
          f"({len(data.train):,} train tokens)", flush=True)
    main = _train_all(todo, asdict(data_spec), workers, out, deadline, extra, "main")
    ended = {s.run_id: done[s.run_id]["row"] for s in plan.specs if s.run_id in done}
    ended.update({r["spec"]["run_id"]: (
        r["result"]["params_total"], r["result"]["tokens"],
        r["result"]["flops"][cfg.flops_convention], r["result"]["final_val_loss"],
        r["spec"]["budget"]) if r["status"] == "finished" else None
        for r in main if r["status"] in ("finished", "diverged")})
    rows = [row for row in ended.values() if row is not None]
    print(f"main runs: {len(rows)} of {len(plan.specs)} finished, "
          f"{len(ended) - len(rows)} diverged ({time.time() - start:.0f} s)", flush=True)
    if cfg.isoflop is None or cfg.isoflop.holdout is None:
        return 0
    if len(ended) < len(plan.specs):  # as pipeline.planner.holdout: once every main run has ended
        print("held-out runs not planned: not every main run has ended", flush=True)
        return 1
    import numpy as np

    from analysis.errors import AnalysisError

    try:
        fit = fit_approach2(*(np.array(col, dtype=float) for col in zip(*rows, strict=True)))
    except AnalysisError as e:
        print(f"held-out runs not planned: Approach 2 cannot be fitted on the main budgets, so "
              f"there is no predicted optimum to train at: {e}", file=sys.stderr)
        return 1
    n_opt = {c: float(fit.n_opt(c)) for c in cfg.isoflop.holdout.budgets}
    for c, n in n_opt.items():
        print(f"held-out budget C={c:.3g}: Approach 2 on the main budgets (a = {fit.a:.3f}) "
              f"predicts N_opt = {n:,.0f}", flush=True)
    held = plan_holdout(cfg, n_opt, sweep_file, vocab)
    if problem := repetition_problem(held.specs, len(data.train), cfg.data.max_epochs,
                                     sweep_file):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    held_todo = [s for s in held.specs if s.run_id not in done]
    print(f"{len(held.specs)} held-out runs, {len(held.specs) - len(held_todo)} finished "
          f"before", flush=True)
    _train_all(held_todo, asdict(data_spec), workers, out, deadline, extra, "holdout")
    print(f"all done in {time.time() - start:.0f} s", flush=True)
    return 0


# --- import (this machine: MLflow) ----------------------------------------------------------


def read_records(folder: Path) -> list[dict]:
    """The records of `folder`. A run killed while appending (a call's time limit) leaves a
    truncated last member: the complete records before it are kept, and a warning names it."""
    lines: list[str] = []
    try:
        with gzip.open(folder / RECORDS, "rt") as f:
            for line in f:
                lines.append(line)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        print(f"warning: {folder / RECORDS}: truncated after {len(lines)} complete record(s) "
              f"({type(e).__name__}); the rest is ignored", file=sys.stderr)
    records = []
    for line in lines:
        if not line.endswith("\n"):
            break  # the last, cut short
        if line.strip():
            records.append(json.loads(line))
    return records


def import_records(folder: Path, sweep_file: str, uri: str) -> tuple[int, int]:
    """Write the finished records of `folder` into the sweep's ledger at `uri`; returns
    (imported, skipped as already finished)."""
    from pipeline.config import load_sweep
    from pipeline.tracking import Ledger, MLflowTracker
    from pipeline.trial import curve_tag
    from pipeline.vocab import keys
    from pipeline.vocab.spec import RunSpec

    cfg = load_sweep(sweep_file)
    ledger = Ledger(uri, cfg.name)
    trials = ledger.trials()
    # Runs on other tokens than the ledger's would be fitted together silently: refuse them
    # all before anything is written.
    ended = (keys.STATUS_FINISHED, keys.STATUS_DIVERGED)
    theirs = {rec.data_fingerprint: f"the ledger's run {rid}" for rid, rec in trials.items()
              if rec.status in ended and rec.data_fingerprint}
    records = [r for r in read_records(folder) if r["status"] in ended]
    for record in records:
        if (sweep := record["spec"].get("sweep")) != cfg.name:
            raise SystemExit(f"error: {folder / RECORDS}: run {record['spec'].get('run_id')} "
                             f"is of sweep {sweep!r}, not {cfg.name!r} ({sweep_file})")
        ours, rid = record.get("data_fingerprint", ""), record["spec"].get("run_id")
        if ours and theirs and ours not in theirs:
            other, where = next(iter(theirs.items()))
            raise SystemExit(
                f"error: {folder / RECORDS}: run {rid} was trained on tokens {ours[:12]}, "
                f"{where} of {cfg.name!r} on {other[:12]}: the corpus, tokenizer or split "
                f"differ; nothing imported")
        if ours:
            theirs.setdefault(ours, f"run {rid} of this folder")
    done = {rid for rid, rec in trials.items() if rec.status in ended}
    parent = ledger.parent_run({"kind_of_sweep": cfg.kind, "family": cfg.family,
                                IMPORTED_FROM_TAG: IMPORTED_FROM})
    imported = skipped = 0
    for record in records:
        spec = RunSpec.from_dict(record["spec"])
        if spec.run_id in done:
            skipped += 1
            continue
        trial = ledger.create_trial(spec, parent)
        tracker = MLflowTracker(uri, trial.mlflow_run_id)
        tracker.start_attempt()
        tracker.set_tags({**record["tags"], IMPORTED_FROM_TAG: IMPORTED_FROM,
                          "device": record["device"], "host": record["host"],
                          keys.TAG_GIT_COMMIT: record.get("git_commit", ""),
                          keys.TAG_GIT_DIRTY: "", keys.TAG_PYTHON: record["python_version"],
                          keys.TAG_TORCH: record["torch_version"]})
        for dataset in record["datasets"]:
            tracker.log_dataset(dataset)
        for step, metrics in record["metrics"]:
            tracker.log_metrics(metrics, step)
        tracker.log_summary(record["summary"])
        curve = record["result"]["curve"]
        tracker.log_dict(curve, keys.CURVE_ARTIFACT)
        if (inline := curve_tag(curve)) is not None:
            tracker.set_tags({keys.TAG_CURVE: inline})
        tracker.end(record["status"])
        done.add(spec.run_id)
        imported += 1
    ledger.mark(parent, "finished", "FINISHED")
    return imported, skipped



def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train the sweep here (no Ray, no MLflow)")
    r.add_argument("sweep_file")
    r.add_argument("out", type=Path)
    r.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2),
                   help="processes sharing the device (default: CPUs - 2)")
    r.add_argument("--deadline-s", type=float, default=math.inf,
                   help="start no run after this many seconds")
    r.add_argument("--git-commit", default="", help="the commit of this code, for the ledger")
    r.add_argument("--done", type=Path, nargs="+", default=[],
                   help="runs trained before, not to train again: a report's runs.csv or an "
                        "earlier OUT folder")
    i = sub.add_parser("import", help="write a run's records into the MLflow ledger")
    i.add_argument("folder", type=Path)
    i.add_argument("--sweep-file", required=True)
    i.add_argument("--tracking-uri", default=None)
    args = p.parse_args(argv)
    if args.command == "run":
        for path in args.done:
            if not path.exists():
                print(f"error: --done {path}: no such file or folder", file=sys.stderr)
                return 2
            if path.is_dir() and not (path / RECORDS).is_file():
                print(f"error: --done {path}: no {RECORDS} there (give a report's runs.csv or "
                      f"an earlier OUT folder)", file=sys.stderr)
                return 2
        return run(args.sweep_file, args.out, args.workers, args.deadline_s, args.git_commit,
                   tuple(args.done))
    if not (args.folder / RECORDS).is_file():
        print(f"error: {args.folder / RECORDS}: no such file", file=sys.stderr)
        return 2
    from pipeline.tracking import default_tracking_uri

    uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    imported, skipped = import_records(args.folder, args.sweep_file, uri)
    print(f"imported {imported} run(s) into {uri}; {skipped} already finished there")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sweep overhead (Ray + MLflow against a plain loop) and memory of the same runs.

    python benchmarks/perf/bench_sweep.py                 # ~3-4 minutes on 2 cores
    python benchmarks/perf/bench_sweep.py --sweep-file sweeps/quickstart.yaml   # ~10 minutes

A small plan is built in code (an IsoFLOP sweep file parsed with pipeline.config.parse_sweep,
expanded with pipeline.planner.expand: one budget, 4 gpt shapes, ~10 s of CPU each, the default
recipe: 8 evaluations plus the final one), or with --sweep-file a shipped sweep's own plan
(its main runs; issue 21's target is stated on the quickstart's). The same RunSpecs run
  (a) in a loop of pipeline.train.train(spec, NullTracker()) in one process, and
  (b) as a user starts it, `python -m pipeline.sweep FILE --no-report --cpus 1 --json`: a
      fresh sqlite MLflow store, a local Ray with one CPU (so runs go one at a time),
      checkpoints at every evaluation (the default). (Until 2026-12-06 (b) called run_sweep
      inside a benchmark process that had imported torch: 1.2 s of CPU the CLI's driver
      never spends.)
Each path in its own subprocess, (a) before and after (b) (the mean of the two is the
reference). Overhead = (b - a) / b, by the wall clock and by CPU seconds of the whole process
tree (driver, Ray's processes, workers; sampled from /proc). Memory: peak resident set per
run and Pss of the whole tree; the token arrays must be memory-maps, not copies.

Environment (set here if not already): RAY_TMPDIR=<short tmp dir>, SCALING_CACHE_DIR=<tmp>,
MLFLOW_TRACKING_URI=sqlite:///<tmp>/mlflow.db. Ray is stopped at the end of (b).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import benchlib as bl  # noqa: E402
import procmon  # noqa: E402

# An IsoFLOP sweep, like the shipped ones: one budget, four shapes (~40k to ~170k params).
SWEEP_YAML = """
name: bench-overhead
kind: isoflop
family: gpt
data: {{corpus: stdlib, tokenizer: bytes, seq_len: 128}}
train: {{batch_size: 16, lr: 3.0e-3}}
resources: {{num_cpus: 1, num_gpus: 0}}
flops_convention: exact
isoflop:
  budgets: [{budget:g}]
  sizes:
    shapes:
      - {{n_layer: 2, d_model: 32}}
      - {{n_layer: 3, d_model: 48}}
      - {{n_layer: 2, d_model: 64}}
      - {{n_layer: 3, d_model: 64}}
"""


def plan(budget: float, sweep_file: str | None = None):
    from pipeline.config import load_sweep, parse_sweep
    from pipeline.planner import expand

    if sweep_file:
        cfg = load_sweep(sweep_file)
        return cfg, expand(cfg, sweep_file)
    cfg = parse_sweep(SWEEP_YAML.format(budget=budget), "bench-overhead.yaml")
    return cfg, expand(cfg, ".", 256)


def mib(kb: float) -> str:
    return f"{kb / 1024:,.0f} MiB"


# --------------------------------------------------------------------------------------
# Workers (each in its own process)
# --------------------------------------------------------------------------------------


def loop_worker(budget: float, sweep_file: str | None) -> dict:
    import numpy as np

    from pipeline.data import load_data
    from pipeline.train import NullTracker, train

    cfg, p = plan(budget, sweep_file)
    data = load_data(p.specs[0].data)  # the cache is built (by the parent): this only maps it
    check = {"train_is_memmap": isinstance(data.train, np.memmap),
             "train_mib": data.train.nbytes / 2**20}
    before = procmon.self_kb()
    t0, c0 = time.perf_counter(), time.process_time()
    walls, anon = [], []
    for spec in p.specs:
        walls.append(train(spec, NullTracker()).wall_s)  # loads its data itself, as a worker
        anon.append(procmon.self_kb()["RssAnon"] / 1024)
    after = procmon.self_kb()
    # Touch every page of the train split: a memmap maps them from the page cache
    # (RssFile grows, shared with every process), a copy would allocate (RssAnon).
    touched = procmon.self_kb()
    int(np.asarray(data.train[:: 2048 // data.train.itemsize]).sum())
    touched_after = procmon.self_kb()
    check["touch_anon_mib"] = (touched_after["RssAnon"] - touched["RssAnon"]) / 1024
    check["touch_file_mib"] = (touched_after["RssFile"] - touched["RssFile"]) / 1024
    check["anon_after_run_mib"] = anon
    return {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0,
            "train_wall": walls, "anon_growth_mib": (after["RssAnon"] - before["RssAnon"]) / 1024,
            "file_growth_mib": (after["RssFile"] - before["RssFile"]) / 1024,
            "hwm_mib": after["VmHWM"] / 1024, **check}


def sweep_file_for(root: str, budget: float, sweep_file: str | None) -> str:
    """The sweep file (b) runs: the shipped one, or the built-in plan written out."""
    if sweep_file:
        return sweep_file
    path = Path(root) / "bench-overhead.yaml"
    path.write_text(SWEEP_YAML.format(budget=budget))
    return str(path)


def sweep_cli(budget: float, root: str, sweep_file: str | None) -> tuple[dict, procmon.TreeMonitor]:
    """(b): the sweep as a user starts it, `python -m pipeline.sweep FILE --no-report --cpus 1`
    (its own imports, store, Ray, scheduling), timed from start to exit. Its outcome is the
    --json object; each run's training wall time is read back from the ledger afterwards."""
    from mlflow.tracking import MlflowClient

    from pipeline.vocab import keys

    cfg, _ = plan(budget, sweep_file)
    cmd = [sys.executable, "-m", "pipeline.sweep", sweep_file_for(root, budget, sweep_file),
           "--no-report", "--cpus", "1", "--checkpoint-dir", str(Path(root) / "ckpt"), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    with procmon.TreeMonitor(proc.pid) as mon:
        out, _ = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"the sweep CLI failed with code {proc.returncode}")
    result = json.loads(out)
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name(cfg.name)
    walls = [r.data.metrics.get(keys.FINAL_WALL_S, 0.0)
             for r in client.search_runs([exp.experiment_id], max_results=10_000)]
    return {"wall": wall, "statuses": sorted({str(r["status"]) for r in result["runs"]}),
            "train_wall": walls}, mon


def mlflow_per_run(specs, root: str, repeat: int = 3) -> float:
    """Wall seconds of the MLflow calls one finished run makes (driver and worker side)."""
    from pipeline.tracking import Ledger, MLflowTracker
    from pipeline.vocab import keys

    uri = f"sqlite:///{root}/mlflow-calls.db"
    ledger = Ledger(uri, "calls")
    times = []
    for i in range(repeat):
        for spec in specs:
            spec = replace(spec, sweep=f"calls{i}")
            t = time.perf_counter()
            rec = ledger.create_trial(spec, None)
            tracker = MLflowTracker(uri, rec.mlflow_run_id)
            tracker.start_attempt()
            tracker.set_tags({"checkpoint_dir": "/tmp/x", "node": "local", "host": "h"})
            for step in range(10, spec.steps + 1, 10):
                tracker.log_metrics({keys.TRAIN_LOSS: 1.0, keys.TRAIN_LR: 1e-3,
                                     keys.TOKENS: step, keys.THROUGHPUT: 1.0}, step)
            tracker.log_summary({keys.FINAL_VAL_LOSS: 1.0, keys.FINAL_TOKENS: 1.0})
            tracker.log_dict({"step": [1], "tokens": [1], "val_loss": [1.0]},
                             keys.CURVE_ARTIFACT)
            tracker.end(keys.STATUS_FINISHED)
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def program(title: str) -> str:
    """The program a command line runs: the script or module after a Python interpreter and
    its options ("python -u .../agent.py ..." -> ".../agent.py"), else its first word."""
    words = title.split() or [""]
    if "python" not in words[0].rsplit("/", 1)[-1]:
        return words[0]
    for i, word in enumerate(words[1:], 1):
        if word == "-m" and i + 1 < len(words):
            return words[i + 1]
        if not word.startswith("-"):
            return word
    return words[0]


def role(titles: set[str]) -> str:
    """A short name for a process of the sweep's tree, from the program each of its command
    lines runs (not their arguments: the raylet's name the agents it starts, and the
    agents' name the raylet)."""
    text = " ".join(program(t) for t in titles)
    for key, name in (("run_trial", "trial worker"), ("pipeline.sweep", "driver"),
                      ("DashboardAgent", "dashboard agent"),
                      ("dashboard/agent.py", "dashboard agent"),
                      ("RuntimeEnvAgent", "runtime-env agent"),
                      ("runtime_env/agent", "runtime-env agent"),
                      ("log_monitor", "log monitor"), ("monitor.py", "autoscaler monitor"),
                      ("dashboard.py", "dashboard head"), ("gcs_server", "gcs_server"),
                      ("raylet", "raylet"), ("ray::", "idle worker"),
                      ("default_worker", "idle worker")):
        if key in text:
            return name
    return "other"


def cpu_by_role(mon: procmon.TreeMonitor) -> dict[str, float]:
    out: dict[str, float] = {}
    for info in mon.procs.values():
        name = role(info.titles)
        out[name] = out.get(name, 0.0) + info.cpu_s
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def run_worker(kind: str, budget: float, root: str,
               sweep_file: str | None) -> tuple[dict, procmon.TreeMonitor]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--root", root,
           "--budget", f"{budget:g}", *(["--sweep-file", sweep_file] if sweep_file else [])]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    with procmon.TreeMonitor(proc.pid) as mon:
        out, _ = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"{kind} worker failed with code {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1]), mon


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------


def print_memory(a1: dict, mon_a1, mon_b, n: int) -> None:
    """The memory table: peak RSS of the loop and of each trial worker, and whether the token
    arrays are shared (memmap) or copied per run."""
    workers = {pid: p for pid, p in mon_b.procs.items()
               if any("ray::" in t or "default_worker" in t for t in p.titles)}
    trial = {pid: p for pid, p in workers.items()
             if any("run_trial" in t for t in p.titles)}
    print("\nMemory")
    mrows = [{
        "process": f"(a) loop process ({n} runs in turn)",
        "peak RSS (VmHWM)": mib(a1["hwm_mib"] * 1024),
        "RssAnon growth over the runs": f"{a1['anon_growth_mib']:+.0f} MiB",
        "RssFile growth": f"{a1['file_growth_mib']:+.0f} MiB",
    }]
    for pid, info in sorted(trial.items()):
        mrows.append({"process": f"(b) Ray worker {pid} (run_trial)",
                      "peak RSS (VmHWM)": mib(info.hwm_kb),
                      "RssAnon growth over the runs": f"peak RssAnon {mib(info.anon_kb)}",
                      "RssFile growth": f"peak RssFile {mib(info.file_kb)}"})
    print(bl.table(mrows, list(mrows[0])))
    print(f"whole sweep (b): peak Pss of the process tree {mib(mon_b.peak_pss_kb)} "
          f"(sum of RSS {mib(mon_b.peak_rss_kb)}: counts shared pages once per process); "
          f"{len(mon_b.procs)} processes seen, {len(trial)} ran trials; (a): peak Pss "
          f"{mib(mon_a1.peak_pss_kb)}")
    runs_anon = a1["anon_after_run_mib"]
    later = runs_anon[-1] - runs_anon[0]
    shared = a1["train_is_memmap"] and a1["touch_anon_mib"] < 0.25 * a1["train_mib"]
    print(f"token arrays: the train split is a np.memmap: {a1['train_is_memmap']} "
          f"({a1['train_mib']:.0f} MiB). Reading every page of it changed RssAnon by "
          f"{a1['touch_anon_mib']:+.1f} MiB and RssFile by {a1['touch_file_mib']:+.1f} MiB "
          f"(file pages, shared through the page cache). RssAnon after each run: "
          + ", ".join(f"{x:.0f}" for x in runs_anon)
          + f" MiB: runs 2-{n} added {later:+.0f} MiB in all (a copy per run would add "
          f"{a1['train_mib']:.0f} MiB each; the first run's growth is torch's allocator "
          f"and lazy imports). Verdict: {'shared, not copied' if shared else 'CHECK'}")


def print_overhead(pl, root: str, a1: dict, mon_a1, b: dict, mon_b, a2: dict, mon_a2) -> None:
    """The overhead tables: (a) loops against (b) the sweep, by wall and process-tree CPU,
    where the sweep's time goes, MLflow per run, and memory."""
    n = len(pl.specs)
    a_wall = statistics.mean([a1["wall"], a2["wall"]])
    a_cpu = statistics.mean([mon_a1.cpu_s, mon_a2.cpu_s])
    rows = []
    for clock, a_v, b_v in (("wall", a_wall, b["wall"]), ("CPU (process tree)", a_cpu,
                                                         mon_b.cpu_s)):
        rows.append({
            "clock": clock, "(a) loop s": f"{a_v:.1f}", "(b) sweep s": f"{b_v:.1f}",
            "overhead (b-a)/b": f"{(b_v - a_v) / b_v:.1%}",
            "per run s": f"{(b_v - a_v) / n:.2f}",
            "per run, % of a 30 s run": f"{(b_v - a_v) / n / 30:.1%}",
        })
    print()
    print(bl.table(rows, list(rows[0])))
    print(f"CPU of the process tree over the training's (the loop's): "
          f"{(mon_b.cpu_s - a_cpu) / a_cpu:.1%} (issue 21's target: at most 3% on the "
          f"quickstart)")
    train_b = sum(b["train_wall"])
    print(f"\n(b) wall: {b['wall']:.1f}s = train() {train_b:.1f}s (the runs' final/wall_s, from "
          f"the ledger) + the rest {b['wall'] - train_b:.1f}s (imports, store, Ray's start "
          f"and stop, worker start, data load, MLflow writes, checkpoints, scheduling).")
    roles = cpu_by_role(mon_b)
    print("(b) CPU seconds by process: " + ", ".join(
        f"{name} {cpu:.1f}s" for name, cpu in roles.items()))
    worker_extra = (roles.get("trial worker", 0.0) - a_cpu) / n
    print(f"Per run, CPU: the trial worker used {worker_extra:+.2f}s per run more than the "
          f"loop process (MLflow writes, checkpoints, Ray task plumbing).")
    others = mon_b.cpu_s - roles.get("trial worker", 0.0)
    daemons = others - roles.get("driver", 0.0)
    print(f"Whatever the runs' speed (CPU time of one process varies by several percent from "
          f"one process to the next here): the driver and Ray's other processes alone used "
          f"{others:.1f}s of CPU per sweep invocation (imports, store, scheduling, Ray's "
          f"periodic work), {others / a_cpu:.1%} of the loop's; of it Ray's daemons "
          f"{daemons:.1f}s over {b['wall']:.0f}s, {daemons / b['wall'] * 60:.2f}s of CPU per "
          f"minute.")
    print(f"(a) wall: runs {a1['wall']:.1f}s and {a2['wall']:.1f}s; train() "
          f"{sum(a1['train_wall']):.1f}s and {sum(a2['train_wall']):.1f}s of it.")
    # Outside train(): robust to the load, which mostly stretches train() itself.
    out_b = b["wall"] - train_b
    out_a = statistics.mean([a1["wall"] - sum(a1["train_wall"]),
                             a2["wall"] - sum(a2["train_wall"])])
    print(f"Outside train() (load-independent view): sweep {out_b:.1f}s, loop {out_a:.1f}s: "
          f"{(out_b - out_a) / n:.2f}s per run ({(out_b - out_a) / n / 30:.1%} of a 30 s run).")
    mlflow_s = mlflow_per_run(pl.specs, root)
    print(f"MLflow calls of one run alone (Ledger.create_trial + the MLflowTracker "
          f"lifecycle of a finished run, sqlite): {mlflow_s:.2f}s wall per run.")

    print_memory(a1, mon_a1, mon_b, n)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=3e11,
                   help="the IsoFLOP budget (exact FLOPs) of every run (3e11: ~8 s of CPU each)")
    p.add_argument("--sweep-file", help="measure this sweep file's plan instead (its own "
                   "runs, recipe and corpus)")
    p.add_argument("--worker", choices=["loop"], help=argparse.SUPPRESS)
    p.add_argument("--root", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker == "loop":
        print(json.dumps(loop_worker(args.budget, args.sweep_file)))
        return 0

    root = tempfile.mkdtemp(prefix="bs-", dir="/tmp")  # short: Ray's socket paths
    os.environ.setdefault("RAY_TMPDIR", os.path.join(root, "ray"))
    os.environ.setdefault("SCALING_CACHE_DIR", os.path.join(root, "cache"))
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{root}/mlflow.db")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.pop("RAY_ADDRESS", None)
    try:
        print(bl.machine_header("Sweep overhead: Ray + MLflow vs a loop of train()"))
        cfg, pl = plan(args.budget, args.sweep_file)
        what = (f"{args.sweep_file}: {len(pl.specs)} {cfg.family} runs" if args.sweep_file else
                f"{len(pl.specs)} gpt runs at C={args.budget:g} (exact)")
        print(f"plan: {what}: "
              + ", ".join(f"L{s.model.n_layer} d{s.model.d_model} {s.steps} steps"
                          for s in pl.specs) + (" (its recipe)" if args.sweep_file else
                                                " (batch 16 x 128), default recipe (8 evals "
                                                "+ final, 8 eval batches)")
              + "; RAY_TMPDIR="
              f"{os.environ['RAY_TMPDIR']}, MLFLOW_TRACKING_URI="
              f"{os.environ['MLFLOW_TRACKING_URI']}")
        from pipeline.data import load_data

        t = time.perf_counter()
        load_data(pl.specs[0].data)  # build the token cache once, untimed (as the driver does)
        print(f"token cache built in {time.perf_counter() - t:.1f}s (untimed)")

        a1, mon_a1 = run_worker("loop", args.budget, root, args.sweep_file)
        print(f"  (a) loop: {a1['wall']:.1f}s wall, tree CPU {mon_a1.cpu_s:.1f}s", flush=True)
        b, mon_b = sweep_cli(args.budget, root, args.sweep_file)
        print(f"  (b) sweep: {b['wall']:.1f}s wall, tree CPU {mon_b.cpu_s:.1f}s, "
              f"statuses {b['statuses']}", flush=True)
        a2, mon_a2 = run_worker("loop", args.budget, root, args.sweep_file)
        print(f"  (a) loop again: {a2['wall']:.1f}s wall, tree CPU {mon_a2.cpu_s:.1f}s",
              flush=True)

        print_overhead(pl, root, a1, mon_a1, b, mon_b, a2, mon_a2)
        print(f"\nload average at the end: {bl.loadavg()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

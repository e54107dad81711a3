"""Parallel efficiency: two 1-thread training processes at once against one alone.

    python benchmarks/perf/bench_parallel.py              # ~2 minutes on 2 cores

Each worker is a separate Python process (as Ray runs a sweep with num_cpus 1) running the
real trainer on the 500k gpt model, and reports tokens/s by the wall clock and per
CPU-second. Rounds alternate: one worker alone, then two at once (interleaved, --reps
rounds). Reported:
  * throughput ratio = (sum of the pair's tokens/s) / (the solo worker's tokens/s), wall
    clock: what a sweep gains from running two runs at a time (target >= 1.9x);
  * per-CPU-second ratio = a paired worker's tokens per CPU-second / the solo worker's:
    below 1 when the two cores share execution units (SMT siblings) or memory bandwidth.
The same is done for a pure fp32 matmul loop (no Python, no memory traffic to speak of),
which separates the hardware from the trainer. Other jobs on the machine distort the wall
clock: the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import benchlib as bl  # noqa: E402


def worker(kind: str, seconds: float) -> dict:
    import torch

    torch.set_num_threads(1)
    if kind == "matmul":
        n = 1024
        a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
        torch.mm(a, b, out=out)
        c0, w0, calls = time.process_time(), time.perf_counter(), 0
        while time.perf_counter() - w0 < seconds:
            torch.mm(a, b, out=out)
            calls += 1
        f = 2.0 * n**3 * calls / 1e9
        return {"cpu": f / (time.process_time() - c0), "wall": f / (time.perf_counter() - w0)}
    cfg = bl.ladder_config("gpt", 4, 96)
    step_s = bl.seconds_per_step(bl.make_spec(cfg, 3))
    log = bl.log_interval_for(step_s, seconds / 4)
    t = bl.time_train(bl.make_spec(cfg, 1, log_interval=log), windows=3)
    return {"cpu": t.tokens_per_s, "wall": t.wall_tokens_per_s}


def launch(kind: str, n: int, seconds: float) -> list[dict]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind,
           "--seconds", str(seconds)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(n)]
    outs = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode:
            raise RuntimeError(f"worker failed with code {p.returncode}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--seconds", type=float, default=8.0, help="timed seconds per worker")
    p.add_argument("--worker", choices=["train", "matmul"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.seconds)))
        return 0

    print(bl.machine_header("Parallel efficiency: 2 one-thread processes vs 1"))
    bl.bench_data()  # build the token cache here, before workers read it
    rows = []
    for kind, unit in (("matmul", "GFLOP/s"), ("train", "tok/s")):
        solo_w, solo_c, pair_w, pair_c = [], [], [], []
        for _ in range(args.reps):
            (s,) = launch(kind, 1, args.seconds)
            a, b = launch(kind, 2, args.seconds)
            solo_w.append(s["wall"])
            solo_c.append(s["cpu"])
            pair_w.append(a["wall"] + b["wall"])
            pair_c += [a["cpu"], b["cpu"]]
            print(f"  {kind}: solo {s['wall']:,.1f} wall / {s['cpu']:,.1f} per CPU-s; pair "
                  f"{a['wall']:,.1f} + {b['wall']:,.1f} wall, {a['cpu']:,.1f} and "
                  f"{b['cpu']:,.1f} per CPU-s; load {bl.loadavg()}", flush=True)
        rows.append({
            "workload": "fp32 matmul 1024^3" if kind == "matmul" else "trainer, gpt 500k fp32",
            "unit": unit,
            "solo, wall": f"{bl.median(solo_w):,.1f}",
            "pair total, wall": f"{bl.median(pair_w):,.1f}",
            "solo, per CPU-s": f"{bl.median(solo_c):,.1f}",
            "paired, per CPU-s (each)": f"{bl.median(pair_c):,.1f}",
            "throughput ratio (wall)": f"{bl.median(pair_w) / bl.median(solo_w):.2f}x",
            "per-CPU-second ratio (paired / solo)":
                f"{bl.median(pair_c) / bl.median(solo_c):.2f}",
        })
    print()
    print(bl.table(rows, list(rows[0])))
    print(f"\nload average at the end: {bl.loadavg()} (a ratio near 2 needs two idle cores)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

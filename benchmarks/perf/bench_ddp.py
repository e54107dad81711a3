"""Data-parallel scaling on the CPU: one run trained by 1 worker, then by 2 gloo workers
(Ray Train, DDP), each worker one thread (issue 18).

    python benchmarks/perf/bench_ddp.py            # ~3 minutes on 2 cores

The same RunSpec (GPT, 4 layers, d_model 128, context 128, batch 32, 80 steps, bytes) both
ways, in one run, twice in alternating order. Compared: the training loop's wall seconds as
each run records them (RunResult.wall_s: from the first step to the last, without Ray's
start, the model build or the final evaluation), and the final validation loss. Speedup =
wall(1 worker) / wall(2 workers); efficiency = speedup / 2.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    import ray

    from pipeline.data import load_data
    from pipeline.tracking import Ledger
    from pipeline.train import NullTracker, train
    from pipeline.trial import run_data_parallel
    from pipeline.vocab.families import make_config
    from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

    data_spec = DataSpec(max_bytes=3_000_000)
    data = load_data(data_spec)

    def spec(workers: int) -> RunSpec:
        return RunSpec(sweep="bench-ddp", model=make_config("gpt", 4, 128, vocab_size=256,
                                                             seq_len=128, head_dim=32),
                       data=data_spec, train=TrainSpec(batch_size=32, evals_per_run=1),
                       steps=80, exec=ExecSpec(threads=1, device="cpu", workers=workers))

    work = Path(tempfile.mkdtemp(prefix="bench-ddp-"))
    uri = f"sqlite:///{work / 'mlflow.db'}"
    ledger = Ledger(uri, "bench-ddp")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    rows = []
    try:
        for round_ in range(2):
            for workers in ((1, 2) if round_ == 0 else (2, 1)):
                t0 = time.perf_counter()
                if workers == 1:
                    r = train(spec(1), NullTracker(), data=data)
                    wall, loss = r.wall_s, r.final_val_loss
                else:
                    record = ledger.create_trial(spec(2), None)
                    out = run_data_parallel(spec(2), uri, record.mlflow_run_id,
                                            str(work / f"ckpt{round_}"), data, None, 0)
                    wall, loss = out["wall_s"], out["final_val_loss"]
                rows.append((workers, wall, loss, time.perf_counter() - t0))
                print(f"round {round_ + 1}, {workers} worker(s): training loop {wall:.1f} s, "
                      f"end to end {rows[-1][3]:.1f} s, final val loss {loss:.5f}", flush=True)
    finally:
        ray.shutdown()
    one = sorted(w for k, w, _, _ in rows if k == 1)
    two = sorted(w for k, w, _, _ in rows if k == 2)
    speedup = (sum(one) / len(one)) / (sum(two) / len(two))
    print(f"speedup {speedup:.2f}x with 2 workers (efficiency {speedup / 2:.0%}); "
          f"load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Loading a large ledger with curves: one query for runs and curves, against one download per run.

    python benchmarks/perf/bench_ledger_load.py              # 2,000 runs (issue 21's size)
    python benchmarks/perf/bench_ledger_load.py --runs 200   # a quick look

Builds a sqlite MLflow store in a temporary folder with ``--runs`` finished trial runs, each
logged as pipeline.trial logs one (tags, summary metrics, 9 evaluations of val/loss and
tokens, the curve.json artifact, and the curve as the keys.TAG_CURVE tag), then times
analysis.runs.load.load_sweep with curves twice in the same process: as it is (curves from
the tags that came back with the runs) and with the tags ignored (one artifact download per
run: how every run was read before the tag existed, and how runs logged before it still are).
Both must give the same curves; wall and CPU seconds of each are printed. Target: < 10 s.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from analysis.runs import load as load_module
from pipeline.trial import curve_tag
from pipeline.vocab import keys


def build_store(root: Path, n_runs: int) -> str:
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("big", artifact_location=(root / "artifacts").as_uri())
    rng = np.random.default_rng(0)
    for i in range(n_runs):
        n = float(rng.choice([1e5, 2e5, 4e5, 8e5]))
        budget = float(rng.choice([1e15, 3e15, 1e16]))
        d = budget / (6 * n)
        step = list(range(100, 1000, 100))
        tokens = [d * s / 900 for s in step]
        loss = [2.0 + 50 / n ** 0.3 + 400 / t ** 0.3 for t in tokens]
        curve = {"step": step, "tokens": tokens, "val_loss": loss}
        run = client.create_run(exp, run_name=f"run-{i}")
        rid = run.info.run_id
        tags = {keys.TAG_KIND: "trial", keys.TAG_SWEEP: "big", keys.TAG_RUN_ID: f"r{i:05d}",
                keys.TAG_FAMILY: "gpt", keys.TAG_BUDGET: f"{budget:.6g}",
                keys.TAG_STATUS: keys.STATUS_FINISHED, keys.TAG_CURVE: curve_tag(curve)}
        summary = {keys.FINAL_VAL_LOSS: loss[-1], keys.FINAL_TOKENS: d, keys.PARAMS_TOTAL: n,
                   keys.PARAMS_NON_EMBEDDING: 0.8 * n, keys.flops_key("6nd"): 6 * n * d}
        client.log_batch(rid, metrics=[Metric(k, float(v), 0, 0) for k, v in summary.items()],
                         params=[Param("model.n_layer", "2"), Param("model.d_model", "32")],
                         tags=[RunTag(k, v) for k, v in tags.items()])
        client.log_dict(rid, curve, keys.CURVE_ARTIFACT)
        client.set_terminated(rid, status="FINISHED")
    return uri


def timed_load(uri: str):
    wall, cpu = time.perf_counter(), time.process_time()
    data = load_module.load_sweep("big", tracking_uri=uri, log=lambda _m: None)
    return data, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=2000)
    args = p.parse_args()
    print(f"machine: {os.cpu_count()} CPUs; load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        uri = build_store(Path(tmp), args.runs)
        print(f"store: {args.runs} runs with curves built in {time.perf_counter() - t0:.0f} s")
        tagged, w_tag, c_tag = timed_load(uri)
        real = load_module._inline_curve
        load_module._inline_curve = lambda run: None  # as before the tag: one download each
        try:
            downloaded, w_dl, c_dl = timed_load(uri)
        finally:
            load_module._inline_curve = real
    key = ["run_id", "step"]
    same = tagged.curves.sort_values(key).reset_index(drop=True).equals(
        downloaded.curves.sort_values(key).reset_index(drop=True))
    print(f"curves from the tags (one query):      {w_tag:6.1f} s wall, {c_tag:6.1f} s CPU")
    print(f"curves downloaded (one per run):       {w_dl:6.1f} s wall, {c_dl:6.1f} s CPU")
    print(f"ratio {w_dl / w_tag:.1f}x; {len(tagged.runs)} runs, {len(tagged.curves)} curve "
          f"points; same curves: {same} (target: < 10 s)")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

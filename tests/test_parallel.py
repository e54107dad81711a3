"""Data-parallel runs (issue 18): a run with exec.workers = 2 trains as a Ray Train job of two
gloo workers (DDP or FSDP2) and ends where the same run with one worker does.

What is compared: the final validation loss and every point of the validation curve of a
tiny GPT (~8k parameters, 120 steps, batch 8 split 4 + 4) trained (a) by train() in this
process and (b) by pipeline.trial.run_data_parallel with 2 workers x 1 thread,
which also writes the MLflow child run from rank 0 only; (b) loses a worker mid-run and
resumes. Then the same through `python -m pipeline.sweep` with resources.workers_per_run.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from pipeline.data import CACHE_ENV, load_data
from pipeline.tracking import Ledger
from pipeline.train import NullTracker, train
from pipeline.train.parallel import World, local_rows
from pipeline.vocab import keys
from pipeline.vocab.families import make_config
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

DATA = DataSpec(max_bytes=300_000)


def _spec(workers: int, sharding: str = "ddp") -> RunSpec:
    return RunSpec(sweep="ddp", model=make_config("gpt", 1, 16, vocab_size=256, seq_len=32,
                                                  head_dim=8),
                   data=DATA, train=TrainSpec(batch_size=8, evals_per_run=4, eval_batches=2),
                   steps=120, exec=ExecSpec(threads=1, device="cpu", workers=workers,
                                            sharding=sharding, checkpoint_interval=50))


def test_rows_of_the_global_batch_are_split_in_order():
    x = torch.arange(8 * 3).reshape(8, 3)
    parts = [local_rows(x, x, World(r, 4))[0] for r in range(4)]
    assert torch.equal(torch.cat(parts), x) and all(len(p) == 2 for p in parts)
    assert local_rows(x, x, World())[0] is x


SWEEP = """\
name: ddp
kind: isoflop
family: gpt
shape: {head_dim: 8}
data: {corpus: stdlib, max_bytes: 400000, seq_len: 32, max_epochs: 10}
train: {batch_size: 4, lr: 3.0e-3, evals_per_run: 4, eval_batches: 2}
resources: {num_cpus: 1, workers_per_run: 2, workers_from_params: 5000}
isoflop:
  budgets: [6e9]
  sizes: {shapes: [{n_layer: 1, d_model: 8}, {n_layer: 1, d_model: 16}]}
"""


@pytest.mark.slow
def test_a_sweep_mixing_one_and_two_worker_runs(tmp_path: Path) -> None:
    """`resources.workers_per_run: 2` from 5,000 parameters, through `python -m
    pipeline.sweep` (local Ray, 2 CPUs): the 3k-parameter run trains on one worker, the
    8k one on two; the dry run says which; both finish, the two-worker run with one metric
    point per evaluation and the final loss train() gets with one worker for its RunSpec."""
    import dataclasses
    import os
    import subprocess
    import sys

    from pipeline.config import load_sweep
    from pipeline.planner import expand, vocab_size_for

    path = tmp_path / "ddp.yaml"
    path.write_text(SWEEP)
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}")
    cmd = [sys.executable, "-m", "pipeline.sweep", str(path), "--cpus", "2", "--no-report"]
    dry = subprocess.run([*cmd, "--dry-run", "--no-estimate"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0 and dry.stdout.count("2 workers x 2 sequences") == 1, dry.stderr
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cfg = load_sweep(path)
    small, spec = expand(cfg, path, vocab_size_for(cfg)).specs
    assert (small.exec.workers, spec.exec.workers) == (1, 2)
    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    runs = {r.data.tags[keys.TAG_RUN_ID]: r for r in client.search_runs(
        [client.get_experiment_by_name("ddp").experiment_id], "tags.kind = 'trial'")}
    assert {rid: r.data.tags[keys.TAG_STATUS] for rid, r in runs.items()} == {
        small.run_id: keys.STATUS_FINISHED, spec.run_id: keys.STATUS_FINISHED}
    run = runs[spec.run_id]
    one = dataclasses.replace(spec, exec=dataclasses.replace(spec.exec, workers=1))
    single = train(one, NullTracker())
    steps = [p.step for p in client.get_metric_history(run.info.run_id, keys.VAL_LOSS)]
    assert steps == single.curve["step"]  # one point per evaluation: rank 0 alone wrote them
    got = run.data.metrics[keys.FINAL_VAL_LOSS]
    assert abs(got - single.final_val_loss) / single.final_val_loss < 1e-3, (got, single)


@pytest.mark.slow
@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_a_worker_killed_mid_run_is_replaced_and_the_run_resumes(tmp_path: Path, monkeypatch,
                                                                  sharding: str) -> None:
    """Two gloo workers (DDP, or FSDP2 with parameters, gradients and AdamW state sharded)
    train the run one worker trains: rank 1 SIGKILLs itself after step 70 (checkpoints
    every 50, full state gathered to rank 0), Ray Train ends the group, a new group resumes
    from step 50 on every rank, and the ledger holds one finished run, written by rank 0 in
    its second attempt, with one validation point per evaluation and the final loss of one
    worker (to 1e-3 relative; measured: see the printed line)."""
    import ray

    from pipeline.trial import KILL_WORKER_ENV, run_data_parallel

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    data = load_data(DATA, cache_dir=str(tmp_path / "cache"))
    single = train(_spec(1), NullTracker(), data=data)
    spec = _spec(2, sharding)
    assert spec.run_id == _spec(1).run_id  # the workers are not part of the run's identity
    marker = tmp_path / "killed"
    monkeypatch.setenv(KILL_WORKER_ENV, f"{spec.run_id}:70:{marker}")  # before Ray starts
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = Ledger(uri, "ddp").create_trial(spec, None)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = run_data_parallel(spec, uri, record.mlflow_run_id, str(tmp_path / "ckpt"), data,
                                None, 0, max_retries=1)
    finally:
        ray.shutdown()
    assert marker.exists(), "the worker was not killed"
    assert out["status"] == keys.STATUS_FINISHED and out["resumed_from"] == 50, out
    run = MlflowClient(tracking_uri=uri).get_run(record.mlflow_run_id)
    assert run.data.tags[keys.TAG_ATTEMPTS] == "2"
    history = MlflowClient(tracking_uri=uri).get_metric_history(record.mlflow_run_id,
                                                                keys.VAL_LOSS)
    assert [p.step for p in history] == single.curve["step"]
    for point, want in zip(history, single.curve["val_loss"], strict=True):
        assert math.isclose(point.value, want, rel_tol=1e-3)
    rel = abs(out["final_val_loss"] - single.final_val_loss) / single.final_val_loss
    assert rel < 1e-3, (out["final_val_loss"], single.final_val_loss)
    print(f"{sharding}: final val loss 1 worker {single.final_val_loss:.6f}, 2 workers "
          f"(resumed) {out['final_val_loss']:.6f}, relative difference {rel:.1e}")


def test_the_plan_estimates_a_worker_of_a_data_parallel_run():
    """Issue 18: the dry run's time of a W-worker run is 1/W of one worker's (said in the
    footer), its memory is one worker's: its rows of the batch, and with FSDP its share of
    the parameters, gradients and AdamW state."""
    from pipeline.estimate.device import Target
    from pipeline.estimate.plan import estimate_plan, run_memory

    gpu = Target(kind="cuda", memory=80 * 2**30, memory_source="declared",
                 flops_per_s=1e14, assumption="assumed")
    one, two = _spec(1), _spec(2)
    fsdp = _spec(2, "fsdp")
    est = estimate_plan([one], gpu)
    est2 = estimate_plan([two], gpu)
    assert est2.seconds[two.run_id] == pytest.approx(est.seconds[one.run_id] / 2)
    assert "1/W of that" in est2.how and "1/W" not in est.how
    m1, m2, mf = run_memory(one, "cuda"), run_memory(two, "cuda"), run_memory(fsdp, "cuda")
    assert m2.activations == pytest.approx(m1.activations / 2) and m2.weights == m1.weights
    assert (mf.weights, mf.gradients, mf.optimizer) == pytest.approx(
        (m1.weights / 2, m1.gradients / 2, m1.optimizer / 2))

"""Data-parallel runs (issue 18): a run with exec.workers = 2 trains as a Ray Train job of two
gloo workers (DDP or FSDP2) and ends where the same run with one worker does.

What is compared: the final validation loss and every point of the validation curve of a
tiny GPT (~8k parameters, 120 steps, batch 8 split 4 + 4) trained (a) by train() in this
process and (b) by pipeline.trial.run_data_parallel with 2 workers x 1 thread (FSDP),
which also writes the MLflow child run from rank 0 only; (b) loses a worker mid-run and
resumes. Then the same through `python -m pipeline.sweep` with resources.workers_per_run
(DDP, 631 steps), whose two-worker run loses a worker too.
"""

from __future__ import annotations

import math
import os
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
resources: {num_cpus: 1, workers_per_run: 2, workers_from_params: 5000, checkpoint_interval: 50}
isoflop:
  budgets: [6e9]
  sizes: {shapes: [{n_layer: 1, d_model: 8}, {n_layer: 1, d_model: 16}]}
"""


@pytest.mark.slow
def test_a_sweep_mixing_one_and_two_worker_runs_and_a_worker_killed(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`resources.workers_per_run: 2` from 5,000 parameters, through `python -m
    pipeline.sweep` (local Ray, 2 CPUs): the 3k-parameter run trains on one worker, the
    8k one on two (DDP); the dry run says which. The two-worker run loses a worker: rank 1
    SIGKILLs itself after step 70 (checkpoints every 50, KILL_WORKER_ENV in the sweep's
    environment, inherited by its Ray), Ray Train ends the group, the run's task starts a
    new one that resumes from step 50 on every rank. Both finish; the two-worker run's
    ledger entry is rank 0's second attempt, with one validation point per evaluation (rank
    0 alone wrote them), the validation curve and the final loss train() gets with one
    worker for its RunSpec (to 1e-3 relative). FSDP's worker kill: the test below. (Until
    2026-12-07 DDP's kill had a test of its own, in this process: a Ray start and two Ray
    Train groups more, ~90 s of CPU.)"""
    import dataclasses
    import subprocess
    import sys

    from pipeline.config import load_sweep
    from pipeline.planner import expand, vocab_size_for
    from pipeline.sweep import main as sweep_main
    from pipeline.trial import KILL_WORKER_ENV

    path = tmp_path / "ddp.yaml"
    path.write_text(SWEEP)
    cfg = load_sweep(path)
    small, spec = expand(cfg, path, vocab_size_for(cfg)).specs
    assert (small.exec.workers, spec.exec.workers) == (1, 2)
    assert spec.exec.sharding == "ddp" and spec.steps > 100
    marker = tmp_path / "killed"
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}",
               **{KILL_WORKER_ENV: f"{spec.run_id}:70:{marker}"})
    cmd = [sys.executable, "-m", "pipeline.sweep", str(path), "--cpus", "2", "--no-report",
           "--no-estimate"]
    # The dry run in this process (its plan table, what `--dry-run` prints; no Ray, no
    # ledger): a second interpreter importing torch and MLflow only to print it cost seconds.
    assert sweep_main([*cmd[3:], "--dry-run", "--no-estimate"]) == 0
    dry = capsys.readouterr()
    assert dry.out.count("2 workers x 2 sequences") == 1, dry.err
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert marker.exists(), "the worker was not killed"
    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    runs = {r.data.tags[keys.TAG_RUN_ID]: r for r in client.search_runs(
        [client.get_experiment_by_name("ddp").experiment_id], "tags.kind = 'trial'")}
    assert {rid: r.data.tags[keys.TAG_STATUS] for rid, r in runs.items()} == {
        small.run_id: keys.STATUS_FINISHED, spec.run_id: keys.STATUS_FINISHED}
    assert runs[small.run_id].data.tags[keys.TAG_ATTEMPTS] == "1"
    run = runs[spec.run_id]
    assert run.data.tags[keys.TAG_ATTEMPTS] == "2"
    assert run.data.tags[keys.TAG_RESUMED_FROM] == "50"
    one = dataclasses.replace(spec, exec=dataclasses.replace(spec.exec, workers=1))
    single = train(one, NullTracker())
    history = client.get_metric_history(run.info.run_id, keys.VAL_LOSS)
    assert [p.step for p in history] == single.curve["step"]  # rank 0 alone wrote them
    for point, want in zip(history, single.curve["val_loss"], strict=True):
        assert math.isclose(point.value, want, rel_tol=1e-3)
    got = run.data.metrics[keys.FINAL_VAL_LOSS]
    rel = abs(got - single.final_val_loss) / single.final_val_loss
    assert rel < 1e-3, (got, single)
    print(f"ddp: final val loss 1 worker {single.final_val_loss:.6f}, 2 workers "
          f"(resumed) {got:.6f}, relative difference {rel:.1e}")


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory: pytest.TempPathFactory):
    """The worker-kill tests' shared setup, built once for both shardings: the tokens (in a
    cache of the module's), what train() gets for the run with one worker, and one local Ray
    (2 CPUs) whose raylet, and so every worker it starts, has KILL_WORKER_ENV: rank 1 of the
    run SIGKILLs itself after step 70 unless the marker file exists (each test deletes it
    first, so each loses a worker once). One Ray start instead of one per sharding; the
    variable is in this process' environment only while Ray starts (the sweep subprocess of
    the mixed test must not inherit it)."""
    import ray

    from pipeline.driver.runner import LOG_MONITOR_ENV
    from pipeline.trial import KILL_WORKER_ENV

    folder = tmp_path_factory.mktemp("kill")
    cache, marker = folder / "cache", folder / "killed"
    data = load_data(DATA, cache_dir=str(cache))
    single = train(_spec(1), NullTracker(), data=data)
    with pytest.MonkeyPatch.context() as mp:  # before Ray starts: its workers inherit them
        for name, value in LOG_MONITOR_ENV.items():  # a sweep's local Ray gets these too
            mp.setenv(name, os.environ.get(name, value))
        mp.setenv(CACHE_ENV, str(cache))
        mp.setenv(KILL_WORKER_ENV, f"{_spec(1).run_id}:70:{marker}")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield data, single, marker
    finally:
        ray.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("sharding", ["fsdp"])
def test_a_worker_killed_mid_run_is_replaced_and_the_run_resumes(tmp_path: Path, one_worker,
                                                                  sharding: str) -> None:
    """Two gloo workers (FSDP2: parameters, gradients and AdamW state sharded) train the run
    one worker trains: rank 1 SIGKILLs itself after step 70 (checkpoints every 50, full
    state gathered to rank 0), Ray Train ends the group, a new group resumes from step 50 on
    every rank, and the ledger holds one finished run, written by rank 0 in its second
    attempt, with one validation point per evaluation and the final loss of one worker (to
    1e-3 relative; measured: see the printed line). DDP's kill is in the sweep above (one
    Ray and one sweep for the mixed plan and the kill; here run_data_parallel is called
    directly, from this process). Another sharding added to the list shares the Ray of the
    one_worker fixture: each test has its own ledger, checkpoints and kill marker."""
    from pipeline.trial import run_data_parallel

    data, single, marker = one_worker
    marker.unlink(missing_ok=True)  # this test's kill (another sharding's left it there)
    spec = _spec(2, sharding)
    assert spec.run_id == _spec(1).run_id  # the workers are not part of the run's identity
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = Ledger(uri, "ddp").create_trial(spec, None)
    out = run_data_parallel(spec, uri, record.mlflow_run_id, str(tmp_path / "ckpt"), data,
                            None, 0, max_retries=1)
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

"""One trial as the ledger sees it: train a RunSpec into its MLflow child run, whatever happens.

Shared by the sweep's Ray tasks and the single-run CLI. The outcome is always recorded:
  finished / diverged  -> MLflow status FINISHED, tag status=finished|diverged
  an exception         -> MLflow status FAILED, tag status=failed, traceback as an artifact
  KeyboardInterrupt    -> MLflow status KILLED (resumes from its checkpoint next time)
A stop request (SIGINT in the worker: Ray's ray.cancel(force=False), which the sweep's driver
sends when it is stopped, or Ctrl-C) is taken at the next step boundary: the run checkpoints
that step and ends KILLED, so the next attempt loses no step (pipeline.train.Stopped).
A worker process that dies (SIGKILL, node lost) records nothing: the run stays RUNNING and
the sweep retries it, resuming from its last checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np

from pipeline.data import TokenData, load_data
from pipeline.tracking import MLflowTracker
from pipeline.train import NullTracker, Stopped, parallel, train
from pipeline.vocab import keys
from pipeline.vocab.spec import RunSpec

# Fault injection for tests (tests/test_faults.py): raise at this step of the given run_id.
FAIL_ENV = "SCALING_INJECT_FAILURE"  # "<run_id>:<step>"
# Test hook: append "<run_id> <first step> <pid>" to this file when an attempt trains its first
# step (first step = the checkpoint step it resumed from, 0 from scratch), so tests count
# trainings across processes. An attempt that resumes from the final checkpoint trains no
# step and writes nothing.
TRAINING_LOG_ENV = "SCALING_TRAINING_LOG"
# Test hook: sleep this many seconds before a trial touches the ledger (a slow worker start),
# which holds a sweep "between runs" long enough for a test to kill its driver there.
START_DELAY_ENV = "SCALING_INJECT_START_DELAY"


def _failure_hook(spec: RunSpec):
    target = os.environ.get(FAIL_ENV, "")
    if ":" not in target:
        return None
    rid, step = target.rsplit(":", 1)
    if rid != spec.run_id:
        return None

    def hook(done: int) -> None:
        if done == int(step):
            raise RuntimeError(f"injected failure at step {done} ({FAIL_ENV})")

    return hook


def _training_log_hook(spec: RunSpec):
    path = os.environ.get(TRAINING_LOG_ENV, "")
    if not path:
        return None
    logged = False

    def hook(done: int) -> None:
        nonlocal logged
        if not logged:
            logged = True
            line = f"{spec.run_id} {done - 1} {os.getpid()}\n".encode()
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)  # one short O_APPEND write: lines never interleave
            finally:
                os.close(fd)

    return hook


def _step_hooks(spec: RunSpec):
    """train()'s on_step: the test hooks that are switched on (None when none is)."""
    hooks = [h for h in (_training_log_hook(spec), _failure_hook(spec)) if h is not None]
    if not hooks:
        return None

    def on_step(done: int) -> None:
        for hook in hooks:
            hook(done)

    return on_step


@contextlib.contextmanager
def stop_on_sigint() -> Iterator[Callable[[], bool] | None]:
    """While training: SIGINT sets a flag that the training loop reads after each step, in
    place of raising KeyboardInterrupt wherever the step happens to be (a model half-way
    through an optimizer update cannot be checkpointed); a second SIGINT raises at once.
    Outside the main thread, where Python cannot set signal handlers, nothing changes
    (None)."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    requested = threading.Event()

    def on_sigint(signum: int, frame: object) -> None:
        if requested.is_set():  # a second Ctrl-C: stop now, whatever the step is doing
            raise KeyboardInterrupt
        requested.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield requested.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


def execute_trial(spec: RunSpec, uri: str, mlflow_run_id: str, checkpoint_dir: str,
                  data: TokenData | None = None, branch_dir: str | None = None,
                  interrupted: Callable[[BaseException], bool] | None = None) -> dict:
    """Train spec (resuming from checkpoint_dir; a WSD branch starting from the trunk's state
    in branch_dir) and record the outcome; returns a summary. An exception for which
    interrupted(e) is true (a data-parallel peer lost) ends the attempt KILLED and is raised,
    as a stop is: the run resumes from its checkpoint instead of being recorded failed."""
    delay = float(os.environ.get(START_DELAY_ENV) or 0)
    if delay > 0:
        time.sleep(delay)
    tracker = MLflowTracker(uri, mlflow_run_id)
    attempts = tracker.start_attempt()
    # Where the weights are, for pipeline.sample and the report's text samples; and where
    # this attempt ran: Ray node id ("local" outside Ray), host, GPUs Ray gave it ("" = none),
    # and the worker's process id (to find, or in tests to kill, the process of a run).
    ray = sys.modules.get("ray")
    node = ray.get_runtime_context().get_node_id() if ray and ray.is_initialized() else "local"
    tracker.set_tags({"checkpoint_dir": checkpoint_dir, "node": node, "host": socket.gethostname(),
                      "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "unset"),
                      "worker_pid": str(os.getpid())})
    try:
        with stop_on_sigint() as stop_requested:
            result = train(spec, tracker, checkpoint_dir=checkpoint_dir, resume=True,
                           data=data, on_step=_step_hooks(spec), branch_dir=branch_dir,
                           stop_requested=stop_requested)
    except KeyboardInterrupt as stop:
        if isinstance(stop, Stopped) and stop.checkpointed:
            tracker.set_tags({keys.TAG_STOPPED_AT: str(stop.step)})
        tracker.end(keys.STATUS_KILLED)
        raise
    except Exception as e:  # noqa: BLE001 - every failure is recorded, then reported
        if interrupted is not None and interrupted(e):
            tracker.end(keys.STATUS_KILLED)
            raise
        tracker.log_text(traceback.format_exc(), "traceback.txt")
        tracker.set_tags({keys.TAG_ERROR: f"{type(e).__name__}: {e}"[:500]})
        tracker.end(keys.STATUS_FAILED)
        return {"run_id": spec.run_id, "status": keys.STATUS_FAILED, "attempts": attempts,
                "error": f"{type(e).__name__}: {e}"}
    tracker.log_dict(result.curve, keys.CURVE_ARTIFACT)
    if (inline := curve_tag(result.curve)) is not None:
        tracker.set_tags({keys.TAG_CURVE: inline})
    if result.resumed_from is not None:
        tracker.set_tags({keys.TAG_RESUMED_FROM: str(result.resumed_from)})
    tracker.end(result.status)
    out = asdict(result)
    out.pop("curve")
    out["attempts"] = attempts
    return out


def run_trial(spec_dict: dict, uri: str, mlflow_run_id: str, checkpoint_dir: str,
              fingerprint: str, data_meta: dict | None = None,
              train_tokens: np.ndarray | None = None,
              val_tokens: np.ndarray | None = None, branch_dir: str | None = None,
              worker_gpus: float = 0.0, max_retries: int = 2) -> dict:
    """Entry point of a sweep's Ray task (plain data in, plain data out).

    Tokens reach the worker one of two ways, both checked against the driver's fingerprint:
    on one machine, the driver's memory-mapped cache (shared through the page cache); on a
    cluster, arrays the driver put once in Ray's object store (zero-copy, read-only on every
    node), so no node re-tokenises a corpus that may differ there (e.g. another stdlib).
    A run of several workers (exec.workers) is a Ray Train job launched from here
    (pipeline.train.parallel; this task then holds no CPU, its workers do, each with
    worker_gpus GPUs).
    """
    spec = RunSpec.from_dict(spec_dict)
    if train_tokens is not None and val_tokens is not None and data_meta is not None:
        data = TokenData(train=train_tokens, val=val_tokens, **data_meta)
    else:
        data = load_data(spec.data)
    if data.fingerprint != fingerprint:
        raise RuntimeError(
            f"token data on this worker has fingerprint {data.fingerprint[:12]}, the driver's "
            f"is {fingerprint[:12]}: the corpus differs between machines"
        )
    if spec.exec.workers > 1:
        return run_data_parallel(spec, uri, mlflow_run_id, checkpoint_dir, data, branch_dir,
                                 worker_gpus, max_retries)
    return execute_trial(spec, uri, mlflow_run_id, checkpoint_dir, data=data,
                         branch_dir=branch_dir)


def curve_tag(curve: dict[str, list[float]]) -> str | None:
    """The eval curve (step, tokens, val_loss) as compact JSON for keys.TAG_CURVE, or None
    when it is too long for a tag (a run with hundreds of evaluations keeps the artifact only)."""
    text = json.dumps({k: curve[k] for k in ("step", "tokens", "val_loss")},
                      separators=(",", ":"))
    return text if len(text) <= keys.CURVE_TAG_MAX_CHARS else None


# --- the Ray Train job -----------------------------------------------------------------------

RESULT_FILE = "data_parallel_result.json"  # rank 0's trial summary, read by the coordinator
# Test hook (tests/test_parallel.py): "<run_id>:<step>:<marker file>" makes rank 1 SIGKILL
# itself after that step, once (the marker records it): a worker lost mid-run.
KILL_WORKER_ENV = "SCALING_INJECT_WORKER_KILL"


def run_data_parallel(spec, uri: str, mlflow_run_id: str, checkpoint_dir: str, data,
                      branch_dir: str | None, num_gpus: float, max_retries: int = 2) -> dict:
    """Train `spec` with spec.exec.workers Ray Train workers; returns rank 0's trial summary
    (the dict pipeline.trial.execute_trial returns). Called inside the sweep's Ray task (a
    coordinator that holds no CPU: the workers do).

    A worker lost before rank 0 recorded the outcome (a killed process, a lost node: Ray Train
    then ends the whole group) is retried up to max_retries times with a new group, which
    resumes from the run's last checkpoint, as Ray retries a single-worker run's task. An
    outcome rank 0 recorded (finished, diverged, failed) is final, as for one worker."""
    import ray
    import ray.train
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    workers = spec.exec.workers
    # Tokens: a local cache pickles as its path (each worker maps it); arrays the driver put
    # in the object store (a cluster) go by reference, read zero-copy on each worker's node.
    payload = data if data.cache_path else _shipped(data, ray)  # the loop's only token variable
    folder = Path(checkpoint_dir)
    folder.mkdir(parents=True, exist_ok=True)
    result_path = folder / RESULT_FILE
    result_path.unlink(missing_ok=True)

    def loop(_config: dict) -> None:
        tokens = _received(*payload) if isinstance(payload, tuple) else payload
        if ray.train.get_context().get_world_rank() == 0:
            out = execute_trial(spec, uri, mlflow_run_id, checkpoint_dir, data=tokens,
                                branch_dir=branch_dir, interrupted=parallel.peer_lost)
            tmp = result_path.with_suffix(f".tmp-{os.getpid()}")
            tmp.write_text(json.dumps(out))
            os.replace(tmp, result_path)
            if out["status"] == "failed":  # the other ranks wait in a collective: end them
                raise RuntimeError(f"rank 0 failed: {out.get('error', '')}")
        else:
            train(spec, NullTracker(), checkpoint_dir=checkpoint_dir, resume=True,
                  data=tokens, branch_dir=branch_dir, on_step=_kill_hook(spec))

    per_worker = {"CPU": spec.exec.threads}
    if num_gpus > 0:
        per_worker["GPU"] = num_gpus
    for attempt in range(max_retries + 1):
        trainer = TorchTrainer(
            loop,
            scaling_config=ScalingConfig(num_workers=workers, use_gpu=num_gpus > 0,
                                         resources_per_worker=per_worker),
            # A fresh name per attempt: Ray Train must not restore a group of its own; the
            # run's checkpoint folder is what every attempt resumes from.
            run_config=RunConfig(name=f"{spec.run_id}-{uuid.uuid4().hex[:8]}",
                                 storage_path=str(folder.resolve() / "ray_train"),
                                 failure_config=FailureConfig(max_failures=0)),
        )
        try:
            trainer.fit()
            break
        except Exception as e:  # noqa: BLE001 - rank 0's own record says what happened, if any
            if result_path.exists():
                break
            if attempt == max_retries:
                raise RuntimeError(f"data-parallel run {spec.run_id} ({workers} workers) lost "
                                   f"a worker {attempt + 1} time(s): {e}") from e
    return json.loads(result_path.read_text())


def _kill_hook(spec):
    """on_step of rank 1 when KILL_WORKER_ENV names this run (tests only), else None."""
    target = os.environ.get(KILL_WORKER_ENV, "")
    if target.count(":") < 2 or not target.startswith(spec.run_id + ":"):
        return None
    _, step, marker = target.split(":", 2)
    import ray.train

    if ray.train.get_context().get_world_rank() != 1 or Path(marker).exists():
        return None

    def hook(done: int) -> None:
        if done == int(step):
            Path(marker).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def _shipped(data, ray) -> tuple:
    """The tokens by reference: the arrays in the object store, the rest as it is."""
    return (data.shipped_meta(), ray.put(data.train), ray.put(data.val))


def _received(meta: dict, train_ref, val_ref):
    import ray

    from pipeline.data import TokenData

    return TokenData(train=ray.get(train_ref), val=ray.get(val_ref), **meta)

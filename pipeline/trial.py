"""One trial as the ledger sees it: train a RunSpec into its MLflow child run, whatever happens.

Shared by the sweep's Ray tasks and the single-run CLI. The outcome is always recorded:
  finished / diverged  -> MLflow status FINISHED, tag status=finished|diverged
  an exception         -> MLflow status FAILED, tag status=failed, traceback as an artifact
  KeyboardInterrupt    -> MLflow status KILLED (resumes from its checkpoint next time)
A worker process that dies (SIGKILL, node lost) records nothing: the run stays RUNNING and
the sweep retries it, resuming from its last checkpoint.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import asdict

from pipeline import keys
from pipeline.spec import RunSpec
from pipeline.tracking import MLflowTracker
from pipeline.train import train

# Fault injection for tests (tests/test_faults.py): raise at this step of the given run_id.
FAIL_ENV = "SCALING_INJECT_FAILURE"  # "<run_id>:<step>"


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


def execute_trial(spec: RunSpec, uri: str, mlflow_run_id: str, checkpoint_dir: str) -> dict:
    """Train spec (resuming from checkpoint_dir) and record the outcome; returns a summary."""
    tracker = MLflowTracker(uri, mlflow_run_id)
    attempts = tracker.start_attempt()
    # Where the weights are, for pipeline.sample and the report's text samples.
    tracker.set_tags({"checkpoint_dir": checkpoint_dir})
    try:
        result = train(spec, tracker, checkpoint_dir=checkpoint_dir, resume=True,
                       on_step=_failure_hook(spec))
    except KeyboardInterrupt:
        tracker.end(keys.STATUS_KILLED)
        raise
    except Exception as e:  # noqa: BLE001 - every failure is recorded, then reported
        tracker.log_text(traceback.format_exc(), "traceback.txt")
        tracker.set_tags({keys.TAG_ERROR: f"{type(e).__name__}: {e}"[:500]})
        tracker.end(keys.STATUS_FAILED)
        return {"run_id": spec.run_id, "status": keys.STATUS_FAILED, "attempts": attempts,
                "error": f"{type(e).__name__}: {e}"}
    tracker.log_dict(result.curve, keys.CURVE_ARTIFACT)
    if result.resumed_from is not None:
        tracker.set_tags({keys.TAG_RESUMED_FROM: str(result.resumed_from)})
    tracker.end(result.status)
    out = asdict(result)
    out.pop("curve")
    out["attempts"] = attempts
    return out


def run_trial(spec_dict: dict, uri: str, mlflow_run_id: str, checkpoint_dir: str) -> dict:
    """Entry point of a sweep's Ray task (plain data in, plain data out)."""
    return execute_trial(RunSpec.from_dict(spec_dict), uri, mlflow_run_id, checkpoint_dir)

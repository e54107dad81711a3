"""Text samples from the smallest and the largest model of a sweep, for the report.

A run that finished since 2026-12-05 carries its own sample of the report's default prompt
(the tag keys.TAG_SAMPLE, written by the trainer from the final weights), and the report
reads it from the store. For any other run or prompt: sampling needs torch and the
checkpoints, and analysis never imports torch, so each sample is `python -m pipeline.sample`
in a subprocess (an argument list, no shell) with a timeout, launched through
`analysis.child` so that it dies with the report's process even when that is killed
outright (~5 s of CPU each, mostly imports: issue 21). The samples start before the fits and
run alongside them; a sample that cannot be produced (no checkpoint, no spec, a timeout)
becomes a one-line reason in the report, never an error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from analysis.runs.table import RunsTable
from pipeline.vocab import keys

PROMPT = keys.SAMPLE_PROMPT
MAX_NEW_TOKENS = keys.SAMPLE_NEW_TOKENS
TIMEOUT_S = 240.0
"""Per sample, counted from its start (torch import and data loading take most of it)."""
MAX_LINES = 12
MAX_CHARS = 1200


@dataclass(frozen=True)
class Sample:
    label: str
    """"smallest model" or "largest model"."""
    run_id: str
    name: str
    """The MLflow run name (the run_id where there is none)."""
    n: float
    text: str | None
    error: str | None = None
    """Why there is no text (None when there is)."""


def sample_command(run_id: str, prompt: str, tracking_uri: str | None,
                   corpus: str | None = None) -> list[str]:
    """`python -m pipeline.sample ...`, run by `analysis.child` on behalf of this process.
    CORPUS: the one the user's sweep file names (pipeline.sample never reads a corpus that
    only the ledger names: docs/untrusted.md)."""
    cmd = [sys.executable, "-m", "analysis.child", str(os.getpid()), "pipeline.sample",
           "--run-id", run_id, "--prompt", prompt, "--max-new-tokens", str(MAX_NEW_TOKENS)]
    if tracking_uri:
        cmd += ["--tracking-uri", tracking_uri]
    if corpus:
        cmd += ["--corpus", corpus]
    return cmd


Picked = tuple[str, str, str, float]
"""(label, run_id, name, N) of a run to sample."""


def pick_runs(runs: RunsTable) -> list[Picked]:
    """The smallest and the largest model; among runs of one size the longest-trained (most
    tokens) one. One entry when every run has the same size."""
    frame = runs.frame.sort_values(["N", "D"], kind="stable")
    n = frame["N"].to_numpy(dtype=float)
    picked = []
    for label, row in (("smallest model", frame[n == n.min()].iloc[-1]),
                       ("largest model", frame[n == n.max()].iloc[-1])):
        if picked and np.isclose(row["N"], picked[0][3]):
            break
        name = str(row.get("run_name") or "") or str(row["run_id"])
        picked.append((label, str(row["run_id"]), name, float(row["N"])))
    return picked


def _shorten(text: str) -> str:
    lines = text.rstrip().splitlines()
    cut = "\n".join(lines[:MAX_LINES])
    if len(cut) > MAX_CHARS:
        cut = cut[:MAX_CHARS]
    return cut + ("\n…" if cut != text.rstrip() else "")


def _reason(stderr: str, returncode: int) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else f"exit status {returncode}"
    return f"`pipeline.sample` failed: {last[:300]}"


class SampleJobs:
    """Sample subprocesses started now, collected later with ``results()``."""

    def __init__(self, picked: list[Picked], *, prompt: str,
                 tracking_uri: str | None, timeout_s: float = TIMEOUT_S,
                 recorded: dict[str, str] | None = None, corpus: str | None = None) -> None:
        self.prompt = prompt
        self.timeout_s = timeout_s
        self.started = time.monotonic()
        env = dict(os.environ, MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false")
        self.jobs: list[tuple[Picked, subprocess.Popen | Sample | str]] = []
        for pick in picked:
            run_id = pick[1]
            if recorded and run_id in recorded:  # the run's own sample: no process
                self.jobs.append((pick, Sample(*pick, _shorten(recorded[run_id]))))
                continue
            try:
                proc: subprocess.Popen | str = subprocess.Popen(
                    sample_command(run_id, prompt, tracking_uri, corpus), stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                    errors="replace", env=env)
            except OSError as err:
                proc = f"could not start `pipeline.sample`: {err}"
            self.jobs.append((pick, proc))

    def results(self) -> list[Sample]:
        out = []
        for (label, run_id, name, n), proc in self.jobs:
            if isinstance(proc, Sample):
                out.append(proc)
                continue
            if isinstance(proc, str):
                out.append(Sample(label, run_id, name, n, None, proc))
                continue
            left = max(1.0, self.timeout_s - (time.monotonic() - self.started))
            try:
                stdout, stderr = proc.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                out.append(Sample(label, run_id, name, n, None,
                                  f"`pipeline.sample` timed out after {self.timeout_s:.0f} s"))
                continue
            if proc.returncode != 0 or not stdout.strip():
                out.append(Sample(label, run_id, name, n, None,
                                  _reason(stderr, proc.returncode)))
            else:
                out.append(Sample(label, run_id, name, n, _shorten(stdout)))
        return out

    def stop(self) -> None:
        """Kill the subprocesses that are still running (the report failed)."""
        for _, proc in self.jobs:
            if isinstance(proc, subprocess.Popen) and proc.poll() is None:
                proc.kill()
                proc.communicate()


@contextmanager
def sample_jobs(runs: RunsTable, *, tracking_uri: str | None, prompt: str = PROMPT,
                timeout_s: float = TIMEOUT_S, corpus: str | None = None
                ) -> Iterator[SampleJobs]:
    """Start the samples; whatever happens in the block, no subprocess outlives it. CORPUS:
    the corpus the user's sweep file names, which the samples may read (sample_command)."""
    # A masked LM or a classifier does not generate (pipeline.sample refuses it).
    picked = pick_runs(runs) if runs.generates else []
    recorded = recorded_samples([p[1] for p in picked], tracking_uri, prompt)
    jobs = SampleJobs(picked, prompt=prompt, tracking_uri=tracking_uri, timeout_s=timeout_s,
                      recorded=recorded, corpus=corpus)
    try:
        yield jobs
    finally:
        jobs.stop()


def recorded_samples(run_ids: list[str], tracking_uri: str | None, prompt: str) -> dict[str, str]:
    """run_id -> the sample its finished run recorded (keys.TAG_SAMPLE) of this prompt, for
    the runs that have one: one search of the store per run, no process started."""
    if not run_ids or prompt != keys.SAMPLE_PROMPT:
        return {}
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    out = {}
    for run_id in run_ids:
        if not run_id.isalnum():  # run ids are hashes; anything else is not looked up
            continue
        for run in client.search_runs(
                experiments, f"tags.{keys.TAG_RUN_ID} = '{run_id}' and "
                             f"tags.{keys.TAG_STATUS} = '{keys.STATUS_FINISHED}'"):
            tags = run.data.tags
            if tags.get(keys.TAG_SAMPLE) and tags.get(keys.TAG_SAMPLE_PROMPT) == prompt:
                out[run_id] = tags[keys.TAG_SAMPLE]
    return out

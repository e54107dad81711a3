"""Faults (issue 7): real processes, real signals, real files.

Every sweep here is a real `python -m pipeline.sweep` subprocess with a local Ray and a sqlite
MLflow store in the test's tmp folder; faults are injected from outside as they happen in
practice (SIGKILL to the driver or to a Ray worker, a damaged checkpoint file, a store that
cannot be created) or through the trial's injection hooks (pipeline.trial: an exception at a
step, a slow worker start). Trainings are counted with the trial's training log
($SCALING_TRAINING_LOG: one line per attempt that trains, with the step it started from) and
with the `attempts` tag of each MLflow child run.

Determinism: on CPU a resumed run is bit-exact (tests/test_train.py asserts ==), and that
holds across processes too: every recovered sweep's final table (final/val_loss per run_id)
must EQUAL the uninterrupted sweep's, with no tolerance.

The driver killed mid-run is tests/test_sweep.py::test_killed_driver_resumes_without_retraining;
here: before any run finished (with its runs in flight, plus a truncated checkpoint), between
runs, and during the report. Token-cache atomicity is covered by tests/test_data.py (killed builder, failed build,
concurrent builders); checkpoint damage at the unit level by tests/test_train.py; YAML's
safe loading by tests/test_config.py::test_python_tags_are_refused.

Hygiene: each sweep subprocess carries a marker in its environment, inherited by Ray's raylet
and workers; after each test, no process with that marker may be left (they are killed by
pid, and the test fails if any was). One exception, reported as a warning: Ray's two agents
(ray::DashboardAgent, ray::RuntimeEnvAgent) now and then outlive a SIGKILLed driver.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from servers import MlflowServer

from pipeline import checkpoint
from pipeline.config import load_sweep
from pipeline.planner import expand, vocab_size_for
from pipeline.trial import FAIL_ENV, START_DELAY_ENV, TRAINING_LOG_ENV
from pipeline.vocab import keys
from pipeline.vocab.spec import RunSpec

ROOT = Path(__file__).resolve().parents[1]
MARKER_ENV = "SCALING_FAULTS_TEST_MARKER"
TIMEOUT = 300  # seconds per sweep invocation: generous, the machine may be shared

# tiny.yaml (2 budgets x 2 sizes: 315 to 1440 steps, a few seconds each) with a checkpoint
# every 25 steps, so kills land between checkpoints and every interrupted run has some. The
# larger budget first, so that two at a time start with the longest run (a Ray worker trains
# on for a second or two after its driver is SIGKILLed); the order changes no run_id.
FAULTS_SWEEP = """\
name: faults
kind: isoflop
family: gpt
shape:
  head_dim: 8
data:
  corpus: stdlib
  max_bytes: 400000
  seq_len: 32
train:
  batch_size: 4
  lr: 3.0e-3
  evals_per_run: 4
  eval_batches: 2
resources:
  num_cpus: 1
  checkpoint_interval: 25
isoflop:
  budgets: [6e9, 3e9]
  sizes:
    shapes:
      - {n_layer: 1, d_model: 16}
      - {n_layer: 1, d_model: 8}
"""

# The faults sweep's lower budget alone (its 2 shorter runs, 315 and 720 steps, the same run
# ids): for the faults that need runs in training but not the whole sweep (about 10 s less
# per invocation than the 4 runs; the fault tests are the longest part of the suite).
SMALL_FAULTS_SWEEP = FAULTS_SWEEP.replace("budgets: [6e9, 3e9]", "budgets: [3e9]")

# Two runs of 80 steps. The peak LR scales with width, lr * (96 / d_model)^2: d_model 96 trains
# at 1.0 (the largest LR a sweep file accepts), d_model 8 at 144, which blows up in a few steps.
DIVERGE_SWEEP = """\
name: diverge
kind: runs
family: gpt
shape:
  head_dim: 8
data:
  corpus: stdlib
  max_bytes: 400000
  seq_len: 32
train:
  batch_size: 4
  lr: 1.0
  lr_width_exponent: 2
  lr_reference_d_model: 96
  grad_clip: 0
  evals_per_run: 4
  eval_batches: 2
resources:
  num_cpus: 1
runs:
  - {n_layer: 1, d_model: 8, tokens: 10240}
  - {n_layer: 1, d_model: 96, tokens: 10240}
"""


# --- processes -------------------------------------------------------------------------------


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    """True for a live process (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _marked(marker: str) -> list[int]:
    """Live processes whose environment carries the marker: a driver, its Ray, its workers."""
    needle = f"{MARKER_ENV}={marker}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            pid = int(entry.name)
            if needle in _environ(pid) and _alive(pid):
                found.append(pid)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return "?"


# Ray 2.60 leaves these two orphaned (parent: init) after a SIGKILL of the driver that started
# it, now and then; raylet, GCS and workers always go. Killed here, reported as a warning.
RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")


def _reap(marker: str, grace: float = 45.0) -> list[int]:
    """Wait up to grace seconds for the marked processes to exit; SIGKILL (by pid) and return
    those that did not."""
    deadline = time.monotonic() + grace
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = _marked(marker)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


# --- a sweep in a tmp folder -----------------------------------------------------------------


class SweepDir:
    """A sweep file, its MLflow store, checkpoints and training log in one tmp folder."""

    def __init__(self, root: Path, text: str, store: Path | None = None) -> None:
        """store: an empty MLflow database to start from (saves its creation, seconds)."""
        self.root = root
        self.file = root / "sweep.yaml"
        self.file.write_text(text)
        cfg = load_sweep(self.file)
        self.name = cfg.name
        self.specs: dict[str, RunSpec] = {
            s.run_id: s for s in expand(cfg, self.file, vocab_size_for(cfg)).specs}
        self.db = root / "mlflow.db"
        self.uri = f"sqlite:///{self.db}"
        if store is not None:
            shutil.copy(store, self.db)
        self.log = root / "trainings.log"
        self.marker = uuid.uuid4().hex
        self.procs: list[subprocess.Popen] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in (FAIL_ENV, START_DELAY_ENV, "RAY_ADDRESS")}
        env.update({"MLFLOW_TRACKING_URI": self.uri, TRAINING_LOG_ENV: str(self.log),
                    MARKER_ENV: self.marker, "PYTHONPATH": str(ROOT)})
        env.update(extra)
        return env

    def start(self, *args: str, report: bool = False, **env: str) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "pipeline.sweep", str(self.file), "--no-estimate", *args]
        if not report:
            cmd.append("--no-report")
        proc = subprocess.Popen(cmd, cwd=self.root, env=self.env(**env), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def finish(self, proc: subprocess.Popen, timeout: float = TIMEOUT) -> tuple[int, str]:
        """Wait for a started sweep; its exit code and output (stdout and stderr)."""
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail(f"sweep still running after {timeout}s:\n{out[-4000:]}")
        return proc.returncode, out

    def run(self, *args: str, report: bool = False, **env: str) -> tuple[int, str]:
        return self.finish(self.start(*args, report=report, **env))

    def kill_driver(self, proc: subprocess.Popen, *, with_runs: bool = False) -> str:
        """SIGKILL the driver (as the OOM killer or `kill -9` would); its output.

        with_runs: the workers that are training die at the same instant (frozen first, so
        none takes another step). Left alone they train on until Ray's cleanup reaches them,
        a second or two, in which a tiny run can finish and leave nothing interrupted."""
        busy = [pid for pid in _marked(self.marker)
                if _cmdline(pid).startswith("ray::run_trial")] if with_runs else []
        for pid in busy:
            os.kill(pid, signal.SIGSTOP)
        os.kill(proc.pid, signal.SIGKILL)
        for pid in busy:
            os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        return out

    def wait_all_gone(self, grace: float = 30.0) -> None:
        """After a kill: Ray's own cleanup must take the raylet, GCS and workers down."""
        deadline = time.monotonic() + grace

        def others() -> dict[int, str]:
            names = {pid: _cmdline(pid) for pid in _marked(self.marker)}
            return {pid: n for pid, n in names.items() if not n.startswith(RAY_AGENTS)}

        while others() and time.monotonic() < deadline:
            time.sleep(0.5)
        # Everything else is gone: Ray's agents get a few more seconds, then they are killed
        # (when they linger, they linger for good).
        agents = {pid: _cmdline(pid) for pid in _marked(self.marker)}
        left = {pid: agents.get(pid) or "?" for pid in _reap(self.marker, grace=3.0)}
        stray = {pid: n for pid, n in left.items() if not n.startswith(RAY_AGENTS)}
        assert not stray, f"processes outlived the killed driver (killed now): {stray}"
        if left:
            warnings.warn(f"Ray agents outlived the killed driver (killed now): {left}",
                          stacklevel=2)

    def close(self) -> list[int]:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        return _reap(self.marker, grace=20.0)

    # --- what the ledger and the disk say ---

    def store_ready(self) -> bool:
        """True once the driver has created the store and the sweep's experiment in it.

        Read-only, with sqlite itself: an MlflowClient opened while the driver is creating
        the store would create its tables too, and two creators break the store (the
        driver's creation fails with "table ... already exists")."""
        if not self.db.exists():
            return False
        try:
            con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)
            try:
                row = con.execute("SELECT 1 FROM experiments WHERE name = ?", (self.name,))
                return row.fetchone() is not None
            finally:
                con.close()
        except sqlite3.Error:
            return False

    def trials(self, *, settled: bool = False) -> dict[str, Any]:
        """MLflow child runs by run_id ({} until the driver has created the store).

        settled: no driver runs (it was killed, or it ended): read with MLflow at once.
        store_ready's read-only sqlite check failed now and then (CI) right after a writer
        was SIGKILLed mid-transaction; MLflow's read-write connection recovers the file."""
        if not settled and not self.store_ready():
            return {}
        client = MlflowClient(tracking_uri=self.uri)
        exp = client.get_experiment_by_name(self.name)
        if exp is None:
            return {}
        runs = client.search_runs([exp.experiment_id], f"tags.{keys.TAG_KIND} = 'trial'")
        return {r.data.tags[keys.TAG_RUN_ID]: r for r in runs}

    def training_mid_run(self) -> bool:
        """A run is training, has a checkpoint and is not past half its steps: a fault
        injected now lands mid-run."""
        return any(tags.get(keys.TAG_STATUS) == keys.STATUS_RUNNING and self.ckpts(rid)
                   and self.ckpts(rid)[-1] <= self.specs[rid].steps // 2
                   for rid, tags in self.poll_tags().items())

    def assert_every_point_once(self, runs: dict[str, Any]) -> None:
        """Each run's train loss at every multiple of the log interval (10) and at its last
        step, its val loss at the steps of its curve: none lost, none doubled."""
        for rid, run in runs.items():
            steps = self.specs[rid].steps
            assert self.metric_steps(run, keys.TRAIN_LOSS) == sorted(
                set(range(10, steps + 1, 10)) | {steps}), rid
            curve = json.loads(run.data.tags[keys.TAG_CURVE])
            assert self.metric_steps(run, keys.VAL_LOSS) == curve["step"], rid

    def metric_steps(self, run: Any, key: str) -> list[int]:
        """The steps of a child run's history of `key`, in order, repeats kept."""
        client = MlflowClient(tracking_uri=self.uri)
        return sorted(p.step for p in client.get_metric_history(run.info.run_id, key))

    def poll_tags(self, *names: str) -> dict[str, dict[str, str]]:
        """run_id -> {tag: value} of the child runs (their status tag and the tags named), for
        polling while a driver runs: plain sqlite in read-only mode, as store_ready reads.
        An MlflowClient search costs the test process tens of ms of CPU per poll, taken
        from the sweep it watches on a 2-core machine (ten polls a second for the whole
        wait), and could create tables in a store the driver is creating. {} until the
        store is there; {} too while a writer holds it locked (the next poll reads it)."""
        if not self.db.exists():
            return {}
        wanted = (keys.TAG_RUN_ID, keys.TAG_KIND, keys.TAG_STATUS, *names)
        try:
            con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=1.0)
            try:
                rows = con.execute(
                    f"SELECT run_uuid, key, value FROM tags WHERE key IN "
                    f"({', '.join('?' * len(wanted))})", wanted).fetchall()
            finally:
                con.close()
        except sqlite3.Error:
            return {}
        runs: dict[str, dict[str, str]] = {}
        for run_uuid, key, value in rows:
            runs.setdefault(run_uuid, {})[key] = value
        return {tags[keys.TAG_RUN_ID]: tags for tags in runs.values()
                if tags.get(keys.TAG_KIND) == "trial" and keys.TAG_RUN_ID in tags}

    def ckpt_dir(self, run_id: str) -> Path:
        return self.root / "checkpoints" / self.name / run_id

    def ckpts(self, run_id: str) -> list[int]:
        """Steps of the complete checkpoints of a run (.pt with its .sha256), oldest first."""
        folder = self.ckpt_dir(run_id)
        if not folder.is_dir():
            return []
        names = {p.name for p in folder.iterdir()}
        return sorted(int(n[5:13]) for n in names
                      if re.fullmatch(r"step_\d{8}\.pt", n) and n + ".sha256" in names)

    def trainings(self) -> list[tuple[str, int]]:
        """(run_id, first step) of every attempt that trained, in order."""
        if not self.log.exists():
            return []
        return [(rid, int(step)) for rid, step, _pid in
                (line.split() for line in self.log.read_text().splitlines())]

    def table(self) -> dict[str, float]:
        return {rid: r.data.metrics[keys.FINAL_VAL_LOSS] for rid, r in self.trials().items()}


def _attempts(run: Any) -> int:
    return int(run.data.tags.get(keys.TAG_ATTEMPTS, "0") or 0)


def _status(run: Any) -> str:
    return run.data.tags.get(keys.TAG_STATUS, "")


def _wait_for(what: str, cond: Callable[[], Any], proc: subprocess.Popen,
              timeout: float = 240.0, every: float = 0.1) -> Any:
    """Poll cond() until it returns something truthy, while the sweep is still running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"the sweep exited (code {proc.returncode}) before {what}:\n{out[-4000:]}")
        time.sleep(every)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow sqlite database with its tables and no sweep, copied into each test's folder:
    the driver then creates only the experiment (the reference sweep creates the whole store,
    as a first-time user's sweep does)."""
    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture
def sweep_dir(tmp_path: Path, empty_store: Path) -> Iterator[Callable[[str], SweepDir]]:
    made: list[SweepDir] = []

    def make(text: str) -> SweepDir:
        made.append(SweepDir(tmp_path, text, store=empty_store))
        return made[-1]

    yield make
    left = [pid for sd in made for pid in sd.close()]
    assert not left, f"processes left behind by the test (killed now): {left}"


@pytest.fixture(scope="module")
def reference(reference_sweep: SweepDir) -> dict[str, float]:
    """final/val_loss by run_id of the faults sweep, run once without interruption."""
    return reference_sweep.table()


@pytest.fixture(scope="module")
def reference_sweep(tmp_path_factory: pytest.TempPathFactory) -> SweepDir:
    """The faults sweep, run once without interruption (its folder: read, never written)."""
    sd = SweepDir(tmp_path_factory.mktemp("reference"), FAULTS_SWEEP)
    try:
        code, out = sd.run("--cpus", "2")
        assert code == 0, out[-4000:]
        # The driver creates the store before Ray (and any worker) starts.
        assert out.index("Creating initial MLflow database tables") < out.index(
            "Started a local Ray instance")
        trials = sd.trials()
        assert set(trials) == set(sd.specs)
        assert all(_attempts(r) == 1 for r in trials.values())
        assert sorted(sd.trainings()) == sorted((rid, 0) for rid in sd.specs)
        return sd
    finally:
        left = sd.close()
        assert not left, f"processes left behind by the reference sweep: {left}"


# --- the driver killed -----------------------------------------------------------------------


@pytest.mark.slow
def test_driver_killed_before_any_run_finished_then_a_corrupt_checkpoint(
    sweep_dir: Callable[[str], SweepDir], reference: dict[str, float]
) -> None:
    """Kill the driver (and the runs in flight with it) as soon as the longest run has two
    checkpoints, before any run finished; truncate the newest checkpoint of an interrupted
    run; re-run: that run resumes from the previous checkpoint (with a warning), the others
    from their newest."""
    sd = sweep_dir(FAULTS_SWEEP)  # 4 runs: the longest two start first
    longest = max(sd.specs, key=lambda rid: sd.specs[rid].steps)
    proc = sd.start("--cpus", "2")

    def two_checkpoints_none_final() -> bool:
        assert not any(spec.steps in sd.ckpts(rid) for rid, spec in sd.specs.items()), \
            "a run finished before the kill (machine too slow to poll in time?)"
        return len(sd.ckpts(longest)) >= 2

    _wait_for("two checkpoints of the longest run", two_checkpoints_none_final, proc,
              every=0.02)
    sd.kill_driver(proc, with_runs=True)
    sd.wait_all_gone()

    before = sd.trials(settled=True)
    assert not any(_status(r) == keys.STATUS_FINISHED for r in before.values())
    attempts = {rid: _attempts(before[rid]) for rid in sd.specs}  # 1 if started, else 0
    previous, newest = sd.ckpts(longest)[-2:]
    damaged = sd.ckpt_dir(longest) / f"step_{newest:08d}.pt"
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])  # truncated
    # Where each run must start again: its newest good checkpoint, or scratch (0).
    start = {rid: (sd.ckpts(rid) or [0])[-1] for rid in sd.specs} | {longest: previous}
    logged = len(sd.trainings())

    code, out = sd.run("--cpus", "2")
    assert code == 0, out[-4000:]
    assert f"checkpoint {damaged} fails its sha256 check (corrupt); skipped" in out
    after = sd.trials()
    assert all(_status(r) == keys.STATUS_FINISHED for r in after.values())
    assert sorted(sd.trainings()[logged:]) == sorted(start.items())  # each once, from there
    for rid, run in after.items():
        assert _attempts(run) == attempts[rid] + 1, rid
        assert run.data.tags.get(keys.TAG_RESUMED_FROM, "0") == str(start[rid]), rid
    assert sd.table() == reference  # bit-exact across processes and resumes


@pytest.mark.slow
def test_driver_killed_between_runs(
    sweep_dir: Callable[[str], SweepDir], reference: dict[str, float]
) -> None:
    """One run at a time (--cpus 1), each held 5 s before it starts (a slow worker start):
    kill the driver when a run has finished and the next has not started. Re-run: the
    finished run is skipped, the others train once, from scratch (they have no checkpoint)."""
    sd = sweep_dir(SMALL_FAULTS_SWEEP)
    proc = sd.start("--cpus", "1", **{START_DELAY_ENV: "5"})

    def between_runs() -> set[str] | None:
        trials = {rid: tags.get(keys.TAG_STATUS, "") for rid, tags in sd.poll_tags().items()}
        done = {rid for rid, status in trials.items() if status == keys.STATUS_FINISHED}
        others = {status for rid, status in trials.items() if rid not in done}
        return done if len(trials) == len(sd.specs) and done and others == {"queued"} else None

    finished = _wait_for("a run finished and the next was queued", between_runs, proc)
    sd.kill_driver(proc)
    sd.wait_all_gone()

    before = sd.trials(settled=True)
    assert {rid for rid, r in before.items() if _status(r) == keys.STATUS_FINISHED} == finished
    for rid, run in before.items():
        if rid not in finished:  # never started: no attempt, no checkpoint
            assert (_status(run), _attempts(run), sd.ckpts(rid)) == ("queued", 0, []), rid
    assert sorted(sd.trainings()) == sorted((rid, 0) for rid in finished)

    code, out = sd.run("--cpus", "2")
    assert code == 0, out[-4000:]
    assert f"{len(finished)} run(s) already finished or diverged in the ledger" in out
    after = sd.trials()
    assert all(_status(r) == keys.STATUS_FINISHED and _attempts(r) == 1 for r in after.values())
    assert sorted(sd.trainings()) == sorted((rid, 0) for rid in sd.specs)  # each trained once
    assert sd.table() == {rid: reference[rid] for rid in sd.specs}


@pytest.mark.slow
def test_driver_killed_during_the_report(
    sweep_dir: Callable[[str], SweepDir], reference_sweep: SweepDir, reference: dict[str, float]
) -> None:
    """Every run finished (the reference's ledger, copied; its artifacts and checkpoints are
    read where they are): the sweep goes straight to its report (analysis.report). Kill the
    driver there; re-run: nothing is trained, the report is written whole."""
    sd = sweep_dir(FAULTS_SWEEP)
    shutil.copy(reference_sweep.db, sd.db)
    proc = sd.start("--cpus", "2", report=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")),
                              daemon=True)
    reader.start()
    _wait_for("the report's fits", lambda: any("report: fits with" in x for x in lines), proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    reader.join(timeout=60)
    out = "".join(lines)
    assert "nothing to train" in out and "written in" not in out, out[-4000:]
    sd.wait_all_gone()  # also the text-sample subprocesses the report had started
    reports = sd.root / "reports"
    # The report is built in a staging folder swapped in when complete: nothing half-written
    # under reports/faults (a hidden .faults.partial-* folder may stay behind).
    assert not (reports / "faults").exists()

    code, out = sd.run("--cpus", "2", report=True)
    assert code == 0, out[-4000:]
    assert "nothing to train" in out
    assert {p.name for p in (reports / "faults").iterdir()} >= {
        "report.md", "report.html", "fit.json", "runs.csv", "figures"}
    assert sorted((reports / "faults" / "runs.csv").read_text().count(rid) for rid in reference) \
        == [1, 1, 1, 1]
    assert sd.trainings() == []  # nothing trained, in either invocation
    assert all(_attempts(r) == 1 for r in sd.trials().values())
    assert sd.table() == reference


# --- a Ray worker killed ---------------------------------------------------------------------


@pytest.mark.slow
def test_killed_worker_is_retried_and_resumes(
    sweep_dir: Callable[[str], SweepDir], reference: dict[str, float]
) -> None:
    sd = sweep_dir(SMALL_FAULTS_SWEEP)
    proc = sd.start("--cpus", "2")

    def running_worker() -> tuple[str, int, int] | None:
        for rid, tags in sd.poll_tags("worker_pid").items():
            pid = tags.get("worker_pid")
            steps = sd.ckpts(rid)
            # Running, checkpointed, and far from its end: the kill lands mid-run.
            if (tags.get(keys.TAG_STATUS) == keys.STATUS_RUNNING and pid and steps
                    and steps[-1] <= sd.specs[rid].steps // 2):
                return rid, int(pid), steps[-1]
        return None

    victim, pid, seen = _wait_for("a checkpointed run in a worker", running_worker, proc)
    assert f"{MARKER_ENV}={sd.marker}".encode() in _environ(pid)  # a worker of this sweep
    os.kill(pid, signal.SIGKILL)
    code, out = sd.finish(proc)
    assert code == 0, out[-4000:]
    assert not _alive(pid)

    runs = sd.trials()
    assert all(_status(r) == keys.STATUS_FINISHED for r in runs.values())
    assert {rid: _attempts(r) for rid, r in runs.items()} == {
        rid: 2 if rid == victim else 1 for rid in sd.specs}
    assert f"finished {victim}" in out and "attempt 2)" in out
    resumed = int(runs[victim].data.tags[keys.TAG_RESUMED_FROM])
    assert resumed >= seen and resumed % 25 == 0
    assert runs[victim].data.tags["worker_pid"] != str(pid)  # the retry ran in a new worker
    # Every run's history, the victim's too: one point per logged step, none lost, none
    # doubled (metrics are flushed before each checkpoint, the retry skips stored steps).
    sd.assert_every_point_once(runs)
    assert sorted(sd.trainings()) == sorted(
        [(rid, 0) for rid in sd.specs] + [(victim, resumed)])
    assert sd.table() == {rid: reference[rid] for rid in sd.specs}


# --- the driver stopped (SIGTERM) -------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_checkpoints_the_runs_in_flight_at_their_current_step(
    sweep_dir: Callable[[str], SweepDir], reference: dict[str, float]
) -> None:
    """A preemption (SIGTERM to the driver) mid-run: each run in flight is asked to stop
    (ray.cancel without force: SIGINT in its worker), saves a checkpoint of the step it is
    on, between the periodic ones, and ends killed; the driver exits 130 within the grace
    period. The next invocation resumes each from exactly that step: nothing is trained
    twice, and the losses are those of the uninterrupted sweep."""
    sd = sweep_dir(SMALL_FAULTS_SWEEP)
    proc = sd.start("--cpus", "2")

    _wait_for("a checkpointed run in training", sd.training_mid_run, proc)
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)  # as `ray job stop` or a scheduler stops the driver
    code, out = sd.finish(proc)
    stopped_in = time.monotonic() - t0
    assert code == 130, out[-4000:]
    assert stopped_in < 30, stopped_in
    stopped = {rid: int(r.data.tags[keys.TAG_STOPPED_AT]) for rid, r in sd.trials().items()
               if keys.TAG_STOPPED_AT in r.data.tags}
    assert stopped, out[-4000:]
    for rid, step in stopped.items():
        assert sd.ckpts(rid)[-1] == step  # the checkpoint of the step it stopped at
    code, out = sd.run("--cpus", "2")
    assert code == 0, out[-4000:]
    runs = sd.trials()
    assert all(_status(r) == keys.STATUS_FINISHED for r in runs.values())
    for rid, step in stopped.items():
        assert int(runs[rid].data.tags[keys.TAG_RESUMED_FROM]) == step
        assert (rid, step) in sd.trainings()
    sd.assert_every_point_once(runs)
    assert sd.table() == {rid: reference[rid] for rid in sd.specs}


# --- the tracking server killed --------------------------------------------------------------

OUTAGE_S = 5.0  # the server is down this long, plus its restart (a few seconds)


@pytest.mark.slow
def test_tracking_server_killed_and_restarted_mid_sweep(
    sweep_dir: Callable[[str], SweepDir], reference: dict[str, float], tmp_path: Path
) -> None:
    """The sweep's ledger is an `mlflow server` (on the sweep's sqlite file); it is SIGKILLed
    while a run trains, and restarted on the same port and store OUTAGE_S later. MLflow's
    client retries (7, exponential backoff from 2 s: about two minutes) carry the driver and
    the trainers over the gap: the same invocation finishes, every run trained once, every
    metric point in the store once, the losses those of the uninterrupted sweep."""
    sd = sweep_dir(SMALL_FAULTS_SWEEP)
    server = MlflowServer(sd.db, tmp_path / "artifacts", tmp_path / "server.log")
    server.start()
    sd.uri = server.url
    try:
        proc = sd.start("--cpus", "2")

        _wait_for("a checkpointed run in training", sd.training_mid_run, proc)
        server.kill()
        down = time.monotonic()
        time.sleep(OUTAGE_S)
        assert proc.poll() is None, "the sweep ended while the server was down"
        server.start()
        outage = time.monotonic() - down
        code, out = sd.finish(proc)
        assert code == 0, out[-4000:]
        runs = sd.trials()
        assert set(runs) == set(sd.specs)
        assert all(_status(r) == keys.STATUS_FINISHED for r in runs.values())
        assert all(_attempts(r) == 1 for r in runs.values()), "a run was retried"
        assert sorted(sd.trainings()) == sorted((rid, 0) for rid in sd.specs)
        sd.assert_every_point_once(runs)
        assert sd.table() == {rid: reference[rid] for rid in sd.specs}
        assert outage >= OUTAGE_S
    finally:
        server.stop()


# --- a run that raises -----------------------------------------------------------------------


@pytest.mark.slow
def test_failed_run_is_recorded_and_only_it_is_retried(
    sweep_dir: Callable[[str], SweepDir], reference: dict[str, float], tmp_path: Path
) -> None:
    sd = sweep_dir(SMALL_FAULTS_SWEEP)
    victim = min(sd.specs, key=lambda rid: sd.specs[rid].steps)  # 315 steps
    code, out = sd.run("--cpus", "2", **{FAIL_ENV: f"{victim}:100"})
    assert code == 1, out[-4000:]
    assert re.search(rf"failed {victim} .*RuntimeError: injected failure at step 100", out)

    runs = sd.trials()
    failed = runs[victim]
    assert failed.info.status == "FAILED" and _status(failed) == keys.STATUS_FAILED
    assert failed.data.tags[keys.TAG_ERROR] == (
        f"RuntimeError: injected failure at step 100 ({FAIL_ENV})")
    client = MlflowClient(tracking_uri=sd.uri)
    tb = Path(client.download_artifacts(failed.info.run_id, "traceback.txt", str(tmp_path)))
    text = tb.read_text()
    assert text.startswith("Traceback (most recent call last)")
    assert "in execute_trial" in text and "injected failure at step 100" in text
    others = {rid: r for rid, r in runs.items() if rid != victim}
    assert all(_status(r) == keys.STATUS_FINISHED and _attempts(r) == 1
               for r in others.values())
    assert sd.ckpts(victim)[-1] == 100
    logged = len(sd.trainings())

    code, out = sd.run("--cpus", "2")
    assert code == 0, out[-4000:]
    assert f"{victim}: was failed after 1 attempt(s); resuming from its last checkpoint" in out
    assert sd.trainings()[logged:] == [(victim, 100)]  # only the failed run, from step 100
    runs = sd.trials()
    assert {rid: _attempts(r) for rid, r in runs.items()} == {
        rid: 2 if rid == victim else 1 for rid in sd.specs}
    assert runs[victim].info.status == "FINISHED"
    assert runs[victim].data.tags[keys.TAG_RESUMED_FROM] == "100"
    assert sd.table() == {rid: reference[rid] for rid in sd.specs}


# --- divergence ------------------------------------------------------------------------------


@pytest.mark.slow
def test_diverged_run_ends_at_its_step_and_the_sweep_goes_on(
    sweep_dir: Callable[[str], SweepDir]
) -> None:
    from pipeline.train import train

    sd = sweep_dir(DIVERGE_SWEEP)
    by_width = {s.model.d_model: rid for rid, s in sd.specs.items()}
    bad, good = by_width[8], by_width[96]
    assert sd.specs[bad].train.lr == pytest.approx(144.0)
    assert sd.specs[good].train.lr == pytest.approx(1.0)

    code, out = sd.run("--cpus", "2")
    assert code == 0, out[-4000:]  # a divergence is an outcome, not a failure
    runs = sd.trials()
    assert _status(runs[good]) == keys.STATUS_FINISHED
    run = runs[bad]
    assert run.info.status == "FINISHED" and _status(run) == keys.STATUS_DIVERGED
    step = int(run.data.tags[keys.TAG_DIVERGED_STEP])
    assert 0 <= step < sd.specs[bad].steps
    assert re.search(rf"diverged {bad} .* at step {step}\b", out)
    metrics = run.data.metrics
    assert metrics[keys.FINAL_STEPS] == step
    assert keys.FINAL_VAL_LOSS not in metrics and keys.FINAL_VAL_BPB not in metrics
    client = MlflowClient(tracking_uri=sd.uri)
    for key in (keys.TRAIN_LOSS, keys.VAL_LOSS):
        history = client.get_metric_history(run.info.run_id, key)
        assert all(p.step <= step for p in history), key
    assert all(s <= step for s in sd.ckpts(bad))  # a diverged model is never checkpointed
    # The step is the trainer's own, deterministically: the same run here diverges there too.
    assert train(sd.specs[bad]).diverged_step == step

    # The analysis keeps the finished run and excludes the diverged one, saying which and why.
    from analysis.runs.load import load_sweep as load_runs

    said: list[str] = []
    table = load_runs(sd.name, tracking_uri=sd.uri, with_curves=False, log=said.append).runs
    assert list(table.frame["run_id"]) == [good]
    name = run.info.run_name
    assert bad[:6] in name
    assert [(e.run, e.reason) for e in table.excluded] == [(name, f"diverged at step {step}")]
    assert said == [f"{sd.name}: 1 finished runs; excluded 1: {name} (diverged at step {step})"]

    code, out = sd.run("--cpus", "2")  # diverged runs are results: nothing is trained again
    assert code == 0 and "nothing to train" in out, out[-4000:]
    assert all(_attempts(r) == 1 for r in sd.trials().values())
    assert sorted(sd.trainings()) == sorted((rid, 0) for rid in sd.specs)


# --- MLflow under concurrent writers ---------------------------------------------------------

WRITERS, KEYS_PER_RUN, STEPS_PER_KEY = 8, 4, 150

# One writer process: wait for the go file, then log STEPS_PER_KEY points of KEYS_PER_RUN keys
# as fast as it can through the trainer's tracker (a separate interpreter per writer, as Ray
# workers are; a plain script, so a writer imports MLflow and not the test suite).
WRITER = f"""
import os, sys, time
from pipeline.vocab import keys
from pipeline.tracking import MLflowTracker

uri, run_id, flush_every, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
tracker = MLflowTracker(uri, run_id, flush_every=flush_every)
tracker.start_attempt()
while not os.path.exists(go):
    time.sleep(0.01)
for step in range({STEPS_PER_KEY}):
    tracker.log_metrics({{f"load/{{k}}": step + k / 10 for k in range({KEYS_PER_RUN})}}, step)
tracker.end(keys.STATUS_FINISHED)
"""


@pytest.mark.slow
def test_concurrent_writers_lose_no_metric_point(tmp_path: Path) -> None:
    from pipeline.tracking import Ledger
    from pipeline.vocab.spec import DataSpec, TrainSpec

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    ledger = Ledger(uri, "writers")  # the driver creates the store, before any writer
    assert db.is_file()
    base = next(iter(SweepDir(tmp_path, FAULTS_SWEEP).specs.values()))
    runs = []
    for i in range(WRITERS):
        spec = RunSpec(sweep="writers", model=base.model, data=DataSpec(),
                       train=TrainSpec(seed=i), steps=100)
        runs.append(ledger.create_trial(spec, parent_run_id=None).mlflow_run_id)

    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Half flush every 10 points (many small transactions), half in batches of 200 as training.
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, uri, rid, "10" if i % 2 else "200",
                               str(go)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for i, rid in enumerate(runs)]
    try:
        deadline = time.monotonic() + 120
        client = MlflowClient(tracking_uri=uri)
        while time.monotonic() < deadline and not all(  # every writer is ready: go together
                client.get_run(rid).data.tags.get(keys.TAG_ATTEMPTS) == "1" for rid in runs):
            time.sleep(0.2)
        go.touch()
        outs = [p.communicate(timeout=240)[0] for p in procs]
        assert [p.returncode for p in procs] == [0] * WRITERS, "\n".join(outs)[-4000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()

    written = WRITERS * KEYS_PER_RUN * STEPS_PER_KEY
    found = 0
    for rid in runs:
        assert client.get_run(rid).info.status == "FINISHED"
        for k in range(KEYS_PER_RUN):
            history = client.get_metric_history(rid, f"load/{k}")
            assert sorted((p.step, p.value) for p in history) == [
                (s, s + k / 10) for s in range(STEPS_PER_KEY)]
            found += len(history)
    print(f"metric points written {written}, found {found}")
    assert found == written == 4_800


# --- disk faults -----------------------------------------------------------------------------


def _full_disk_at(step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """fsync of the checkpoint file of `step` fails with ENOSPC (what a full disk gives)."""
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if f"step_{step:08d}.pt" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["disk full", "not a directory"])
def test_unwritable_checkpoints_fail_the_run_clearly_and_keep_the_ledger(
    fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, empty_store: Path
) -> None:
    """The same code path as a sweep's Ray task (pipeline.trial.execute_trial), in process."""
    from pipeline.tracking import Ledger
    from pipeline.train import train
    from pipeline.trial import execute_trial
    from pipeline.vocab.spec import DataSpec, ExecSpec, TrainSpec

    monkeypatch.delenv(FAIL_ENV, raising=False)
    monkeypatch.delenv(TRAINING_LOG_ENV, raising=False)
    base = next(iter(SweepDir(tmp_path, FAULTS_SWEEP).specs.values()))
    spec = RunSpec(sweep="disk", model=base.model, data=DataSpec(max_bytes=400_000),
                   train=TrainSpec(batch_size=4, warmup_steps=2), steps=30,
                   exec=ExecSpec(checkpoint_interval=10))
    shutil.copy(empty_store, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ledger = Ledger(uri, "disk")
    rec = ledger.create_trial(spec, parent_run_id=None)
    if fault == "disk full":
        ckpt = tmp_path / "ckpt"
        _full_disk_at(20, monkeypatch)
        reason = f"[Errno 28] no space left on the disk to write {ckpt / 'step_00000020.pt'}: "
    else:
        (tmp_path / "a-file").write_text("")
        ckpt = tmp_path / "a-file" / "ckpt"  # as root, chmod cannot make a folder read-only
        reason = "[Errno 20] Not a directory"

    out = execute_trial(spec, uri, rec.mlflow_run_id, str(ckpt))
    step = 20 if fault == "disk full" else 10
    assert out["status"] == keys.STATUS_FAILED
    assert out["error"].startswith(f"CheckpointError: cannot write checkpoint for step {step} "
                                   f"in {ckpt}: {reason}")
    assert fault != "disk full" or re.search(r": [\d,]+ bytes needed, [\d,]+ bytes free$",
                                             out["error"])
    run = MlflowClient(tracking_uri=uri).get_run(rec.mlflow_run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags[keys.TAG_ERROR].startswith("CheckpointError: cannot write checkpoint")
    # The ledger stays readable and intact.
    assert Ledger(uri, "disk").trials()[spec.run_id].status == keys.STATUS_FAILED
    with sqlite3.connect(tmp_path / "mlflow.db") as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    if fault == "not a directory":
        return
    # Disk full: the checkpoint before is intact, no temporary is left, and once there is
    # space again the retry resumes from it and ends exactly where an unbroken run ends.
    assert [p.name for p in sorted(ckpt.iterdir())] == ["step_00000010.pt",
                                                        "step_00000010.pt.sha256"]
    monkeypatch.undo()
    monkeypatch.delenv(FAIL_ENV, raising=False)
    out = execute_trial(spec, uri, rec.mlflow_run_id, str(ckpt))
    assert out["status"] == keys.STATUS_FINISHED
    assert (out["resumed_from"], out["attempts"]) == (10, 2)
    assert out["final_val_loss"] == train(spec).final_val_loss


@pytest.mark.parametrize("where", ["under a file", "a folder", "not a database"])
def test_unusable_tracking_store_stops_the_sweep_before_launching(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The driver refuses the store before the data, Ray or any run: pipeline.sweep.main in
    this process (a subprocess until 2026-12-07: ~5 s of CPU importing torch and MLflow for
    the same lines; nothing here is a fault from outside)."""
    from pipeline.sweep import main

    sd = SweepDir(tmp_path, FAULTS_SWEEP)
    if where == "under a file":
        (tmp_path / "a-file").write_text("")
        db, why = tmp_path / "a-file" / "mlflow.db", f"{tmp_path / 'a-file'} is a file, not a folder"
    elif where == "a folder":
        db, why = tmp_path / "store", f"{tmp_path / 'store'} is a folder, not a database file"
        db.mkdir()
    else:
        db, why = tmp_path / "junk.db", "file is not a database"
        db.write_bytes(b"these bytes are not sqlite" * 100)
    sd.uri = f"sqlite:///{db}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", sd.uri)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    capsys.readouterr()
    code = main([str(sd.file), "--cpus", "2", "--no-report", "--no-estimate"])
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert code == 2, out[-4000:]
    assert f"error: cannot create the MLflow tracking store {sd.uri}" in out or \
        f"error: cannot use the MLflow tracking store {sd.uri}" in out, out[-4000:]
    assert why in out and "Traceback" not in out
    assert "Started a local Ray instance" not in out and not (tmp_path / "checkpoints").exists()


# --- security --------------------------------------------------------------------------------


def _sources(*folders: str) -> list[tuple[Path, ast.Module]]:
    files = [p for f in folders for p in sorted((ROOT / f).rglob("*.py"))]
    assert files
    return [(p, ast.parse(p.read_text(), filename=str(p))) for p in files]


def _calls(tree: ast.Module) -> Iterator[tuple[str, ast.Call]]:
    """(dotted name of the callee, call) for every call, e.g. ('torch.load', ...)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            parts, f = [], node.func
            while isinstance(f, ast.Attribute):
                parts.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name):
                parts.append(f.id)
            yield ".".join(reversed(parts)), node


def _keyword(call: ast.Call, name: str) -> Any:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value.value if isinstance(kw.value, ast.Constant) else kw.value
    return None


def test_every_torch_load_is_weights_only() -> None:
    loads = [(p, c) for p, tree in _sources("pipeline", "analysis") for name, c in _calls(tree)
             if name == "torch.load" or name.endswith(".torch.load")]
    assert loads, "checkpoint.load_latest calls torch.load"
    bad = [f"{p.name}:{c.lineno}" for p, c in loads if _keyword(c, "weights_only") is not True]
    assert not bad, f"torch.load without weights_only=True: {bad}"
    assert checkpoint.load_latest.__doc__  # the one reader of checkpoints


def test_no_shell_commands_are_built() -> None:
    shells = {"os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput",
              "os.execl", "os.execlp", "os.spawnl", "os.spawnlp"}
    bad = [f"{p.relative_to(ROOT)}:{c.lineno} {name}"
           for p, tree in _sources("pipeline", "analysis") for name, c in _calls(tree)
           if name in shells or _keyword(c, "shell") is not None]
    assert not bad, f"shell commands: {bad}"


def test_yaml_is_read_by_a_safe_loader_only() -> None:
    """The behaviour (python tags refused) is tests/test_config.py::test_python_tags_are_refused;
    this checks no other YAML read exists that could bypass it."""
    import yaml

    from pipeline import config

    assert issubclass(config._Loader, yaml.SafeLoader)
    unsafe = {"Loader", "FullLoader", "UnsafeLoader", "unsafe_load", "full_load", "load_all",
              "unsafe_load_all", "full_load_all"}
    bad = []
    for p, tree in _sources("pipeline", "analysis"):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "yaml" and node.attr in unsafe):
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno} yaml.{node.attr}")
        for name, c in _calls(tree):
            if name == "yaml.load":
                loader = _keyword(c, "Loader")
                if not (isinstance(loader, ast.Name) and loader.id in ("_Loader", "SafeLoader")
                        or isinstance(loader, ast.Attribute) and loader.attr in (
                            "SafeLoader", "CSafeLoader")):
                    bad.append(f"{p.relative_to(ROOT)}:{c.lineno} yaml.load")
    assert not bad, f"YAML read without the safe loader: {bad}"


def test_servers_bind_to_loopback_by_default() -> None:
    # Code: nothing listens on all interfaces; the local Ray starts without its dashboard.
    for p, _tree in _sources("pipeline", "analysis"):
        assert "0.0.0.0" not in p.read_text(), p
    assert "include_dashboard=False" in (ROOT / "pipeline" / "driver" / "runner.py").read_text()
    # Docs: the MLflow UI as documented listens on 127.0.0.1 (its default). A server bound to
    # all interfaces (0.0.0.0, ::) is never shown without a word on what that exposes; one
    # bound to a chosen private address (a cluster's head) is the reader's explicit choice.
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^(MLFLOW_\w+=\w+ )*mlflow ui (?!.*--host).*http://127\.0\.0\.1:5000",
                     readme, re.M)
    everywhere = re.compile(r"0\.0\.0\.0|--(dashboard-)?host[ =](::|\*|\[::\])(\s|$)")
    note = re.compile(r"firewall|trusted|private network|expos|secur", re.I)
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for para in doc.read_text().split("\n\n"):
            if everywhere.search(para):
                assert note.search(para), f"{doc.name}: all interfaces, no caution:\n{para}"


def test_trial_hooks_log_the_first_step_and_fail_where_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counter the tests above rely on: one line per attempt, at its first step."""
    from pipeline.trial import _step_hooks

    spec = next(iter(SweepDir(tmp_path, FAULTS_SWEEP).specs.values()))
    log = tmp_path / "log"
    monkeypatch.delenv(FAIL_ENV, raising=False)
    monkeypatch.delenv(TRAINING_LOG_ENV, raising=False)
    assert _step_hooks(spec) is None  # nothing switched on: train() gets no hook
    monkeypatch.setenv(TRAINING_LOG_ENV, str(log))
    monkeypatch.setenv(FAIL_ENV, f"{spec.run_id}:53")
    hook = _step_hooks(spec)
    for done in (51, 52):  # an attempt resumed from step 50
        hook(done)
    with pytest.raises(RuntimeError, match="injected failure at step 53"):
        hook(53)
    _step_hooks(spec)(1)  # the next attempt, from scratch
    assert log.read_text() == f"{spec.run_id} 50 {os.getpid()}\n{spec.run_id} 0 {os.getpid()}\n"
    monkeypatch.setenv(FAIL_ENV, "some-other-run:53")
    _step_hooks(spec)(53)  # another run's failure is not this one's

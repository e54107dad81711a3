"""Running a plan: the ledger reconciled, leases claimed, one Ray task per run, results back.

  1. the ledger: runs on other tokens stop the sweep; finished and diverged runs are results
  2. leases (pipeline.ledger.lease): a run is trained only by the driver that holds its
     lease; runs another live driver holds are waited for (their result is read from the
     ledger) and taken over if that driver dies
  3. Ray Core tasks, one per run (Ray starts only once this driver has a run to train)
  4. Ctrl-C: runs in flight are cancelled and marked killed; they resume next time
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.config import SweepConfig, SweepError
from pipeline.data import TokenData
from pipeline.driver.capacity import local_cpus, node_problem, workers_problem
from pipeline.planner import Plan
from pipeline.preflight import warn_loopback_uri
from pipeline.terminal import chatty, console, say
from pipeline.terminal.tables import Progress, planned_seconds, report_one, trained_flops
from pipeline.vision.data import ImageData
from pipeline.vocab import keys
from pipeline.vocab.spec import RunSpec, branch_folder

if TYPE_CHECKING:
    from pipeline.ledger.lease import Holder, Leases
    from pipeline.tracking import Ledger
    from pipeline.vocab.manifest import PlanManifest

POLL_S = 5.0  # how often runs held by another driver are looked up in the ledger
STOP_GRACE_S = 20.0
"""Seconds a stopping driver waits for its runs to checkpoint their current step (one step
and one checkpoint: well under a second for the CPU studies, a few seconds on a GPU)."""


def sigterm_as_interrupt() -> None:
    """SIGTERM (a preempted node, `ray job stop`, a scheduler's kill) ends the sweep as
    Ctrl-C does: runs in flight are cancelled and marked killed, leases given back, and the
    next invocation resumes them. Installed again after ray.init, whose driver handler
    would exit at once."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# Ray's log monitor (it forwards workers' output to the driver) looks for new log files with
# a glob of the session's log folder every 0.1 s while the folder holds fewer than 1000
# files. Told to look every 5 s (the files it has are still read every 0.1 s; a new
# worker's first lines reach the terminal up to 5 s later), it spends 0.28 s of CPU per 90 s
# instead of 0.59 s (an idle local Ray, 2-core AMD EPYC, 2026-12-06): ~0.3% of the core a
# sweep trains on. Variables a user has set win; a cluster's monitors are `ray start`'s.
LOG_MONITOR_ENV = {"RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0",
                   "LOG_NAME_UPDATE_INTERVAL_S": "5"}


def init_ray(address: str | None, cpus: int | None, *, hide_gpus: bool = False) -> None:
    """Connect to a cluster (address) or start a private local Ray.

    hide_gpus: a local Ray whose tasks take no GPU gets CUDA_VISIBLE_DEVICES="" in its own
    environment, which its raylet hands to every worker it starts (a cluster's tasks get it
    in their runtime env instead). A local Ray has no runtime env at all: with one, no
    prestarted worker can take a task and each first task waits for a new worker and the
    runtime-env agent (2.5-2.7 s to the first two tasks done against 3.5-4.4 s, 3 trials
    each, measured on a 2-core machine, 2026-12-04)."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage reporting
    try:
        if address:
            ray.init(address=address, log_to_driver=chatty())
        else:
            # Local: a private Ray instance; temp files under RAY_TMPDIR if set (short paths:
            # Ray's unix sockets must fit in 107 characters).
            tmp = os.environ.get("RAY_TMPDIR")
            env = {k: v for k, v in LOG_MONITOR_ENV.items() if k not in os.environ}
            if hide_gpus:
                env["CUDA_VISIBLE_DEVICES"] = ""
            with _environ(env):
                ray.init(num_cpus=local_cpus(cpus), include_dashboard=False,
                         _temp_dir=tmp or None, log_to_driver=chatty())
    except SystemExit as e:  # SIGTERM while Ray starts: its own handler calls sys.exit(15)
        if e.code != signal.SIGTERM:
            raise
        ray.shutdown()  # what had started goes with it
        raise KeyboardInterrupt(f"signal {signal.SIGTERM}") from None
    finally:
        sigterm_as_interrupt()


@contextlib.contextmanager
def _environ(values: dict[str, str]):
    """os.environ with these values while the block runs (the processes it starts keep
    them), as it was afterwards."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_trial(*args, **kwargs) -> dict:
    """The Ray task of one run: pipeline.trial.run_trial, imported by the worker that runs
    it. The driver never imports it, nor torch with it (1.5 s of a CPU sweep's start, spent
    before Ray could start; measured 2026-12-04). Its name is the workers' process title
    (ray::run_trial)."""
    from pipeline.trial import run_trial as trial

    return trial(*args, **kwargs)


def slots_here(num_cpus: int, cpus: int | None) -> int:
    return max(1, local_cpus(cpus) // num_cpus)


def cluster_slots(num_cpus: int, num_gpus: float) -> int:
    """Runs the connected cluster holds at a time (its CPUs and GPUs right now)."""
    import ray

    total = ray.cluster_resources()
    slots = int(total.get("CPU", 0) // num_cpus)
    if num_gpus > 0:
        slots = min(slots, int(total.get("GPU", 0) // num_gpus))
    return max(1, slots)


def other_tokens(existing: dict, plan: Plan, fingerprint: str) -> str | None:
    """Runs of the ledger that trained on other tokens than this sweep's data (the default
    corpus differs between Python versions; the run id names the data settings, not the
    tokens): reused as finished, or resumed from their checkpoints, they would pass for
    runs on these data. The data fingerprint (corpus + tokenizer + split) is the check."""
    foreign = [(s.run_id, existing[s.run_id]) for s in plan.specs
               if s.run_id in existing and existing[s.run_id].data_fingerprint
               and existing[s.run_id].data_fingerprint != fingerprint]
    if not foreign:
        return None
    run_id, rec = foreign[0]
    return (f"{len(foreign)} run(s) of this sweep in the ledger trained on other tokens than "
            f"its data now, e.g. run {run_id} ({rec.status}): tokens {rec.data_fingerprint[:12]}"
            f", now {fingerprint[:12]} (the corpus, tokenizer or split differ: another Python's "
            "standard library, an edited corpus). They are not reused: give the sweep another "
            "name (a new experiment), or run it where the data are the ones it trained on")


def run_sweep(cfg: SweepConfig, plan: Plan, data: TokenData, *, address: str | None, uri: str,
              checkpoint_root: Path, cpus: int | None = None,
              manifest: PlanManifest | None = None,
              seconds: dict[str, float] | None = None) -> dict[str, dict]:
    """Train every unfinished run of the plan that no other driver trains; wait for those
    another driver trains; return every run's result by run_id. ``manifest``: the sweep's
    plan so far, recorded on its parent run once that exists (record_plan). ``seconds``:
    each run's estimated time (pipeline.estimate, as the printed plan's), from which the
    progress lines tell the time left (without: from the FLOP rate of the finished runs)."""
    from pipeline.ledger.lease import Leases
    from pipeline.tracking import Ledger

    ledger = Ledger(uri, cfg.name)
    if problem := other_tokens(ledger.trials(), plan, data.fingerprint):
        raise SweepError(problem)  # before the sweep run is touched
    leases = Leases(uri, cfg.name)
    leases.start()
    try:
        return _Runner(cfg, plan, data, ledger, leases, address=address, uri=uri,
                       checkpoint_root=checkpoint_root, cpus=cpus, manifest=manifest,
                       seconds=seconds).run()
    finally:
        leases.stop()  # releases whatever is still held (a killed run resumes next time)


def record_plan(ledger: Ledger, parent_run_id: str, manifest: PlanManifest) -> None:
    """Write the plan manifest on the sweep's parent run (keys.PLAN_ARTIFACT). The held-out
    runs of the plan there before are kept when it was planned from the same file (same
    sweep_sha256): a relaunch of an unchanged file stopped before its held-out step still
    lists them. Never fails the sweep: the runs are what matters; a plan not recorded is said
    once (readers then keep every finished run of the sweep and read C in the
    convention the runs recorded: analysis.runs.load)."""
    try:
        before = ledger.read_plan(parent_run_id)
        if before is not None and before.sweep_sha256 == manifest.sweep_sha256:
            manifest = manifest.with_runs(before.holdout())
        ledger.write_plan(parent_run_id, manifest)
    except Exception as e:  # noqa: BLE001 - an artifact store's error of any kind
        from rich.markup import escape

        say(f"[yellow]warning[/]: the sweep's plan ({keys.PLAN_ARTIFACT}) was not recorded "
            f"on its parent run: {type(e).__name__}: {escape(str(e)[:300])}")


class _Runner:
    """One invocation's runs: those it trains (pending on Ray, or waiting for their WSD
    trunk) and those another driver trains (elsewhere, looked up every POLL_S)."""

    def __init__(self, cfg: SweepConfig, plan: Plan, data: TokenData, ledger: Ledger,
                 leases: Leases, *, address: str | None, uri: str, checkpoint_root: Path,
                 cpus: int | None, manifest: PlanManifest | None = None,
                 seconds: dict[str, float] | None = None) -> None:
        self.cfg, self.plan, self.data, self.ledger, self.leases = cfg, plan, data, ledger, leases
        self.address, self.uri, self.root, self.cpus = address, uri, checkpoint_root, cpus
        self.parent = ledger.parent_run({"kind_of_sweep": cfg.kind, "family": cfg.family,
                                         "runs_planned": str(len(plan.specs))})
        if manifest is not None:
            record_plan(ledger, self.parent, manifest)
        self.progress = Progress(total=len(plan.specs))
        self.seconds = seconds
        self.results: dict[str, dict] = {}
        self.pending: dict = {}  # Ray ref -> (spec, mlflow run id)
        self.waiting: dict[str, list[tuple[RunSpec, str]]] = defaultdict(list)
        self.elsewhere: dict[str, RunSpec] = {}
        self.by_budget: dict[str, list[float]] = defaultdict(list)
        self.task = self.parallel_task = None
        self.shipped: tuple = ()
        self.slots = slots_here(cfg.resources.cpus_per_run, cpus)

    # --- the ledger and the leases -------------------------------------------------------
    def reconcile(self) -> list[tuple[RunSpec, str]]:
        """Which planned runs this driver trains, with their MLflow run. Finished and diverged
        runs are results; a run is claimed before it is created or resumed (failed, killed
        and interrupted runs resume from a checkpoint); runs another driver holds wait."""
        first = self.ledger.trials()
        open_runs = [s for s in self.plan.specs if not self._done(s, first)]
        self.leases.clear_stale({s.run_id for s in self.plan.specs} - {s.run_id for s in open_runs})
        held_elsewhere: dict[str, Holder] = {}
        for spec in open_runs:
            if (holder := self.leases.claim(spec.run_id)) is not None:
                held_elsewhere[spec.run_id] = holder
        existing = self.ledger.trials()  # again: a run may have finished meanwhile
        todo = []
        for spec in open_runs:
            if spec.run_id in held_elsewhere:
                self.elsewhere[spec.run_id] = spec
                console.print(f"{spec.run_id}: trained by the driver "
                              f"{held_elsewhere[spec.run_id].label()}; waiting for it")
            elif self._done(spec, existing):
                self.leases.release(spec.run_id)
            else:
                todo.append((spec, self._trial(spec, existing)))
        return todo

    def _done(self, spec: RunSpec, existing: dict) -> bool:
        """Finished or diverged in the ledger: a result (recorded), never trained again."""
        rec = existing.get(spec.run_id)
        if rec is None or rec.status not in (keys.STATUS_FINISHED, keys.STATUS_DIVERGED):
            return False
        if spec.run_id not in self.results:
            self.progress.skipped += 1
            self.results[spec.run_id] = {"run_id": spec.run_id, "status": rec.status,
                                         "skipped": True, "final_val_loss": rec.final_val_loss}
        return True

    def _trial(self, spec: RunSpec, existing: dict) -> str:
        rec = existing.get(spec.run_id)
        if rec is None:
            rec = self.ledger.create_trial(spec, self.parent)
        elif rec.status != "queued":
            console.print(f"{spec.run_id}: was {rec.status} after {rec.attempts} attempt(s); "
                          "resuming from its last checkpoint")
        return rec.mlflow_run_id

    def look_elsewhere(self) -> None:
        """Runs of other drivers: a result once the ledger has one; claimed and trained here
        when their driver is gone (its lease expired or its process died)."""
        existing = self.ledger.trials()
        for run_id, spec in list(self.elsewhere.items()):
            if self._done(spec, existing):
                del self.elsewhere[run_id]
                out = self.results[run_id]
                console.print(f"{run_id}: {out['status']} by another driver")
            elif self.leases.claim(run_id) is None:
                del self.elsewhere[run_id]
                now = self.ledger.trials()  # it may have finished since `existing` was read
                if self._done(spec, now):
                    self.leases.release(run_id)
                    continue
                say(f"{run_id}: its driver is gone; training it here")
                self.progress.total += 1
                self.progress.flops_left += trained_flops(spec)
                self.progress.expect(run_id, planned_seconds(spec, self.seconds))
                self.submit(spec, self._trial(spec, now))

    # --- Ray ---------------------------------------------------------------------------------
    def start_ray(self) -> None:
        import ray

        res = self.cfg.resources
        # Device placement follows what Ray assigned: with num_gpus > 0 Ray sets
        # CUDA_VISIBLE_DEVICES to the task's GPU(s), so device "auto" is cuda:0 of the task;
        # with num_gpus 0 it leaves the variable alone (Ray 2.60), and "auto" would take a GPU
        # that Ray gave to another task: hide CUDA devices from the run instead (a local
        # Ray's workers through the raylet's environment, a cluster's through the task's).
        init_ray(self.address, self.cpus, hide_gpus=res.num_gpus == 0)
        # Before any task: one that no node can hold would stay pending for ever (a local
        # Ray was checked before it started: pipeline.driver.capacity.local_problem).
        if problem := (node_problem(res, ray.nodes())
                       or workers_problem(res, ray.cluster_resources())):
            raise SweepError(problem)
        hide_gpus = {"runtime_env": {"env_vars": {"CUDA_VISIBLE_DEVICES": ""}}} \
            if res.num_gpus == 0 and self.address else {}
        options = dict(num_cpus=res.num_cpus, num_gpus=res.num_gpus,
                       max_retries=res.max_retries, retry_exceptions=False, **hide_gpus)
        self.task = ray.remote(run_trial).options(**options)
        # A data-parallel run's task coordinates: its Ray Train workers hold the resources.
        self.parallel_task = ray.remote(run_trial).options(**{**options, "num_cpus": 0,
                                                              "num_gpus": 0})
        if self.address:
            self.slots = cluster_slots(res.cpus_per_run, res.num_gpus * res.workers_per_run)
            warn_loopback_uri(self.uri)
        if self.address and not isinstance(self.data, ImageData):  # images load on each node
            # Cluster: the tokens go to the object store once; every node reads them zero-copy.
            self.shipped = (self.data.shipped_meta(), ray.put(np.asarray(self.data.train)),
                            ray.put(np.asarray(self.data.val)))

    def submit(self, spec: RunSpec, mlflow_run_id: str) -> None:
        if self.task is None:
            self.start_ray()
        ckpt = str(self.root / self.cfg.name / spec.run_id)
        branch_dir = None
        if spec.exec.branch_from:
            branch_dir = str(branch_folder(self.root / self.cfg.name / spec.exec.branch_from,
                                           spec.exec.branch_step))
        task = self.task if spec.exec.workers == 1 else self.parallel_task
        ref = task.remote(spec.to_dict(), self.uri, mlflow_run_id, ckpt, self.data.fingerprint,
                          *self.shipped, branch_dir=branch_dir,
                          worker_gpus=self.cfg.resources.num_gpus,
                          max_retries=self.cfg.resources.max_retries)
        self.pending[ref] = (spec, mlflow_run_id)

    def collect(self, ref) -> None:
        import ray

        spec, mlflow_run_id = self.pending.pop(ref)
        self.progress.flops_left -= trained_flops(spec)
        try:
            out = ray.get(ref)
        except (ray.exceptions.RayError, Exception) as e:  # noqa: BLE001
            # The worker died more often than max_retries allows (or Ray failed).
            out = {"run_id": spec.run_id, "status": keys.STATUS_FAILED,
                   "error": f"{type(e).__name__}: {str(e)[:300]}"}
            self.ledger.mark(mlflow_run_id, keys.STATUS_FAILED, "FAILED")
        self.leases.release(spec.run_id)
        self.results[spec.run_id] = out
        report_one(spec, out, self.progress, self.by_budget)
        for branch in self.waiting.pop(spec.run_id, []):
            self.submit(*branch)  # whatever the trunk's outcome: see train._branch_state

    # --- the loop ----------------------------------------------------------------------------
    def run(self) -> dict[str, dict]:
        todo = self.reconcile()
        self.progress.total = len(todo)
        if self.progress.skipped:
            console.print(f"{self.progress.skipped} run(s) already finished or diverged in the "
                          "ledger: not trained again")
        if not todo and not self.elsewhere:
            console.print("nothing to train: every run of this sweep is already in the ledger")
            self.ledger.mark(self.parent, "finished", "FINISHED")
            return self.results
        self.progress.flops_left = sum(trained_flops(s) for s, _ in todo)
        for spec, _ in todo:  # in the order they are submitted (a branch: after its trunk)
            self.progress.expect(spec.run_id, planned_seconds(spec, self.seconds))
        # WSD branches wait for their trunk (the state they start from is saved as it trains);
        # a branch whose trunk is already in the ledger starts at once.
        in_todo = {spec.run_id for spec, _ in todo}
        try:
            for spec, mlflow_run_id in todo:
                if spec.exec.branch_from in in_todo:
                    self.waiting[spec.exec.branch_from].append((spec, mlflow_run_id))
                else:
                    self.submit(spec, mlflow_run_id)
            self._loop()
        except KeyboardInterrupt:
            self._mark_killed(todo)
            raise
        except SweepError:  # refused when Ray started (no node fits a run): nothing ran
            self.ledger.mark(self.parent, keys.STATUS_FAILED, "FAILED")
            raise
        finally:
            import ray

            if ray.is_initialized():
                ray.shutdown()
        self.ledger.mark(self.parent, keys.STATUS_FINISHED, "FINISHED")
        return self.results

    def _loop(self) -> None:
        import ray

        last_line = last_look = 0.0
        while self.pending or self.elsewhere:
            ready = []
            if self.pending:
                ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=2.0)
            else:
                time.sleep(1.0)
            self.progress.running = min(len(self.pending), self.slots)
            self.progress.slots = self.slots  # a cluster's, once Ray has started
            for ref in ready:
                self.collect(ref)
            if self.elsewhere and time.monotonic() - last_look > POLL_S:
                self.look_elsewhere()
                last_look = time.monotonic()
            if self.pending and (time.monotonic() - last_line > 30 or ready):
                console.print(self.progress.line())
                last_line = time.monotonic()

    def _mark_killed(self, todo: list[tuple[RunSpec, str]]) -> None:
        """Ctrl-C or SIGTERM: ask the runs in flight to stop (each checkpoints the step it is
        on and ends killed: pipeline.trial.stop_on_sigint), wait up to STOP_GRACE_S for them,
        then cancel the rest outright; they, the runs not submitted yet and the branches
        waiting for a trunk are marked killed, and resume from their checkpoints on the next
        invocation."""
        import ray

        say("[yellow]interrupted[/]: stopping runs in flight; each saves a checkpoint of its "
            "current step, is marked killed and resumes from it on the next invocation")
        refs = list(self.pending)
        for ref in refs:
            ray.cancel(ref, force=False)  # SIGINT in the worker: a stop request
        ended, late = ray.wait(refs, num_returns=len(refs), timeout=STOP_GRACE_S) \
            if refs else ([], [])
        for ref in late:
            ray.cancel(ref, force=True)
        done = set()  # runs that ended on their own meanwhile keep their status
        for ref in ended:
            # A stopped run's result raises (Ray re-raises its KeyboardInterrupt): marked below.
            with contextlib.suppress(Exception, KeyboardInterrupt):
                if ray.get(ref).get("status") in (keys.STATUS_FINISHED, keys.STATUS_DIVERGED):
                    done.add(ref)
        for ref, (_spec, mlflow_run_id) in self.pending.items():
            if ref not in done:
                self.ledger.mark(mlflow_run_id, keys.STATUS_KILLED, "KILLED")
        # Runs of this driver not submitted yet (stopped while Ray started): killed as well.
        started = {spec.run_id for spec, _ in self.pending.values()} | set(self.results)
        for spec, mlflow_run_id in todo:  # with the branches waiting for their trunk
            if spec.run_id not in started:
                self.ledger.mark(mlflow_run_id, keys.STATUS_KILLED, "KILLED")
        self.ledger.mark(self.parent, keys.STATUS_KILLED, "KILLED")

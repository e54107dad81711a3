"""MLflow, write side: runs, params, metrics and artifacts (pipeline.ledger.lease holds the
leases on runs, pipeline.sample reads checkpoints' specs; nothing else in pipeline/ imports
mlflow).

MLflow is the ledger of a sweep: one experiment per sweep (named after it), one sweep run
(tag kind=sweep) and one child run per RunSpec (tag kind=trial, run_id=<spec hash>, sweep_run=
the sweep run's id), side by side rather than nested; how they read in the UI (names, summary
params, the dataset input, the experiment kind) is pipeline.ledger.ui. Keys are
the constants of pipeline.vocab.keys. Everything goes through MlflowClient with explicit run ids
(no global "active run"), so Ray workers and threads cannot mix runs up.

Default store: sqlite:///<working folder>/mlflow.db, MLflow's own default; MLFLOW_TRACKING_URI
is honoured. Several processes creating the same fresh sqlite database at once corrupt it,
so the driver calls prepare_store() before any worker writes, and prepare_store() holds a
lock on the database's folder meanwhile (two drivers started together in one folder).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

try:
    import fcntl
except ImportError:  # Windows: no flock; the store is created without the lock
    fcntl = None

from mlflow import MlflowClient
from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunTag
from mlflow.exceptions import MlflowException

from pipeline.ledger import ui
from pipeline.vocab import keys
from pipeline.vocab.manifest import MAX_BYTES as MAX_PLAN_BYTES
from pipeline.vocab.manifest import PlanManifest, manifest_from_json
from pipeline.vocab.spec import RunSpec, flatten
from pipeline.vocab.store import folder_problem, sqlite_file

# MLflow's log_batch limits (per call): 1000 metrics, 100 params, 100 tags.
_MAX_METRICS, _MAX_PARAMS = 1000, 100
_MAX_PARAM_LEN = 6000


def default_tracking_uri() -> str:
    """MLFLOW_TRACKING_URI if set, else an absolute sqlite file in the working folder."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"


_REMOTE_NAMES = frozenset({"databricks", "databricks-uc", "uc"})
"""Tracking URIs MLflow takes as a whole word, without "://" (its StoreRegistry)."""


def is_local_store(uri: str) -> bool:
    """True for stores that only processes on this machine can reach: a sqlite database in
    any dialect spelling (sqlite:, sqlite+pysqlite:, SQLite:, ...), a file: URI or a bare
    path (relative, absolute, or a Windows drive's C:\\...); MLflow picks its store by
    the same scheme, lower-cased, up to its "+driver" (mlflow.utils.uri.get_uri_scheme)."""
    text = uri.strip()
    if text in _REMOTE_NAMES:
        return False
    try:
        scheme = urlsplit(text).scheme  # lower-cased by urlsplit
    except ValueError:  # e.g. an unclosed "[" of an IPv6 host: no store MLflow could open
        return False
    if len(scheme) <= 1:  # none (a path) or a drive letter
        return True
    return scheme.split("+", 1)[0] in ("sqlite", "file")


class TrackingError(RuntimeError):
    """The MLflow tracking store cannot be created or written; the message says why."""


def _sqlite_problem(db: Path) -> str | None:
    """Why a sqlite database file cannot be created or written at db (None if it can)."""
    if db.is_dir():
        return f"{db} is a folder, not a database file"
    if db.exists():
        return None if os.access(db, os.R_OK | os.W_OK) else f"{db} is not writable"
    return folder_problem(db.parent)  # MLflow creates the missing folders


def prepare_store(uri: str, experiment: str) -> str:
    """Create the database (once, here) and the experiment if missing; return its id.

    For a sqlite store the artifacts go next to the database file, as an absolute path, so
    every worker process (whatever its working folder) writes to the same place. A store
    that cannot be created or opened raises TrackingError naming the URI and the reason.
    """
    db = sqlite_file(uri)
    problem = _sqlite_problem(db) if db is not None else None
    if problem:
        raise TrackingError(f"cannot create the MLflow tracking store {uri}: {problem}. Set "
                            "MLFLOW_TRACKING_URI to a database in a writable folder, e.g. "
                            "sqlite:////path/to/mlflow.db, or to a tracking server's URL")
    try:
        with _creation_lock(db):
            client = MlflowClient(tracking_uri=uri)
            found = client.get_experiment_by_name(experiment)
            if found is not None:
                if found.tags.get(ui.EXPERIMENT_KIND_TAG) is None:  # a ledger from before
                    client.set_experiment_tag(found.experiment_id, ui.EXPERIMENT_KIND_TAG,
                                              ui.EXPERIMENT_KIND)
                return found.experiment_id
            artifact_location = None
            if db is not None:
                artifact_location = (db.parent / "mlartifacts" / experiment).resolve().as_uri()
            return client.create_experiment(
                experiment, artifact_location=artifact_location,
                tags={ui.EXPERIMENT_KIND_TAG: ui.EXPERIMENT_KIND})
    except Exception as e:  # noqa: BLE001 - sqlalchemy, OSError, MlflowException, HTTP...
        first_line = (str(e).splitlines() or [""])[0][:300]
        raise TrackingError(f"cannot use the MLflow tracking store {uri}: "
                            f"{type(e).__name__}: {first_line}") from e


def runs_page(uri: str, experiment: str) -> str:
    """How to open the sweep's runs in the MLflow UI (pipeline.ledger.ui.runs_page)."""
    found = MlflowClient(tracking_uri=uri).get_experiment_by_name(experiment)
    return ui.runs_page(uri, found.experiment_id if found is not None else "0")


def budget_pages(uri: str, experiment: str, budgets: list[float]) -> dict[float, str]:
    """A link per IsoFLOP budget that opens its runs in the UI's chart view with useful
    columns: a saved view per budget (pipeline.ledger.ui.budget_view, an experiment tag,
    rewritten with its first date kept), or, where the store takes no tag, the budget's
    filter in the link (no columns then). {} when the experiment is not there."""
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return {}
    base, pages = ui.ui_base(uri), {}
    for budget in sorted(set(budgets)):
        key = ui.budget_view_key(budget)
        try:
            now = int(time.time() * 1000)
            old = found.tags.get(ui.SHARED_VIEW_TAG_PREFIX + key)
            try:
                created = int(json.loads(old)["createdAt"]) if old else now
            except (ValueError, KeyError, TypeError):
                created = now
            client.set_experiment_tag(found.experiment_id, ui.SHARED_VIEW_TAG_PREFIX + key,
                                      ui.budget_view(budget, created, now))
        except (MlflowException, OSError):  # a store that takes no tag: a link without columns
            pages[budget] = ui.runs_url(base, found.experiment_id,
                                        search_filter=ui.budget_filter(budget), chart=True)
        else:
            pages[budget] = ui.runs_url(base, found.experiment_id, view=key, chart=True)
    return pages


@contextmanager
def _creation_lock(db: Path | None) -> Iterator[None]:
    """Hold an exclusive lock on the sqlite database's folder while the store is created.

    Several processes creating one fresh sqlite database at once corrupt it (each runs
    MLflow's schema migrations); two sweeps started together in one folder would. The lock
    is on the folder (flock), so no lock file is left behind. No-op for a server URI, or
    where flock does not exist (Windows).
    """
    if db is None or fcntl is None:
        yield
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(db.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


ENDED = {keys.STATUS_FINISHED: "FINISHED", keys.STATUS_DIVERGED: "FINISHED"}
"""The statuses of a run that ended with a result, and the MLflow run status each ends with."""
OPEN = ("RUNNING", "SCHEDULED")
"""MLflow run statuses of a run not ended."""


@dataclass
class TrialRecord:
    """A child run already in the ledger."""

    mlflow_run_id: str
    run_id: str
    status: str  # keys.STATUS_*
    attempts: int
    final_val_loss: float | None = None  # of a finished run, for the sweep's summary table
    data_fingerprint: str = ""  # the tokens it trained on ("" before its first attempt)


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, str]:
    """What produced a run: the git commit of this checkout ("" when it is not one, e.g. a
    cluster job's uploaded folder), whether it had uncommitted changes, and the versions of
    Python and torch. Tags, so the MLflow UI can filter on them."""
    root = Path(__file__).resolve().parent.parent
    commit = dirty = ""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10)
        if out.returncode == 0:
            commit = out.stdout.strip()
            status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                    cwd=root, capture_output=True, text=True, timeout=10)
            dirty = "true" if status.stdout.strip() else "false"
    except (OSError, subprocess.SubprocessError):
        pass  # no git on this machine: the versions below still say what ran
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = ""
    return {keys.TAG_GIT_COMMIT: commit, keys.TAG_GIT_DIRTY: dirty,
            keys.TAG_PYTHON: platform.python_version(), keys.TAG_TORCH: torch_version}


def _no_run_links() -> None:
    """MLflow prints "View run <name> at: <url>" on every run's end with a tracking server:
    two lines per run through Ray's log forwarding. The sweep prints its one link instead."""
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


def _again_after_a_unique_race(call, *args) -> None:
    """call(*args), once more if it lost a race to insert the same row (the store's unique
    key failed because another writer inserted it first: now it exists, and the second call
    updates or links it)."""
    try:
        call(*args)
    except MlflowException as e:
        if "UNIQUE constraint failed" not in str(e) and "IntegrityError" not in str(e):
            raise
        call(*args)


class Ledger:
    """Finding and creating runs of one sweep (used by the driver only)."""

    def __init__(self, uri: str, experiment: str) -> None:
        _no_run_links()
        self.uri = uri
        self.experiment = experiment
        self.experiment_id = prepare_store(uri, experiment)
        self.client = MlflowClient(tracking_uri=uri)

    def _search(self, filter_string: str) -> list:
        runs, token = [], None
        while True:
            page = self.client.search_runs(
                [self.experiment_id], filter_string, max_results=5000, page_token=token
            )
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def trials(self) -> dict[str, TrialRecord]:
        """Child runs by run_id. If a run_id has several MLflow runs, the finished one wins.

        A run whose status says it ended (finished or diverged) while its MLflow run is still
        open is closed here: its trainer was stopped between the two writes that end a run
        (MLflowTracker.end: the status tag, then the run's end), and nothing would train it
        again to close it. Seen once in tests/test_sweep.py, a driver and its workers
        SIGKILLed at once: the ledger read finished, and the MLflow UI showed the run running
        for good."""
        found: dict[str, TrialRecord] = {}
        for run in self._search(f"tags.{keys.TAG_KIND} = 'trial'"):
            tags = run.data.tags
            rec = TrialRecord(
                mlflow_run_id=run.info.run_id, run_id=tags.get(keys.TAG_RUN_ID, ""),
                status=tags.get(keys.TAG_STATUS, keys.STATUS_RUNNING),
                attempts=int(tags.get(keys.TAG_ATTEMPTS, "0") or 0),
                final_val_loss=run.data.metrics.get(keys.FINAL_VAL_LOSS),
                data_fingerprint=tags.get(keys.TAG_DATA_FINGERPRINT, ""),
            )
            if rec.status in ENDED and run.info.status in OPEN:
                self.client.set_terminated(rec.mlflow_run_id, status=ENDED[rec.status])
            old = found.get(rec.run_id)
            if old is None or rec.status == keys.STATUS_FINISHED:
                found[rec.run_id] = rec
        return found

    def parent_run(self, tags: dict[str, str]) -> str:
        """The sweep's parent run: reused across invocations of the same sweep."""
        existing = self._search(f"tags.{keys.TAG_KIND} = 'sweep'")
        if existing:
            run_id = existing[0].info.run_id
            self.client.update_run(run_id, status="RUNNING")
        else:
            run = self.client.create_run(
                self.experiment_id, run_name=self.experiment,
                tags={keys.TAG_KIND: "sweep", keys.TAG_SWEEP: self.experiment},
            )
            run_id = run.info.run_id
        run_tags = [RunTag(k, str(v)) for k, v in tags.items()]
        # Two drivers starting together tag the one parent run at once (see mark).
        _again_after_a_unique_race(lambda: self.client.log_batch(run_id, tags=run_tags))
        return run_id

    def write_plan(self, parent_run_id: str, manifest: PlanManifest) -> None:
        """The plan manifest as the parent run's keys.PLAN_ARTIFACT (replacing the one there:
        two drivers of one sweep write the same plan, one whole file each). A local plan.json
        that is a link is removed first, never written through (docs/untrusted.md)."""
        local = self._local_plan(parent_run_id)
        if local is not None and local.is_symlink():
            local.unlink()
        self.client.log_dict(parent_run_id, manifest.to_dict(), keys.PLAN_ARTIFACT)

    def read_plan(self, parent_run_id: str) -> PlanManifest | None:
        """The parent run's plan manifest; None when it has none, or one this code would not
        write (checked field by field: pipeline.vocab.manifest), or it cannot be read. Read
        only as a regular file (not a link) of at most MAX_PLAN_BYTES: a ledger may be
        someone else's."""
        try:
            local = self._local_plan(parent_run_id)
            if local is not None:
                if not local.is_file() or local.is_symlink() \
                        or local.stat().st_size > MAX_PLAN_BYTES:
                    return None
                with open(local, "rb") as f:
                    data = f.read(MAX_PLAN_BYTES + 1)
            else:
                listed = {a.path: a for a in self.client.list_artifacts(parent_run_id)}
                info = listed.get(keys.PLAN_ARTIFACT)
                if info is None or info.is_dir or (info.file_size or 0) > MAX_PLAN_BYTES:
                    return None
                with tempfile.TemporaryDirectory(prefix="plan-") as tmp:
                    path = self.client.download_artifacts(parent_run_id, keys.PLAN_ARTIFACT, tmp)
                    data = Path(path).read_bytes()[: MAX_PLAN_BYTES + 1]
            return manifest_from_json(data, f"run {parent_run_id}: {keys.PLAN_ARTIFACT}")
        except (MlflowException, OSError, ValueError, RecursionError):
            return None  # a partial write, or not a plan this code writes

    def _local_plan(self, run_id: str) -> Path | None:
        """Where the run's plan.json is when its artifacts are files here, else None."""
        uri = self.client.get_run(run_id).info.artifact_uri or ""
        if urlsplit(uri).scheme not in ("", "file"):
            return None
        from mlflow.utils.file_utils import local_file_uri_to_path

        return Path(local_file_uri_to_path(uri)) / keys.PLAN_ARTIFACT

    def create_trial(self, spec: RunSpec, parent_run_id: str | None) -> TrialRecord:
        """A new child run for spec, with params, tags and the resolved spec as an artifact."""
        tags = {
            keys.TAG_KIND: "trial", keys.TAG_SWEEP: spec.sweep, keys.TAG_RUN_ID: spec.run_id,
            keys.TAG_FAMILY: spec.model.family,
            keys.TAG_BUDGET: "" if spec.budget is None else f"{spec.budget:.6g}",
            keys.TAG_STATUS: "queued", keys.TAG_ATTEMPTS: "0", keys.TAG_ROLE: spec.role,
        }
        tags.update(code_version())
        if spec.exec.branch_from:
            tags[keys.TAG_BRANCH_OF] = spec.exec.branch_from
            tags[keys.TAG_BRANCH_STEP] = str(spec.exec.branch_step)
        if parent_run_id:
            # Not MLflow's parentRunId: its UI hides nested runs, from the table and from the
            # charts, until each parent is expanded by hand, and comparing runs is its use.
            tags[keys.TAG_SWEEP_RUN] = parent_run_id
        run = self.client.create_run(self.experiment_id, run_name=ui.run_name(spec), tags=tags)
        rid = run.info.run_id
        params = [Param(k, str(v)[:_MAX_PARAM_LEN]) for k, v in flatten(spec.to_dict()).items()]
        params.append(Param("tokens", str(spec.tokens)))
        params += [Param(k, v) for k, v in ui.summary_params(spec).items()]
        for i in range(0, len(params), _MAX_PARAMS):
            self.client.log_batch(rid, params=params[i : i + _MAX_PARAMS])
        self.client.log_dict(rid, spec.to_dict(), keys.SPEC_ARTIFACT)
        return TrialRecord(rid, spec.run_id, "queued", 0)

    def mark(self, mlflow_run_id: str, status: str, mlflow_status: str) -> None:
        # Two drivers of one sweep end together and mark its parent run at the same moment:
        # both find the tag missing and insert it (seen with sqlite); setting it again updates.
        _again_after_a_unique_race(self.client.set_tag, mlflow_run_id, keys.TAG_STATUS, status)
        self.client.set_terminated(mlflow_run_id, status=mlflow_status)


class MLflowTracker:
    """The trainer's tracker for one child run: buffers metrics, writes them with log_batch."""

    def __init__(self, uri: str, mlflow_run_id: str, flush_every: int = 200) -> None:
        _no_run_links()
        self.client = MlflowClient(tracking_uri=uri)
        self.run_id = mlflow_run_id
        self._buffer: list[Metric] = []
        self._flush_every = flush_every
        # Steps already in the store per metric key, read once per key on a retried attempt
        # (None on a first attempt: nothing to skip). A resumed run logs again the steps
        # between its checkpoint and the point where the last attempt ended; MLflow would
        # keep both copies (their timestamps differ), so the history would hold two points
        # for one step.
        self._stored: dict[str, set[int]] | None = None

    def start_attempt(self) -> int:
        """Mark the run RUNNING and count this attempt (a tag, visible in the UI)."""
        run = self.client.get_run(self.run_id)
        attempts = int(run.data.tags.get(keys.TAG_ATTEMPTS, "0") or 0) + 1
        self._stored = {} if attempts > 1 else None
        self.client.update_run(self.run_id, status="RUNNING")
        self.set_tags({keys.TAG_ATTEMPTS: str(attempts), keys.TAG_STATUS: keys.STATUS_RUNNING})
        return attempts

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        if self._stored is not None:
            metrics = {k: v for k, v in metrics.items() if step not in self._stored_steps(k)}
        self._buffer.extend(Metric(k, float(v), now, step) for k, v in metrics.items())
        if len(self._buffer) >= self._flush_every:
            self.flush()

    def _stored_steps(self, key: str) -> set[int]:
        if key not in self._stored:
            history = self.client.get_metric_history(self.run_id, key)
            self._stored[key] = {m.step for m in history}
        return self._stored[key]

    def flush(self) -> None:
        while self._buffer:
            chunk, self._buffer = self._buffer[:_MAX_METRICS], self._buffer[_MAX_METRICS:]
            self.client.log_batch(self.run_id, metrics=chunk)

    def log_summary(self, metrics: dict[str, float]) -> None:
        # Summary values at step 0 of their own keys; "latest value" is what search shows.
        self.log_metrics(metrics, 0)
        self.flush()

    def set_tags(self, tags: dict[str, str]) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_dict(self, obj: dict, name: str) -> None:
        self.client.log_dict(self.run_id, obj, name)

    def log_dataset(self, record: dict[str, str]) -> None:
        """The run's training tokens as a dataset input (pipeline.ledger.ui.dataset). MLflow
        keeps one dataset per (name, digest) in an experiment and one input per run, so a
        resumed attempt logging it again adds nothing."""
        context = InputTag(key="mlflow.data.context", value="train")
        inputs = [DatasetInput(Dataset(**record), tags=[context])]
        # Two runs starting together both find the dataset missing and insert it (seen in CI
        # with sqlite): logging again links the one that exists now.
        _again_after_a_unique_race(self.client.log_inputs, self.run_id, inputs)

    def log_text(self, text: str, name: str) -> None:
        self.client.log_text(self.run_id, text, name)

    def end(self, status: str) -> None:
        """status is keys.STATUS_*; the MLflow run status follows it."""
        self.flush()
        mlflow_status = {**ENDED, keys.STATUS_KILLED: "KILLED"}.get(status, "FAILED")
        self.set_tags({keys.TAG_STATUS: status})
        self.client.set_terminated(self.run_id, status=mlflow_status)

"""The plan a sweep recorded in its ledger: the ``plan.json`` artifact of its parent run.

Why: the sweep driver writes the plan manifest (pipeline.vocab.manifest) of its last launch on
the sweep's parent run (the run tagged ``kind = sweep``), so the analysis knows which runs of
the experiment belong to the sweep as it is now, and in which FLOP convention its budgets are,
without importing the planner or re-reading the sweep file. A ledger may be someone else's
(docs/untrusted.md): the file is read only when it is a regular file of at most
MAX_PLAN_BYTES, and a manifest that is not one this code writes is a DataError naming the
store, the sweep, plan.json and the field.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from analysis.errors import DataError
from analysis.inputs import read_input
from pipeline.vocab import keys
from pipeline.vocab.manifest import MAX_BYTES as MAX_PLAN_BYTES
from pipeline.vocab.manifest import ManifestError, PlanManifest, manifest_from_json


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """MLflow draws a progress bar per artifact download; one per run would flood stderr."""
    name = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    old = os.environ.get(name)
    os.environ[name] = "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _local_folder(artifact_uri: str) -> Path | None:
    """The folder of a run's artifacts when they are files on this machine, else None."""
    if urlsplit(artifact_uri).scheme not in ("", "file"):
        return None
    from mlflow.utils.file_utils import local_file_uri_to_path

    return Path(local_file_uri_to_path(artifact_uri))


def _plan_bytes(client: object, run: object, label: str) -> bytes | None:
    """The bytes of the run's plan.json, None when it has none."""
    from mlflow.exceptions import MlflowException

    folder = _local_folder(run.info.artifact_uri or "")
    if folder is not None:  # read in place: checked as a regular file before it is opened
        path = folder / keys.PLAN_ARTIFACT
        if not os.path.lexists(path):
            return None
        return read_input(path, f"{label} at", MAX_PLAN_BYTES)
    try:
        listed = {f.path: f for f in client.list_artifacts(run.info.run_id)}
        info = listed.get(keys.PLAN_ARTIFACT)
        if info is None:
            return None
        if info.is_dir or (info.file_size or 0) > MAX_PLAN_BYTES:
            raise DataError(f"{label}: is a folder or over {MAX_PLAN_BYTES:,} bytes")
        with tempfile.TemporaryDirectory() as tmp, no_progress_bars():
            path = client.download_artifacts(run.info.run_id, keys.PLAN_ARTIFACT, tmp)
            return read_input(path, label, MAX_PLAN_BYTES)
    except MlflowException as e:
        raise DataError(f"{label}: cannot read it ({' '.join(str(e).split())[:300]})") from e


def read_plan(client: object, experiment_id: str, sweep: str, where: str) -> PlanManifest | None:
    """The manifest on the parent run of ``sweep`` (the one pipeline.tracking.Ledger.parent_run
    reuses), None when the sweep has no parent run or it has no plan.json (ledgers written
    before the manifest). ``where`` names the store in errors."""
    parents = client.search_runs([experiment_id], f"tags.{keys.TAG_KIND} = 'sweep'",
                                 max_results=1)
    if not parents:
        return None
    label = f"{where}: sweep {sweep!r}: {keys.PLAN_ARTIFACT}"
    data = _plan_bytes(client, parents[0], label)
    if data is None:
        return None
    try:
        plan = manifest_from_json(data, label)
    except ManifestError as e:
        raise DataError(str(e)) from e
    if plan.sweep != sweep:
        raise DataError(f"{label}: the plan of sweep {plan.sweep!r}, not of {sweep!r}")
    return plan

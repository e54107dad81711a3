"""The sweep driver's pre-flight checks: everything that would make runs fail late (a
dashboard URL given as the Ray address, a local MLflow store with a cluster, a tracking server
that does not answer, checkpoints on a folder other nodes cannot see or nobody can write) is
found here, before the data, Ray or any worker starts."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlparse, urlsplit

from pipeline.terminal import say


def driver_problem(address: str | None, checkpoint_dir: str, uri: str, sweep_name: str) -> str:
    """Why the sweep cannot start ("" when it can); creates the ledger's store (once, here).

    MLflow is imported only here: a sweep file that fails validation never imports it.
    """
    from pipeline.tracking import TrackingError, folder_problem, is_local_store, prepare_store

    if address and _scheme(address) in ("http", "https"):
        return (f"the Ray address {address} (--address or $RAY_ADDRESS) is a "
                "dashboard URL: that is the address for `ray job submit`. Submit this command "
                f"with `ray job submit --address {address} -- python -m pipeline.sweep "
                "FILE`, or give the cluster's address HOST:PORT (docs/cluster.md)")
    if address and is_local_store(uri):  # any sqlite dialect, file:, a path (tracking.py)
        return (f"a Ray cluster address is set ({address}: --address, or $RAY_ADDRESS "
                f"as under `ray job submit`) but the MLflow tracking URI is a local store ({uri}): "
                "runs on other nodes cannot write it. Start a tracking server and set "
                "MLFLOW_TRACKING_URI=http://HOST:PORT (for `ray job submit`: --runtime-env-json "
                "'{\"env_vars\": {\"MLFLOW_TRACKING_URI\": \"http://HOST:PORT\"}}'); see "
                "docs/cluster.md")
    if _scheme(uri) in ("http", "https") and (why := _unreachable(uri)):
        return (f"the MLflow tracking server {uri} does not answer ({why}). Is "
                "`mlflow server` running, and reachable from here (on a cluster: from every "
                "node)? See docs/cluster.md")
    if address:
        _warn_checkpoint_dir(checkpoint_dir, address)
    # Checked before any run starts, not at the first checkpoint of every run.
    if why := folder_problem(Path(checkpoint_dir)):
        return (f"--checkpoint-dir {checkpoint_dir}: run checkpoints cannot be "
                f"written there ({why}); pass --checkpoint-dir (or set SCALING_CHECKPOINT_DIR) "
                "to a writable folder")
    try:  # the ledger's store: created once, here, before the data, Ray or any worker
        prepare_store(uri, sweep_name)
    except TrackingError as e:
        return str(e)
    return ""


def _scheme(uri: str) -> str:
    """The URI's scheme, lower-cased as URL schemes compare ("HTTP://h" is http); "" if none
    or unparsable."""
    try:
        return urlsplit(uri.strip()).scheme
    except ValueError:
        return ""


def _unreachable(uri: str, timeout: float = 10.0) -> str:
    """Why a tracking server cannot be reached ("" if it answers at all, even 401 or 404).

    Checked once, up front: MLflow's client retries a dead server for minutes per request.
    """
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout):
            return ""
    except urllib.error.HTTPError:
        return ""  # it answered (behind a proxy or with auth, perhaps)
    except (OSError, ValueError) as e:
        return str(getattr(e, "reason", e))


def _warn_checkpoint_dir(path: str, address: str) -> None:
    """On a cluster, checkpoints must be on storage every node sees, or resumes start over."""
    if Path(path).is_absolute():
        return
    where = Path(path).resolve()
    print(f"warning: a cluster address is set ({address}) but checkpoints go to {where}, "
          f"the relative path {path!r} under this driver's working folder (under `ray job "
          "submit`, a per-job folder on the head node that no other node sees). A run retried "
          "or resumed on another node will not find its checkpoints there and restarts from "
          "scratch. Pass --checkpoint-dir (or set SCALING_CHECKPOINT_DIR) to a folder that "
          "every node mounts at the same path (NFS, a mounted bucket): see docs/cluster.md",
          file=sys.stderr)


def warn_loopback_uri(uri: str) -> None:
    """A tracking server at 127.0.0.1 is only reachable from nodes on the driver's host."""
    import ray

    host = urlparse(uri).hostname or ""
    ips = {n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}
    if host in ("127.0.0.1", "localhost", "::1") and len(ips) > 1:
        say(f"[yellow]warning[/]: MLFLOW_TRACKING_URI is {uri}, a loopback address, "
                      f"but the cluster spans {len(ips)} machines: runs on the others cannot "
                      "reach it unless each has a tunnel to it. Use an address every node can "
                      "reach (docs/cluster.md)")

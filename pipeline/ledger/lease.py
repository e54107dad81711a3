"""Leases: one driver trains a run at a time, however many drivers run the sweep.

Two drivers of one sweep (two terminals, a retried `ray job submit`, two people on one study)
each see a run as not finished and would both train it. A driver therefore claims a run
before it creates or resumes it, and trains only what it holds.

The claim must be atomic in every store the ledger may be in (a sqlite file, a tracking
server), and MLflow offers no compare-and-set on tags. What it does offer is a unique name: a
registered model's creation fails with RESOURCE_ALREADY_EXISTS when the name is taken, in the
database, whoever asks. A lease is a registered model named lease.<sweep>.<run_id>, tagged with
its holder (host, pid, a driver token) and an expiry (unix seconds) that the holder renews
while it lives; releasing it deletes it. Leases show in the UI's Models page while runs train.

A lease whose expiry has passed, or whose holder is a process of this host that no longer
exists, is stale: another driver takes it over by renaming it away first (a rename of a name
that no longer exists fails, so of two drivers taking over one lease only one succeeds), then
claiming it afresh.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

TTL_S = 60.0  # a lease lives this long unless renewed; renewed every TTL_S / 4


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    token: str  # unique per driver process: pids repeat across hosts and time

    def label(self) -> str:
        return f"{self.host}:{self.pid}"


def _name(sweep: str, run_id: str) -> str:
    return f"lease.{sweep}.{run_id}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, another user's
    return True


class Leases:
    """The leases this driver holds on runs of one sweep, renewed by a background thread."""

    def __init__(self, uri: str, sweep: str, ttl_s: float = TTL_S) -> None:
        self.client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        self.sweep = sweep
        self.ttl_s = ttl_s
        self.me = Holder(socket.gethostname(), os.getpid(), uuid.uuid4().hex)
        self.held: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- claiming -------------------------------------------------------------------------
    def _tags(self) -> dict[str, str]:
        return {"host": self.me.host, "pid": str(self.me.pid), "token": self.me.token,
                "expires": f"{time.time() + self.ttl_s:.3f}", "sweep": self.sweep}

    def claim(self, run_id: str) -> Holder | None:
        """Take the run's lease; None when this driver holds it now, else the live holder."""
        name = _name(self.sweep, run_id)
        for _ in range(3):  # a takeover can race another; a few tries settle it
            try:
                self.client.create_registered_model(name, tags=self._tags())
            except MlflowException as e:
                if e.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
            else:
                with self._lock:
                    self.held.add(run_id)
                return None
            holder, stale = self._inspect(name)
            if holder is not None and holder.token == self.me.token:
                with self._lock:
                    self.held.add(run_id)
                return None
            if not stale:
                return holder
            self._take_over(name, holder)
        return self._inspect(name)[0]

    def _inspect(self, name: str) -> tuple[Holder | None, bool]:
        """(holder, stale) of a lease; (None, True) when it vanished meanwhile."""
        try:
            tags = self.client.get_registered_model(name).tags
        except MlflowException:
            return None, True
        holder = Holder(tags.get("host", "?"), int(tags.get("pid", "0") or 0), tags.get("token", ""))
        expired = float(tags.get("expires", "0") or 0) < time.time()
        dead_here = holder.host == self.me.host and not _alive(holder.pid)
        return holder, expired or dead_here

    def _take_over(self, name: str, stale: Holder | None) -> None:
        """Rename the stale lease away (only one driver's rename can succeed) and delete it;
        if what was renamed turned out to be a fresh lease, put it back."""
        aside = f"{name}.stale.{uuid.uuid4().hex[:8]}"
        try:
            self.client.rename_registered_model(name, aside)
        except MlflowException:
            return  # another driver took it over first
        tags = self.client.get_registered_model(aside).tags
        if stale is not None and tags.get("token") != stale.token:
            try:  # a fresh lease of a third driver: give it back
                self.client.rename_registered_model(aside, name)
                return
            except MlflowException:
                pass  # the name is taken again already: the renamed one is abandoned
        self.client.delete_registered_model(aside)

    def clear_stale(self, run_ids: set[str]) -> None:
        """Delete the stale leases of these runs (finished in the ledger: they need none). A
        driver killed between a run's end and the release of its lease leaves one behind,
        which no later driver would otherwise touch, as it never claims a finished run."""
        if not run_ids:
            return
        wanted = {_name(self.sweep, run_id) for run_id in run_ids}
        # LIKE's "_" matches any character: a wider match is fine, `wanted` decides.
        found = self.client.search_registered_models(
            filter_string=f"name LIKE 'lease.{self.sweep}.%'", max_results=1000)
        for model in found:
            if model.name in wanted:
                holder, stale = self._inspect(model.name)
                if stale:
                    self._take_over(model.name, holder)

    # --- holding ---------------------------------------------------------------------------
    def release(self, run_id: str) -> None:
        """Give the lease back (the run is finished, failed or killed)."""
        with self._lock:
            if run_id not in self.held:
                return
            self.held.discard(run_id)
        name = _name(self.sweep, run_id)
        try:
            if self.client.get_registered_model(name).tags.get("token") == self.me.token:
                self.client.delete_registered_model(name)
        except MlflowException:
            pass  # already gone (taken over after an expiry): nothing to give back

    def renew(self) -> None:
        expires = f"{time.time() + self.ttl_s:.3f}"
        with self._lock:
            held = list(self.held)
        for run_id in held:
            # A lost lease (an expiry passed while the store was away): the run goes on.
            with contextlib.suppress(MlflowException):
                self.client.set_registered_model_tag(_name(self.sweep, run_id), "expires",
                                                     expires)

    def start(self) -> None:
        """Renew the held leases every ttl / 4 until stop()."""
        def loop() -> None:
            while not self._stop.wait(self.ttl_s / 4):
                self.renew()

        self._thread = threading.Thread(target=loop, name="lease-renewal", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and release every lease still held."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            held = list(self.held)
        for run_id in held:
            self.release(run_id)

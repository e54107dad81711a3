"""Leases on runs (pipeline/ledger/lease.py) in a real sqlite ledger: one holder at a time,
released and taken over when their driver is gone."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from pipeline.ledger.lease import Leases


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_one_holder_at_a_time_and_release(uri: str) -> None:
    a, b = Leases(uri, "s"), Leases(uri, "s")
    assert a.claim("r1") is None  # a holds it
    assert a.claim("r1") is None  # and may claim it again
    holder = b.claim("r1")
    assert holder is not None and holder.token == a.me.token
    assert b.claim("r2") is None  # other runs are free
    a.release("r1")
    assert b.claim("r1") is None
    assert b.held == {"r1", "r2"}
    b.stop()  # releases everything still held
    assert not MlflowClient(tracking_uri=uri).search_registered_models()


def test_an_expired_lease_is_taken_over_and_renewal_keeps_it(uri: str) -> None:
    # TTL 2 s: a store call on a loaded 2-core machine can take a few hundred ms (with 0.5 s,
    # b's claim right after the renewal once came after the expiry).
    a, b = Leases(uri, "s", ttl_s=2.0), Leases(uri, "s")
    assert a.claim("r1") is None and a.claim("r2") is None
    time.sleep(1.2)
    a.renew()  # r1 and r2 now live 2 s from here, past the original expiry
    time.sleep(1.0)
    assert b.claim("r1") is not None
    time.sleep(1.5)  # a stopped renewing (its driver hangs or its host is gone)
    assert b.claim("r1") is None and b.claim("r2") is None
    assert len(MlflowClient(tracking_uri=uri).search_registered_models()) == 2  # no leftovers


def test_a_lease_of_a_dead_process_on_this_host_is_taken_over_at_once(uri: str) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    a = Leases(uri, "s")
    a.me = type(a.me)(a.me.host, dead.pid, a.me.token)  # as if that process had claimed it
    assert a.claim("r1") is None
    b = Leases(uri, "s")
    assert b.claim("r1") is None  # its holder's PID is gone: no need to wait for the expiry
    names = [m.name for m in MlflowClient(tracking_uri=uri).search_registered_models()]
    assert names == ["lease.s.r1"]


def test_stale_leases_of_finished_runs_are_cleared(uri: str) -> None:
    """A driver killed between a run's end and its release leaves the lease; the next driver
    never claims the (finished) run, so it clears such leases: stale ones only."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = Leases(uri, "s_1")
    gone.me = type(gone.me)(gone.me.host, dead.pid, gone.me.token)
    assert gone.claim("r1") is None and gone.claim("r2") is None
    live = Leases(uri, "s_1")
    assert live.claim("r3") is None
    other_sweep = Leases(uri, "sx1")  # "_" in LIKE matches "x": not ours, left alone
    other_sweep.me = gone.me
    assert other_sweep.claim("r1") is None
    Leases(uri, "s_1").clear_stale({"r1", "r3"})
    names = sorted(m.name for m in MlflowClient(tracking_uri=uri).search_registered_models())
    assert names == ["lease.s_1.r2", "lease.s_1.r3", "lease.sx1.r1"]

"""The process pool: the worker processes that a bootstrap's resamples
(analysis.numerics.bootstrap) and the report's convention refits run in.

How many (``default_jobs``: the cores this process may run on); one pool shared by every
bootstrap inside a block (``worker_pool``) or, without one, a pool per bootstrap
(``_new_pool``); a call in a worker while the caller goes on (``in_worker``). The workers are
forked from a fork server that has imported the fits once (``POOL_PRELOAD``), and each ends
with the process that made the pool (``_exit_with``). Functions go to a worker pickled by
their module path: a function run there must be importable from where it is defined.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


def default_jobs() -> int:
    """Processes a bootstrap uses by default: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


_POOL: tuple[int, ProcessPoolExecutor] | None = None
"""The pool of ``worker_pool`` while its block runs: (processes, executor)."""


POOL_PRELOAD = ("analysis.fits.table", "analysis.checks.conventions")
"""What the fork server imports once for all workers: every fit, and the refits under other
conventions that the report runs in a worker. Not analysis.analyze, which adds the checks,
scipy.stats and more (1.65 s of CPU against 0.95 s here), none of which a worker runs: the
workers are ready that much sooner (issue 21)."""


def _new_pool(n_jobs: int) -> ProcessPoolExecutor:
    # A fork server, not fork and not spawn. Not fork: the caller may have threads (the sweep
    # driver reports in-process, beside Ray's and MLflow's; BLAS has its own), and a fork of a
    # process with threads can hang. Not spawn: a spawned worker imports numpy, scipy and the
    # fits anew, ~0.8 s of CPU each (issue 21). The fork server starts clean, imports them
    # once and forks every worker from itself.
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(POOL_PRELOAD))
    else:  # Windows
        ctx = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(max_workers=n_jobs, mp_context=ctx, initializer=_exit_with,
                               initargs=(os.getpid(),))


def _start_workers(pool: ProcessPoolExecutor, n_jobs: int) -> None:
    """Start the pool's ``n_jobs`` workers (each submit of a pool that has no idle worker
    starts one). Each start waits until the fork server has imported POOL_PRELOAD."""
    for _ in range(n_jobs):
        try:
            pool.submit(int)
        except RuntimeError:  # shut down (the caller was interrupted) or broken: the caller's
            return  # own submits say so, in its thread, where it can be handled


def _exit_with(parent: int) -> None:
    """A worker's initializer: end the worker when ``parent`` (the process that made the
    pool) ends, even by SIGKILL (the OOM killer, kill -9), which nothing passes on. Left
    alone, a worker waits for work forever, and keeps the fork server alive with it
    (tests/test_faults.py kills a sweep's driver while its report runs). Linux >= 5.3 has a
    descriptor that becomes readable when a process ends; elsewhere workers are not watched."""
    try:
        fd = os.pidfd_open(parent)
    except ProcessLookupError:  # the parent is gone already
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd here
        return

    def watch() -> None:
        select.select([fd], [], [])
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


@contextmanager
def worker_pool(n_jobs: int) -> Iterator[None]:
    """One pool of ``n_jobs`` worker processes for every bootstrap run inside the block.

    Its workers start when the block is entered and import nothing more (the fork server has
    them imported: ``_new_pool``); a report bootstraps 7 fits plus the convention refits, and
    enters the block before its first fit, so the workers start beside its first fits, which
    do not use them. With ``n_jobs`` 1 nothing is started.
    """
    global _POOL
    if n_jobs <= 1 or _POOL is not None:
        yield
        return
    with _new_pool(n_jobs) as pool:
        # The workers start from a thread: a start waits for the fork server's imports (~1 s
        # of CPU, on another core), and the caller has its own work meanwhile (its full-data
        # fits); started here, the report waited ~1 s for them (issue 21). A bootstrap that
        # needs the workers before they are up waits for them in its submit (the pool's lock).
        starter = threading.Thread(target=_start_workers, args=(pool, n_jobs),
                                   name="pool-start", daemon=True)
        starter.start()
        _POOL = (n_jobs, pool)
        try:
            yield
        finally:
            _POOL = None
            starter.join()  # before the pool shuts down: no submit after its shutdown


def in_worker(fn: Callable[..., T], *args: object) -> Future[T]:
    """``fn(*args)`` in a worker of the pool of ``worker_pool``, while the caller goes on;
    without a pool (``n_jobs`` 1), here and now. Its Future either way (``fn`` and ``args``
    must be picklable)."""
    if _POOL is not None:
        return _POOL[1].submit(fn, *args)
    done: Future[T] = Future()
    done.set_result(fn(*args))
    return done

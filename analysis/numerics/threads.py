"""Keep BLAS single-threaded while fitting.

Why: SciPy's L-BFGS-B and least-squares solvers call BLAS/LAPACK on matrices of a few rows.
OpenBLAS starts its thread pool for these calls; on a busy 2-core machine the threads spin
and wait, and we measured 20 Approach 3 runs on the Epoch data take 2.8 s of CPU with the
default pool against 0.1 s with one thread (same iterations, same result). The fits have no
large matrix anywhere, so one BLAS thread is never slower. threadpoolctl sets the limit for
the duration of a block only, leaving the caller's settings as they were; where it is not
installed the fits run unchanged (and slower on a loaded machine).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # optional: only speed depends on it
    threadpool_limits = None

_depth = 0


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Limit BLAS to one thread inside the block (re-entrant; nested blocks cost nothing)."""
    global _depth
    if _depth or threadpool_limits is None:
        yield
        return
    _depth += 1
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            yield
    finally:
        _depth -= 1

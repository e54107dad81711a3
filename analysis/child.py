"""`python -m analysis.child PARENT_PID MODULE [ARGS...]`: run MODULE as `python -m MODULE
ARGS...` would, but die with the process PARENT_PID.

Why: a report runs `python -m pipeline.sample` alongside its fits. When the report's process
is killed outright (SIGKILL, the OOM killer: no cleanup of ours runs), its samples must not
live on. On Linux the kernel kills this process when its parent dies (prctl
PR_SET_PDEATHSIG); everywhere, a daemon thread also exits it once PARENT_PID is no longer its
parent. Nothing here imports MODULE's dependencies: they load in this child only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import runpy
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
POLL_S = 0.5


def _exit_when_orphaned(parent: int) -> None:
    with contextlib.suppress(OSError, AttributeError):  # Linux only: elsewhere the thread
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(POLL_S)
        os._exit(137)

    if os.getppid() != parent:  # the parent died before we got here
        os._exit(137)
    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: python -m analysis.child PARENT_PID MODULE [ARGS...]")
    parent, module = int(sys.argv[1]), sys.argv[2]
    _exit_when_orphaned(parent)
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

"""A real `mlflow server` for tests: on a free loopback port, stopped (or killed) by its PID.

Shared by the UI tests (read back through the REST API) and the fault tests (the server
killed and restarted in the middle of a sweep, on the same port and the same store).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """`mlflow server` with a sqlite backend and proxied artifacts, one worker."""

    def __init__(self, backend: Path, artifacts: Path, log: Path) -> None:
        self.backend, self.artifacts, self.log = backend, artifacts, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120.0) -> None:
        """Start it and wait until /health answers."""
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        env.pop("MLFLOW_TRACKING_URI", None)
        exe = Path(sys.executable).parent / "mlflow"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(exe), "server", "--host", "127.0.0.1", "--port", str(self.port),
                 "--workers", "1", "--backend-store-uri", f"sqlite:///{self.backend}",
                 "--artifacts-destination", str(self.artifacts)],
                cwd=self.log.parent, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited:\n{self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"mlflow server did not answer in {timeout:.0f} s")
            time.sleep(0.5)

    def kill(self) -> None:
        """SIGKILL the server's process group, as a crash or an OOM kill would end it."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

"""A sweep's time estimate, measured as its dry run's (pipeline.estimate.plan.estimate_plan)
in a child process, so that the plan the sweep prints, and the time left of its progress
lines, come from the same calibration.

What it costs, and why a child (sweeps/quickstart.yaml, a 2-core AMD EPYC shared with other
jobs, load 4-6, 2026-12-07): importing what the calibration needs takes 7-9 s of wall (torch
and the model 3.7-4.9 s, torch._dynamo, which the first AdamW imports, 3-4 s) and timing the
steps 1.2-1.9 s; ~6 s of CPU in all. In the driver that was 6-10 s more before the first run.
The driver imports neither (pipeline.driver.runner.run_trial), and meanwhile spends 5-6 s
importing MLflow and checking its store (more when it creates it). So the child is started as
soon as the plan is known and imports while the driver does that; it times the steps only once
the driver asks, just before the plan is printed, while the driver waits (the dry run's
calibration also runs on an otherwise quiet process). The driver waited 4.9 s for it in a
quickstart at load 10-19, 2.9-4.0 s after an 8 s head start at load 4. A CPU sweep's driver
stays without torch for the whole sweep, and the models (on a GPU, their memory) the
calibration built go with the child before the first run starts.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
import weakref
from dataclasses import replace
from pathlib import Path

from pipeline.estimate.plan import PlanEstimate, estimate_plan
from pipeline.vocab.spec import RunSpec


class Timing:
    """The plan's times, measured by a child process started now (times assumed from a
    device's peak x MFU need no child: computed at once, in this process)."""

    def __init__(self, specs: list[RunSpec], est: PlanEstimate) -> None:
        self.specs, self.est = specs, est
        self.proc: subprocess.Popen | None = None
        if est.target.measured:
            root = str(Path(__file__).resolve().parents[2])
            path = os.environ.get("PYTHONPATH")
            env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
            self.proc = subprocess.Popen([sys.executable, "-m", __name__], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE)
            # A driver that stops before it asks (a refused store, bad data) ends it.
            weakref.finalize(self, _stop, self.proc)

    def result(self) -> PlanEstimate:
        """The estimate with each run's time (as the dry run's); without times, said in its
        `how`, if the child failed."""
        if self.proc is None:
            return estimate_plan(self.specs, self.est.target, measure=True)
        try:
            out, err = self.proc.communicate(pickle.dumps((self.specs, self.est.target)))
        finally:
            _stop(self.proc)
        if self.proc.returncode == 0:
            with contextlib.suppress(Exception):
                return pickle.loads(out)
        why = (err.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        return replace(self.est, seconds=None,
                       how=f"no time estimate: its calibration failed ({why[:200]})")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()


def _child() -> None:
    """Import what the calibration needs, then wait for the plan on stdin; its estimate
    goes to stdout (pickled: anything printed goes to stderr)."""
    out, sys.stdout = sys.stdout.buffer, sys.stderr
    import pipeline.estimate.calibration  # noqa: F401 - torch, the model, the trainer

    with contextlib.suppress(ImportError):
        import torch._dynamo  # noqa: F401 - what the first AdamW would import, timed here
    specs, target = pickle.load(sys.stdin.buffer)
    out.write(pickle.dumps(estimate_plan(specs, target, measure=True)))
    out.flush()


if __name__ == "__main__":
    _child()

"""Whether one run of a sweep fits where it would train, checked before Ray is asked for it.

Ray leaves a task that no node can hold pending for ever: `resources.num_cpus: 64` on a
2-core machine planned, passed the dry run, started Ray and then waited without end (its
autoscaler says "No available node types can fulfill resource request {'CPU': 64.0}" after
a minute, on the driver's log only). So a run that cannot fit is refused with the numbers:

  * a local Ray (no --address): against this machine, before Ray starts and in the dry run:
    its CPUs as the local Ray gets them (--cpus, else os.cpu_count(): pipeline.driver.runner
    .init_ray) and its GPUs as torch counts them (CUDA_VISIBLE_DEVICES applied);
  * a cluster (--address): against each live node's resources (ray.nodes()), once the driver
    has connected and before any task is submitted: a run's task (or each of its workers)
    must fit on one node, whatever the cluster's total.

The dry run checks what it plans for: this machine, except a GPU sweep planned where there
is no GPU (it is timed for an assumed H100, pipeline.estimate.device.target_for) and a dry run
given --address (the cluster's nodes are checked at launch).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.config import ResourcesSection

_EPS = 1e-9  # fractional GPUs (0.0625 = 1/16) compare exactly enough at this tolerance
_HINT = ("lower it in the sweep file, or run the sweep where a node is that large "
         "(--address: docs/cluster.md)")
_CLUSTER_HINT = "lower it in the sweep file, or add a node that large to the cluster"


def _count(n: float, what: str) -> str:
    """ "2 CPUs", "1 CPU", "0.5 GPU"."""
    return f"{n:g} {what}" if n == 1 or 0 < n < 1 else f"{n:g} {what}s"


def local_cpus(cpus: int | None) -> int:
    """CPUs a local Ray is started with (pipeline.driver.runner.init_ray): --cpus, else every
    CPU os.cpu_count() sees."""
    return cpus or os.cpu_count() or 1


def local_gpus() -> int:
    """CUDA devices this process sees (CUDA_VISIBLE_DEVICES applied); imports torch, so it
    is asked only for a sweep whose runs take a GPU."""
    import torch

    return torch.cuda.device_count()


def local_problem(res: ResourcesSection, cpus: int | None, *, address: str | None,
                  dry_run: bool) -> str | None:
    """Why one run cannot fit the local Ray this sweep would start (None if it can, or if the
    runs go to a cluster); see the module doc for what a dry run checks."""
    if address:
        return None  # a cluster: node_problem, once connected
    gpus = local_gpus() if res.num_gpus > 0 else 0
    if dry_run and res.num_gpus > 0 and gpus == 0:
        return None  # a GPU sweep planned here for a GPU machine elsewhere
    have_cpus = local_cpus(cpus)
    where = (f"the local Ray has {_count(have_cpus, 'CPU')} (--cpus {cpus})" if cpus
             else f"this machine has {_count(have_cpus, 'CPU')}")
    unit = "per run" if res.workers_per_run == 1 else "per worker"
    if res.num_cpus > have_cpus:
        return f"resources.num_cpus: {res.num_cpus} {unit}, {where}; {_HINT}"
    if res.num_gpus > gpus + _EPS:
        return (f"resources.num_gpus: {res.num_gpus:g} {unit}, this machine has "
                f"{_count(gpus, 'GPU')} (torch.cuda.device_count(), CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')!r}); {_HINT}")
    return workers_problem(res, {"CPU": have_cpus, "GPU": gpus})


def node_problem(res: ResourcesSection, nodes: Sequence[Mapping[str, Any]]) -> str | None:
    """Why no live node of a Ray cluster (ray.nodes()) can hold one run's task, or one of its
    workers (None if one can): CPUs and GPUs must be on the same node."""
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    need_cpu, need_gpu = res.num_cpus, res.num_gpus
    if any(r.get("CPU", 0) + _EPS >= need_cpu and r.get("GPU", 0) + _EPS >= need_gpu
           for r in alive):
        return None
    unit = "per run" if res.workers_per_run == 1 else "per worker"
    most_cpu = max((r.get("CPU", 0) for r in alive), default=0)
    most_gpu = max((r.get("GPU", 0) for r in alive), default=0)
    nodes_text = f"{len(alive)} live node(s)"
    if need_cpu > most_cpu + _EPS:
        return (f"resources.num_cpus: {need_cpu} {unit}, the cluster's largest node has "
                f"{_count(most_cpu, 'CPU')} ({nodes_text}); {_CLUSTER_HINT}")
    if need_gpu > most_gpu + _EPS:
        return (f"resources.num_gpus: {need_gpu:g} {unit}, the cluster's largest node has "
                f"{_count(most_gpu, 'GPU')} ({nodes_text}); {_CLUSTER_HINT}")
    shapes = ", ".join(f"{r.get('CPU', 0):g} CPU/{r.get('GPU', 0):g} GPU" for r in alive[:8])
    return (f"resources: {_count(need_cpu, 'CPU')} and {_count(need_gpu, 'GPU')} {unit}; no "
            f"node of the cluster has both ({nodes_text}: {shapes}); {_CLUSTER_HINT}")


def workers_problem(res: ResourcesSection, have: Mapping[str, float]) -> str | None:
    """Why the Ray cluster (or this machine) can never hold one run, or None: a run of W
    workers needs W x num_cpus CPUs (and W x num_gpus GPUs) at once; left pending it would
    wait for ever."""
    w = res.workers_per_run
    if w == 1:  # one worker: its task is checked by local_problem / node_problem
        return None
    for what, need in (("CPU", res.cpus_per_run), ("GPU", res.num_gpus * w)):
        if need > have.get(what, 0) + _EPS:
            return (f"resources.workers_per_run = {w}: a run needs {w} workers x "
                    f"{need / w:g} {what}(s) = {need:g} at once; there are "
                    f"{have.get(what, 0):g} {what}(s) here")
    return None

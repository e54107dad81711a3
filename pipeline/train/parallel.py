"""Data-parallel runs (issue 18): one run trained by W workers of a Ray Train job, with
PyTorch DDP averaging the gradients (gloo on the CPU, NCCL on GPUs).

Why the result does not depend on W: the global batch of step s is still the pure function
of (seed, step) (pipeline.data.get_batch); worker r trains on rows [r*B/W, (r+1)*B/W) of it,
each worker's loss is the mean over its rows, and DDP averages the W gradients, which for
equal slices is the gradient of the global batch's mean loss. Clipping, AdamW and the
schedule then see the same gradient on every worker, so the weights stay identical (DDP
broadcasts rank 0's initial weights, and every rank seeds the same way anyway). What differs
is floating-point summation order: the final loss agrees to 7.8e-8 relative on a tiny CPU
run (tests/test_parallel.py); AdamW can grow it over a longer run (docs/cluster.md, 6b).
The Ray Train job that runs the workers is pipeline.trial.run_data_parallel.

One MLflow child run per run, written by rank 0 (pipeline.trial.execute_trial); the other
ranks train with a NullTracker. Checkpoints are the run's own (pipeline.checkpoint), written by
rank 0 into the run's folder and read by every rank on resume, so a W-worker run resumes,
and is retried after a lost worker, exactly as a single-worker run: Ray Train's own
checkpoint API would add a second copy of the same state without changing what is restored.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class World:
    """This process's place in the run's workers."""

    rank: int = 0
    size: int = 1

    @property
    def writes(self) -> bool:
        """Rank 0 records metrics and writes checkpoints; the others only train."""
        return self.rank == 0


SINGLE = World()


def current_world() -> World:
    """The torch.distributed process group this process is in (Ray Train set it up), or a
    single worker."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size())
    return SINGLE


def wrap(model: torch.nn.Module, world: World, device: torch.device,
         sharding: str = "ddp") -> torch.nn.Module:
    """The module the training step calls: DDP over `model` with several workers (its
    gradients averaged across them), `model` itself with one. With sharding "fsdp", `model`
    is sharded in place (FSDP2's fully_shard: each block, then the rest) and returned: the
    optimizer must be made after this, over the sharded parameters."""
    if world.size == 1:
        return model
    if sharding == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)  # embeddings, final norm and (tied) head: the root group
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def training_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                   sharding: str) -> tuple[dict, dict]:
    """(model, optimizer) state as a checkpoint holds it. FSDP's shards are gathered into the
    full tensors on the CPU (a collective: every rank calls it; rank 0 writes), so the file
    has the layout of an unsharded run's, keyed by parameter name."""
    if sharding != "fsdp":
        return model.state_dict(), optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(model, optimizer,
                          options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_training_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                        state: dict, sharding: str) -> None:
    """The inverse of training_state: every rank loads the full state it read from the file
    and keeps its shards (FSDP), or loads it whole."""
    saved = state.get("sharding", "ddp")
    if (saved == "fsdp") != (sharding == "fsdp"):
        raise ValueError(f"checkpoint of step {state.get('step')} was written with sharding "
                         f"{saved!r}; this run uses {sharding!r}: resume it with the sharding "
                         "it was written with")
    if sharding != "fsdp":
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"],
                   options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def local_rows(x: torch.Tensor, y: torch.Tensor,
               world: World) -> tuple[torch.Tensor, torch.Tensor]:
    """This worker's slice of the global batch (rows [r*B/W, (r+1)*B/W))."""
    if world.size == 1:
        return x, y
    part = len(x) // world.size
    rows = slice(world.rank * part, (world.rank + 1) * part)
    return x[rows], y[rows]


def mean_over_workers(loss: torch.Tensor, world: World) -> torch.Tensor:
    """The global batch's mean loss from each worker's mean (equal slices), on every worker:
    the logged loss, and the divergence check, agree across ranks."""
    if world.size == 1:
        return loss
    import torch.distributed as dist

    total = loss.detach().clone()
    dist.all_reduce(total)
    return total / world.size


def peer_lost(error: BaseException) -> bool:
    """A collective that failed because another worker went away (its process or node died):
    an interruption of the run, not an outcome of it. torch raises DistError subclasses for
    most backend failures; gloo's lost TCP pair is a plain RuntimeError naming its source."""
    import torch.distributed as dist

    text = str(error)
    return isinstance(error, dist.DistError) or "/gloo/transport/" in text or "NCCL" in text

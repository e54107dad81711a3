"""Data-parallel runs (issue 18): one run trained by W workers of a Ray Train job, with
PyTorch DDP averaging the gradients (gloo on the CPU, NCCL on GPUs).

Why the result does not depend on W: the global batch of step s is still the pure function
of (seed, step) (pipeline.data.get_batch); worker r trains on rows [r*B/W, (r+1)*B/W) of it,
each worker's loss is the mean over its rows, and DDP averages the W gradients, which for
equal slices is the gradient of the global batch's mean loss. Clipping, AdamW and the
schedule then see the same gradient on every worker, so the weights stay identical (DDP
broadcasts rank 0's initial weights, and every rank seeds the same way anyway). What differs
is floating-point summation order: the final loss agrees to ~1e-6 relative on the CPU
(tests/test_parallel.py).

One MLflow child run per run, written by rank 0 (pipeline.trial.execute_trial); the other
ranks train with a NullTracker. Checkpoints are the run's own (pipeline.checkpoint), written by
rank 0 into the run's folder and read by every rank on resume, so a W-worker run resumes,
and is retried after a lost worker, exactly as a single-worker run: Ray Train's own
checkpoint API would add a second copy of the same state without changing what is restored.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from dataclasses import dataclass
from pathlib import Path

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


# --- the Ray Train job -----------------------------------------------------------------------

RESULT_FILE = "data_parallel_result.json"  # rank 0's trial summary, read by the coordinator
# Test hook (tests/test_parallel.py): "<run_id>:<step>:<marker file>" makes rank 1 SIGKILL
# itself after that step, once (the marker records it): a worker lost mid-run.
KILL_WORKER_ENV = "SCALING_INJECT_WORKER_KILL"


def run_data_parallel(spec, uri: str, mlflow_run_id: str, checkpoint_dir: str, data,
                      branch_dir: str | None, num_gpus: float, max_retries: int = 2) -> dict:
    """Train `spec` with spec.exec.workers Ray Train workers; returns rank 0's trial summary
    (the dict pipeline.trial.execute_trial returns). Called inside the sweep's Ray task (a
    coordinator that holds no CPU: the workers do).

    A worker lost before rank 0 recorded the outcome (a killed process, a lost node: Ray Train
    then ends the whole group) is retried up to max_retries times with a new group, which
    resumes from the run's last checkpoint, as Ray retries a single-worker run's task. An
    outcome rank 0 recorded (finished, diverged, failed) is final, as for one worker."""
    import ray
    import ray.train
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    workers = spec.exec.workers
    # Tokens: a local cache pickles as its path (each worker maps it); arrays the driver put
    # in the object store (a cluster) go by reference, read zero-copy on each worker's node.
    payload = data if data.cache_path else _shipped(data, ray)  # the loop's only token variable
    folder = Path(checkpoint_dir)
    folder.mkdir(parents=True, exist_ok=True)
    result_path = folder / RESULT_FILE
    result_path.unlink(missing_ok=True)

    def loop(_config: dict) -> None:
        from pipeline.train import NullTracker, train
        from pipeline.trial import execute_trial

        tokens = _received(*payload) if isinstance(payload, tuple) else payload
        if ray.train.get_context().get_world_rank() == 0:
            out = execute_trial(spec, uri, mlflow_run_id, checkpoint_dir, data=tokens,
                                branch_dir=branch_dir, interrupted=peer_lost)
            tmp = result_path.with_suffix(f".tmp-{os.getpid()}")
            tmp.write_text(json.dumps(out))
            os.replace(tmp, result_path)
            if out["status"] == "failed":  # the other ranks wait in a collective: end them
                raise RuntimeError(f"rank 0 failed: {out.get('error', '')}")
        else:
            train(spec, NullTracker(), checkpoint_dir=checkpoint_dir, resume=True,
                  data=tokens, branch_dir=branch_dir, on_step=_kill_hook(spec))

    per_worker = {"CPU": spec.exec.threads}
    if num_gpus > 0:
        per_worker["GPU"] = num_gpus
    for attempt in range(max_retries + 1):
        trainer = TorchTrainer(
            loop,
            scaling_config=ScalingConfig(num_workers=workers, use_gpu=num_gpus > 0,
                                         resources_per_worker=per_worker),
            # A fresh name per attempt: Ray Train must not restore a group of its own; the
            # run's checkpoint folder is what every attempt resumes from.
            run_config=RunConfig(name=f"{spec.run_id}-{uuid.uuid4().hex[:8]}",
                                 storage_path=str(folder.resolve() / "ray_train"),
                                 failure_config=FailureConfig(max_failures=0)),
        )
        try:
            trainer.fit()
            break
        except Exception as e:  # noqa: BLE001 - rank 0's own record says what happened, if any
            if result_path.exists():
                break
            if attempt == max_retries:
                raise RuntimeError(f"data-parallel run {spec.run_id} ({workers} workers) lost "
                                   f"a worker {attempt + 1} time(s): {e}") from e
    return json.loads(result_path.read_text())


def _kill_hook(spec):
    """on_step of rank 1 when KILL_WORKER_ENV names this run (tests only), else None."""
    target = os.environ.get(KILL_WORKER_ENV, "")
    if target.count(":") < 2 or not target.startswith(spec.run_id + ":"):
        return None
    _, step, marker = target.split(":", 2)
    import ray.train

    if ray.train.get_context().get_world_rank() != 1 or Path(marker).exists():
        return None

    def hook(done: int) -> None:
        if done == int(step):
            Path(marker).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


_META = ("vocab_size", "fingerprint", "corpus_fingerprint", "train_bytes", "val_bytes",
         "tokenizer_config", "n_train_docs", "n_val_docs")


def _shipped(data, ray) -> tuple:
    """The tokens by reference: the arrays in the object store, the rest as it is."""
    return ({k: getattr(data, k) for k in _META}, ray.put(data.train), ray.put(data.val))


def _received(meta: dict, train_ref, val_ref):
    import ray

    from pipeline.data import TokenData

    return TokenData(train=ray.get(train_ref), val=ray.get(val_ref), **meta)

"""One training run: train(spec, tracker) -> RunResult.

Imports neither Ray nor MLflow: the tracker object is handed in (pipeline.tracking has the
MLflow one; NullTracker here records nothing). The recipe:
  1. data: tokens from pipeline.data (memmap), batches a pure function of (seed, step)
  2. model: pipeline.model.build_model (Transformer, or VisionTransformer for vit) from the shape
  3. AdamW, decoupled weight decay on matrices only; global-norm gradient clipping
  4. schedule: linear warmup, then cosine to min_lr_ratio x peak over exactly the planned
     steps (Chinchilla: the cosine length matches D), or warmup-stable-decay
  5. validation loss (nats/token) and bits/byte on fixed batches every eval_interval steps
  6. checkpoints every checkpoint_interval steps and at the end; resume continues from one
  7. a non-finite loss ends the run with status "diverged" at the step it happened

CLI (pipeline/train/cli.py): python -m pipeline.train --family gpt --n-layer 2 --d-model 64 --tokens 2e6
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from pipeline import checkpoint
from pipeline.data import TokenData, load_data  # load_data: re-exported
from pipeline.data.batches import unique_tokens_seen
from pipeline.data.subset import train_subset
from pipeline.ledger import ui
from pipeline.model import build_model
from pipeline.train import objective, parallel
from pipeline.train.parallel import SINGLE, World
from pipeline.train.passes import accuracy, autocast_for, evaluate, micro_batches, sample_tags
from pipeline.vision.data import images_seen
from pipeline.vocab import flops, keys
from pipeline.vocab.families import model_vocab_size
from pipeline.vocab.recipe import lr_at, trained_precision
from pipeline.vocab.spec import RunSpec, branch_folder


class Tracker(Protocol):
    """What the trainer needs from a tracker (pipeline.tracking.MLflowTracker implements it)."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...
    def log_summary(self, metrics: dict[str, float]) -> None: ...
    def set_tags(self, tags: dict[str, str]) -> None: ...
    def log_dataset(self, record: dict[str, str]) -> None: ...
    def flush(self) -> None: ...


class NullTracker:
    """Keeps metrics in memory; for tests and for calling train() without MLflow."""

    def __init__(self) -> None:
        self.metrics: list[tuple[int, dict[str, float]]] = []
        self.summary: dict[str, float] = {}
        self.tags: dict[str, str] = {}
        self.datasets: list[dict[str, str]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.metrics.append((step, dict(metrics)))

    def log_summary(self, metrics: dict[str, float]) -> None:
        self.summary.update(metrics)

    def set_tags(self, tags: dict[str, str]) -> None:
        self.tags.update(tags)

    def log_dataset(self, record: dict[str, str]) -> None:
        self.datasets.append(dict(record))

    def flush(self) -> None:
        pass  # nothing is buffered


class Stopped(KeyboardInterrupt):
    """The run stopped on request (train's stop_requested) after `step`, with a checkpoint of
    that step when `checkpointed`. A KeyboardInterrupt: whoever ran it treats it as Ctrl-C
    (the run is marked killed and resumes next time)."""

    def __init__(self, step: int, *, checkpointed: bool) -> None:
        super().__init__(f"stopped after step {step}" + (", checkpointed" if checkpointed
                                                         else ""))
        self.step, self.checkpointed = step, checkpointed


@dataclass
class RunResult:
    run_id: str
    status: str  # keys.STATUS_FINISHED or keys.STATUS_DIVERGED
    steps: int  # optimizer steps completed
    tokens: int  # D actually consumed
    params_total: int
    params_non_embedding: int
    flops: dict[str, float]  # training FLOPs under each convention of pipeline.vocab.flops
    final_val_loss: float = math.nan
    final_val_bpb: float = math.nan
    final_train_loss: float = math.nan
    wall_s: float = 0.0
    tokens_per_s: float = 0.0
    diverged_step: int | None = None
    resumed_from: int | None = None  # step of the checkpoint this attempt started from
    curve: dict[str, list[float]] = field(default_factory=dict)  # step, tokens, val_loss
    train_tokens: int = 0  # unique tokens available: the run's share of the train split
    unique_tokens: int = 0  # distinct train-split tokens the batches covered
    final_val_accuracy: float = math.nan  # classify (vit): share of val images right


def pick_device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def make_optimizer(model: torch.nn.Module, spec: RunSpec, device: torch.device) -> torch.optim.AdamW:
    # Decay matrices (linear weights, embeddings); never norms or biases (AdamW, Loshchilov 2019).
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": spec.train.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    t = spec.train
    # One fused kernel for all parameter updates (CPU and CUDA; CPU needs torch >= 2.4):
    # +8% per step at 20k parameters on CPU, neutral from 500k (BENCHMARKS.md).
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), fused=True)


def _branch_state(branch_dir: str | Path, spec: RunSpec) -> dict | None:
    """The trunk's state a WSD branch starts from, checked; None (with a warning) if absent.

    Absent (the trunk's checkpoints were deleted, or it ran elsewhere): the branch trains
    from step 0, which gives the same result bit for bit, only at full cost.
    """
    state = checkpoint.load_latest(branch_dir, map_location="cpu")
    if state is None:
        warnings.warn(f"run {spec.run_id}: no trunk state in {branch_dir} (trunk "
                      f"{spec.exec.branch_from}); training from step 0 instead (same result, "
                      "full cost)", stacklevel=2)
        return None
    if int(state["step"]) != spec.exec.branch_step:
        raise ValueError(f"run {spec.run_id}: the trunk state in {branch_dir} is at step "
                         f"{state['step']}, the branch starts at {spec.exec.branch_step}")
    return state


@dataclass
class _Run:
    """One run's training state, and the things done with it along the way: record the
    training loss or an evaluation (curve + tracker) and save a checkpoint."""

    spec: RunSpec
    tracker: Tracker
    model: torch.nn.Module
    optimizer: torch.optim.AdamW
    device: torch.device
    evals: list
    bytes_per_token: float
    checkpoint_dir: str | Path | None
    curve: dict[str, list[float]] = field(
        default_factory=lambda: {"step": [], "tokens": [], "val_loss": []})
    last_train_loss: float = math.nan
    last_accuracy: float = math.nan
    """classify: the validation accuracy of the latest evaluation."""
    wall_before: float = 0.0
    """Wall seconds of the attempts before this one (from the checkpoint resumed)."""
    data_fingerprint: str = ""
    """The tokens' fingerprint, saved in every checkpoint and checked on resume."""
    world: World = SINGLE
    """This worker's rank among the run's data-parallel workers (rank 0 writes)."""
    forward: torch.nn.Module | None = None
    """What a training step calls: DDP over model with several workers, else model."""

    @property
    def tokens_per_step(self) -> int:
        return self.spec.train.batch_size * self.spec.model.seq_len

    def save_checkpoint(self, step: int, wall: float, folder: str | Path | None = None) -> None:
        folder = self.checkpoint_dir if folder is None else folder
        if folder is None:
            return
        sharding = self.spec.exec.sharding
        model_state, optimizer_state = parallel.training_state(self.model, self.optimizer,
                                                               sharding)
        if not self.world.writes:  # rank 0 writes (after every rank took part in a gather)
            return
        # Metrics up to `step` reach the store before the checkpoint of `step` exists: a run
        # resumed from it logs only later steps, so no point is lost between the two.
        self.tracker.flush()
        checkpoint.save(folder, step, {
            "model": model_state, "optimizer": optimizer_state, "sharding": sharding,
            "rng": torch.get_rng_state(), "step": step, "curve": self.curve, "wall_s": wall,
            "train_loss": self.last_train_loss, "run_id": self.spec.run_id,
            "data_fingerprint": self.data_fingerprint,
        })

    def stop_at(self, step: int, wall: float, window: torch.Tensor) -> None:
        """A stop request after `step`: checkpoint it (unless a loss of the current log window
        is not finite: a diverging model is never saved) and raise Stopped."""
        if bool(torch.isfinite(window).all()):
            self.save_checkpoint(step, wall)
            raise Stopped(step, checkpointed=self.checkpoint_dir is not None)
        raise Stopped(step, checkpointed=False)

    def record_train(self, step: int, lr: float, tokens_per_s: float) -> None:
        tokens = step * self.tokens_per_step
        self.tracker.log_metrics({
            keys.TRAIN_LOSS: self.last_train_loss, keys.TRAIN_LR: lr, keys.TOKENS: tokens,
            keys.THROUGHPUT: tokens_per_s,
        }, step)
        self.tracker.log_metrics({keys.TRAIN_LOSS_BY_TOKENS: self.last_train_loss}, tokens)

    def record_eval(self, step: int) -> float:
        val = evaluate(self.model, self.evals, self.spec, self.device)
        self.curve["step"].append(step)
        self.curve["tokens"].append(step * self.tokens_per_step)
        self.curve["val_loss"].append(val)
        tokens = step * self.tokens_per_step
        metrics = {keys.VAL_LOSS: val, keys.TOKENS: tokens}
        if objective.is_classify(self.spec):
            self.last_accuracy = accuracy(self.model, self.evals, self.spec, self.device)
            metrics[keys.VAL_ACCURACY] = self.last_accuracy
        elif not objective.is_masked(self.spec):  # bits per byte of text predicted in full
            metrics[keys.VAL_BPB] = val / math.log(2) * (1 / self.bytes_per_token)
        self.tracker.log_metrics(metrics, step)
        self.tracker.log_metrics({keys.VAL_LOSS_BY_TOKENS: val}, tokens)
        return val

    def _check_identity(self, state: dict, folder: str | Path | None,
                        run_id: str | None) -> None:
        """A checkpoint of another run (run_id given), or one trained on other tokens, is
        refused: resuming from it would pass its training off as this run's. Checkpoints
        written before a field existed lack it and are not checked on it."""
        found = state.get("run_id")
        if run_id is not None and found is not None and found != run_id:
            raise checkpoint.CheckpointError(
                f"the checkpoint in {folder} is of run {found}, not {run_id}: refusing to "
                "resume from it (move it away, or give the run its own --checkpoint-dir)")
        tokens = state.get("data_fingerprint")
        if tokens and self.data_fingerprint and tokens != self.data_fingerprint:
            raise checkpoint.CheckpointError(
                f"the checkpoint in {folder} was trained on tokens {tokens[:12]}, this run's "
                f"are {self.data_fingerprint[:12]}: refusing to resume from it")

    def restore(self, resume: bool, branch_dir: str | Path | None) -> int | None:
        """Load the newest checkpoint (resume), else a WSD branch's trunk state; returns its
        step (None: nothing to load) and sets curve, train loss and wall_before."""
        state = None
        if resume and self.checkpoint_dir is not None:
            # Loaded on the CPU: torch.set_rng_state needs a CPU tensor (a CUDA map_location
            # broke resuming on GPUs); load_state_dict moves model and optimizer state over.
            state = checkpoint.load_latest(self.checkpoint_dir, map_location="cpu")
        if state is not None:
            self._check_identity(state, self.checkpoint_dir, self.spec.run_id)
        if state is None and branch_dir is not None:
            state = _branch_state(branch_dir, self.spec)  # a WSD branch starts from its trunk
            if state is not None:
                self._check_identity(state, branch_dir, None)
        if state is None:
            return None
        parallel.load_training_state(self.model, self.optimizer, state, self.spec.exec.sharding)
        torch.set_rng_state(state["rng"])
        self.curve = {k: list(v) for k, v in state["curve"].items()}
        self.last_train_loss = float(state.get("train_loss", math.nan))
        self.wall_before = float(state["wall_s"])
        return int(state["step"])


def _checked_data(spec: RunSpec, data: TokenData | None, tracker: Tracker) -> TokenData:
    """The run's tokens (loaded if not handed in), checked against the model's vocabulary,
    their fingerprints tagged (provenance: exactly which tokens this run saw), the train
    split cut to the run's spec.data.train_fraction (pipeline.data.subset: the cache holds
    the whole split, shared by every fraction; validation is never cut)."""
    data = data or load_data(spec.data)
    expected = model_vocab_size(spec.model.family, data.vocab_size)
    if expected != spec.model.vocab_size:
        raise ValueError(
            f"model vocab_size={spec.model.vocab_size} does not match the tokenizer's "
            f"{data.vocab_size} ({spec.data.tokenizer}) for family {spec.model.family!r} "
            f"(expected {expected})"
        )
    m = spec.model
    if m.is_image and (data.image_size, data.channels) != (m.image_size, m.channels):
        raise ValueError(f"model expects {m.image_size}x{m.image_size} images of {m.channels} "
                         f"channel(s), the data ({spec.data.corpus}) has "
                         f"{data.image_size}x{data.image_size} of {data.channels}")
    tracker.set_tags({keys.TAG_DATA_FINGERPRINT: data.fingerprint,
                      keys.TAG_CORPUS_FINGERPRINT: data.corpus_fingerprint})
    # From here on the split is the run's share: its batches, data/train_tokens (U),
    # final/epochs = D / U and final/unique_tokens all count it.
    data = train_subset(data, spec.data.train_fraction)
    tracker.log_dataset(ui.dataset(spec, data.fingerprint, len(data.train), len(data.val),
                                   data.train_bytes))
    return data


def _optimizer_step(run: _Run, data: TokenData, step: int) -> tuple[torch.Tensor, float]:
    """One optimizer step at the schedule's LR; returns the (device) loss and the LR."""
    spec, t, optimizer = run.spec, run.spec.train, run.optimizer
    model = run.model if run.forward is None else run.forward  # a compiled module has no truth value
    lr = lr_at(step, spec)
    for group in optimizer.param_groups:
        group["lr"] = lr
    x, y = objective.train_batch(spec, data, step, run.device)
    targets = objective.target_count(y) if objective.is_masked(spec) else None
    x, y = parallel.local_rows(x, y, run.world)  # this worker's rows of the global batch
    passes = micro_batches(x, y, spec, global_targets=targets, workers=run.world.size)
    if len(passes) == 1 and passes[0][2] == 1.0:
        with autocast_for(spec, run.device):
            _, loss = model(x, y)
        loss.backward()
    else:  # gradient accumulation: the batch's mean loss, a pass at a time
        loss = torch.zeros((), device=run.device)
        for xs, ys, share in passes:
            with autocast_for(spec, run.device):
                _, part = model(xs, ys)
            (part * share).backward()
            loss += part.detach().float() * share
    if t.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip, foreach=True)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return parallel.mean_over_workers(loss, run.world), lr


def _result(run: _Run, steps_done: int, wall: float, resumed_from: int | None) -> RunResult:
    """The run's counts after steps_done steps (losses of the final eval are added after)."""
    cfg, tokens = run.spec.model, steps_done * run.tokens_per_step
    return RunResult(
        run_id=run.spec.run_id, status=keys.STATUS_FINISHED, steps=steps_done, tokens=tokens,
        params_total=flops.params_total(cfg), params_non_embedding=flops.params_non_embedding(cfg),
        flops={c: flops.flops_per_token(cfg, c) * tokens for c in flops.CONVENTIONS},
        final_train_loss=run.last_train_loss, wall_s=wall, resumed_from=resumed_from,
        # Over the attempt chain (as wall_s): a resume from the final checkpoint trains 0 steps.
        tokens_per_s=tokens / max(wall, 1e-9),
    )


def _log_summary(tracker: Tracker, result: RunResult, positions: int = 0) -> None:
    """The run's final numbers as MLflow summary metrics (non-finite losses left out);
    ``positions``: vit's tokens per image, to log the patch tokens its images make."""
    summary = {
        keys.FINAL_TOKENS: result.tokens, keys.FINAL_STEPS: result.steps,
        keys.FINAL_WALL_S: result.wall_s, keys.FINAL_TOKENS_PER_S: result.tokens_per_s,
        keys.TRAIN_SPLIT_TOKENS: result.train_tokens,
        keys.FINAL_EPOCHS: result.tokens / max(result.train_tokens, 1),
        keys.FINAL_UNIQUE_TOKENS: result.unique_tokens,
        keys.PARAMS_TOTAL: result.params_total,
        keys.PARAMS_NON_EMBEDDING: result.params_non_embedding,
        **{keys.flops_key(c): v for c, v in result.flops.items()},
    }
    if positions:  # vit: D counts images; its Transformer read this many tokens
        summary[keys.FINAL_PATCH_TOKENS] = result.tokens * positions
    for key, value in ((keys.FINAL_VAL_LOSS, result.final_val_loss),
                       (keys.FINAL_VAL_BPB, result.final_val_bpb),
                       (keys.FINAL_VAL_ACCURACY, result.final_val_accuracy),
                       (keys.FINAL_TRAIN_LOSS, result.final_train_loss)):
        if math.isfinite(value):
            summary[key] = value
    tracker.log_summary(summary)


def train(
    spec: RunSpec,
    tracker: Tracker | None = None,
    *,
    checkpoint_dir: str | Path | None = None,
    resume: bool = True,
    data: TokenData | None = None,
    on_step: Callable[[int], None] | None = None,
    branch_dir: str | Path | None = None,
    stop_requested: Callable[[], bool] | None = None,
) -> RunResult:
    """Train one run to spec.steps steps (or until divergence) and return its result.

    checkpoint_dir: where checkpoints go (none are written when None). With resume=True the
    newest good checkpoint there is loaded first. branch_dir (WSD reuse, a branch run): with
    no checkpoint of its own, the run starts from the trunk's state saved there at step
    spec.exec.branch_step (see branch_folder). on_step(step) is called after every
    optimizer step, once its eval and checkpoint (if due) are done (used by fault-injection
    tests and progress reporting). When stop_requested() turns true (a preemption: the sweep
    is stopping), the run saves a checkpoint of the step it has just finished and raises
    Stopped, so the next attempt goes on from there.
    """
    tracker = tracker or NullTracker()
    t, cfg = spec.train, spec.model
    torch.set_num_threads(spec.exec.threads)
    device = pick_device(spec.exec.device)
    data = _checked_data(spec, data, tracker)
    torch.manual_seed(t.seed)
    model = build_model(cfg, fp32_head=t.head_precision == "fp32").to(device)
    world = parallel.current_world()
    if t.batch_size % world.size:
        raise ValueError(f"batch_size={t.batch_size} does not split over {world.size} workers")
    forward = parallel.wrap(model, world, device, spec.exec.sharding)  # before the optimizer
    run = _Run(spec, tracker, model, make_optimizer(model, spec, device), device,
               evals=objective.validation_batches(spec, data, t.batch_size, t.eval_batches,
                                                 device),
               bytes_per_token=(math.nan if cfg.is_image else data.bytes_per_token("val")),
               checkpoint_dir=checkpoint_dir,
               data_fingerprint=data.fingerprint, world=world, forward=forward)
    tracker.set_tags({keys.TAG_PRECISION: trained_precision(t.precision, device.type)})
    tokens_per_step = run.tokens_per_step
    eval_every = t.resolved_eval_interval(spec.steps)
    log_every = max(1, spec.exec.log_interval)
    resumed_from = run.restore(resume, branch_dir)
    start_step, wall_before = resumed_from or 0, run.wall_before
    branch_steps = set(spec.exec.branch_steps)

    model.train()
    t0 = time.perf_counter()
    # Per-step losses stay on the device; one host sync per log interval (no .item() per step).
    window = torch.zeros(log_every, device=device)
    window_start = start_step
    diverged_step, step = None, start_step
    tokens_timed, t_timed = 0, time.perf_counter()
    for step in range(start_step, spec.steps):
        loss, lr = _optimizer_step(run, data, step)
        window[step - window_start] = loss.detach()
        done = step + 1
        ci = spec.exec.checkpoint_interval
        # Windows end at multiples of log_every (and at the last step), counted from step 0:
        # a resumed attempt logs train metrics at the same steps as an uninterrupted run.
        end_of_window = done % log_every == 0 or done == spec.steps
        eval_due = done % eval_every == 0 and done != spec.steps
        checkpoint_due = ci > 0 and done % ci == 0 and done != spec.steps
        if end_of_window or eval_due or checkpoint_due:
            # Also before an eval or a checkpoint: a diverged model is never evaluated or saved.
            losses = window[: done - window_start].cpu()
            bad = (~torch.isfinite(losses)).nonzero()
            if len(bad):
                diverged_step = window_start + int(bad[0])
                break
        if end_of_window:
            run.last_train_loss = float(losses.mean())
            now = time.perf_counter()
            tokens_timed += (done - window_start) * tokens_per_step
            run.record_train(done, lr, tokens_timed / max(now - t_timed, 1e-9))
            tokens_timed, t_timed = 0, now
            window_start = done
        if eval_due:
            run.record_eval(done)
        if checkpoint_due:
            run.save_checkpoint(done, wall_before + time.perf_counter() - t0)
        if done in branch_steps and checkpoint_dir is not None:
            # A trunk's state where a WSD branch's decay begins: its own folder, so the
            # rolling KEEP-newest pruning of the run's checkpoints never removes it.
            run.save_checkpoint(done, wall_before + time.perf_counter() - t0,
                                branch_folder(checkpoint_dir, done))
        if on_step is not None:  # after the step is recorded: a failure here loses nothing
            on_step(done)
        if stop_requested is not None and done < spec.steps and stop_requested():
            run.stop_at(done, wall_before + time.perf_counter() - t0,
                        window[: done - window_start])

    return _finish(run, data, wall_before + time.perf_counter() - t0, diverged_step,
                   resumed_from)


def _finish(run: _Run, data: TokenData, wall: float, diverged_step: int | None,
            resumed_from: int | None) -> RunResult:
    """The end of a run: its result, the final checkpoint and eval (unless it diverged), the
    summary metrics."""
    spec, tracker = run.spec, run.tracker
    steps_done = diverged_step if diverged_step is not None else spec.steps
    result = _result(run, steps_done, wall, resumed_from)
    if diverged_step is not None:
        result.status, result.diverged_step = keys.STATUS_DIVERGED, diverged_step
        tracker.set_tags({keys.TAG_DIVERGED_STEP: str(diverged_step)})
    else:
        # Checkpoint first: a run resumed from it evaluates once more, not a second time.
        run.save_checkpoint(spec.steps, wall)
        result.final_val_loss = run.record_eval(spec.steps)
        if not objective.is_masked(spec) and not spec.model.is_image:
            result.final_val_bpb = result.final_val_loss / math.log(2) / run.bytes_per_token
        result.final_val_accuracy = run.last_accuracy
        if run.world.writes and (tags := sample_tags(spec, run.model, data, run.device,
                                                     run.world.size)):
            tracker.set_tags(tags)
    result.curve = run.curve
    result.train_tokens = len(data.train)
    if spec.model.is_image:
        result.unique_tokens = images_seen(len(data.train), spec.train.batch_size, steps_done)
    else:
        result.unique_tokens = unique_tokens_seen(
            len(data.train), spec.train.batch_size, spec.model.seq_len, spec.train.batch_seed,
            steps_done, spec.train.sampling)
    _log_summary(tracker, result, spec.model.positions if spec.model.is_image else 0)
    return result

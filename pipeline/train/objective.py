"""The batches and loss weights of a family's objective (pipeline.vocab.families.OBJECTIVES).

causal    (x, y): windows and the same windows shifted by one token; every position a target.
masked    (inputs, targets): windows with BERT's masking (pipeline.data.masking); targets are
          the original ids at the chosen positions and IGNORE elsewhere.
classify  (images, labels): vit's images and classes (pipeline.vision.data); validation is
          the whole val split, the same images for every run.

All are pure functions of (seed, step) (training) or of the split alone (validation), so
resumed runs see the same batches and every run is scored on the same positions.

Loss weights: the model's loss is a mean over a batch's targets. A causal batch has
batch_size * seq_len of them in every pass, so a pass's share is its rows / batch; a masked
batch has a varying count, so a pass (or a validation batch) is weighted by its own count:
the weighted mean is the mean over all masked tokens, nats per masked token. A classify
validation batch is weighted by its images (the last one may be smaller): nats per image.
"""

from __future__ import annotations

import torch

from pipeline.data import TokenData, eval_batches, get_batch
from pipeline.data.batches import _to_device
from pipeline.data.masking import IGNORE, eval_rng, mask_windows, train_rng
from pipeline.vision.data import image_batch, val_batches
from pipeline.vocab.families import CLASSIFY, MASKED, Objective, get_family
from pipeline.vocab.spec import RunSpec

Batch = tuple[torch.Tensor, torch.Tensor]


def objective_of(spec: RunSpec) -> Objective:
    """The objective of the run's family (its Family in the registry)."""
    return get_family(spec.model.family).objective


def is_masked(spec: RunSpec) -> bool:
    return objective_of(spec) is MASKED


def is_classify(spec: RunSpec) -> bool:
    return objective_of(spec) is CLASSIFY


def train_batch(spec: RunSpec, data: TokenData, step: int, device: torch.device) -> Batch:
    """The global batch of optimizer step `step`."""
    t = spec.train
    if is_classify(spec):
        return image_batch(data, t.batch_size, t.batch_seed, step, device)  # type: ignore[arg-type]
    if not is_masked(spec):
        return get_batch(data.train, t.batch_size, spec.model.seq_len, t.batch_seed, step,
                         device=device, sampling=t.sampling)
    x, _ = get_batch(data.train, t.batch_size, spec.model.seq_len, t.batch_seed, step, device="cpu",
                     sampling=t.sampling)
    inputs, targets = mask_windows(x, t.mask_rate, data.vocab_size, train_rng(t.batch_seed, step))
    return _to_device(inputs, device), _to_device(targets, device)


def validation_batches(spec: RunSpec, data: TokenData, batch_size: int, n_batches: int,
                       device: torch.device) -> list[Batch]:
    """The fixed validation batches (masked the same way for every run of a masked family)."""
    T = spec.model.seq_len
    if is_classify(spec):
        return val_batches(data, batch_size, device)  # type: ignore[arg-type]
    if not is_masked(spec):
        return eval_batches(data.val, batch_size, T, n_batches, device=device)
    out, rate, mask_id = [], spec.train.mask_rate, data.vocab_size
    for i, (x, _) in enumerate(eval_batches(data.val, batch_size, T, n_batches, device="cpu")):
        # One stream per window, by its index in the whole validation set: runs that split
        # the same windows into batches of another size still mask them identically.
        rows = [mask_windows(x[j:j + 1], rate, mask_id, eval_rng(i * batch_size + j))
                for j in range(len(x))]
        inputs, targets = (torch.cat(part) for part in zip(*rows, strict=True))
        out.append((_to_device(inputs, device), _to_device(targets, device)))
    return out


def target_count(y: torch.Tensor) -> int:
    """Positions of y that carry a loss."""
    return int((y != IGNORE).sum())


def eval_weights(spec: RunSpec, batches: list[Batch]) -> list[int]:
    """Each validation batch's weight in the mean loss: its masked tokens (masked), its
    images (classify), 1 (causal: equal batches)."""
    if is_masked(spec):
        return [target_count(y) for _, y in batches]
    if is_classify(spec):
        return [len(y) for _, y in batches]
    return [1] * len(batches)

"""Training batches as a pure function of (seed, step), and the fixed evaluation batches."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipeline.data.settings import (
    DataError,
    _is_int,
)

if TYPE_CHECKING:  # torch is imported where batches are made: preparing data never needs it
    import torch


def get_batch(
    tokens: np.ndarray,
    batch_size: int,
    seq_len: int,
    seed: int,
    step: int,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Training batch (x, y), int64 (batch_size, seq_len), y = x shifted by one token.

    A pure function of (seed, step): offsets come from np.random.default_rng([seed, step]), so a
    run resumed at step k sees exactly the batches an uninterrupted run would, with no RNG state
    to checkpoint. Only the sampled windows are read from the memmap.
    """
    _check_sizes(batch_size=batch_size, seq_len=seq_len, seed=seed, step=step)
    n = len(tokens)
    if n < batch_size * seq_len + 1:
        raise DataError(
            f"train split has {n:,} tokens, fewer than one batch needs "
            f"(batch_size*seq_len+1 = {batch_size}*{seq_len}+1 = {batch_size * seq_len + 1:,})"
        )
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, n - seq_len, size=batch_size)  # last window ends at index n-1
    return _windows(tokens, starts, seq_len, device)


def eval_batches(
    tokens: np.ndarray,
    batch_size: int,
    seq_len: int,
    n_batches: int,
    device: str | torch.device = "cpu",
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A fixed list of n_batches (x, y) batches whose windows are spread evenly over the split.

    Fixed, not random per eval, so every eval of every run measures the same text and curves
    are comparable. Windows overlap when the split is shorter than all of them end to end.
    """
    _check_sizes(batch_size=batch_size, seq_len=seq_len, n_batches=n_batches)
    n = len(tokens)
    if n < seq_len + 1:
        raise DataError(
            f"validation split has {n:,} tokens, fewer than one sequence needs (seq_len+1 = {seq_len + 1})"
        )
    starts = np.linspace(0, n - seq_len - 1, num=n_batches * batch_size).round().astype(np.int64)
    return [_windows(tokens, row, seq_len, device) for row in starts.reshape(n_batches, batch_size)]


def _windows(
    tokens: np.ndarray, starts: np.ndarray, seq_len: int, device: str | torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    chunk = np.asarray(tokens[starts[:, None] + np.arange(seq_len + 1)], dtype=np.int64)  # (B, T+1)
    x = torch.from_numpy(np.ascontiguousarray(chunk[:, :-1]))
    y = torch.from_numpy(np.ascontiguousarray(chunk[:, 1:]))
    return _to_device(x, device), _to_device(y, device)


def _to_device(t: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    import torch

    if torch.device(device).type == "cuda":  # pinned + non_blocking overlaps copy and compute
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _check_sizes(**values: int) -> None:
    for name, value in values.items():
        low = 0 if name in ("seed", "step") else 1
        if not _is_int(value) or value < low:
            raise DataError(f"{name} must be an int >= {low}, got {value!r}")

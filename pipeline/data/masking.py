"""BERT's masking rule (Devlin et al. 2019, Sec. 3.1), as a pure function of (seed, step).

Of a window's tokens, a share `rate` (BERT: 15%) is chosen for prediction; of those, 80% are
replaced by [MASK], 10% by a random token and 10% kept. The loss is the cross-entropy at the
chosen positions only (targets elsewhere are IGNORE), so it is in nats per masked token.

Why a pure function: a run resumed at step k masks its batches exactly as an uninterrupted
run would, with no RNG state in the checkpoint (as pipeline.data.batches draws windows). The
validation windows are masked with a stream that depends on the window's index only, not on
the run's seed or batch size: every run of every sweep with the same rate is scored on the
same masked positions, so their losses compare.

Each window has at least one chosen position (the one with the smallest draw, when none was
drawn below the rate): a window without one would have no loss. At BERT's 15% this changes a
window of T tokens with probability 0.85**T (1e-9 at T = 128).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported where tensors are made
    import torch

IGNORE = -100
"""Target of the positions not chosen (torch's cross_entropy ignore_index default)."""
MASK_SHARE, RANDOM_SHARE = 0.8, 0.1
"""Of the chosen positions: replaced by [MASK], by a random token; the rest are kept."""
DEFAULT_RATE = 0.15
"""BERT's share of positions chosen for prediction."""
_TRAIN_STREAM, _EVAL_STREAM = 0x4D4C4D, 0x4D4C4D + 1  # "MLM": streams apart from the windows'


def check_rate(rate: float) -> None:
    """ValueError naming the value unless 0 < rate < 1."""
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0.0 < rate < 1.0:
        raise ValueError(f"mask_rate must be in (0, 1), got {rate!r}")


def choose(shape: tuple[int, int], rate: float, rng: np.random.Generator,
           vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Boolean (B, T) arrays (chosen, to_mask, to_random) and the random replacement ids.

    chosen: predicted positions, a share `rate` (at least one per row); to_mask and to_random
    split them 80/10 (the remaining 10% keep their token); replacements are uniform over the
    tokenizer's `vocab` ids (never [MASK] itself).
    """
    check_rate(rate)
    draw = rng.random(shape)
    chosen = draw < rate
    empty = ~chosen.any(axis=1)
    if empty.any():  # a row without a target has no loss: choose its smallest draw
        rows = np.flatnonzero(empty)
        chosen[rows, draw[rows].argmin(axis=1)] = True
    kind = rng.random(shape)
    to_mask = chosen & (kind < MASK_SHARE)
    to_random = chosen & (kind >= MASK_SHARE) & (kind < MASK_SHARE + RANDOM_SHARE)
    replacements = rng.integers(0, vocab, size=shape)
    return chosen, to_mask, to_random, replacements


def mask_windows(x: torch.Tensor, rate: float, mask_id: int, rng: np.random.Generator
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of int64 windows x (B, T) on the CPU: inputs with the chosen positions
    masked, replaced or kept; targets the original ids there and IGNORE elsewhere. mask_id is
    the tokenizer's vocabulary size (pipeline.vocab.families.model_vocab_size)."""
    import torch

    tokens = x.numpy()
    chosen, to_mask, to_random, replacements = choose(tokens.shape, rate, rng, mask_id)
    inputs = np.where(to_mask, mask_id, np.where(to_random, replacements, tokens))
    targets = np.where(chosen, tokens, IGNORE)
    return torch.from_numpy(inputs.astype(np.int64)), torch.from_numpy(targets.astype(np.int64))


def train_rng(seed: int, step: int) -> np.random.Generator:
    """The masking stream of training step `step` of a run seeded `seed`."""
    return np.random.default_rng([seed, step, _TRAIN_STREAM])


def eval_rng(window_index: int) -> np.random.Generator:
    """The masking stream of validation window `window_index`: the same for every run."""
    return np.random.default_rng([window_index, _EVAL_STREAM])

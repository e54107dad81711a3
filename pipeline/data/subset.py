"""A run's share of the train split (DataSpec.train_fraction): the unique tokens (or images) U
it may read, so that runs of one N and D can repeat their data by different amounts, the
cells that make the decay of repeated data (R_D*, Muennighoff et al. 2023) identifiable.

The rule (SUBSET_RULE, fixed: a run id with train_fraction < 1 names what it trained on
through it): the split of n items is cut into K equal blocks at edges e_k = k * n // K, and
block k keeps its leading c_{k+1} - c_k items, c_k = floor(f * e_k): floor(f * n) items in
all, K = min(BLOCKS, n // min_block) (at least 1). Why blocks and not the split's first
f * n items: a text split is its documents in sorted name order (stdlib+tests: its first
third holds none of its test/ package, 54% of its bytes), and validation is drawn by name
hash from all of them, so a prefix would change what a run learns, not only how often it
sees it. With 256 blocks every part of the corpus keeps its share to within a block (0.4%).

The kept items are copied out of the memmap (f x the split: ~20 MB for a third of the 29.9M
byte tokens of stdlib+tests), once per run, after the cache is loaded: one cache serves every
fraction, and the validation split is never cut. Imports no torch.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from pipeline.data.settings import DataError

BLOCKS = 256
"""Most blocks the split is cut into (each keeps its leading share)."""
TEXT_MIN_BLOCK = 65_536
"""Fewest tokens per block of a text split: a kept piece is then at least f x 65,536 tokens
(~22k at a third; 39k in stdlib+tests' 117k-token blocks), so the windows (129 tokens at
seq_len 128) that run from one piece into the next, a seam like those between the split's
documents (one every ~17k byte tokens in stdlib+tests), are under 0.6% of them."""
SUBSET_RULE = (f"leading floor(f*e_(k+1)) - floor(f*e_k) items of each of K = min({BLOCKS}, "
               f"n // min_block) blocks e_k = k*n//K; min_block {TEXT_MIN_BLOCK} tokens, 1 image")


def _check(fraction: float) -> None:
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not (
            0 < fraction <= 1):
        raise DataError(f"train_fraction must be in (0, 1], got {fraction!r}")


def kept_count(n: int, fraction: float) -> int:
    """Items of a split of n that a run with this train_fraction reads: floor(f * n) (n at
    1). The repetition rule (pipeline.data.repetition) counts each run's epochs over it."""
    _check(fraction)
    return n if fraction >= 1 else math.floor(fraction * n)


def kept_ranges(n: int, fraction: float, min_block: int = 1) -> list[tuple[int, int]]:
    """The [start, stop) ranges of a split of n items that the rule keeps, in order (empty
    ones left out); [(0, n)] at fraction 1."""
    _check(fraction)
    if fraction >= 1:
        return [(0, n)]
    blocks = max(1, min(BLOCKS, n // max(1, min_block)))
    edges = [k * n // blocks for k in range(blocks + 1)]
    counts = [math.floor(fraction * e) for e in edges]  # cumulative: floor(f * n) in all
    out = []
    for k in range(blocks):
        # <= the block's length: floor(f*b) - floor(f*a) <= ceil(f*(b-a)) <= b - a for f < 1.
        keep = counts[k + 1] - counts[k]
        if keep:
            out.append((edges[k], edges[k] + keep))
    return out


def train_subset(data, fraction: float):
    """``data`` (a TokenData, or vision's ImageData) with its train split cut to the items
    the rule keeps; the same object at fraction 1 (every run from before the field existed
    trains exactly as it did). Everything else is kept: the validation split, fingerprints,
    vocabulary."""
    _check(fraction)
    if fraction >= 1:
        return data
    images = hasattr(data, "train_labels")
    ranges = kept_ranges(len(data.train), fraction, 1 if images else TEXT_MIN_BLOCK)
    if images:  # its train_bytes follow from the arrays
        index = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges]
                               or [np.zeros(0, dtype=np.int64)])
        return replace(data, train=data.train[index], train_labels=data.train_labels[index])
    kept = np.concatenate([np.asarray(data.train[a:b]) for a, b in ranges]
                          or [np.zeros(0, dtype=data.train.dtype)])
    # Bytes of the kept tokens, pro rata (exact for bytes; bits per byte are scored on the
    # validation split, which is whole). No cache_path: pickled, the subset travels by value
    # (reopening the cache would give the whole split back), with its tokenizer.
    return replace(data, train=kept,
                   train_bytes=round(data.train_bytes * len(kept) / max(len(data.train), 1)),
                   cache_path="", built=False,
                   tokenizer_json=data.shipped_meta()["tokenizer_json"])

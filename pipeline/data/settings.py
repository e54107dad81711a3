"""The data settings one run is built from (DataConfig: a DataSpec plus the cache folder),
validated on construction, and the error type of the data code."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.data.tokenizers import (
    BPE_MIN_VOCAB,
    TOKENIZER_NAMES,
)
from pipeline.vocab.spec import DataSpec

CACHE_ENV = "SCALING_CACHE_DIR"
DEFAULT_CACHE_DIR = "~/.cache/scaling-pipeline"

Progress = Callable[[str], None]


class DataError(ValueError):
    """Bad data input (corpus, tokenizer, sizes); the message names the offending value."""


@dataclass(frozen=True)
class DataConfig(DataSpec):
    """A DataSpec (the fields and defaults, part of every run_id) plus where the token cache
    lives (not part of the run_id), validated on construction."""

    cache_dir: str | None = None
    """Token cache folder; default $SCALING_CACHE_DIR, else ~/.cache/scaling-pipeline."""

    def __post_init__(self) -> None:
        if not isinstance(self.corpus, str) or not self.corpus.strip():
            raise DataError(f"corpus must be a non-empty string, got {self.corpus!r}")
        if self.corpus.startswith("hf:"):
            _parse_hf_spec(self.corpus)  # fail at config time, not after minutes of work
        if self.tokenizer not in TOKENIZER_NAMES:
            raise DataError(
                f"unknown tokenizer {self.tokenizer!r}; expected one of {TOKENIZER_NAMES}"
            )
        if not _is_int(self.bpe_vocab_size):
            raise DataError(f"bpe_vocab_size must be an int, got {self.bpe_vocab_size!r}")
        if self.tokenizer == "bpe" and self.bpe_vocab_size < BPE_MIN_VOCAB:
            raise DataError(
                f"bpe_vocab_size={self.bpe_vocab_size} is too small: byte-level BPE needs at "
                f"least {BPE_MIN_VOCAB} (256 byte tokens + one merge)"
            )
        if (
            isinstance(self.val_fraction, bool)
            or not isinstance(self.val_fraction, int | float)
            or not 0 < self.val_fraction < 1
        ):
            raise DataError(f"val_fraction must be in (0, 1), got {self.val_fraction!r}")
        if (isinstance(self.train_fraction, bool)
                or not isinstance(self.train_fraction, int | float)
                or not 0 < self.train_fraction <= 1):
            raise DataError(f"train_fraction must be in (0, 1], got {self.train_fraction!r}")
        if self.max_bytes is not None and not (_is_int(self.max_bytes) and self.max_bytes > 0):
            raise DataError(f"max_bytes must be a positive int or None, got {self.max_bytes!r}")
        if self.cache_dir is not None and not isinstance(self.cache_dir, str | os.PathLike):
            raise DataError(f"cache_dir must be a path or None, got {self.cache_dir!r}")

    def resolved_cache_dir(self) -> Path:
        """Argument, then $SCALING_CACHE_DIR, then the default (so tests and clusters redirect it)."""
        raw = self.cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR
        return Path(raw).expanduser()



def _parse_hf_spec(spec: str) -> tuple[str, str, str]:
    """ "hf:<dataset>[:<split>][:<text_field>]" -> (dataset, split, field)."""
    parts = spec[len("hf:") :].split(":")
    if not parts[0] or len(parts) > 3:
        raise DataError(
            f"bad Hugging Face corpus {spec!r}; expected hf:<dataset>[:<split>][:<text_field>]"
        )
    split = parts[1] if len(parts) > 1 and parts[1] else "train"
    text_field = parts[2] if len(parts) > 2 and parts[2] else "text"
    return parts[0], split, text_field



def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _quiet(_message: str) -> None:
    pass
